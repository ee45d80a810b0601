"""The Monte Carlo engine of the claims: the mean of a claim's sampler, drawn in rounds to a decision.

The rounds and the rule valid under their optional stopping are :mod:`geomjax.claims.sequential`'s; this module
feeds it the claim's sampler (sample i always uses ``fold_in(key, i)``, so a round extends the same sample and
the first look is exactly the fixed-size estimate of ``Claim.n_samples[budget]`` draws).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import time

import numpy as np

from geomjax.claims._format import _flat_tree, _jsonable, _summary
from geomjax.claims.claim import Claim, ClaimResult
from geomjax.claims.judge import _resolve_predicted
from geomjax.claims.rules import MonteCarloRule
from geomjax.claims.sequential import SECONDS, Stats, samples_needed, sequential_decision
from geomjax.theory import montecarlo


_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("geomjax_claims_deadline", default=None)


@contextlib.contextmanager
def run_deadline(deadline: float | None):
    """Within the block, no claim's rounds run past ``deadline`` (a ``time.perf_counter()`` value; None: no limit)."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def claim_seconds(claim: Claim, budget: str) -> float:
    """The claim's budget in process CPU seconds at ``budget`` (``Claim.seconds``, else
    :data:`~geomjax.claims.sequential.SECONDS`), cut to the wall time left before the run's deadline
    (:func:`run_deadline`, ``geomjax verify --time-budget``)."""
    own = claim.seconds or {}
    seconds = float(own.get(budget, SECONDS[budget]))
    deadline = _DEADLINE.get()
    return seconds if deadline is None else max(0.0, min(seconds, deadline - time.perf_counter()))


def _drawer(claim: Claim, key, n0: int, mesh, info: dict):
    """``(start, count) -> Stats``: ``count`` (a multiple of n0) draws from index ``start``, in calls of n0 draws
    each (one compiled program for every round)."""
    chunk = min(claim.chunk, n0)
    if mesh is not None:  # the driver needs a multiple of the device count
        n_dev = int(mesh.devices.size)
        chunk = -(-chunk // n_dev) * n_dev

    def draw(start: int, count: int) -> Stats:
        total = None
        for s in range(start, start + count, n0):
            est = montecarlo.estimate(claim.sampler, key, min(n0, start + count - s), chunk=chunk, mesh=mesh,
                                      dtype=claim.dtype, start=s)
            out = est.as_numpy()
            info["dtype"] = out["dtype"]
            sd = _flat_tree(out["std"])
            st = Stats(int(out["n"]), _flat_tree(out["mean"]), sd * sd * (int(out["n"]) - 1))
            total = st if total is None else total.merge(st)
        return total

    return draw


def _judge_monte_carlo(claim: Claim, budget: str, key, mesh=None) -> ClaimResult:
    rule: MonteCarloRule = claim.rule  # type: ignore[assignment]
    n0 = int(claim.n_samples[budget])
    info: dict = {}
    pred_raw = _resolve_predicted(claim, budget)
    seconds = claim_seconds(claim, budget)
    out = sequential_decision(_drawer(claim, key, n0, mesh, info), n0, pred_raw,
                              lambda st: rule.margin.value(np.broadcast_to(np.asarray(pred_raw, float), st.mean.shape),
                                                           st.sd),
                              n_sigma=rule.n_sigma, seconds=seconds, deadline=_DEADLINE.get(),
                              max_samples=2**31 - 1 - max(claim.chunk, n0))
    st, dec = out.stats, out.decision
    mean, sem, sd = st.mean, st.sem, st.sd
    if mean.size == 1:
        mean, sem, sd = mean.reshape(()), sem.reshape(()), sd.reshape(())
    pred = np.broadcast_to(np.asarray(pred_raw, dtype=float), mean.shape)
    delta = rule.margin.value(pred, sd)
    err = np.abs(mean - pred)
    finite = np.isfinite(sem) & (sem > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        # z = (estimate − predicted)/sem; a zero sem gives 0 (exact agreement) or ±inf
        z = np.where(finite, (mean - pred) / np.where(finite, sem, 1.0), np.where(err == 0, 0.0, np.inf * np.sign(mean - pred)))
    reason = dec.reason
    sequential = {"rounds": out.rounds, "samples": st.n, "cpu_seconds": round(out.seconds, 3), "stopped": out.stopped,
                  "looks": out.looks, "sigma_per_look": out.k, "first_look": n0, "budget_seconds": seconds,
                  "history": [[n, v] for n, v in out.history]}
    if dec.verdict == "inconclusive" and "not finite" not in reason:
        need = samples_needed(mean - pred, sd, delta, out.k)
        rate = out.seconds / st.n
        sequential["samples_needed"] = need
        reason += (f"; stopped: {out.stopped} after {out.rounds} round(s), n = {st.n}; deciding needs about "
                   + (f"{need:.3g} samples (≈ {need * rate:.3g} CPU s at this run's rate)" if math.isfinite(need)
                      else "an unbounded sample (the error sits on the margin)"))
    details = {
        "kind": "monte_carlo",
        "rule": rule.describe(),
        "z": _jsonable(_summary(z)),
        "worst_abs_z": float(np.abs(z.reshape(-1)[dec.worst])) if z.size else float("nan"),
        "n_samples": int(st.n),
        "dtype": info.get("dtype", claim.dtype),
        "mc_margin": delta,  # the margin in absolute units (used to judge the witness)
        "sequential": _jsonable(sequential),
    }
    return ClaimResult(
        id=claim.id, source=claim.source, statement=claim.statement,
        predicted=_summary(pred), estimate=_summary(mean), sem=_summary(sem), verdict=dec.verdict,
        details=details, margin=dec.margin, margin_origin=rule.margin.origin,
        detectable_error=dec.detectable_error, n=int(st.n), reason=reason,
    )
