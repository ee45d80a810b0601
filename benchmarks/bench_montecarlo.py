"""Monte Carlo throughput for the Wertich bilinear-form claims: geomjax (jit + vmap + lax.scan via
``geomjax.theory.montecarlo.estimate``) against a NumPy Python loop of the same math and vectorised NumPy.

One sample is s = ⟨Ax, By⟩ with x, y ~ N(0, I_n) drawn fresh and A, B fixed n×n matrices (thesis
eqs. 6.2-6.3); every implementation returns the mean and the standard error of s (float64). Compile
time of the jitted driver is measured separately (first call) and excluded from samples/s.

    .venv/bin/python benchmarks/bench_montecarlo.py                       # writes benchmarks/results/montecarlo.md
    .venv/bin/python benchmarks/bench_montecarlo.py --n 16 --samples 262144 --repeats 5
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import _common as C  # noqa: E402

from geomjax.theory import montecarlo  # noqa: E402


def make_sampler(A: np.ndarray, B: np.ndarray, dtype):
    n = A.shape[0]

    def sample(key):
        z = jax.random.normal(key, (2, n), dtype)  # x = z[0], y = z[1]: one draw, no key split
        return (jnp.asarray(A, dtype) @ z[0]) @ (jnp.asarray(B, dtype) @ z[1])

    return sample


def numpy_loop(A, B, n_samples: int, seed: int):
    """The same estimator as a Python loop: one sample per iteration (Welford mean/variance)."""
    rng = np.random.default_rng(seed)
    n = A.shape[0]
    mean = m2 = 0.0
    for i in range(1, n_samples + 1):
        x = rng.standard_normal(n)
        y = rng.standard_normal(n)
        s = float((A @ x) @ (B @ y))
        d = s - mean
        mean += d / i
        m2 += d * (s - mean)
    return mean, math.sqrt(m2 / (n_samples - 1) / n_samples)


def numpy_vectorised(A, B, n_samples: int, seed: int, chunk: int = 65536):
    """Vectorised NumPy: chunks of samples as (chunk, n) arrays, s = Σ_j (XAᵀ)_j (YBᵀ)_j."""
    rng = np.random.default_rng(seed)
    n = A.shape[0]
    tot = tot2 = 0.0
    done = 0
    while done < n_samples:
        c = min(chunk, n_samples - done)
        X = rng.standard_normal((c, n))
        Y = rng.standard_normal((c, n))
        s = np.einsum("ci,ci->c", X @ A.T, Y @ B.T)
        tot += s.sum(); tot2 += (s * s).sum(); done += c
    mean = tot / n_samples
    var = (tot2 - n_samples * mean**2) / (n_samples - 1)
    return mean, math.sqrt(var / n_samples)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[4, 16, 64], help="dimensions of x, y (A, B are n×n); one table each")
    ap.add_argument("--samples", type=int, default=2**18, help="samples per timed call (jax and vectorised NumPy)")
    ap.add_argument("--loop-samples", type=int, default=2**14, help="samples of the Python-loop baseline")
    ap.add_argument("--chunk", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "montecarlo.md"),
                    help="append the Markdown section to this file")
    ap.add_argument("--quick", action="store_true", help="2^16 samples (2^12 in the loop), 3 repeats")
    args = ap.parse_args(argv)
    if args.quick:
        args.samples, args.loop_samples, args.repeats = 2**16, 2**12, 3
    info = C.machine_info()
    parts = [f"## Monte Carlo throughput: bilinear form ⟨Ax, By⟩ (Wertich eqs. 6.2-6.3)", "", C.machine_block(info) + C.load_warning()]
    for n in args.n:
        parts.append(bench_one(args, n))
    parts.append(f"\nload average at the end: {C.load_avg()}")
    text = "\n".join(parts)
    print(text)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    C.write_section(args.out, text)
    return 0


def bench_one(args, n: int) -> str:
    """One table: throughput of the three implementations for n-dimensional x, y."""
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((n, n)) / math.sqrt(n), rng.standard_normal((n, n)) / math.sqrt(n)
    C_ = A.T @ B
    pred_mean, pred_var = 0.0, float(np.trace(C_ @ C_.T))  # eq. 6.3 with μ = 0, Σ = I
    key = jax.random.key(0)
    rows, res = [], {}

    for dtype_name in ("float64", "float32"):
        dt = jnp.float64 if dtype_name == "float64" else jnp.float32
        with jax.enable_x64(dtype_name == "float64"):
            samp = make_sampler(A, B, dt)
            t0 = time.perf_counter()
            est = montecarlo.estimate(samp, key, args.samples, chunk=args.chunk, dtype=dtype_name)
            jax.block_until_ready(est.mean)
            compile_s = time.perf_counter() - t0

            def run_jax():
                e = montecarlo.estimate(samp, key, args.samples, chunk=args.chunk, dtype=dtype_name)
                jax.block_until_ready(e.mean)
                return e

            if dtype_name == "float64":
                times = C.interleaved({"jax": run_jax, "numpy_vec": lambda: numpy_vectorised(A, B, args.samples, 1)},
                                      args.repeats)
                res["jax64"] = times["jax"]; res["vec"] = times["numpy_vec"]
            else:
                res["jax32"] = C.interleaved({"jax": run_jax}, args.repeats)["jax"]
            e = est.as_numpy()
            res[f"est_{dtype_name}"] = (float(e["mean"]), float(e["sem"]), float(e["std"]) ** 2)
            res[f"compile_{dtype_name}"] = compile_s

    loop_t = [C.timed(lambda: numpy_loop(A, B, args.loop_samples, 2)) for _ in range(2)]
    loop_rate = args.loop_samples / np.median(loop_t)
    vec_rate = args.samples / np.median(res["vec"])
    j64 = args.samples / np.median(res["jax64"])
    j32 = args.samples / np.median(res["jax32"])
    ratio_vec = C.ratio_stats(res["vec"], res["jax64"])
    m, sem, var = res["est_float64"]
    rows = [
        ["geomjax estimate (jit+vmap+scan), float64", f"{j64:,.0f}", f"{res['compile_float64']:.2f}",
         f"**{j64 / loop_rate:.0f}×**", C.fmt_ratio(ratio_vec)],
        ["geomjax estimate, float32", f"{j32:,.0f}", f"{res['compile_float32']:.2f}", f"{j32 / loop_rate:.0f}×",
         f"{j32 / vec_rate:.2f}×"],
        ["NumPy vectorised (chunks of 65536), float64", f"{vec_rate:,.0f}", "—", f"{vec_rate / loop_rate:.0f}×", "1×"],
        ["NumPy Python loop (one sample per iteration), float64", f"{loop_rate:,.0f}", "—", "1×", "—"],
    ]
    return "\n".join([
        "",
        f"### n = {n}",
        "",
        f"One sample: x, y ~ N(0, I_{n}), s = ⟨Ax, By⟩ for fixed {n}×{n} A, B; every implementation "
        f"returns mean and sem. {args.samples:,} samples per timed call ({args.repeats} interleaved repeats, median), "
        f"{args.loop_samples:,} for the Python loop; compile time (first call) excluded and listed. Check: "
        f"mean {m:.4g} ± {sem:.2g} (predicted 0), variance {var:.4g} (eq. 6.3: Tr(CCᵀ) = {pred_var:.4g}).",
        "",
        C.markdown_table(["implementation", "samples/s", "compile (s)", "vs Python loop (goal ≥ 50×)",
                          "vs vectorised NumPy (goal ≥ 2×; median, min–max)"], rows),
    ])


if __name__ == "__main__":
    raise SystemExit(main())
