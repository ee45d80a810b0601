"""Streaming decomposition throughput and memory, against baselines measured in the same run.

Baselines:
  numpy   the source code's approach: materialise the whole (C, T, d) tensor, then mean, pos,
          ctx, resid (another C x T x d tensor) and the two d x d second moments, float64-free.
  read    the memory-read bound: time to read the hidden states once (a float32 sum).
  matmul  the compute floor: one (B T x d)^T (B T x d) product per batch, which any exact
          second moment needs (2 d^2 flops per token).

Run:  .venv/bin/python benchmarks/bench_decomposition.py [--quick] [--markdown]
Peak memory versus C is measured in fresh subprocesses (VmHWM of the child), so each number
is that configuration's own peak.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
import _common  # noqa: E402


FIRST_CALL: dict[str, float] = {}


def _timeit(fn, repeats, name=None):
    """Median steady-state time; the first (compiling) call is timed apart into FIRST_CALL[name]."""
    t0 = time.perf_counter()
    fn()  # warm-up (compile)
    if name:
        FIRST_CALL[name] = time.perf_counter() - t0
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def make_hidden(C, T, d, seed=0):
    rng = np.random.default_rng(seed)
    mean = (rng.normal(size=d) * 50).astype(np.float32)
    mean[:3] = 3000.0  # GPT-2-like massive channels
    pos = rng.normal(size=(T, d)).astype(np.float32)
    h = rng.normal(size=(C, T, d)).astype(np.float32)
    h += mean
    h += pos[None]
    return h


def numpy_materialised(h):
    mu = h.mean((0, 1))
    pos = h.mean(0) - mu
    ctx = h.mean(1) - mu
    resid = h - mu - pos[None] - ctx[:, None]
    cen = (h - mu).reshape(-1, h.shape[-1])
    r = resid.reshape(-1, h.shape[-1])
    return mu, pos, ctx, cen.T @ cen, r.T @ r


def throughput(C, T, d, B, repeats):
    import jax
    import jax.numpy as jnp

    import geomjax as gj

    h = make_hidden(C, T, d)
    tokens = C * T
    t_np = _timeit(lambda: numpy_materialised(h), repeats)

    def stream():
        st = gj.decompose_stream((h[i : i + B] for i in range(0, C, B)))
        jax.block_until_ready(st.resid_second_moment)

    t_stream = _timeit(stream, repeats, "stream_f32")

    def stream_f64():
        st = gj.decompose_stream((h[i : i + B] for i in range(0, C, B)), accum_dtype="float64")
        jax.block_until_ready(st.resid_second_moment)

    t_stream64 = _timeit(stream_f64, max(1, repeats // 2), "stream_f64")

    t_read = _timeit(lambda: h.sum(dtype=np.float32), repeats)

    x = jnp.asarray(h[:B].reshape(-1, d))
    gram = jax.jit(lambda a: a.T @ a)
    t_mm = _timeit(lambda: jax.block_until_ready(gram(x)), repeats) * (C / B)

    # Accuracy of the float32 stream against a float64 NumPy reference.
    ref = numpy_materialised(h.astype(np.float64))
    st = gj.decompose_stream((h[i : i + B] for i in range(0, C, B)))
    err = lambda a, b: float(np.abs(np.asarray(a, np.float64) - b).max() / np.abs(b).max())  # noqa
    acc = {"pos": err(st.pos, ref[1]), "ctx": err(st.ctx, ref[2]),
           "centered": err(st.centered_second_moment, ref[3]),
           "resid": err(st.resid_second_moment, ref[4])}
    ref32 = numpy_materialised(h)
    acc_np32 = {"pos": err(ref32[1], ref[1]), "ctx": err(ref32[2], ref[2]),
                "centered": err(ref32[3], ref[3]), "resid": err(ref32[4], ref[4])}
    return {
        "C": C, "T": T, "d": d, "B": B, "tokens": tokens,
        "seconds": {"numpy_materialised": t_np, "stream_f32": t_stream, "stream_f64": t_stream64,
                    "read_once": t_read, "gram_floor": t_mm},
        "tokens_per_s": {"numpy_materialised": tokens / t_np, "stream_f32": tokens / t_stream,
                         "stream_f64": tokens / t_stream64},
        "compile_s": {k: FIRST_CALL[k] - v for k, v in (("stream_f32", t_stream), ("stream_f64", t_stream64))},
        "ratios": {"stream_vs_numpy": t_np / t_stream, "stream_vs_read_bound": t_stream / t_read,
                   "stream_vs_gram_floor": t_stream / t_mm, "f64_cost": t_stream64 / t_stream},
        "max_rel_error_f32_stream_vs_f64": acc,
        "max_rel_error_f32_numpy_vs_f64": acc_np32,
    }


def _peak_child(mode, C, T, d, B):
    """Run in a subprocess: peak RSS (MiB) of one decomposition of C contexts."""
    import jax

    import geomjax as gj

    rng = np.random.default_rng(0)
    if mode == "stream":
        def batches():
            for _ in range(C // B):
                yield rng.standard_normal((B, T, d), dtype=np.float32) + np.float32(1000)

        st = gj.decompose_stream(batches())
        jax.block_until_ready(st.resid_second_moment)
    else:
        h = rng.standard_normal((C, T, d), dtype=np.float32)
        h += np.float32(1000)
        numpy_materialised(h)
    return _vm_hwm_mib()


def _vm_hwm_mib() -> float:
    """Peak resident memory of this process image (VmHWM, MiB).

    Not ``ru_maxrss``: Linux carries ru_maxrss across fork+exec, so a child started by a parent
    that already held 2 GiB would report the parent's peak (this benchmark's first version did).
    """
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_memory(Cs, T, d, B):
    rows = []
    for C in Cs:
        row = {"C": C, "tensor_MiB": C * T * d * 4 / 2**20}
        for mode in ("stream", "numpy"):
            out = subprocess.run(
                [sys.executable, __file__, "--child", mode, str(C), str(T), str(d), str(B)],
                capture_output=True, text=True, check=True,
            )
            row[f"{mode}_peak_MiB"] = float(out.stdout.strip().splitlines()[-1])
        rows.append(row)
    return rows


def markdown(res) -> str:
    """The results as a Markdown section (for benchmarks/run_all.py and RESULTS.md)."""
    tp = res["throughput"]
    r = tp["ratios"]
    lines = [f"## Streaming decomposition (C {tp['C']}, T {tp['T']}, d {tp['d']}, B {tp['B']})", "",
             _common.machine_block(_common.machine_info()), "",
             _common.markdown_table(
                 ["comparison", "ratio"],
                 [["stream f32 speed-up over NumPy materialised", f"**{r['stream_vs_numpy']:.2f}×**"],
                  ["stream f32 time / one read of the states", f"{r['stream_vs_read_bound']:.1f}×"],
                  ["stream f32 time / GEMM floor", f"{r['stream_vs_gram_floor']:.2f}×"],
                  ["float64 accumulation / float32", f"{r['f64_cost']:.2f}×"],
                  ["compile (first call − steady) f32 / f64",
                   f"{tp['compile_s']['stream_f32']:.2f} s / {tp['compile_s']['stream_f64']:.2f} s"],
                  ["max rel. error, f32 stream vs f64 (ctx, resid M2)",
                   f"{tp['max_rel_error_f32_stream_vs_f64']['ctx']:.1e}, "
                   f"{tp['max_rel_error_f32_stream_vs_f64']['resid']:.1e}"],
                  ["max rel. error, NumPy f32 vs f64 (ctx, resid M2)",
                   f"{tp['max_rel_error_f32_numpy_vs_f64']['ctx']:.1e}, "
                   f"{tp['max_rel_error_f32_numpy_vs_f64']['resid']:.1e}"]]),
             "", "Peak resident memory (fresh subprocess per row):", "",
             _common.markdown_table(
                 ["C", "C·T·d tensor (MiB)", "stream peak (MiB)", "NumPy peak (MiB)"],
                 [[m["C"], f"{m['tensor_MiB']:.0f}", f"{m['stream_peak_MiB']:.0f}", f"{m['numpy_peak_MiB']:.0f}"]
                  for m in res["peak_memory"]]),
             "", f"(load average at the end: {_common.load_avg()})"]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None, help="write results to this JSON file")
    ap.add_argument("--out", default=None, help="append a Markdown section to this file")
    args = ap.parse_args()
    if args.child:
        mode, C, T, d, B = args.child
        print(_peak_child(mode, int(C), int(T), int(d), int(B)))
        return
    import jax

    T, d, B = (64, 256, 32) if args.quick else (128, 768, 32)
    C = 256 if args.quick else 512
    res = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "cpus": __import__("os").cpu_count(),
        "jax": jax.__version__, "numpy": np.__version__, "backend": jax.default_backend(),
        "throughput": throughput(C, T, d, B, repeats=3),
        "peak_memory": peak_memory([128, 512, 2048] if not args.quick else [64, 256], T, d, B),
    }
    print(json.dumps(res, indent=2))
    if args.out:
        _common.write_section(args.out, markdown(res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
