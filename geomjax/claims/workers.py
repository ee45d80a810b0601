"""Checking a selection of claims in several processes (``geomjax verify --workers N``; issue 46 item 3).

A claim's result depends only on its id, the seed and the budget (:func:`geomjax.claims.run`'s contract), so the
selection can be split across processes without changing any verdict. Most claims are small programs whose
time is XLA compilation and tracing, which use one core: one process checks claims on about one core of a
2-core machine, two processes on both.

The split keeps each registering module's deterministic claims together (the results they share through
:func:`~geomjax.claims.per_run` are computed once, in one process), places each Monte Carlo claim on its own (its
samples are a function of its key alone: a sampler is a traced program, which reads no per-run result), and
balances the bins by the recorded quick-budget seconds (``quick_seconds.json``; full: the recorded full verdicts'
seconds), largest unit first.
The calling process checks the first bin itself (and every claim that a fresh process cannot re-register: one
registered by hand rather than by an importable module), so the run's :class:`~geomjax.claims.RunMemo` holds its
shared results for the report hooks; the other bins go to fresh processes (``spawn``), which import the sources
(and the researcher's ``--claims`` files, :func:`~geomjax.claims.registration.load_claims`) and take the
caller's JAX settings that bear on results and compilation (matmul precision, rank promotion, x64, the
compilation cache).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing
import os
import time
from collections.abc import Sequence
from typing import Any

import jax

from geomjax.base.threads import host_blas_threads
from geomjax.claims.catalogue import load_quick_seconds, load_report_seconds
from geomjax.claims.claim import Claim, ClaimResult
from geomjax.claims.memo import RunMemo, run_memo
from geomjax.claims.records import load_full_verdicts
from geomjax.claims.registration import claim_origin, load_claims, registered_claim, user_spec

__all__ = ["default_workers", "split", "report_bins", "run_in_workers"]

# JAX settings a fresh process takes from the caller: the ones that change results or what is compiled and cached.
_JAX_SETTINGS = ("jax_default_matmul_precision", "jax_numpy_rank_promotion", "jax_enable_x64",
                 "jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
                 "jax_persistent_cache_min_entry_size_bytes")
# Seconds a fresh process spends before its first claim (importing JAX, geomjax and the sources), counted in its bin.
_START_SECONDS = 6.0


def default_workers() -> int:
    """Processes for ``geomjax verify``: the usable CPUs, at most 2 (a third process adds start-up and memory, and
    the Monte Carlo claims' own programs use several cores)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        n = os.cpu_count() or 1
    return max(1, min(2, n))


def _costs(budget: str) -> dict[str, float]:
    if budget == "quick":
        return load_quick_seconds()
    return {k: float(v["seconds"]) for k, v in load_full_verdicts().items() if v.get("seconds") is not None}


def _module_key(claim: Claim, origin: str) -> str:
    """The module whose code checks ``claim``: its sampler's or evaluator's module when that lies in the registering
    module's package (a source registering through a shared helper, e.g. Wertich's chapters through ``_shared``,
    keeps each chapter's claims, which share its :func:`~geomjax.claims.per_run` results, together), else the
    registering module."""
    fn = claim.sampler if claim.sampler is not None else claim.evaluate
    module = getattr(fn, "__module__", None) or origin
    package = origin.rsplit(".", 1)[0]
    return module if module.startswith(package + ".") or module == origin else origin


def split(claims: Sequence[Claim], workers: int, budget: str) -> list[list[Claim]]:
    """``workers`` bins of ``claims`` (the selection's order kept within each bin): bin 0 for the calling process.

    The deterministic claims checked by one module (:func:`_module_key`) stay in one bin, as one unit; each Monte
    Carlo claim (a ``sampler``) is a unit of its own; a claim no fresh process can re-register (registered by hand,
    not by a source module or a ``--claims`` file) goes to bin 0. Units are placed largest first on the bin with the
    least recorded seconds (a claim without a record counts 1 s; a fresh process's bin starts at its start-up
    seconds; a source's recorded report seconds count with the unit whose bin draws it: :func:`report_bins`). Empty
    bins are dropped, except bin 0.
    """
    cost = _costs(budget)
    modules: dict[str, list[Claim]] = {}  # unit -> its claims
    bins: list[list[Claim]] = [[] for _ in range(max(1, workers))]
    for c in claims:
        unit = _unit(c)
        if unit is None:
            bins[0].append(c)
        else:
            modules.setdefault(unit, []).append(c)
    weight = {key: sum(cost.get(c.id, 1.0) for c in group) for key, group in modules.items()}
    hosts = _report_units(modules, weight)
    for g, seconds in (load_report_seconds() if budget == "quick" else {}).items():  # a source's report figures
        if g in hosts:
            weight[hosts[g]] += seconds
    load = [sum(cost.get(c.id, 1.0) for c in bins[0])] + [_START_SECONDS] * (len(bins) - 1)
    for key, group in sorted(modules.items(), key=lambda kv: (-weight[kv[0]], kv[0])):
        i = min(range(len(bins)), key=lambda j: (load[j], j))
        bins[i].extend(group)
        load[i] += weight[key]
    order = {c.id: k for k, c in enumerate(claims)}
    return [sorted(b, key=lambda c: order[c.id]) for i, b in enumerate(bins) if i == 0 or b]


def _settings() -> dict:
    return {name: getattr(jax.config, name) for name in _JAX_SETTINGS}


_BIN_MEMO: RunMemo | None = None
"""A fresh process's :class:`~geomjax.claims.RunMemo`: its bin's shared results, kept for its report task."""


def _child(run_ordered, settings: dict, specs: list[str], ids: list[str], budget: str, seed: int, errors: str,
           remaining: float | None, time_budget: float | None) -> list[ClaimResult]:
    """A fresh process's bin: the caller's JAX settings, the researcher's claims files, then the claims in order,
    with the host BLAS pools sized as the command sizes them (:func:`geomjax.base.threads.host_blas_threads`),
    through ``run_ordered`` (:func:`geomjax.claims.runner.run_ordered`, passed by reference), in a memo that
    :func:`_child_reports` re-enters."""
    global _BIN_MEMO
    for name, value in settings.items():
        if value is not None:
            jax.config.update(name, value)
    for spec in specs:
        load_claims(spec)
    deadline = None if remaining is None else time.perf_counter() + remaining
    _BIN_MEMO = RunMemo()
    with run_memo(_BIN_MEMO), host_blas_threads():  # the command's BLAS sizing (the caller's variables reach it)
        return run_ordered([registered_claim(i) for i in ids], budget, seed, None, errors, (deadline, time_budget))


def _child_reports(reports, groups: list[str]) -> dict[str, Any]:
    """The reports of ``groups`` in the fresh process that checked their claims (its bin's memo re-entered)."""
    with run_memo(_BIN_MEMO), host_blas_threads():
        return {g: reports(g) for g in groups}


def _unit(c: Claim) -> str | None:
    """The split's unit of ``c``: its id for a Monte Carlo claim (a ``sampler``: its samples depend on its key
    alone), else its checking module (:func:`_module_key`: the deterministic claims that share per_run results);
    None for a claim no fresh process can re-register (registered by hand), which stays in the calling process."""
    origin = claim_origin(c.id)
    if origin is None or (not origin.startswith("geomjax.sources.") and user_spec(origin) is None):
        return None
    return c.id if c.sampler is not None else _module_key(c, origin)


def _report_units(units: dict[str, list[Claim]], weight: dict[str, float]) -> dict[str, str]:
    """{source group: the unit whose process draws its report}: the group's costliest deterministic unit (where
    the results its claims share are), else its costliest unit; ties by name."""
    best: dict[str, tuple] = {}
    for key, group in units.items():
        rank = (group[0].sampler is None, weight[key], key)
        if group[0].group not in best or rank > best[group[0].group]:
            best[group[0].group] = rank
    return {g: rank[2] for g, rank in best.items()}


def report_bins(bins: list[list[Claim]], budget: str) -> list[list[str]]:
    """The source groups each bin reports (:func:`run_in_workers`' ``reports``): a group goes to the bin of its
    costliest deterministic unit of :func:`split` (where the per_run results its claims share are at hand), else of
    its costliest unit (recorded seconds; a claim without a record counts 1 s)."""
    cost = _costs(budget)
    units: dict[str, list[Claim]] = {}
    where: dict[str, int] = {}
    for i, b in enumerate(bins):
        for c in b:
            key = _unit(c) or f"{c.id} (this process)"
            units.setdefault(key, []).append(c)
            where[key] = i
    weight = {key: sum(cost.get(c.id, 1.0) for c in group) for key, group in units.items()}
    out: list[list[str]] = [[] for _ in bins]
    for g, key in sorted(_report_units(units, weight).items()):
        out[where[key]].append(g)
    return out


def run_in_workers(bins: list[list[Claim]], budget: str, seed: int, errors: str,
                   limit: tuple[float | None, float | None], run_ordered, bar=None, *, checked=None,
                   reports=None, reports_wait: bool = False) -> tuple[list[ClaimResult], dict[str, Any]]:
    """Bins 1.. in fresh processes (one each) and, meanwhile, bin 0 in this one, each through ``run_ordered(claims,
    budget, seed, mesh, errors, limit, bar)`` (:func:`geomjax.claims.runner.run_ordered`, passed by reference); then
    every result, bin by bin, through ``checked(results)`` (:func:`geomjax.claims.runner.run`'s hand-over), and the
    ``reports(group)`` of :func:`report_bins`, each in its bin's process right after that bin's claims (this
    process's own after the hand-over with ``reports_wait``, so that a report that fails or is interrupted loses
    no verdict).

    ``limit`` = (deadline, time_budget): the deadline (``time.perf_counter()`` of this process, or None) reaches
    each process as the seconds left; a progress ``bar`` counts this process's claims one by one and another
    process's when its bin is done. An exception of a claim (``errors="raise"``) propagates after this process's own
    bin has finished.

    Returns:
      (every result, {group: reports(group)}; empty without ``reports``).
    """
    specs = sorted({s for b in bins[1:] for c in b if (s := user_spec(claim_origin(c.id))) is not None})
    deadline, time_budget = limit
    remaining = None if deadline is None else max(0.0, deadline - time.perf_counter())
    groups = report_bins(bins, budget) if reports is not None else [[] for _ in bins]
    ctx = multiprocessing.get_context("spawn")
    with contextlib.ExitStack() as stack:
        pools = [stack.enter_context(cf.ProcessPoolExecutor(max_workers=1, mp_context=ctx)) for _ in bins[1:]]
        futures = [pool.submit(_child, run_ordered, _settings(), specs, [c.id for c in b], budget, seed, errors,
                               remaining, time_budget) for pool, b in zip(pools, bins[1:])]
        later = [pool.submit(_child_reports, reports, g) for pool, g in zip(pools, groups[1:]) if g]
        results = list(run_ordered(bins[0], budget, seed, None, errors, limit, bar))
        outputs = {} if reports_wait else {g: reports(g) for g in groups[0]}
        for f, b in zip(futures, bins[1:]):
            results.extend(f.result())
            if bar is not None:
                bar.update(len(b))
        if checked is not None:
            results = checked(results)
        if reports_wait:
            outputs = {g: reports(g) for g in groups[0]}
        for f in later:
            outputs |= f.result()
    return results, outputs
