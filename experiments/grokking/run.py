"""Grokking modular addition and the clock algorithm's Fourier anatomy (Nanda et al.; the clock blog).

Trains (or resumes / loads) the preset's ReLU run and its ReLU-free variant as jitted ``lax.scan``
loops, then writes a geomjax run directory with every analysis and figure::

    .venv/bin/python experiments/grokking/run.py --preset cpu --out runs/grokking-cpu
    .venv/bin/python experiments/grokking/run.py --preset blog --out runs/grokking-blog   # GPU: minutes

Training goes to ``<out>/train`` and ``<out>/train-norelu`` (checkpoints every chunk, parameter
snapshots for the progress measures); re-running resumes or reuses them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from config import get_config  # noqa: E402

from geomjax.claims.clock import analysis_sections, analyze  # noqa: E402
from geomjax.report import RunDir, Section, to_jsonable  # noqa: E402
from geomjax.train.grokking import grokking_milestones, train_grokking  # noqa: E402


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="cpu", choices=["paper", "blog", "cpu", "smoke"])
    ap.add_argument("--out", default=None, help="run directory (default runs/grokking-<preset>)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-relu-free", action="store_true", help="skip the ReLU-free variant")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.out or f"runs/grokking-{args.preset}")
    run = RunDir(out, command="grokking")
    cfg = get_config(args.preset, seed=args.seed)
    t0 = time.perf_counter()
    res = train_grokking(cfg, out / "train", progress=not args.no_progress, log_file=out / "train.log")
    free = None
    if not args.no_relu_free:
        cfg_free = get_config(args.preset, relu=False, seed=args.seed)
        free = train_grokking(cfg_free, out / "train-norelu", progress=not args.no_progress, log_file=out / "train-norelu.log")
    run.write_config({"preset": args.preset, "seed": args.seed, "relu": to_jsonable(cfg),
                      "relu_free": to_jsonable(free.config) if free else None})
    an = analyze(res, seed=args.seed)
    an_free = analyze(free, seed=args.seed, with_snapshots=False) if free else None
    sections, metrics = analysis_sections(run, an, an_free, title=args.preset)
    timing = Section("Timing")
    timing.paragraphs.append(
        f"This invocation: training (this call; 0 if loaded) {res.seconds:.1f} s (compile {res.compile_seconds:.1f} s)"
        + (f", ReLU-free {free.seconds:.1f} s" if free else "") + f"; total with analyses {time.perf_counter() - t0:.1f} s.")
    sections.insert(0, timing)
    metrics.update(preset=args.preset, milestones=grokking_milestones(res.history),
                   milestones_relu_free=grokking_milestones(free.history) if free else None,
                   final=dict(train_acc=res.history["train_acc"][-1], test_acc=res.history["test_acc"][-1]),
                   train_seconds=res.seconds, compile_seconds=res.compile_seconds)
    run.write_json("metrics.json", metrics)
    run.write_report(f"Grokking and the clock algorithm ({args.preset})", sections)
    print(f"report: {out / 'report.md'}")
    return out


if __name__ == "__main__":
    main()
