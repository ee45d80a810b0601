"""Run every benchmark (benchmarks/bench_*.py) and collect their Markdown into one results file.

Each ``bench_<name>.py`` takes ``--quick`` (smaller sizes) and ``--out FILE`` (append its Markdown
section, machine and load included). They run one after another in fresh processes, so no
benchmark's compile cache or memory high-water mark leaks into the next.

    .venv/bin/python benchmarks/run_all.py                  # everything, full sizes
    .venv/bin/python benchmarks/run_all.py --quick          # smaller sizes (minutes)
    .venv/bin/python benchmarks/run_all.py --only scale,models

The collected file (default ``benchmarks/results/run-<date>.md``) is the raw record; the
curated summary with the goals lives in ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _common  # noqa: E402


def discover() -> list[str]:
    """Names of the benchmarks present (bench_<name>.py), sorted."""
    return sorted(p.stem[len("bench_"):] for p in HERE.glob("bench_*.py"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="pass --quick to every benchmark")
    ap.add_argument("--only", default=None, help="comma list of benchmark names (default: all)")
    ap.add_argument("--out", default=None, help="collected Markdown (default benchmarks/results/run-<date>.md)")
    args = ap.parse_args(argv)
    names = discover()
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            raise SystemExit(f"run_all: unknown benchmark(s) {unknown}; present: {names}")
        names = wanted
    out = Path(args.out or HERE / "results" / f"run-{time.strftime('%Y%m%d-%H%M')}.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    header = [f"# geomjax benchmarks, {time.strftime('%Y-%m-%d %H:%M')} ({'quick' if args.quick else 'full'} sizes)",
              "", _common.machine_block(_common.machine_info()), ""]
    out.write_text("\n".join(header) + "\n", encoding="utf-8")
    failed = []
    for name in names:
        cmd = [sys.executable, str(HERE / f"bench_{name}.py"), "--out", str(out)]
        if args.quick:
            cmd.append("--quick")
        print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=HERE.parent)
        dt = time.perf_counter() - t0
        print(f"== {name}: exit {r.returncode} after {dt:.0f} s", flush=True)
        if r.returncode:
            failed.append(name)
            _common.write_section(str(out), f"## {name}: FAILED (exit {r.returncode} after {dt:.0f} s)")
    print(f"results: {out}")
    if failed:
        print(f"failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
