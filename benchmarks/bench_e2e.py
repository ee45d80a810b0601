"""The study end to end, stage by stage, against its forward-pass floor (issue 36 item 7).

Usage::

    .venv/bin/python benchmarks/bench_e2e.py [--rounds 2 | --quick] [--cases demo,gpt2] \
        [--gpt2-sizes N_DOCS,WINDOWS_PER_DOC,T] [--out benchmarks/RESULTS.md]

Two cases, each measured in one run:

* ``demo``: ``geomjax demo`` (MiniLM, the demo's sizes) as a user runs it; ``demo-claims``: ``geomjax demo --claims``
  (the Song & Zhong claims checked in the run too).
* ``gpt2``: ``geomjax geometry`` on a GPT-2-small-shaped checkpoint (12 layers, d = 768, vocabulary 50,257)
  with random weights from ``transformers``' initialisation, written with ``save_pretrained`` together with
  GPT-2's tokenizer.json (``geomjax.convert.tokenizers.gpt2_tokenizer``). On a GPU the default sizes are the
  issue's 40 documents x 4 windows x 512 tokens (160 x 512); on this 2-core CPU far smaller ones
  (``--gpt2-sizes``).

Every study runs in a fresh process (``python -m geomjax.cli``) with its own cache root (``GEOMJAX_CACHE``):
once with empty caches ("cold": no compiled programs, no tokenized corpora), then ``--rounds`` times warm.
Its stage table is the run's own ``run.json`` ``timing`` (wall, CPU and compile seconds and the XLA programs
of every stage; ``geomjax.base.timing``). The floor: the PyTorch (``transformers``) forward of the same model
over as many windows of the same length and batch size as the study forwards (topic windows, the fresh
cvec draw, the App. C windows and the OOD windows), all hidden states, inference mode, on the device geomjax
runs on (CUDA when JAX's backend is a GPU); the warm runs and the floor alternate, so both see the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import _common as C  # noqa: I001  (settles the BLAS environment before NumPy loads)
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def jax_device() -> str:
    """'gpu' when JAX's default backend is a GPU, else 'cpu' (the floor then runs on the same kind)."""
    import jax

    return "gpu" if jax.default_backend() in ("gpu", "cuda", "rocm") else "cpu"


def gpt2_checkpoint(path: str) -> str:
    """A GPT-2-small-shaped checkpoint with random weights (transformers' init) and GPT-2's tokenizer.json."""
    import torch
    import transformers

    from geomjax.convert.tokenizers import gpt2_tokenizer

    torch.manual_seed(0)
    transformers.GPT2Model(transformers.GPT2Config()).eval().save_pretrained(path)
    gpt2_tokenizer().backend.save(os.path.join(path, "tokenizer.json"))
    return path


def study_windows(cfg) -> int:
    """Windows the study forwards: C topic windows, the n_cvec fresh draw, the App. C windows, C OOD windows."""
    return (cfg.n_contexts * (2 if cfg.ood_corpus else 1) + cfg.n_cvec
            + (cfg.n_docs * cfg.n_cluster_windows if cfg.n_docs >= 2 else 0))


def torch_floor(kind: str, model_path: str, n_windows: int, T: int, batch: int, device: str):
    """The ``transformers`` forward (all hidden states) over ``n_windows`` x T tokens in batches."""
    import torch
    import transformers

    cls = transformers.BertModel if kind == "bert" else transformers.GPT2Model
    dev = "cuda" if device == "gpu" else "cpu"
    hf = cls.from_pretrained(model_path, attn_implementation="sdpa").eval().to(dev)
    ids = torch.from_numpy(np.random.default_rng(0).integers(1000, 20000, size=(n_windows, T)).astype(np.int64)).to(dev)

    def run():
        with torch.inference_mode():
            for k in range(0, n_windows, batch):
                hf(ids[k: k + batch], output_hidden_states=True)
        if dev == "cuda":
            torch.cuda.synchronize()

    return run


def run_study(argv: list[str], cache: str) -> dict:
    """``python -m geomjax.cli ARGV --out DIR`` in a fresh process with ``cache`` as its cache root: the
    process's wall time and its run.json ``timing``."""
    with tempfile.TemporaryDirectory(prefix="gj_bench_e2e_") as d:
        out = os.path.join(d, "run")
        env = dict(os.environ, GEOMJAX_CACHE=cache, GEOMJAX_NO_COMPILE_CACHE="0")
        env.pop("GEOMJAX_CACHE_DIR", None)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "geomjax.cli", *argv, "--out", out, "--no-progress"], cwd=REPO,
                       env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        with open(os.path.join(out, "run.json")) as f:
            timing = json.load(f)["timing"]
    return {"wall": wall, "timing": timing}


def stage_table(r: dict) -> str:
    rows = [[s["name"] + (" (in parallel)" if s["parallel"] else ""), f"{s['wall_s']:.2f}", f"{s['cpu_s']:.2f}",
             f"{s['compile_s']:.2f}", f"{s['programs']} ({s['cache_hits']} cached)"] for s in r["timing"]["stages"]]
    t = r["timing"]
    rows.append(["**whole command** (process: imports and exit included)", f"{r['wall']:.2f}", f"{t['cpu_s']:.2f}",
                 f"{t['compile_s']:.2f}", f"{t['programs']} ({t['cache_hits']} cached)"])
    return C.markdown_table(["stage", "wall s", "CPU s", "compile s", "XLA programs"], rows)


def measure(name: str, argv: list[str], floor, rounds: int) -> dict:
    floor()  # PyTorch's own one-time set-up, not part of the floor
    with tempfile.TemporaryDirectory(prefix="gj_bench_cache_") as cache:
        cold = run_study(argv, cache)
        print(f"{name}: cold {cold['wall']:.1f} s", flush=True)
        warm, fl = [], []
        for r in range(rounds):
            warm.append(run_study(argv, cache))
            fl.append(C.timed(floor))
            print(f"{name} round {r}: warm {warm[-1]['wall']:.1f} s, floor {fl[-1]:.1f} s", flush=True)
    return {"cold": cold, "warm": warm, "floor": fl}


def render(name: str, desc: str, res: dict, device: str) -> str:
    cold, warm, fl = res["cold"], res["warm"], res["floor"]
    w = [r["wall"] for r in warm]
    rows = [["cold (empty caches)", f"{cold['wall']:.1f} s", f"{cold['wall'] / np.median(fl):.2f}×"],
            [f"warm (median of {len(w)})", f"{np.median(w):.1f} s", C.fmt_ratio(C.ratio_stats(w, fl))],
            [f"PyTorch forward floor on {device} (median of {len(fl)})", f"{np.median(fl):.1f} s", "1×"]]
    return "\n".join([f"#### {name}", "", desc, "", C.markdown_table(["run", "wall", "÷ floor"], rows), "",
                      "Stages of the cold run (run.json `timing`):", "", stage_table(cold), "",
                      "Stages of the first warm run:", "", stage_table(warm[0]), ""])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2, help="warm runs and floor runs per case, interleaved")
    ap.add_argument("--quick", action="store_true", help="one warm round")
    ap.add_argument("--cases", default="demo,gpt2", help="comma-separated: demo, demo-claims (demo --claims), gpt2")
    ap.add_argument("--gpt2-sizes", default=None,
                    help="N_DOCS,WINDOWS_PER_DOC,T of the GPT-2 study (default: 40,4,512 on a GPU, 4,2,128 on a CPU)")
    ap.add_argument("--out", default=None, help="append the Markdown section to this file")
    args = ap.parse_args()
    rounds = 1 if args.quick else args.rounds
    device = jax_device()
    if device == "cpu":
        C.set_threads()
    info = C.machine_info()
    info["device"] = device
    print(C.machine_block(info), flush=True)
    sys.path.insert(0, REPO)
    import geomjax as gj
    from geomjax.analysis.study_config import GeometryConfig

    parts = [f"### Study end to end vs its forward floor ({time.strftime('%Y-%m-%d %H:%M')}; device {device})", "",
             C.machine_block(info), ""]
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    for case, argv in (("demo", ["demo"]), ("demo-claims", ["demo", "--claims"])):
        if case not in cases:
            continue
        cfg = GeometryConfig()
        n = study_windows(cfg)
        res = measure(case, argv, torch_floor("bert", str(gj.convert.minilm_path()), n, cfg.seq_len,
                                              cfg.batch_size, device), rounds)
        parts.append(render(f"`geomjax {' '.join(argv)}` (MiniLM)", f"Floor: `transformers` MiniLM over {n} windows "
                            f"x {cfg.seq_len} tokens, batch {cfg.batch_size}.", res, device))
    if "gpt2" in cases:
        sizes = args.gpt2_sizes or ("40,4,512" if device == "gpu" else "4,2,128")
        n_docs, wpd, T = (int(x) for x in sizes.split(","))
        batch = min(16, n_docs * wpd)
        with tempfile.TemporaryDirectory(prefix="gj_bench_gpt2_") as ck:
            gpt2_checkpoint(ck)
            argv = ["geometry", "--model", ck, "--n-docs", str(n_docs), "--windows-per-doc", str(wpd), "-T", str(T),
                    "--batch-size", str(batch)]
            cfg = GeometryConfig(model=ck, n_docs=n_docs, windows_per_doc=wpd, seq_len=T, batch_size=batch)
            n = study_windows(cfg)
            res = measure("gpt2", argv, torch_floor("gpt2", ck, n, T, batch, device), rounds)
        parts.append(render(f"`geomjax geometry`, GPT-2-small shape, {n_docs} x {wpd} x {T}",
                            f"Random weights (transformers' init, save_pretrained), GPT-2's tokenizer.json. Floor: "
                            f"`transformers` GPT2Model over {n} windows x {T} tokens, batch {batch}.", res, device))
    parts.append(f"- load average at the end: {C.load_avg()}")
    text = "\n".join(parts)
    print("\n" + text)
    C.write_section(args.out, text)


if __name__ == "__main__":
    main()
