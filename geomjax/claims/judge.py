"""Judging one claim's check: deterministic evaluations under their rule, and the second witness that a
refutation needs."""

from __future__ import annotations

import zlib
from dataclasses import replace
from typing import Any

import jax
import numpy as np

from geomjax.claims._format import _jsonable, _summary
from geomjax.claims.claim import Claim, ClaimResult
from geomjax.claims.rules import MIN_DRAWS, Decision, Evaluation, Inequality, Tolerance, decide


def _claim_key(seed: int, claim_id: str):
    """Independent key per claim: fold_in(key(seed), crc32(id)); unaffected by the selection."""
    return jax.random.fold_in(jax.random.key(seed), zlib.crc32(claim_id.encode()) & 0x7FFFFFFF)


def _resolve_predicted(claim: Claim, budget: str):
    p = claim.predicted
    return p(budget) if callable(p) else p


def _judge_tolerance(rule: Tolerance, ev: Evaluation, pred_raw, details: dict, mc_margin=None):
    value = np.asarray(ev.value, dtype=float)
    pred = np.broadcast_to(np.asarray(pred_raw, dtype=float), value.shape)
    sem = np.broadcast_to(np.asarray(0.0 if ev.sem is None else ev.sem, dtype=float), value.shape)
    err = np.abs(value - pred)
    allowed = (np.broadcast_to(np.asarray(mc_margin, dtype=float), value.shape) if mc_margin is not None
               else rule.atol + rule.rtol * np.abs(pred))
    dec = decide(value - pred, sem, allowed, rule.n_sigma)
    w = dec.worst
    details.update(
        worst_abs_error=float(err.reshape(-1)[w]) if err.size else float("nan"),
        allowed_at_worst=float(np.asarray(allowed).reshape(-1)[w]) if err.size else float("nan"),
        worst_margin=float((allowed - err).reshape(-1)[w]) if err.size else float("nan"),
    )
    n = ev.n if ev.n is not None else int(value.size)
    return dec, _summary(pred), _summary(value), (_summary(sem) if np.any(sem > 0) else None), n


def judge_inequality(rule: Inequality, ev: Evaluation, claim_id: str, details: dict):
    """The :class:`Inequality` rule on one evaluation (lhs ≤ rhs elementwise, arrays of one shape, widened by
    k·sem and the certified slack): the (result, details) the registry's deterministic judge returns. Public so that
    a source can judge each draw of a statement about random instances by the claim's own rule (the clock claims:
    one verdict per trained seed)."""
    lhs = np.asarray(ev.lhs, dtype=float)
    rhs = np.asarray(ev.rhs, dtype=float)
    if lhs.shape != rhs.shape:
        raise ValueError(f"claim {claim_id}: lhs shape {lhs.shape} != rhs shape {rhs.shape}")
    k = rule.n_sigma
    sem = np.broadcast_to(np.asarray(0.0 if ev.sem is None else ev.sem, dtype=float), lhs.shape)
    upper = lhs + k * sem
    lower = (lhs if ev.lhs_lower is None else np.asarray(ev.lhs_lower, dtype=float)) - k * sem
    slack = np.maximum(np.broadcast_to(np.asarray(ev.slack, dtype=float), lhs.shape),
                       rule.rtol * np.maximum(np.abs(lhs), np.abs(rhs)))
    finite = np.all(np.isfinite(upper)) and np.all(np.isfinite(rhs)) and np.all(np.isfinite(lower))
    if not finite:
        verdict, reason = "inconclusive", "a number is not finite"
    elif np.all(upper <= rhs - slack):
        verdict, reason = "holds", ""
    elif np.any(lower > rhs + slack):
        verdict, reason = "does not hold", f"{int(np.sum(lower > rhs + slack))} certified violation(s)"
    else:
        verdict, reason = "inconclusive", ("not certified either way: some lhs lies within the rounding slack "
                                           "or the Monte Carlo error band of rhs")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio_up = np.where(rhs > 0, upper / rhs, np.inf)
        ratio_lo = np.where(rhs > 0, lower / rhs, np.inf)
    worst = int(np.argmax(ratio_lo if verdict == "does not hold" else ratio_up)) if lhs.size else 0
    details.update(
        n_instances=int(lhs.size),
        worst_ratio_lhs_over_rhs=float(ratio_up.reshape(-1)[worst]),
        worst_ratio_lower_over_rhs=float(ratio_lo.reshape(-1)[worst]),
        worst_margin_rhs_minus_lhs=float(np.min(rhs - lhs)),
        n_violations_certified=int(np.sum(lower > rhs + slack)),
        n_not_certified=int(np.sum(upper > rhs - slack)),
    )
    slack_w = float(slack.reshape(-1)[worst]) if slack.size and np.isfinite(slack.reshape(-1)[worst]) else 0.0
    dec = Decision(verdict, reason, float(np.max(k * sem)) if sem.size else 0.0, max(rule.margin, slack_w), worst)
    predicted = float(rhs.reshape(-1)[worst]) if rhs.size else None
    estimate = float((lower if verdict == "does not hold" else upper).reshape(-1)[worst]) if lhs.size else None
    n = ev.n if ev.n is not None else int(lhs.size)
    return dec, predicted, estimate, (_summary(sem) if np.any(sem > 0) else None), n


def _judge_evaluation(claim: Claim, ev: Evaluation, budget: str, mc_margin=None):
    """(Decision, predicted, estimate, sem, n, details) of an evaluation under the claim's rule;
    a Monte Carlo claim's witness is judged as a Tolerance with the Monte Carlo margin."""
    if not isinstance(ev, Evaluation):
        raise TypeError(f"claim {claim.id}: evaluate must return an Evaluation, got {type(ev).__name__}")
    rule = claim.rule
    details: dict[str, Any] = {"kind": "deterministic", "rule": rule.describe()}
    if isinstance(rule, Inequality):
        out = judge_inequality(rule, ev, claim.id, details)
    else:
        tol = rule if isinstance(rule, Tolerance) else Tolerance(origin="Monte Carlo margin", n_sigma=rule.n_sigma)
        out = _judge_tolerance(tol, ev, _resolve_predicted(claim, budget), details, mc_margin=mc_margin)
    dec, predicted, estimate, sem, n = out
    if ev.precondition:
        dec = Decision("inconclusive", f"precondition not met: {ev.precondition}", dec.detectable_error,
                       dec.margin, dec.worst)
    if ev.needs:
        details["needs"] = ev.needs
        if dec.verdict == "inconclusive":
            dec = replace(dec, reason=f"{dec.reason}; deciding needs {ev.needs}")
    if ev.draws is not None:
        details["draws"] = int(ev.draws)
    details.update(_jsonable(ev.details))
    return dec, predicted, estimate, sem, n, details


def _judge_deterministic(claim: Claim, budget: str, key) -> ClaimResult:
    ev = claim.evaluate(budget, key)
    dec, predicted, estimate, sem, n, details = _judge_evaluation(claim, ev, budget)
    if ev.method:
        details["method"] = ev.method
    return ClaimResult(
        id=claim.id, source=claim.source, statement=claim.statement, predicted=predicted,
        estimate=estimate, sem=sem, verdict=dec.verdict, details=details, margin=dec.margin,
        margin_origin=claim.margin_origin, detectable_error=dec.detectable_error, n=n, reason=dec.reason,
        observations=_jsonable(ev.observations),
    )


def _witness_entry(method: str, predicted, estimate, sem, verdict: str) -> dict:
    return _jsonable({"method": method, "estimate": estimate, "sem": sem, "predicted": predicted,
                      "verdict": verdict})


def _too_few_draws(claim: Claim, res: ClaimResult) -> ClaimResult | None:
    """A refutation of a statement about random instances decided over fewer than :data:`MIN_DRAWS` independent
    draws is "inconclusive" (issue 33 item 2); None when the refutation may stand."""
    if claim.scope != "random":
        return None
    draws = res.details.get("draws")
    if draws is not None and int(draws) >= MIN_DRAWS:
        return None
    return replace(res, verdict="inconclusive",
                   reason=(f"a statement about random instances is refuted only over ≥ {MIN_DRAWS} independent draws; "
                           f"this check drew {draws if draws is not None else 'an unstated number'} ({res.reason})"
                           + (f"; deciding needs {res.details['needs']}" if res.details.get("needs") else "")))


def _second_witness(claim: Claim, res: ClaimResult, budget: str, key) -> ClaimResult:
    """Keep a refutation only when the claim's independent second computation rejects too."""
    first_method = res.details.get("method") or ("Monte Carlo" if claim.sampler is not None else "evaluation")
    first = _witness_entry(first_method, res.predicted, res.estimate, res.sem, res.verdict)
    if claim.witness is None:
        return replace(res, verdict="inconclusive",
                       reason=f"refuted by one computation only ({res.reason}); no second witness registered",
                       witnesses=(first,))
    ev = claim.witness(budget, jax.random.fold_in(key, 0x5EC0))
    mc_margin = res.details.get("mc_margin") if claim.sampler is not None else None
    dec, predicted, estimate, sem, _, details = _judge_evaluation(claim, ev, budget, mc_margin=mc_margin)
    second = _witness_entry(ev.method or "second computation", predicted, estimate, sem, dec.verdict)
    second["details"] = _jsonable({k: v for k, v in details.items() if k not in ("kind", "rule")})
    if dec.verdict == "does not hold":
        return replace(res, witnesses=(first, second))
    return replace(res, verdict="inconclusive", witnesses=(first, second),
                   reason=f"the second witness ({second['method']}) does not confirm the refutation: {dec.verdict}")


# ----------------------------------------------------------------------------------------------
