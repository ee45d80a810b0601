"""Running claims: :func:`run_claim` (one claim), :func:`run` (a selection), and the results one run shares
(:class:`RunMemo`, :func:`per_run`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from geomjax.claims.catalogue import load_quick_seconds
from geomjax.claims.claim import Claim, ClaimResult
from geomjax.claims.judge import _claim_key, _judge_deterministic, _second_witness, _too_few_draws
from geomjax.claims.memo import RunMemo, per_run, run_memo  # re-exported: the run's shared results
from geomjax.claims.records import load_full_verdicts, write_results
from geomjax.claims.registration import _select_strict
from geomjax.claims.rules import BUDGETS, Budget
from geomjax.claims.sampling import _judge_monte_carlo, run_deadline
from geomjax.claims.workers import run_in_workers, split
from geomjax.errors import GeomjaxError


def run_claim(claim: Claim, budget: Budget = "quick", seed: int = 0, mesh=None) -> ClaimResult:
    """Check one claim (not necessarily registered) and return its :class:`ClaimResult`.

    A "does not hold" is confirmed by the claim's ``witness`` (see :class:`Claim`) or turned into
    "inconclusive".

    Args:
      claim: the :class:`Claim`.
      budget: "quick" or "full" (sample counts / instance sizes).
      seed: base seed; the claim's key is ``fold_in(key(seed), crc32(claim.id))``.
      mesh: optional 1-D "data" mesh; Monte Carlo claims then shard their samples over it
        (the samples, hence the estimate up to rounding, are the same as without it).
    """
    if budget not in BUDGETS:
        raise ValueError(f"run: budget must be one of {BUDGETS}, got {budget!r}")
    if not isinstance(claim, Claim):
        raise TypeError(f"run_claim: expected a Claim, got {type(claim).__name__}")
    key = _claim_key(seed, claim.id)
    t0 = time.perf_counter()
    with run_memo():
        if claim.sampler is not None:
            res = _judge_monte_carlo(claim, budget, key, mesh=mesh)
        else:
            res = _judge_deterministic(claim, budget, key)
        if res.verdict == "does not hold":
            res = _too_few_draws(claim, res) or _second_witness(claim, res, budget, key)
    res.details["seconds"] = round(time.perf_counter() - t0, 3)
    res.details["budget"] = budget
    res.details["seed"] = seed
    if claim.notes:
        res.details["notes"] = claim.notes
    return res


def run(
    select: str | Sequence[str] | None = None,
    budget: Budget = "quick",
    seed: int = 0,
    out_dir: str | Path | None = None,
    errors: Literal["raise", "record"] = "raise",
    mesh=None,
    progress: bool = False,
    time_budget: float | None = None,
    workers: int = 1,
    *,
    on_results: Callable[[list[ClaimResult]], None] | None = None,
    reports: Callable[[str], Any] | None = None,
) -> list[ClaimResult] | tuple[list[ClaimResult], dict[str, Any]]:
    """Check every selected claim and optionally write ``claims.json`` and ``claims.md``.

    Args:
      select: see :func:`~geomjax.claims.registration.select_claims` (None = every claim).
      budget: "quick" (seconds, for tests and CI) or "full" (more samples / larger instances).
      seed: base seed; claim ``id`` uses ``fold_in(key(seed), crc32(id))``, so a claim's result
        does not depend on which other claims are selected.
      out_dir: directory to write ``claims.json`` and ``claims.md`` into (created if needed).
      errors: "raise" (default) re-raises an exception from a claim; "record" turns it into an
        "inconclusive" result whose details hold the error.
      mesh: optional 1-D "data" mesh over which Monte Carlo samples are sharded.
      progress: show a tqdm bar over the claims (stderr) naming the claim being checked and the decided /
        undecided counts so far.
      time_budget: optional wall seconds for the whole selection (``geomjax verify --time-budget``): the claims
        are checked cheapest first (:func:`cost_order`), a Monte Carlo claim's rounds stop at the run's deadline,
        and a claim not started before it is "inconclusive" ("not reached within the time budget").
      workers: processes that check the selection (:mod:`geomjax.claims.workers`: each registering module's
        deterministic claims in one process, each Monte Carlo claim on its own, bins balanced by recorded seconds,
        this process checking the first); the results are the same
        for any number. 1 (default) checks every claim here; with a ``mesh`` every claim is checked here too.
      on_results: called with the results (sorted by id, ``claims.json`` written) as soon as every claim is
        checked, before this process draws a report and before another process's failed report raises
        (``verify --budget full`` records its verdicts there).
      reports: a function ``reports(group) -> value`` (picklable: module-level, or a ``functools.partial`` of one),
        called once per source group with a checked claim (``Claim.group``: a source's report figures), in the
        process that checked the most recorded seconds of that group's claims — the run's
        :func:`~geomjax.claims.per_run` results at hand — right after its own claims, while other processes still
        check theirs (:func:`geomjax.claims.workers.report_bins`); with ``on_results`` this process's reports wait
        for every result to be handed over.

    Returns:
      One :class:`ClaimResult` per selected claim, sorted by id; with ``reports``, (those results,
      {group: reports(group)}).

    Raises:
      ValueError: unknown budget or errors mode, or a ``select`` pattern that matches no claim.
      GeomjaxError: a time budget that is not a positive number.
    """
    if budget not in BUDGETS:
        raise ValueError(f"run: budget must be one of {BUDGETS}, got {budget!r}")
    if errors not in ("raise", "record"):
        raise ValueError(f"run: errors must be 'raise' or 'record', got {errors!r}")
    if time_budget is not None and not (isinstance(time_budget, (int, float)) and time_budget > 0):
        raise GeomjaxError(f"run: time_budget must be a positive number of seconds, got {time_budget!r}")
    selected = _select_strict(select, "run")
    order = selected if time_budget is None else cost_order(selected, budget)
    deadline = None if time_budget is None else time.perf_counter() + float(time_budget)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise GeomjaxError(f"run: workers must be a positive integer, got {workers!r}")
    bins = [list(order)] if workers == 1 or mesh is not None else split(order, workers, budget)
    bar = None
    if progress:
        from tqdm.auto import tqdm  # display only

        bar = tqdm(total=len(order), desc="claims", unit="claim", leave=True)
    limit = (deadline, time_budget)

    def checked(results: list[ClaimResult]) -> list[ClaimResult]:  # every claim checked: handed over before reports
        if bar is not None:
            bar.close()
        results.sort(key=lambda r: r.id)
        if out_dir is not None:
            write_results(results, out_dir, budget=budget, seed=seed)
        if on_results is not None:
            on_results(results)
        return results

    with run_memo():
        if len(bins) == 1:
            results = checked(run_ordered(bins[0], budget, seed, mesh, errors, limit, bar))
            outputs = {} if reports is None else {g: reports(g) for g in sorted({c.group for c in bins[0]})}
        else:
            results, outputs = run_in_workers(bins, budget, seed, errors, limit, run_ordered, bar, checked=checked,
                                              reports=reports, reports_wait=on_results is not None)
    return results if reports is None else (results, outputs)


def run_ordered(claims: Sequence[Claim], budget: str, seed: int, mesh, errors: str,
                limit: tuple[float | None, float | None] = (None, None), bar=None) -> list[ClaimResult]:
    """Check ``claims`` in order in this process (inside the current run's memo): :func:`run`'s loop.

    ``limit`` = (deadline, time_budget): a claim not started by the deadline (``time.perf_counter()``) is
    "inconclusive" ("not reached within the time budget"); ``bar`` (a tqdm bar) advances by one per claim and names
    the claim being checked.
    """
    deadline, time_budget = limit
    results: list[ClaimResult] = []
    with run_memo(), run_deadline(deadline):
        for claim in claims:
            if bar is not None:
                decided = sum(r.verdict != "inconclusive" for r in results)
                bar.set_postfix_str(f"decided {decided}, undecided {len(results) - decided}; {claim.id}", refresh=True)
            if deadline is not None and time.perf_counter() >= deadline:
                results.append(_not_reached(claim, budget, seed, time_budget))
            else:
                results.append(_run_or_record(claim, budget, seed, mesh, errors))
            if bar is not None:
                bar.update(1)
    return results


def cost_order(claims: Sequence[Claim], budget: str) -> list[Claim]:
    """Claims cheapest-to-decide first: by recorded seconds at ``budget`` (quick: ``quick_seconds.json``; full: the
    recorded full verdicts), claims without a record last (in id order)."""
    if budget == "quick":
        cost = load_quick_seconds()
    else:
        cost = {k: float(v["seconds"]) for k, v in load_full_verdicts().items() if v.get("seconds") is not None}
    return sorted(claims, key=lambda c: (c.id not in cost, cost.get(c.id, 0.0), c.id))


def _not_reached(claim: Claim, budget: str, seed: int, time_budget) -> ClaimResult:
    return ClaimResult(id=claim.id, source=claim.source, statement=claim.statement, predicted=None, estimate=None,
                       sem=None, verdict="inconclusive", details={"budget": budget, "seed": seed, "seconds": 0.0},
                       margin_origin=claim.margin_origin,
                       reason=f"not reached within the time budget ({time_budget:g} s; claims run cheapest first)")


def _run_or_record(claim: Claim, budget: str, seed: int, mesh, errors: str) -> ClaimResult:
    """:func:`run_claim`, or (``errors="record"``) an "inconclusive" result holding the exception."""
    try:
        return run_claim(claim, budget=budget, seed=seed, mesh=mesh)
    except Exception as exc:
        if errors == "raise":
            raise
        return ClaimResult(
            id=claim.id,
            source=claim.source,
            statement=claim.statement,
            predicted=None,
            estimate=None,
            sem=None,
            verdict="inconclusive",
            details={"error": repr(exc), "budget": budget, "seed": seed},
            margin_origin=claim.margin_origin,
            reason=f"the check raised {type(exc).__name__}",
        )


# ----------------------------------------------------------------------------------------------
# Limits, witnesses
# ----------------------------------------------------------------------------------------------
