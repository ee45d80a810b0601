"""End-to-end jobs behind the CLI: the per-layer geometry study, the claims check, toy training.

:func:`run_geometry` composes the study as data flow: ``geomjax.analysis.study.run(config)`` computes a
``StudyResult`` (Song & Zhong §2: Tables 1-5, Theorem 1 on real layers, App. C, Table 2),
``geomjax.analysis.plots.study_figures`` draws it, ``geomjax.analysis.report.sections`` writes its report, and
``StudyResult.to_json()`` is metrics.json. The claims check and toy training compose
``geomjax.claims`` and ``geomjax.train`` the same way. No numbers are computed here.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import dataclasses
import functools
import shutil
import time
from collections.abc import Mapping

import jax
import matplotlib.pyplot as plt
import numpy as np

from geomjax._version import __version__
from geomjax import claims, data, train
from geomjax.base import parallel, timing
from geomjax.analysis import plots
from geomjax.analysis import report
from geomjax.analysis import study
from geomjax.errors import GeomjaxError
from geomjax.analysis.report import Section, schedule_section
from geomjax.claims.catalogue import load_quick_seconds
from geomjax.claims.records import load_full_verdicts
from geomjax.claims.registration import source_report
from geomjax.claims.workers import default_workers
from geomjax.analysis.study import (  # noqa: F401  (the study's configuration and inputs, re-exported)
    PRESETS,
    GeometryConfig,
    GeometryInputs,
    check_topic_capacity,
    load_model_and_tokenizer,
    model_conventions,
    prepare_inputs,
    status_line,
    validate_geometry,
)

__all__ = [
    "run_geometry_sweep",
    "GeometryConfig",
    "GeometryInputs",
    "load_model_and_tokenizer",
    "prepare_inputs",
    "run_geometry",
    "run_claims",
    "run_training",
    "meta_line",
    "validate_geometry",
    "status_line",
    "check_topic_capacity",
    "claims_summary",
    "tally_summary",
    "recorded_claims",
    "validate_training",
]


def run_geometry(cfg: GeometryConfig, run: report.RunDir, progress: bool = True, alongside=None):
    """Song & Zhong §2 study of every hidden state (``geomjax.analysis.study.run``); writes its figures
    into ``run`` (none with ``cfg.figures`` False).

    The figures (host work: matplotlib) are drawn by a worker thread from the moment the study has
    everything they show, that is while the OOD forward (Table 2, which no figure draws) runs, and, if
    given, while ``alongside() -> (sections, metrics)`` runs once the study is computed (the demo's
    ``--claims``); its sections follow the study's and its metrics are merged into the study's. Both
    finish before this returns; an error in either propagates, so the caller abandons the run
    directory with nothing still writing into it.

    Returns:
      (sections, metrics): report sections (``geomjax.analysis.report.sections``) and metrics.json
      (``StudyResult.to_json``: ``per_layer`` metrics, ``summary`` (mean ± std across layers,
      Tables 1-2), singular values, Theorem 1 tables and timings; docs/DESIGN.md).
    """
    def draw(result):
        status_line("figures", progress)
        with timing.stage("figures", parallel=True):
            return {name: plots.save_to_run(fig, run, f"{name}.png")
                    for name, fig in plots.study_figures(result).items()}

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="geomjax-figures") as pool:
        drawn = []

        def start(partial):  # the figures' stage in this run's recording
            drawn.append(pool.submit(contextvars.copy_context().run, draw, partial))

        try:
            result = study.run(cfg, progress=progress, before_ood=start if cfg.figures else None)
            more, extra = alongside() if alongside is not None else ([], {})
            paths = drawn[0].result() if drawn else {}
        finally:  # never leave the thread drawing into a run directory that is about to be abandoned
            for f in drawn:
                f.cancel()
            concurrent.futures.wait(drawn)
    return report.sections(result, paths) + more, result.to_json() | extra


SWEEP_METRICS = ("screenot_rank", "stable_rank", "relative_norm", "share_pos", "share_ctx", "share_resid",
                 "incoherence_max", "dct_low_freq_energy")
"""The across-layer means a sweep's report tabulates per checkpoint (Song & Zhong Table 1 columns)."""


def run_geometry_sweep(cfg: GeometryConfig, models: list[str], run: report.RunDir, progress: bool = True):
    """The geometry study of each checkpoint of a sweep (training revisions ``NAME@stepN``, or directories),
    one after the other with the same windows, as one report: the metrics over training.

    Returns:
      (sections, metrics): a table of the across-layer means (:data:`SWEEP_METRICS`) per checkpoint and one
      of the relative norm per layer; metrics.json ``{"sweep": [{"model", "model_conventions", "summary",
      "per_layer"}, ...]}`` in the order given.
    """
    rows = []
    for i, name in enumerate(models):
        status_line(f"checkpoint {i + 1}/{len(models)}: {name}", progress)
        m = study.run(dataclasses.replace(cfg, model=name), progress=progress).to_json()
        rows.append({"model": name, **{k: m[k] for k in ("model_conventions", "summary", "per_layer", "layers")}})
    s = Section("Metrics over training (Song & Zhong Table 1 per checkpoint)")
    s.paragraphs.append(f"{len(models)} checkpoints, each studied on the same windows of {cfg.corpus} "
                        f"(C = {cfg.n_docs} x {cfg.windows_per_doc}, T = {cfg.seq_len}); mean over layers.")
    s.table(["checkpoint", *SWEEP_METRICS],
            [[r["model"], *(r["summary"].get(k, {}).get("mean", "n/a") for k in SWEEP_METRICS)] for r in rows])
    layers = rows[0]["layers"]
    s.table(["checkpoint", *layers], [[r["model"], *(layer.get("relative_norm") for layer in r["per_layer"])]
                                      for r in rows if r["layers"] == layers], caption="relative norm per layer")
    return [s], {"sweep": rows, "model_conventions": rows[0]["model_conventions"]}


def claims_summary(counts: dict) -> str:
    """'n hold, n do not hold, n inconclusive' from verdict counts."""
    return (f"{counts.get('holds', 0)} hold, {counts.get('does not hold', 0)} do not hold, "
            f"{counts.get('inconclusive', 0)} inconclusive")


def tally_summary(tally: dict) -> str:
    """The sources' statements apart from geomjax's own readings (:func:`geomjax.claims.tally`), e.g.
    "statements: 22 hold, 9 do not hold, 0 inconclusive; geomjax's own readings: 9 hold, 1 do not hold, 0
    inconclusive" (each part only when it counts something)."""
    parts = [f"geomjax's own readings: {claims_summary(tally['readings'])}"] if sum(tally["readings"].values()) else []
    if sum(tally["statements"].values()) or not parts:
        parts.insert(0, f"statements: {claims_summary(tally['statements'])}")
    return "; ".join(parts)


def erratum_cells(verdicts: Mapping[str, str]) -> dict[str, str]:
    """claim id -> the erratum's class of a claim that does not hold (its registered ``error_kind``, e.g.
    "typo/notation"), with the intended statement's claim and its verdict where the claim names one
    (``intended_by``); "" for a claim that holds or has no class. ``verdicts``: claim id -> verdict of a table."""
    by_id = {c.id: c for c in claims.all_claims()}
    out = {}
    for cid, v in verdicts.items():
        c = by_id.get(cid)
        if v != "does not hold" or c is None or not c.error_kind:
            out[cid] = ""
            continue
        intended = (f"; the intended statement `{c.intended_by}`: {verdicts.get(c.intended_by, 'not in this table')}"
                    if c.intended_by else "")
        out[cid] = c.error_kind + intended
    return out


ERRATUM_COLUMN = "erratum class (of a 'does not hold')"
ERRATUM_NOTE = ("The erratum column gives docs/ERRATA.md's class of each claim that does not hold: a 'typo/notation' "
                "is a misprint (the printed symbols say something false) whose evident intended statement is checked "
                "beside it; only 'wrong statement', 'wrong constant' and 'over-general statement' refute the source.")


def recorded_claims(source: str, flag: str) -> tuple[list[Section], dict]:
    """The recorded ``full`` verdicts of ``source``'s claims (``geomjax/claims/full_verdicts.json``) as a report
    section that names ``flag``, the option that checks them in the run instead (``geomjax demo`` without
    ``--claims``): nothing is checked, and the section says so.

    Returns:
      ([section], {"claims": {"checked": False, "recorded_counts", "recorded_tally", "recorded"}}).
    """
    recs = {k: v for k, v in sorted(load_full_verdicts().items()) if k.startswith(source + ".")}
    counts = {v: sum(r["verdict"] == v for r in recs.values()) for v in ("holds", "does not hold", "inconclusive")}
    parts = claims.tally({k: r["verdict"] for k, r in recs.items()})
    quick = load_quick_seconds()
    s = Section(f"Claims: not checked in this run ({len(recs)} recorded verdicts, {tally_summary(parts)})")
    s.paragraphs.append(
        f"This run did not check the claims of {source}, which do not depend on the model studied above (random "
        f"matrices, synthetic Grams, MiniLM on its own windows). `{flag}` checks them in the run (budget quick: their "
        f"checks were recorded at {sum(quick.get(k, 0.0) for k in recs):.0f} s in all, geomjax/claims/quick_seconds.json, "
        f"compiling and loading not counted); `geomjax verify --source {source}` checks them alone. Below are the verdicts "
        "recorded at budget full (geomjax/claims/full_verdicts.json), each with the date and commit of its run; "
        "docs/ERRATA.md gives the witnesses of those that do not hold. " + ERRATUM_NOTE)
    erratum = erratum_cells({k: r["verdict"] for k, r in recs.items()})
    s.table(["id", "recorded verdict (full)", ERRATUM_COLUMN, "date", "commit"],
            [[k, r["verdict"], erratum[k], r.get("date", ""), r.get("commit", "")] for k, r in recs.items()])
    return [s], {"claims": {"checked": False, "recorded_counts": counts, "recorded_tally": parts,
                            "recorded": {k: r["verdict"] for k, r in recs.items()}}}


@claims.run_memo()  # one memo over the claims and their report hooks (geomjax.claims.per_run)
def run_claims(run: report.RunDir, select=None, budget: str = "quick", seed: int = 0,
               progress: bool = False, on_results=None, time_budget: float | None = None, workers: int | None = 1):
    """Check the registered claims (``geomjax.claims.run``; ``time_budget``: wall seconds for the selection,
    cheapest claims first; ``workers``: processes, None for :func:`geomjax.claims.workers.default_workers`);
    writes claims.json / claims.md. Each source's report sections (:func:`_source_report`) are drawn by the
    process that checked most of its claims, right after them (``geomjax.claims.run``'s ``reports``).

    ``on_results(results)``, if given, is called as soon as the claims are checked, before this process draws
    its report sections and before a report that failed in another process raises (minutes of figures at
    ``full``): ``verify --budget full`` records its verdicts there, so a report step that fails or is killed
    does not lose them.

    Returns:
      (sections, metrics) with one table row per claim; ``metrics["counts"]`` counts verdicts, ``metrics["tally"]``
      the sources' statements apart from geomjax's own readings (:func:`geomjax.claims.tally`).
    """
    results, drawn = claims.run(select=select, budget=budget, seed=seed, out_dir=run.path, progress=progress,
                                time_budget=time_budget, workers=default_workers() if workers is None else workers,
                                on_results=on_results, reports=functools.partial(_source_report, str(run.path),
                                                                                 budget, seed))
    rows = []
    erratum = erratum_cells({r.id: r.verdict for r in results})
    for r in results:
        d = r.to_dict()
        seq = r.details.get("sequential") or {}
        sampling = (f"n = {seq['samples']}, {seq['rounds']} round(s), {seq['cpu_seconds']:.3g} CPU s, {seq['stopped']}"
                    if seq else "")
        rows.append([d["id"], d["source"], d.get("verdict"), erratum[r.id], _short(d.get("predicted")),
                     _short(d.get("estimate")), _short(d.get("sem")), _short(d.get("z_score")), sampling])
    counts = {v: sum(r.verdict == v for r in results) for v in ("holds", "does not hold", "inconclusive")}
    parts = claims.tally({r.id: r.verdict for r in results})
    s = Section(f"Claims checked ({len(results)}: {tally_summary(parts)})")
    s.paragraphs.append(
        "Each claim declares a margin (the error that would make it wrong) and is checked against an "
        "independent computation: it holds when |estimate − prediction| + k·sem ≤ margin, does not hold "
        "when |estimate − prediction| − k·sem > margin on two independent computations (the witnesses), "
        "and is inconclusive otherwise (the reason is given); k = 5, or for a Monte Carlo claim sampled in "
        "doubling rounds until it decides, 5.46 per look (the 5σ error split over its 12 looks). claims.md gives the margins and their "
        "origin, the detectable error, the witnesses and the corrected forms. For inequality claims "
        "(lhs ≤ rhs on every instance) the 'predicted' column is the right side and 'estimate' the left "
        "side, at the worst instance. " + ERRATUM_NOTE)
    s.table(["id", "source", "verdict", ERRATUM_COLUMN, "predicted", "estimate", "sem", "z", "sampling (Monte Carlo rounds)"], rows)
    sections = [s]
    extra, seconds = {}, {}
    for name, out in sorted(drawn.items()):
        if out is not None:
            sections.extend(out[0])
            extra[name], seconds[name] = out[1], out[2]
    metrics = {"budget": budget, "seed": seed, "counts": counts, "tally": parts,
               "results": [r.to_dict() for r in results]}
    if extra:
        metrics["figures"], metrics["report_seconds"] = extra, seconds
    return sections, metrics


def _source_report(path: str, budget: str, seed: int, group: str):
    """The ``report_sections`` of ``group``'s source drawn into the run directory at ``path`` (None when the
    source has no report; :func:`geomjax.claims.registration.source_report`): (sections, metrics, wall seconds).

    A source's ``report`` module may define
    ``report_sections(run: RunDir, *, budget: str, seed: int) -> (list[Section], dict)`` to add its
    figures to the ``verify`` report; it runs once when any of that source's claims was selected, in the
    process that checked them (``geomjax.claims.run``'s ``reports``).
    """
    hook = source_report(group)
    if hook is None:
        return None
    t0 = time.perf_counter()
    sections, metrics = hook(report.RunDir(path), budget=budget, seed=seed)
    return sections, metrics, round(time.perf_counter() - t0, 3)


def _short(x):
    """A table cell for a claim value: numbers as floats, long vectors abbreviated as in claims.md
    (first three values and the count)."""
    if x is None:
        return "—"
    if isinstance(x, (int, float, np.floating, np.integer)):
        return float(x)
    a = np.asarray(x)
    if a.size == 1 and np.issubdtype(a.dtype, np.number):
        return float(a.reshape(()))
    if a.ndim >= 1 and np.issubdtype(a.dtype, np.number):
        flat = a.reshape(-1)
        vals = ", ".join(f"{float(v):.4g}" for v in flat[:3])
        return f"[{vals}, … ({flat.size} values)]" if flat.size > 4 else \
            "[" + ", ".join(f"{float(v):.4g}" for v in flat) + "]"
    return str(x)[:40]


def run_training(task: str, preset: str, run: report.RunDir, *, resume: bool = True,
                 data_dir: str | None = None, devices: int | None = None, progress: bool = True):
    """Train a toy transformer preset (``geomjax.train.get_config(task, preset)``) in ``run``.

    Checkpoints go to ``run/checkpoints`` and a re-run resumes from the latest one; the report
    covers the whole history of every session (:func:`geomjax.train.merged_history`). ``resume=False`` starts
    over: the directory's checkpoints and histories are deleted first.
    """
    cfg = train.get_config(task, preset)
    if not resume:
        shutil.rmtree(run.path / "checkpoints", ignore_errors=True)
        for f in run.path.glob("history*.json"):
            f.unlink()
    res = train.fit(cfg, run_dir=run.path, data_dir=data_dir, resume=resume,
                    mesh=parallel.data_mesh(devices) if devices else None, progress=progress)
    h = train.merged_history(run.path)
    n_session = len(res.history.steps)
    s = Section(f"Training: {task} ({preset})")
    last = int(h["steps"][-1]) + 1 if len(h["steps"]) else 0
    s.paragraphs.append(
        f"{last} steps in all ({h['sessions']} session{'s' if h['sessions'] != 1 else ''}, "
        f"{h['seconds']:.1f} s of training); this session: {n_session} steps"
        + (f", resumed from step {res.resumed_from}" if res.resumed_from is not None else "") + "."
        + (" Steps not recorded (a session interrupted before it wrote its history): "
           + ", ".join(f"{a}-{b}" for a, b in h["gaps"]) + "." if h["gaps"] else ""))
    if h["evals"]:
        names = [k for k in h["evals"][0] if k != "step"]
        s.table(["step"] + names, [[e["step"]] + [e.get(k) for k in names] for e in h["evals"]],
                "Evaluation (every session)")
    if len(h["steps"]):
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.plot(h["steps"], h["train"]["loss"], lw=0.8, label="train")
        if h["evals"] and "loss" in h["evals"][0]:
            ax.plot([e["step"] for e in h["evals"]], [e["loss"] for e in h["evals"]], "o-", label="eval")
        if res.resumed_from:
            ax.axvline(res.resumed_from, color="0.6", ls=":", lw=0.8, label="resumed")
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.legend(loc="best")
        s.figure(plots.save_to_run(fig, run, "loss.png"), "Loss curves (all sessions)")
    metrics = {"task": task, "preset": preset, "evals": h["evals"], "resumed_from": res.resumed_from,
               "steps_total": last, "steps_this_session": n_session, "sessions": h["sessions"],
               "final_train_loss": float(h["train"]["loss"][-1]) if len(h["steps"]) else None}
    metrics["effective_schedule"] = res.schedule
    return [s, schedule_section({f"{task} ({preset})": res.schedule})], metrics, cfg


def validate_training(task: str, preset: str, data_dir: str | None = None) -> None:
    """Refuse a task/preset pair or data folder that ``geomjax train`` cannot use, before any work.

    Raises:
      GeomjaxError: naming the allowed values.
    """
    try:
        train.get_config(task, preset)
    except (ValueError, KeyError) as e:
        raise GeomjaxError(f"geomjax train {task} --preset {preset}: {e}") from None
    data.data_dir_override(data_dir)


def meta_line(cfg: GeometryConfig, n_positions: int | None = None) -> dict:
    """Header of a geometry report (T as the window length and as the positions analysed)."""
    T = cfg.seq_len
    analysed = n_positions if n_positions is not None else T - int(cfg.drop_first)
    note = "first token dropped" if cfg.drop_first else "first token kept"
    return {"model": cfg.model, "corpus": cfg.corpus,
            "C": f"{cfg.n_contexts} windows ({cfg.n_docs} document{'s' if cfg.n_docs != 1 else ''} × "
                 f"{cfg.windows_per_doc})",
            "T": f"{T} tokens, {analysed} positions analysed ({note})", "seed": cfg.seed,
            "geomjax": __version__,
            "jax": jax.__version__, "backend": jax.default_backend(),
            "devices": len(jax.devices())}
