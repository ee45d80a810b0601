"""Limits (n → ∞ statements) along a sequence of sizes, and a witness from an exact computation."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from geomjax.claims.rules import Evaluation


def fit_limit(sizes, values, sems=None, rates=None) -> dict:
    """Fit v(n) = L + c·n^(−r) to a sequence of sizes (the check of an n → ∞ statement).

    For each rate r on a grid (``rates``, default 0.05 … 3 in steps of 0.01, then refined by golden
    section between the best point's neighbours) L and c follow from weighted least squares (weights 1/sem², or equal weights when no sem is given or any is 0); the
    r with the smallest residual is kept. The standard error of L is the least-squares one, scaled
    by √(χ²/dof) when the residuals exceed the sems (dof = points − 3; with 3 points the sems alone).

    Args:
      sizes: (K,) increasing sizes n_k (K ≥ 3).
      values: (K,) v(n_k) (exact, or Monte Carlo means).
      sems: optional (K,) standard errors of ``values``.
      rates: optional grid of r.

    Returns:
      dict with ``limit`` (L), ``limit_sem``, ``rate`` (r), ``coef`` (c), ``chi2``, ``dof`` and
      ``residuals`` (v − fit, (K,)).
    """
    n = np.asarray(sizes, dtype=float)
    v = np.asarray(values, dtype=float)
    if n.ndim != 1 or n.shape != v.shape or n.size < 3 or np.any(np.diff(n) <= 0) or np.any(n <= 0):
        raise ValueError(f"fit_limit: need >= 3 increasing positive sizes with one value each, got {n}, {v}")
    s = None if sems is None else np.asarray(sems, dtype=float)
    weighted = s is not None and np.all(s > 0) and np.all(np.isfinite(s))
    w = 1.0 / s**2 if weighted else np.ones_like(v)
    grid = np.arange(0.05, 3.0001, 0.01) if rates is None else np.asarray(rates, dtype=float)

    def fit_at(r):
        A = np.stack([np.ones_like(n), n ** (-r)], axis=1)
        coef, *_ = np.linalg.lstsq(A * np.sqrt(w)[:, None], v * np.sqrt(w), rcond=None)
        res = v - A @ coef
        return float(np.sum(w * res**2)), r, coef, res, A

    best = min((fit_at(r) for r in grid), key=lambda t: t[0])
    if rates is None:  # refine the rate between the grid's neighbours (golden section, 40 steps)
        lo, hi = max(best[1] - 0.01, 1e-3), best[1] + 0.01
        g = (math.sqrt(5) - 1) / 2
        for _ in range(40):
            a, b = hi - g * (hi - lo), lo + g * (hi - lo)
            if fit_at(a)[0] < fit_at(b)[0]:
                hi = b
            else:
                lo = a
        best = min(best, fit_at((lo + hi) / 2), key=lambda t: t[0])
    chi2, r, coef, res, A = best
    dof = n.size - 3
    cov = np.linalg.pinv((A * w[:, None]).T @ A)
    if not weighted:  # equal weights: the scatter is the only error estimate
        scale = chi2 / dof if dof > 0 else 0.0
    else:
        scale = max(1.0, chi2 / dof) if dof > 0 else 1.0
    limit_sem = float(np.sqrt(max(cov[0, 0] * scale, 0.0)))
    return {"limit": float(coef[0]), "limit_sem": limit_sem, "rate": float(r), "coef": float(coef[1]),
            "chi2": chi2, "dof": int(dof), "residuals": res.tolist()}


def limit_evaluation(sizes, values, sems=None, *, label: str = "v", method: str = "") -> Evaluation:
    """An :class:`Evaluation` of an n → ∞ statement from a sequence of sizes (:func:`fit_limit`).

    ``value`` is the extrapolated limit L and ``sem`` its standard error, to be judged (rule
    :class:`~geomjax.claims.rules.Tolerance`) against the printed limit; the finite-n values are an observation ("finite-n
    deviation"), never the verdict. The fitted rate must be positive for the sequence to approach
    anything: a rate at the grid's lower end (no decay resolved) makes the evaluation "inconclusive"
    (precondition "the sequence approaches a limit at a resolved rate").

    Args:
      sizes, values, sems: see :func:`fit_limit` ((K,) each).
      label: name of the quantity in the observation.
      method: how the values were computed.
    """
    fit = fit_limit(sizes, values, sems)
    rows = [{"n": float(n_), label: float(v_), **({"sem": float(s_)} if sems is not None else {})}
            for n_, v_, s_ in zip(sizes, values, sems if sems is not None else [None] * len(values))]
    pre = None if fit["rate"] > 0.06 else f"no decay resolved along n = {list(sizes)} (fitted rate {fit['rate']:.2f})"
    return Evaluation(
        value=fit["limit"], sem=fit["limit_sem"], n=len(rows), precondition=pre,
        method=(method + "; " if method else "") + f"fit v(n) = L + c·n^(−r) over n = {list(sizes)}",
        observations={"finite_n": rows, "fitted_rate": fit["rate"], "fitted_coef": fit["coef"]},
        details={"limit_fit": fit},
    )


def exact_witness(fn: Callable[[str], Any], method: str) -> Callable:
    """A claim ``witness`` from an exact computation ``fn(budget) -> value`` (closed form in float64,
    enumeration, quadrature): ``(budget, key) -> Evaluation(value=fn(budget), sem=0, method=method)``."""

    def witness(budget, key):
        with jax.enable_x64(True):
            v = np.asarray(jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), fn(budget)), dtype=float)
        return Evaluation(value=v, sem=0.0, method=method)

    return witness


# ----------------------------------------------------------------------------------------------
# Recorded `full` verdicts (versioned): quick verdicts must never contradict them
