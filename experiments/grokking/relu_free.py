"""Does a ReLU-free clock model grok (the clock blog §8), and at which training split? The ReLU-free variant
(MLP activation removed, everything else as the preset) trained at several (training fraction, epochs)
settings, with its train/test accuracy, test loss and weight norm against epochs::

    .venv/bin/python -m experiments.grokking.relu_free --preset cpu --out runs/grokking-relu-free

Each run goes to ``<out>/relu_free_f<percent>_e<epochs>`` (checkpoints every chunk; a re-run resumes or
reuses it). The settings are :data:`experiments.grokking.config.RELU_FREE_SETTINGS`; the ``cpu`` report's
own ReLU-free run (the blog's 30% split, 4,000 epochs, ``experiments.grokking.run``) is quoted beside them
from the committed ``results/cpu/metrics.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from experiments.grokking.config import GROK_PRESETS, RELU_FREE_SETTINGS, relu_free_configs
from geomjax.analysis import plots
from geomjax.analysis.comparison import PLUMBING_NOTICE, parse_source_table
from geomjax.analysis.report import RunDir, Section, machine_load, to_jsonable
from geomjax.train.cost import toy_training_cost
from geomjax.train.grokking import grokking_milestones, train_grokking

COMMITTED = Path(__file__).resolve().parent / "results" / "cpu" / "report.md"


def run_name(cfg) -> str:
    """The run directory's name of one setting: ``relu_free_f<percent>_e<epochs>``."""
    return f"relu_free_f{round(100 * cfg.train.options.train_frac)}_e{cfg.epochs}"


def log_seconds(path: Path) -> float:
    """Training seconds of every session of a run, from its log (:func:`train_grokking`'s ``log_file``: one line
    a chunk ending in ``wall <s>s``, the seconds since that session began; a session that was killed before it
    finished still left its lines, where ``timings.jsonl`` only records finished sessions)."""
    walls = [float(line.rsplit("wall ", 1)[1].rstrip("s\n")) for line in path.read_text().splitlines()
             if " wall " in line] if path.is_file() else []
    total, prev = 0.0, 0.0
    for w in walls + [0.0]:  # a drop in the wall clock starts a new session
        if w < prev:
            total += prev
        prev = w
    return total


def summarize(res, seconds: float) -> dict:
    """Milestones (Nanda et al. §3: train 100%, test ≥ 99%), the final accuracies and the weight norm of one run;
    ``grokked``: test ≥ 99% reached; ``gen_over_mem``: epoch(test ≥ 99%) / epoch(train 100%); ``trained``: the
    epochs trained so far (below ``epochs`` when stopped with ``--stop-at``)."""
    h = res.history
    ms = grokking_milestones(h)
    sq = np.asarray(h["sq_weights"], np.float64)
    return {"train_frac": res.config.train.options.train_frac, "epochs": res.config.epochs,
            "trained": int(h["epoch"][-1]), **ms,
            "grokked": ms["test_99"] is not None, "final_train_acc": float(h["train_acc"][-1]),
            "final_test_acc": float(h["test_acc"][-1]), "final_test_loss": float(h["test_loss"][-1]),
            "max_test_acc": float(np.max(h["test_acc"])), "sq_weights_start": float(sq[0]),
            "sq_weights_peak": float(sq.max()), "sq_weights_peak_epoch": int(h["epoch"][int(np.argmax(sq))]),
            "sq_weights_end": float(sq[-1]), "seconds": seconds,
            "gen_over_mem": (ms["test_99"] / max(ms["train_100"], 1)) if ms["test_99"] and ms["train_100"] else None}


def _row(name: str, s: dict) -> list:
    at = lambda e: "never" if e is None else str(e)  # noqa: E731
    ep = str(s["epochs"]) if s["trained"] == s["epochs"] else f"{s['trained']} (stopped; of {s['epochs']})"
    return [name, f"{s['train_frac']:.0%}", ep, at(s["train_100"]), at(s["test_99"]),
            f"{s['final_test_acc']:.3f}", f"{s['max_test_acc']:.3f}",
            "—" if s["gen_over_mem"] is None else f"{s['gen_over_mem']:.1f}×", f"{s['seconds']:.0f}"]


def committed_30() -> str | None:
    """The ``relu_free`` row of the committed cpu report (its ReLU-free run at the blog's 30% split, 4,000 epochs),
    as that report states it; None if there is no committed report."""
    if not COMMITTED.is_file():
        return None
    rows = parse_source_table(COMMITTED.read_text())
    row = next((r for r in rows if r["quantity"].startswith("the MLP is affine")), None)
    return None if row is None else f"{row['this run']} — {row['verdict']}"


def committed_splits() -> str | None:
    """:func:`trend` of the committed ``cpu`` split study (``results/cpu/relu_free/metrics.json``), the sentence the
    cpu report's ReLU-free row cites; None when it is not committed."""
    path = COMMITTED.parent / "relu_free" / "metrics.json"
    return trend(json.loads(path.read_text())["runs"]) if path.is_file() else None


def trend(summaries: dict) -> str:
    """One sentence from the runs, by split: when each grokked (or that it did not within its epochs), and how
    high and when the weight norm peaked (weight decay has to bring it down before the test accuracy rises)."""
    parts = []
    for s in sorted(summaries.values(), key=lambda s: -s["train_frac"]):
        g = f"test ≥ 99% at epoch {s['test_99']}" if s["grokked"] else f"no test ≥ 99% within {s['trained']} epochs"
        parts.append(f"{s['train_frac']:.0%} split: train 100% at {s['train_100']}, {g}, sum of squared weights peaking at "
                     f"{s['sq_weights_peak']:.0f} (epoch {s['sq_weights_peak_epoch']})")
    return "By split — " + "; ".join(parts) + "."


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="cpu", choices=[p for p in GROK_PRESETS if p in RELU_FREE_SETTINGS])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stop-at", type=int, default=None,
                    help="train each run up to this epoch only (a multiple of the chunk; a re-run resumes)")
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    out, t0 = Path(a.out), time.perf_counter()
    cfgs = relu_free_configs(a.preset, seed=a.seed)
    for c in cfgs:  # before any training: what it will cost
        print(f"{run_name(c)}: {toy_training_cost(c.train).describe()}")
    rd = RunDir(out, "grokking.relu_free")
    rd.write_config({"preset": a.preset, "seed": a.seed, "runs": [to_jsonable(c) for c in cfgs]})
    summaries, panels = {}, {"test accuracy": {}, "train accuracy": {}, "test loss": {}, "sum of squared weights": {}}
    for c in cfgs:
        name = run_name(c)
        stop = None if a.stop_at is None else min(a.stop_at, c.epochs)
        res = train_grokking(c, out / name, progress=not a.no_progress, log_file=out / f"{name}.log", stop_at=stop)
        summaries[name] = summarize(res, log_seconds(out / f"{name}.log"))  # history: every session
        h, label = res.history, f"{c.train.options.train_frac:.0%} split"
        for panel, k in (("test accuracy", "test_acc"), ("train accuracy", "train_acc"), ("test loss", "test_loss"),
                         ("sum of squared weights", "sq_weights")):
            panels[panel][label] = (h["epoch"], h[k])
    p, rel = rd.figure_path("relu_free_splits.png")
    plots.save(plots.curves(panels, "epoch", "ReLU-free clock model at several training splits",
                            logy=("test loss", "sum of squared weights")), p)
    rows = [_row(n, s) for n, s in summaries.items()]
    ref = committed_30() if a.preset == "cpu" else None
    seconds = time.perf_counter() - t0
    s = Section("ReLU-free runs at several training splits", [
        f"Preset {a.preset}: the ReLU-free variant (MLP activation removed; p = {cfgs[0].train.options.p}, lr "
        f"{cfgs[0].train.optim.lr:g}, weight decay {cfgs[0].train.optim.weight_decay:g}, full batch) at each (training "
        "fraction, epochs). Grokked: test accuracy ≥ 99% (Nanda et al. §3). Training seconds: every session of "
        f"the run (from its log). This invocation {seconds:.0f} s; at the end, {machine_load()}."]
        + [trend(summaries)] + ([PLUMBING_NOTICE] if a.preset == "smoke" else [])
        + ([f"The cpu report's own ReLU-free run (30% split, 4,000 epochs; results/cpu/report.md): {ref}."] if ref else []))
    s.table(["run", "train split", "epochs", "train 100% at", "test ≥ 99% at", "final test acc", "max test acc",
             "test 99% / train 100%", "training s"], rows)
    s.figure(rel, "test and train accuracy, test loss and the sum of squared weights against epochs, per split")
    rd.write_json("metrics.json", {"preset": a.preset, "runs": summaries, "committed_30": ref, "seconds": seconds})
    rd.write_report(f"Grokking without ReLU: the training split ({a.preset})", [s])
    for n, sm in summaries.items():
        print(n, {k: sm[k] for k in ("train_100", "test_99", "final_test_acc")})
    print(f"report: {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
