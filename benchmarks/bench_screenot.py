"""ScreeNOT (Song & Zhong's rank estimator) in geomjax against the official `screenot` package.

Baseline: ``screenot.adaptiveHardThresholding(Y, k, "i")`` (NumPy/SciPy, one matrix per call),
measured in the same run, interleaved. geomjax: ``spectral.screenot`` jitted, one matrix per
call, and vmapped over a stack of matrices (e.g. every layer's P at once). Compile time is
reported apart. Every rank is checked against the official one.

Run:  .venv/bin/python benchmarks/bench_screenot.py [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402


def planted(n: int, m: int, rank: int, count: int, seed: int = 0) -> np.ndarray:
    """(count, n, m) low-rank signal + Gaussian noise (a pos-like matrix)."""
    rng = np.random.default_rng(seed)
    U = rng.standard_normal((count, n, rank))
    V = rng.standard_normal((count, rank, m))
    s = np.linspace(6, 2, rank)[None, None, :] * np.sqrt(m)
    return (U * s) @ V / np.sqrt(n * m) * 8 + rng.standard_normal((count, n, m)) / np.sqrt(m)


def bench_shape(n: int, m: int, count: int, repeats: int, k: int = 20) -> list:
    import jax
    import screenot as official

    from geomjax.theory import spectral

    Ys = planted(n, m, 8, count)
    one = jax.jit(lambda y: spectral.screenot(y, k).rank)
    many = jax.jit(jax.vmap(lambda y: spectral.screenot(y, k).rank))
    t0 = time.perf_counter()
    jax.block_until_ready(one(Ys[0]))
    c_one = time.perf_counter() - t0
    t0 = time.perf_counter()
    ranks_many = np.asarray(jax.block_until_ready(many(Ys)))
    c_many = time.perf_counter() - t0

    def run_official():
        return [official.adaptiveHardThresholding(y, k, "i")[2] for y in Ys]

    def run_one():
        return [int(jax.block_until_ready(one(y))) for y in Ys]

    def run_many():
        return jax.block_until_ready(many(Ys))

    ref = [int(r) for r in run_official()]
    agree = ref == run_one() == [int(r) for r in ranks_many]
    t = _common.interleaved({"official": run_official, "one": run_one, "vmap": run_many}, repeats)
    return [f"{count} × ({n}, {m})", "yes" if agree else f"NO: {ref} vs {ranks_many.tolist()}",
            _common.fmt_ratio(_common.ratio_stats(t["official"], t["one"])),
            _common.fmt_ratio(_common.ratio_stats(t["official"], t["vmap"])),
            f"{c_one:.2f} s / {c_many:.2f} s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None, help="append the Markdown section to this file")
    args = ap.parse_args()
    shapes = [(127, 384, 7), (255, 768, 13)] if args.quick else [(127, 384, 7), (255, 768, 13), (511, 768, 13)]
    rows = [bench_shape(n, m, c, 3 if args.quick else 5) for n, m, c in shapes]
    text = "\n".join([
        f"## ScreeNOT: geomjax vs the official package ({time.strftime('%Y-%m-%d %H:%M')})", "",
        _common.machine_block(_common.machine_info()), "",
        "Speed-up = official time / geomjax time for the same stack of matrices (k = 20, strategy "
        "'i'); 'one' calls the jitted function per matrix, 'vmap' does the whole stack in one call.", "",
        _common.markdown_table(["matrices", "ranks identical", "speed-up (one)", "speed-up (vmap)",
                                "first call incl. compile (one / vmap)"], rows),
        "", f"(load average: {_common.load_avg()})"])
    print(text)
    _common.write_section(args.out, text)


if __name__ == "__main__":
    main()
