"""Grokking modular addition and the clock algorithm's Fourier anatomy (Nanda et al.; the clock blog).

Trains (or resumes / loads) the preset's ReLU run and its ReLU-free variant as jitted ``lax.scan``
loops, then writes a geomjax run directory with every analysis and figure::

    .venv/bin/python -m experiments.grokking.run --preset blog --out runs/grokking-blog
    .venv/bin/python -m experiments.grokking.run --preset cpu --out runs/grokking-cpu

``blog`` is the clock blog's own model and run (§3: no positional embeddings, no LayerNorm, ReLU; 30% split;
AdamW lr 1e-3, weight decay 1; ReLU 10,000 epochs, ReLU-free 20,000): about 25 ms an epoch on a quiet 2-core CPU,
13 minutes for both runs. ``cpu`` is a second setting (Nanda's learned positions, lr 2e-3, 4,000 epochs), labelled
as such: its rows cannot accuse the blog ("not testable at this preset" where it departs).

Training goes to ``<out>/train`` and ``<out>/train-norelu`` (checkpoints every chunk, parameter
snapshots for the progress measures); re-running resumes or reuses them. Training anomalies (loss
spikes, non-finite values, accuracy drops after convergence: :mod:`geomjax.train.anomalies`) are
detected, drawn and reported, and the analyses use a stated checkpoint (``--checkpoint``: by default
the last stable snapshot).
"""

from __future__ import annotations

import os

# One BLAS thread unless the caller says otherwise (before NumPy loads OpenBLAS): the analyses' LAPACK calls
# (SVDs of 226 × 512 matrices, in JAX and NumPy) are small, and a multithreaded OpenBLAS on a shared,
# oversubscribed machine spends seconds per call waiting for its threads (measured on the 2-core machine at
# load ~18: one SVD 2.5–10 s with the default threads, 0.02 s with one; the ReLU analyses of a 31-snapshot
# run 210 s -> 103 s cold).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402


from experiments.grokking.config import GROK_PRESETS, get_config
from experiments.grokking.evidence import (SECOND_SETTINGS, evidence_section, figure_name, second_setting,
                                           second_setting_cost, two_coprime_why, w_l_same, w_l_why)
from experiments.grokking.relu_free import committed_splits
from experiments.grokking.source import SOURCE

from geomjax.sources.clock.report import analysis_sections
from geomjax.tools.clock_probe import analyze, key_series
from geomjax.analysis.comparison import Row, source_section, verdict
from geomjax.errors import GeomjaxError
from geomjax.analysis.report import RunDir, Section, machine_load, schedule_section, timing_section, to_jsonable
from geomjax.base import timing
from geomjax.base.parallel import enable_compilation_cache
from geomjax.train.anomalies import detect_anomalies, last_stable_epoch
from geomjax.train.cost import toy_training_cost
from geomjax.train.grokking import grokking_milestones, param_snapshots, train_grokking

SPIKE_FACTOR = 100.0  # a loss more than this × the median of the previous 50 logged values is a spike
PLATEAU_RATIO = 3.0  # "a real plateau": test 99% no earlier than this × the epoch of train 100%


def choose_checkpoint(res, anomalies, which: str):
    """(epoch, run result whose state holds that snapshot's parameters, reason) for ``which`` ∈
    {"last-stable", "final", "<epoch>"}: the analysed checkpoint."""
    final = int(res.history["epoch"][-1])
    snaps = [(e, p) for e, p in (param_snapshots(res.run_dir, res.state.params) if res.run_dir is not None else [])
             if e <= final]  # a run read at an interruption: no snapshot past it
    epochs = [e for e, _ in snaps] or [final]
    if which == "final":
        ep, why = final, "the final epoch (--checkpoint final)"
    elif which == "last-stable":
        ep = last_stable_epoch(epochs, anomalies)
        if ep is None:
            ep, why = final, "the final epoch: no snapshot lies outside the detected anomalies"
        else:
            why = ("the final epoch, outside every detected anomaly" if ep == final else
                   "the last snapshot outside every detected anomaly (the final one is inside one)")
    else:
        try:
            ep = int(which)
        except ValueError:
            raise GeomjaxError(f"--checkpoint must be 'last-stable', 'final' or an epoch, got {which!r}") from None
        if ep not in epochs:
            raise GeomjaxError(f"--checkpoint {ep}: no snapshot at that epoch; snapshots: {epochs[0]}..{epochs[-1]} "
                               f"every {epochs[1] - epochs[0] if len(epochs) > 1 else 0}")
        why = "the epoch asked for (--checkpoint)"
    if ep == final:
        return ep, res, why
    params = dict(snaps)[ep]
    return ep, dataclasses.replace(res, state=res.state.replace(params=params)), why


def _plateau(ms) -> tuple[int | None, float | None]:
    if ms["train_100"] is None or ms["test_99"] is None:
        return None, None
    return ms["test_99"] - ms["train_100"], ms["test_99"] / max(ms["train_100"], 1)


def _at(epoch: int | None) -> str:
    """A milestone epoch in words ("never" when it was not reached within the run)."""
    return "never" if epoch is None else f"at epoch {epoch}"


def comparison_rows(an, an_free, series: list[dict] | None = None, second: dict | None = None,
                    fig: str = "", free_epochs: int | None = None) -> list[Row]:
    """This run's number and verdict for each of the sources' numbers (:data:`source.SOURCE`); ``series`` (this run's
    :func:`geomjax.tools.clock_probe.key_series`), ``second`` (:func:`experiments.grokking.evidence.second_setting`)
    and ``fig`` (their figure) go into the last column of the W_L and two-coprime rows; ``free_epochs``: the
    ReLU-free run's planned length (a run reported before it, that has not grokked, decides nothing)."""
    ms = an["milestones"]
    length, ratio = _plateau(ms)
    rows = [Row("grok_epoch", f"train 100% {_at(ms['train_100'])}, test ≥ 99% {_at(ms['test_99'])}"
                + (f"; plateau {length} epochs ({ratio:.1f}× the memorisation time)" if length is not None else
                   "; did not grok"),
                verdict(ratio is not None and ratio >= PLATEAU_RATIO) if ms["train_100"] is not None else verdict(False),
                f"reproduced = test ≥ 99% at ≥ {PLATEAU_RATIO:g}× the epoch of train 100%")]
    key = an["key"]
    rows.append(Row("key_freqs", f"{key} hold {an['key_fraction_W_E']:.2f} of W_E's energy (random W_E: "
                    f"{an['random_W_E_fraction']:.2f})", verdict(0 < len(key) <= 8 and an["key_fraction_W_E"] > 0.5),
                    "reproduced = 1–8 key frequencies holding > 50%"))
    rows.append(Row("W_L_same", f"W_E: {an['key_W_E']}, W_L: {an['key_W_L']}",
                    verdict(w_l_same(an["key_W_E"], an["key_W_L"])), w_l_why(an, series or [], second, fig)))
    r2 = [an["circles"][("W_E", k)]["r2"] for k in key]
    r2r = [an["circles"][("W_E", k)]["r2"] for k in an["random_freqs"]]
    rows.append(Row("circles", f"R² {min(r2):.2f}–{max(r2):.2f} on key, {max(r2r):.2f} at most on random" if r2 else "—",
                    verdict(bool(r2) and min(r2) >= 0.9)))
    dom = [h["dominant"] for h in an["attention"]]
    rows.append(Row("attention", f"dominant frequencies per head {dom}", verdict(all(d in an["key_W_E"] for d in dom))))
    pr = an.get("progress")
    if pr and ms["test_99"] is not None:
        test0 = pr[0]["test"]
        first = lambda name: next((q["epoch"] for q in pr if q[name] < 0.5 * test0), None)  # noqa: E731
        er, et = first("restricted"), first("test")
        rows.append(Row("restricted_first", f"restricted loss halves at epoch {er}, test loss at {et}",
                        verdict(er is not None and et is not None and er <= et)))
    else:
        rows.append(Row("restricted_first", "no snapshots or no grokking", verdict(None)))
    if an_free is not None:
        mf, at = an_free["milestones"], int(an_free["history"]["epoch"][-1])
        short = free_epochs is not None and at < free_epochs and mf["test_99"] is None
        rows.append(Row("relu_free", f"ReLU-free: train 100% {_at(mf['train_100'])}, test ≥ 99% "
                        f"{_at(mf['test_99'])} (final test accuracy {an_free['history']['test_acc'][-1]:.2f}); ReLU "
                        f"removed from the trained ReLU model: accuracy {an.get('acc_relu_removed', float('nan')):.2f}",
                        verdict(None if short else mf["test_99"] is not None),
                        f"reported at epoch {at} of the run's {free_epochs}, before it has grokked: undecided"
                        if short else "" if mf["test_99"] is not None else "other training splits (python -m experiments.grokking."
                        "relu_free; results/cpu/relu_free/report.md, with the curves): " + (committed_splits() or
                                                                                            "not run yet")))
    else:
        rows.append(Row("relu_free", "ReLU-free variant not trained (--no-relu-free)", verdict(None)))
    pairs, emb = an["sufficiency"]["pairs"], an["sufficiency_embed"]
    if pairs:
        best = max(pairs, key=pairs.get)
        rows.append(Row("two_coprime", f"best pair {{{best}}}: {pairs[best]:.2f} (logit-restricted), "
                        f"{emb.get(best, float('nan')):.2f} (embedding-restricted)", verdict(pairs[best] >= 0.99),
                        two_coprime_why(an, series or [], second, fig)))
    else:
        rows.append(Row("two_coprime", "fewer than two key frequencies", verdict(None)))
    return rows


def at_setting(rows: list[Row], departures: list[str]) -> list[Row]:
    """The rows as verdicts on the source: a run that departs from the source's setting (``departures``) cannot
    accuse it, so its "not reproduced" reads "not testable at this preset" with the reason (the ``blog`` preset,
    the blog's own setting, decides those rows)."""
    if not departures:
        return rows
    why = "this preset departs from the blog's setting (see the departures): the blog preset decides this row"
    return [Row(r.key, r.run, verdict(None), "; ".join(x for x in (r.note, why) if x)) if r.verdict == verdict(False)
            else r for r in rows]


def anomaly_section(anomalies, checkpoint: int, why: str, final: int) -> Section:
    """What went wrong in training, and which checkpoint the analyses use."""
    s = Section("Training anomalies and the analysed checkpoint")
    s.paragraphs.append(f"Detected on the per-epoch train loss/accuracy and the test metrics: loss spikes (a value more than "
                        f"{SPIKE_FACTOR:g}× the median of the previous 50 logged values and above 1e-4), non-finite values, "
                        "and accuracy drops below 0.94 after first reaching 0.99.")
    if anomalies:
        s.paragraphs.append(f"{len(anomalies)} anomalies: " + "; ".join(a.describe() for a in anomalies) + ".")
    else:
        s.paragraphs.append("No anomaly detected.")
    s.paragraphs.append(f"Analysed checkpoint: epoch {checkpoint} of {final} — {why}. Every analysis below (spectra, "
                        "circles, attention, petals, MLP, sufficiency) uses its parameters.")
    return s


def timing_paragraphs(rec, cache_dir: str | None, load_start: str) -> Section:
    """The report's stage table (:func:`geomjax.analysis.report.timing_section` of the run's
    :mod:`geomjax.base.timing` recording) with this experiment's totals: the analyses' wall seconds (the
    issue-36 figure: both runs, every number of the report, figures excluded), the persistent compilation
    cache and the BLAS threads."""
    s = timing_section(rec)
    an = sum(st.wall_s for st in rec.stages if st.name.startswith("analyses"))
    s.paragraphs.append(
        f"Training reads 0 s where the trained runs were loaded from their run folders. Analyses (both runs, "
        f"the key frequencies at every snapshot and the second setting, whose training this counts too where it was "
        f"not cached; every number of the report, figures excluded): {an:.1f} s. Persistent compilation cache: "
        + ("on (a program compiled by an earlier run is read back instead of compiled)"
           if cache_dir else "off (GEOMJAX_NO_COMPILE_CACHE)")
        + f"; BLAS threads: OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}. At the start, "
        f"{load_start}; at the end, {machine_load()}.")
    return s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="cpu", choices=GROK_PRESETS)
    ap.add_argument("--out", default=None, help="run directory (default runs/grokking-<preset>)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-relu-free", action="store_true", help="skip the ReLU-free variant")
    ap.add_argument("--checkpoint", default="last-stable", help="'last-stable' (default), 'final' or a snapshot epoch")
    ap.add_argument("--relu-free-stop-at", type=int, default=None,
                    help="report the ReLU-free run as it stands at this epoch (a multiple of its chunk) instead of "
                         "training it to the end; the report says so, and re-running without it resumes the run")
    ap.add_argument("--second-setting", default=None, choices=SECOND_SETTINGS,
                    help="the second setting of the W_L and two-coprime rows: seed --seed of the clock claims' ReLU "
                         "models of that budget (the blog's model; trained once as vmapped seeds, then read from the "
                         "geomjax cache: quick 2 seeds stopped at grokking, full 32 seeds of 10,000 epochs, ~3 hours on 2 CPU cores); "
                         "default full for the cpu preset, none for smoke and blog (the blog preset IS the blog's setting)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    if args.second_setting is None:
        args.second_setting = "none" if args.preset in ("smoke", "blog") else "full"
    chunk = get_config(args.preset, relu=False, seed=args.seed).chunk
    if args.relu_free_stop_at is not None and (args.relu_free_stop_at <= 0 or args.relu_free_stop_at % chunk):
        raise GeomjaxError(f"--relu-free-stop-at must be a positive multiple of the ReLU-free run's chunk ({chunk} "
                           f"epochs), got {args.relu_free_stop_at}")
    if args.checkpoint not in ("last-stable", "final") and not args.checkpoint.isdigit():
        raise GeomjaxError(f"--checkpoint must be 'last-stable', 'final' or an epoch, got {args.checkpoint!r}")
    out = Path(args.out or f"runs/grokking-{args.preset}")
    cache_dir, load_start = enable_compilation_cache(), machine_load()
    with timing.record() as rec:
        return _run(args, out, cache_dir, load_start, rec)


def _run(args, out: Path, cache_dir: str | None, load_start: str, rec) -> int:
    """Train (or load) both runs, analyse and write the report (``main``'s body, inside its timing record)."""
    run = RunDir(out, command="grokking")
    cfg = get_config(args.preset, seed=args.seed)
    epochs = [cfg.epochs] + ([] if args.no_relu_free else [get_config(args.preset, relu=False, seed=args.seed).epochs])
    print(f"{len(epochs)} run(s) of {' + '.join(map(str, epochs))} epochs, one after another: "
          + toy_training_cost(cfg.train.replace(total_steps=sum(epochs))).describe())  # before training
    if args.second_setting != "none":
        print(second_setting_cost(args.second_setting, args.seed))
    t0 = time.perf_counter()
    with timing.stage("training (ReLU)"):
        res = train_grokking(cfg, out / "train", progress=not args.no_progress, log_file=out / "train.log")
    free = None
    if not args.no_relu_free:
        cfg_free = get_config(args.preset, relu=False, seed=args.seed)
        with timing.stage("training (ReLU-free)"):
            free = train_grokking(cfg_free, out / "train-norelu", progress=not args.no_progress,
                                  log_file=out / "train-norelu.log", stop_at=args.relu_free_stop_at)
    schedules = {"ReLU": res.config.effective_schedule()} | ({"ReLU-free": free.config.effective_schedule()} if free else {})
    run.write_config({"preset": args.preset, "seed": args.seed, "relu": to_jsonable(cfg),
                      "relu_free": to_jsonable(free.config) if free else None, "checkpoint": args.checkpoint},
                     schedules=schedules)
    anomalies = detect_anomalies(res.history, factor=SPIKE_FACTOR)
    anomalies_free = detect_anomalies(free.history, prefix="ReLU-free ", factor=SPIKE_FACTOR) if free else []
    final = int(res.history["epoch"][-1])
    ck, res_an, why = choose_checkpoint(res, anomalies, args.checkpoint)
    with timing.stage("analyses (ReLU, with the snapshots' progress measures)"):
        an = analyze(res_an, seed=args.seed)
    an.update(anomalies=anomalies, checkpoint=ck)
    an_free = None
    if free:
        ck_free, free_an, _ = choose_checkpoint(free, anomalies_free, args.checkpoint)
        with timing.stage("analyses (ReLU-free)"):
            an_free = analyze(free_an, seed=args.seed, with_snapshots=False)
    with timing.stage("analyses (key frequencies and coprime pairs at every ReLU snapshot)"):
        series = key_series(res)
    second = None
    if args.second_setting != "none":
        with timing.stage(f"analyses (second setting: the claims' {args.second_setting} ReLU model, trained if not cached)"):
            second = second_setting(args.second_setting, args.seed, lambda r: choose_checkpoint(
                r, detect_anomalies(r.history, factor=SPIKE_FACTOR), "last-stable"), progress=not args.no_progress)
    with timing.stage("figures and report sections"):
        sections, metrics = analysis_sections(run, an, an_free, title=args.preset)
        sections.append(evidence_section(run, args.preset, an, series, second, cfg.train.options.train_frac))
    plumbing = args.preset == "smoke"
    opt = cfg.train.options
    departures = _departures(cfg)
    free_at = int(free.history["epoch"][-1]) if free else 0
    free_epochs = ("" if not free else f" ({free.config.epochs} epochs)" if free_at == free.config.epochs else
                   f" (reported at epoch {free_at} of its {free.config.epochs}: the run was interrupted there "
                   "(--relu-free-stop-at) and resumes to the end when re-run)")
    cmp = source_section(SOURCE, args.preset, f"{cfg.epochs} epochs, {opt.train_frac:.0%} of the p² pairs (p = "
                         f"{opt.p}) for training, lr {cfg.train.optim.lr:g}, positional embeddings: "
                         f"{cfg.train.model.pos_embedding}; ReLU-free variant {'too' if free else 'skipped'}{free_epochs}; "
                         f"analysed checkpoint epoch {ck}.",
                         departures, at_setting(comparison_rows(an, an_free, series, second, figure_name(args.preset),
                                                                free.config.epochs if free else None), departures))
    anom = anomaly_section(anomalies + anomalies_free, ck, why, final)
    sections = [cmp, schedule_section(schedules), anom, timing_paragraphs(rec, cache_dir, load_start)] + sections
    ms = grokking_milestones(res.history)
    metrics.update(preset=args.preset, milestones=ms, plateau_epochs=_plateau(ms)[0],
                   milestones_relu_free=grokking_milestones(free.history) if free else None,
                   final=dict(train_acc=res.history["train_acc"][-1], test_acc=res.history["test_acc"][-1]),
                   checkpoint=ck, anomalies=[a.to_json() for a in anomalies + anomalies_free],
                   plumbing_only=plumbing, train_seconds=res.seconds, compile_seconds=res.compile_seconds,
                   stages=[st.to_json() for st in rec.stages], invocation_seconds=time.perf_counter() - t0,
                   key_series=series, second_setting=None if second is None else
                   {k: second[k] for k in ("name", "budget", "seed", "train_frac", "epochs", "checkpoint", "why", "series")}
                   | {k: second["an"][k] for k in ("key", "key_W_E", "key_W_L", "sufficiency", "sufficiency_embed")})
    run.write_json("metrics.json", metrics)
    run.write_report(f"Grokking and the clock algorithm ({args.preset})", sections)
    print(f"report: {out / 'report.md'}")
    return 0


def _departures(cfg) -> list[str]:
    t, d = cfg.train, []
    if t.options.p != 113:
        d.append(f"p = {t.options.p} (source 113)")
    if t.model.d_model != 128:
        d.append(f"d_model {t.model.d_model}, {t.model.n_heads} heads, d_mlp {t.model.d_mlp} (source 128, 4, 512)")
    if abs(t.options.train_frac - 0.3) > 1e-9:
        d.append(f"{t.options.train_frac:.0%} of the pairs for training (source 30%)")
    if t.optim.lr != 1e-3:
        d.append(f"lr {t.optim.lr:g} (source 1e-3: AdamW's decay per step is lr × weight decay, so the plateau is "
                 f"about {t.optim.lr / 1e-3:g}× shorter)")
    if cfg.epochs < 10_000:
        d.append(f"{cfg.epochs} epochs (blog 10,000–20,000: less time for weight decay to clean up the spectrum)")
    if t.model.pos_embedding != "none":
        d.append("learned positional embeddings (Nanda's code; the blog's text, §3, says none): a second setting, "
                 "not the blog's model")
    return d


if __name__ == "__main__":
    raise SystemExit(main())
