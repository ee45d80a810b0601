"""The main job on a shared machine: a warm ``geomjax demo`` quiet and beside busy processes (issue 46 item 4).

Usage::

    .venv/bin/python benchmarks/bench_load.py [--rounds 2] [--busy 2] [--blas 1,2] [--out benchmarks/RESULTS.md]

Each round runs, interleaved, for every BLAS pool size of ``--blas`` (``GEOMJAX_BLAS_THREADS``; 1 is the
command's default since issue 46, 2 is one thread per core as OpenBLAS sizes itself on this machine): a warm
``geomjax demo`` alone ("quiet"), then the same demo beside ``--busy`` busy processes (pure-Python loops, one
core each, started just before the demo and stopped when it ends: the "shared machine"). The demo runs in a
fresh process (``python -m geomjax.cli``, ``benchmarks/bench_e2e.run_study``) with its own cache root, warmed
once first. Reported: wall time quiet and loaded, and loaded / quiet paired by round (fair sharing of
``n_cpus`` cores among the demo's threads and the busy loops predicts about (busy + n_cpus) / n_cpus).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import _common as C  # noqa: I001  (settles the BLAS environment before NumPy loads)
import numpy as np

from bench_e2e import run_study

BUSY = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def demo_beside(cache: str, busy: int, blas: int) -> float:
    """Wall seconds of one warm demo with ``busy`` busy-loop processes running beside it (each bounded)."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY.format(seconds=900)]) for _ in range(busy)]
    try:
        time.sleep(0.5 if busy else 0.0)  # the loops are running before the demo starts
        os.environ["GEOMJAX_BLAS_THREADS"] = str(blas)
        return run_study(["demo"], cache)["wall"]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--busy", type=int, default=2, help="busy processes beside the loaded demo")
    ap.add_argument("--blas", default="1,2", help="comma-separated GEOMJAX_BLAS_THREADS values to compare")
    ap.add_argument("--out", default=None, help="append the Markdown section to this file")
    args = ap.parse_args()
    for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # the demo sizes its own pools
        os.environ.pop(v, None)
    info = C.machine_info(peak=False)
    print(C.machine_block(info), flush=True)
    sizes = [int(x) for x in args.blas.split(",")]
    res = {b: {"quiet": [], "loaded": []} for b in sizes}
    with tempfile.TemporaryDirectory(prefix="gj_bench_load_") as cache:
        run_study(["demo"], cache)  # cold: fills the compilation and token caches
        for r in range(args.rounds):
            for b in sizes:
                res[b]["quiet"].append(demo_beside(cache, 0, b))
                res[b]["loaded"].append(demo_beside(cache, args.busy, b))
                print(f"round {r}, BLAS threads {b}: quiet {res[b]['quiet'][-1]:.1f} s, beside {args.busy} busy "
                      f"{res[b]['loaded'][-1]:.1f} s", flush=True)
    fair = (args.busy + C.n_cpus()) / C.n_cpus()
    rows = [[f"{b}" + (" (the command's default)" if b == 1 else ""), f"{np.median(res[b]['quiet']):.1f} s",
             f"{np.median(res[b]['loaded']):.1f} s", C.fmt_ratio(C.ratio_stats(res[b]["loaded"], res[b]["quiet"]))]
            for b in sizes]
    text = "\n".join([
        f"### The demo on a shared machine ({time.strftime('%Y-%m-%d %H:%M')})", "", C.machine_block(info), "",
        f"Warm `geomjax demo`, alone and beside {args.busy} busy processes (one core each), interleaved, "
        f"{args.rounds} rounds; fair sharing of the {C.n_cpus()} cores predicts about {fair:.1f}×.", "",
        C.markdown_table(["host BLAS threads (`GEOMJAX_BLAS_THREADS`)", "quiet (median)",
                          f"beside {args.busy} busy (median)", "loaded ÷ quiet (median, min–max)"], rows), "",
        f"- load average at the end: {C.load_avg()}"])
    print("\n" + text)
    C.write_section(args.out, text)


if __name__ == "__main__":
    main()
