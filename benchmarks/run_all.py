"""Run every benchmark (benchmarks/bench_*.py) and collect their Markdown into one results file.

Each ``bench_<name>.py`` takes ``--quick`` (smaller sizes) and ``--out FILE`` (append its Markdown
section, machine and load included). They run one after another in fresh processes, so no
benchmark's compile cache or memory high-water mark leaks into the next.

    .venv/bin/python benchmarks/run_all.py                  # everything, full sizes
    .venv/bin/python benchmarks/run_all.py --quick          # smaller sizes (minutes)
    .venv/bin/python benchmarks/run_all.py --only scale,models
    .venv/bin/python benchmarks/run_all.py --gpu            # the accelerator set (one lent GPU session)
    .venv/bin/python benchmarks/run_all.py --gpu --device cpu   # the same set with everything on the CPU

``--gpu`` runs the accelerator set (:data:`GPU_SET`): the forward against ``transformers``, the stream
against the forward, the study end to end (``bench_e2e.py``, when present) and one training step of a
paper preset, each benchmark with ``--device`` (geomjax and every baseline on that device, which each
section records with a matmul peak measured in the same run), within :data:`GPU_BUDGET_S` seconds: a
benchmark that would start after the budget is spent is skipped and listed as such.

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

GPU_BUDGET_S = 600  # the accelerator set must fit one 10-minute lent-GPU command
# (section title, benchmark name, arguments): the accelerator set of ``--gpu``
GPU_SET = (
    ("forward vs transformers", "models", ["--sections", "forward", "--repeats", "5"]),
    ("stream vs forward", "models", ["--sections", "extract"]),
    ("the study end to end", "e2e", []),
    ("a paper preset's training step", "train", ["--preset", "paper", "--steps", "10", "--rounds", "3"]),
)


def discover() -> list[str]:
    """Names of the benchmarks present (bench_<name>.py), sorted."""
    return sorted(p.stem[len("bench_"):] for p in HERE.glob("bench_*.py"))


def plan(names: list[str], *, gpu: bool, quick: bool, device: str | None, out: Path) -> list[tuple[str, list[str]]]:
    """(label, command) of each benchmark to run: the accelerator set (:data:`GPU_SET`, the benchmarks present)
    with ``gpu``, else ``names``; every command carries ``--out`` and, when given, ``--device`` and ``--quick``."""
    items = [(f"{name} ({title})", name, list(extra)) for title, name, extra in GPU_SET if name in names] if gpu \
        else [(name, name, []) for name in names]
    cmds = []
    for label, name, extra in items:
        cmd = [sys.executable, str(HERE / f"bench_{name}.py"), "--out", str(out)] + extra
        if quick:
            cmd.append("--quick")
        if device is not None:
            cmd += ["--device", device]
        cmds.append((label, cmd))
    return cmds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="pass --quick to every benchmark")
    ap.add_argument("--only", default=None, help="comma list of benchmark names (default: all)")
    ap.add_argument("--out", default=None, help="collected Markdown (default benchmarks/results/run-<date>.md)")
    ap.add_argument("--gpu", action="store_true", help=f"the accelerator set only, within {GPU_BUDGET_S} s")
    ap.add_argument("--device", choices=_common.DEVICES, default=None,
                    help="passed to every benchmark: where geomjax and its baselines run (default: auto)")
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
    kind = "accelerator set (--gpu)" if args.gpu else ("quick" if args.quick else "full") + " sizes"
    # the parent starts no JAX backend (on a GPU it would hold the memory the benchmarks need): each section
    # records its own device and matmul peak
    header = [f"# geomjax benchmarks, {time.strftime('%Y-%m-%d %H:%M')} ({kind}, --device {args.device or 'auto'})",
              "", _common.machine_block(_common.machine_info(record_device=False)), ""]
    out.write_text("\n".join(header) + "\n", encoding="utf-8")
    failed, walls, t_all = [], [], time.perf_counter()
    todo = plan(names, gpu=args.gpu, quick=args.quick, device=args.device, out=out)
    if args.gpu and "e2e" not in names:
        _common.write_section(str(out), "## the study end to end: bench_e2e.py is not in this tree (not run)")
    for label, cmd in todo:
        if args.gpu and time.perf_counter() - t_all > GPU_BUDGET_S:
            walls.append((label, "skipped: the budget was spent"))
            _common.write_section(str(out), f"## {label}: SKIPPED (the {GPU_BUDGET_S} s budget was spent)")
            continue
        print(f"== {label}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=HERE.parent)
        dt = time.perf_counter() - t0
        walls.append((label, f"{dt:.0f} s, exit {r.returncode}"))
        print(f"== {label}: exit {r.returncode} after {dt:.0f} s", flush=True)
        if r.returncode:
            failed.append(label)
            _common.write_section(str(out), f"## {label}: FAILED (exit {r.returncode} after {dt:.0f} s)")
    total = time.perf_counter() - t_all
    _common.write_section(str(out), "## Wall time of this run\n\n" + _common.markdown_table(
        ["benchmark", "wall"], walls + [("total", f"{total:.0f} s" + (f" (budget {GPU_BUDGET_S} s)" if args.gpu else ""))]))
    print(f"results: {out}")
    if failed:
        print(f"failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
