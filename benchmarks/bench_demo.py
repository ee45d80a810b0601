"""The demo end to end against its forward-pass floor (issue "Fast where users wait", item 1).

Usage::

    .venv/bin/python benchmarks/bench_demo.py [--rounds 2 | --quick] [--trace DIR] [--out benchmarks/RESULTS.md]

What it measures, in one run:

* ``geomjax demo`` as a user runs it (a fresh process each time, the command's own persistent
  compilation cache and tokenized corpora): once with empty caches ("cold"), then ``--rounds`` times
  with the caches that first run filled ("warm"). Each run reports the wall time of every stage
  (stages are the demo's own status lines and progress bars on stderr, timestamped as they appear)
  and, apart, the time JAX spent tracing, lowering and compiling in that stage (``jax.monitoring``
  duration events), the process's CPU time (user + sys) and the number of programs built (JAX's
  backend-compile event, which covers a program read from the persistent cache as well as one compiled).
* The floor: the PyTorch (``transformers``) forward of the same MiniLM over the same number of windows
  of the same length and batch size as the demo forwards (the C topic windows, the C out-of-distribution
  windows, the ``n_cvec`` fresh windows and the token-cluster windows), with all hidden states, timed
  ``--rounds`` times interleaved with the warm demo runs.

The ratios demo / floor are what the issue's goals (≤ 2× warm, ≤ 3× cold) are about. ``--trace DIR``
also writes a ``jax.profiler`` trace of one warm run (open it with TensorBoard or Perfetto).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import _common as C  # noqa: I001  (settles the BLAS environment before NumPy loads)
import numpy as np

STAGE_PREFIX = "geomjax: "
COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration", "/jax/compilation_cache/cache_retrieval_time_sec")


class _StampedStderr:
    """A stderr that forwards everything and records (time, stage) at each new stage name: a status line
    ``geomjax: <stage>`` or the description of a tqdm bar (the text before its first ':')."""

    def __init__(self, stream, marks: list):
        self.stream, self.marks, self.seen = stream, marks, set()

    def write(self, text: str) -> int:
        for piece in text.replace("\r", "\n").split("\n"):
            piece = piece.strip()
            name = piece[len(STAGE_PREFIX):] if piece.startswith(STAGE_PREFIX) else piece.split(":")[0].strip()
            if name and not name[0].isdigit() and "%" not in name and name not in self.seen and len(name) < 80:
                self.seen.add(name)
                self.marks.append((time.perf_counter(), name))
        return self.stream.write(text)

    def flush(self):
        self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def child(result_json: str, run_dir: str, trace: str | None) -> None:
    """One ``geomjax demo`` in this process (started fresh by the parent): stage marks and compile events."""
    import jax

    from geomjax import cli

    marks, compiles = [], []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, dur, **kw: compiles.append((time.perf_counter(), float(dur), event))
        if event in COMPILE_EVENTS else None)
    sys.stderr = _StampedStderr(sys.stderr, marks)
    t0 = time.perf_counter()
    marks.append((t0, "start (imports done, argument checks)"))
    if trace:
        with jax.profiler.trace(trace):
            rc = cli.main(["demo", "--out", run_dir])
    else:
        rc = cli.main(["demo", "--out", run_dir])
    t1 = time.perf_counter()
    ru = resource.getrusage(resource.RUSAGE_SELF)  # the whole process: imports and every thread
    with open(result_json, "w") as f:
        json.dump({"rc": rc, "t0": t0, "t1": t1, "marks": marks, "compiles": compiles,
                   "cpu": ru.ru_utime + ru.ru_stime}, f)


def stages(res: dict) -> list[tuple[str, float, float]]:
    """(stage, wall s, compile s) from a child's marks: a stage lasts until the next mark."""
    marks = sorted(res["marks"]) + [(res["t1"], "end")]
    rows = []
    for (t, name), (t_next, _) in zip(marks[:-1], marks[1:]):
        comp = sum(c[1] for c in res["compiles"] if t <= c[0] < t_next)
        rows.append((name, t_next - t, comp))
    return rows


def run_demo(cache_dir: str, trace: str | None = None) -> dict:
    """A fresh process runs the demo with ``cache_dir`` as the root of its caches; returns its record."""
    with tempfile.TemporaryDirectory(prefix="gj_bench_demo_") as d:
        out, res = os.path.join(d, "run"), os.path.join(d, "res.json")
        # every geomjax cache (compiled programs in jax/, tokenized corpora in tokens/) under cache_dir:
        # the cold run starts with both empty
        env = dict(os.environ, GEOMJAX_CACHE=cache_dir, GEOMJAX_NO_COMPILE_CACHE="0")
        env.pop("GEOMJAX_CACHE_DIR", None)
        cmd = [sys.executable, os.path.abspath(__file__), "--child", res, out] + (["--trace", trace] if trace else [])
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        with open(res) as f:
            r = json.load(f)
    r["wall"] = wall  # process start, imports and interpreter exit included
    return r


def torch_floor(n_windows: int, T: int, batch: int):
    """A function that runs the PyTorch MiniLM forward (all hidden states) over n_windows × T in batches."""
    import torch
    import transformers

    import geomjax as gj

    hf = transformers.BertModel.from_pretrained(gj.convert.minilm_path()).eval()
    ids = torch.from_numpy(np.random.default_rng(0).integers(1000, 20000, size=(n_windows, T)).astype(np.int64))

    def run():
        with torch.inference_mode():
            for k in range(0, n_windows, batch):
                hf(ids[k : k + batch], output_hidden_states=True)

    return run


def demo_windows() -> tuple[int, int, int]:
    """(windows forwarded by the demo, T, batch) from the demo's configuration (geomjax.analysis.study_config)."""
    from geomjax.analysis.study_config import GeometryConfig

    cfg = GeometryConfig()
    n = cfg.n_contexts * (2 if cfg.ood_corpus else 1) + cfg.n_cvec + cfg.n_docs * cfg.n_cluster_windows
    return n, cfg.seq_len, cfg.batch_size


def render(info: dict, cold: dict, warm: list[dict], floor: list[float], n_win: int, T: int) -> str:
    w = [r["wall"] for r in warm]
    head = [f"### Demo vs its forward floor ({time.strftime('%Y-%m-%d %H:%M')})", "", C.machine_block(info), "",
            f"Floor: `transformers` MiniLM forward over {n_win} windows × {T} tokens (all hidden states). "
            "Demo: `geomjax demo` in a fresh process, wall time from process start to exit.", ""]
    n_comp = [sum(e[2].endswith("backend_compile_duration") for e in r["compiles"]) for r in [cold] + warm]
    rows = [["cold (empty compilation cache)", f"{cold['wall']:.1f} s", f"{cold['wall'] / np.median(floor):.2f}×",
             f"{cold['cpu']:.1f} s", str(n_comp[0])],
            [f"warm (median of {len(w)})", f"{np.median(w):.1f} s", C.fmt_ratio(C.ratio_stats(w, floor)),
             f"{np.median([r['cpu'] for r in warm]):.1f} s", str(int(np.median(n_comp[1:])))],
            [f"PyTorch forward floor (median of {len(floor)})", f"{np.median(floor):.1f} s", "1×", "", ""]]
    body = [C.markdown_table(["run", "time", "÷ floor", "CPU (user+sys)", "programs built (compiled or read from the cache)"], rows), ""]
    for label, r in (("cold", cold), ("warm (first)", warm[0])):
        st = stages(r)
        body += [f"Stages, {label} run (compile = JAX tracing + lowering + compilation + cache reads):", "",
                 C.markdown_table(["stage", "wall s", "of which compile s"],
                                  [[n, f"{t:.1f}", f"{c:.1f}"] for n, t, c in st]), ""]
    return "\n".join(head + body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2, help="warm demo runs and floor runs, interleaved")
    ap.add_argument("--quick", action="store_true", help="one warm round (what run_all.py --quick passes)")
    ap.add_argument("--trace", default=None, help="write a jax.profiler trace of the first warm run here")
    ap.add_argument("--out", default=None, help="append the Markdown section to this file")
    ap.add_argument("--child", nargs=2, metavar=("RESULT_JSON", "RUN_DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.rounds = 1
    if args.child:
        child(args.child[0], args.child[1], args.trace)
        return
    C.set_threads()
    info = C.machine_info()
    print(C.machine_block(info), flush=True)
    n_win, T, batch = demo_windows()
    floor_fn = torch_floor(n_win, T, batch)
    floor_fn()  # first call: PyTorch's own one-time set-up, not part of the floor
    with tempfile.TemporaryDirectory(prefix="gj_bench_cache_") as cache:
        cold = run_demo(cache)
        print(f"cold demo: {cold['wall']:.1f} s", flush=True)
        warm, floor = [], []
        for r in range(args.rounds):
            warm.append(run_demo(cache, args.trace if r == 0 else None))
            floor.append(C.timed(floor_fn))
            print(f"round {r}: warm demo {warm[-1]['wall']:.1f} s, floor {floor[-1]:.1f} s", flush=True)
    info["load after"] = C.load_avg()
    text = render(info, cold, warm, floor, n_win, T)
    print("\n" + text)
    C.write_section(args.out, text)


if __name__ == "__main__":
    main()
