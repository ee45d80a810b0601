"""The Monte Carlo engine of the claims: the mean of a claim's sampler, judged by :func:`decide`."""

from __future__ import annotations

import numpy as np

from geomjax.claims._format import _flat_tree, _jsonable, _summary
from geomjax.claims.claim import Claim, ClaimResult
from geomjax.claims.judge import _resolve_predicted
from geomjax.claims.rules import MonteCarloRule, decide
from geomjax.theory import montecarlo


def _judge_monte_carlo(claim: Claim, budget: str, key, mesh=None) -> ClaimResult:
    rule: MonteCarloRule = claim.rule  # type: ignore[assignment]
    n = int(claim.n_samples[budget])
    chunk = min(claim.chunk, n)
    if mesh is not None:  # the driver needs a multiple of the device count
        n_dev = int(mesh.devices.size)
        chunk = -(-chunk // n_dev) * n_dev
    est = montecarlo.estimate(claim.sampler, key, n, chunk=chunk, mesh=mesh, dtype=claim.dtype)
    out = est.as_numpy()
    mean, sem, sd = _flat_tree(out["mean"]), _flat_tree(out["sem"]), _flat_tree(out["std"])
    if mean.size == 1:
        mean, sem, sd = mean.reshape(()), sem.reshape(()), sd.reshape(())
    pred = np.broadcast_to(np.asarray(_resolve_predicted(claim, budget), dtype=float), mean.shape)
    delta = rule.margin.value(pred, sd)
    dec = decide(mean - pred, sem, delta, rule.n_sigma)
    err = np.abs(mean - pred)
    finite = np.isfinite(sem) & (sem > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        # z = (estimate − predicted)/sem; a zero sem gives 0 (exact agreement) or ±inf
        z = np.where(finite, (mean - pred) / np.where(finite, sem, 1.0), np.where(err == 0, 0.0, np.inf * np.sign(mean - pred)))
    details = {
        "kind": "monte_carlo",
        "rule": rule.describe(),
        "z": _jsonable(_summary(z)),
        "worst_abs_z": float(np.abs(z.reshape(-1)[dec.worst])) if z.size else float("nan"),
        "n_samples": int(out["n"]),
        "dtype": out["dtype"],
        "mc_margin": delta,  # the margin in absolute units (used to judge the witness)
    }
    return ClaimResult(
        id=claim.id, source=claim.source, statement=claim.statement,
        predicted=_summary(pred), estimate=_summary(mean), sem=_summary(sem), verdict=dec.verdict,
        details=details, margin=dec.margin, margin_origin=rule.margin.origin,
        detectable_error=dec.detectable_error, n=int(out["n"]), reason=dec.reason,
    )
