"""A checked statement (:class:`Claim`) and the outcome of checking it (:class:`ClaimResult`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from geomjax.base._repr import summarize
from geomjax.claims._format import _fmt, _jsonable
from geomjax.claims.rules import (BUDGETS, ERRATUM_KINDS, READINGS, SCOPES, Inequality, MonteCarloRule, Rule,
                                  Tolerance)


@dataclass(frozen=True)
class Claim:
    """One checked statement of a source document.

    Attributes:
      id: unique dotted id, "<module>.<name>" (e.g. "song_zhong.theorem1.printed").
      source: document and equation as printed there, e.g. "Song & Zhong Theorem 1, eq. (6)".
      statement: the statement in words (and symbols).
      predicted: closed-form value (float or array), a callable ``budget -> value``, or for
        inequality claims a description string (the rhs comes from the evaluator).
      sampler: Monte Carlo claims: ``key -> pytree`` drawing ONE sample whose mean should equal
        ``predicted``.
      evaluate: deterministic claims: ``(budget, key) -> Evaluation``.
      rule: :class:`MonteCarloRule`, :class:`Tolerance` or :class:`Inequality`.
      n_samples: Monte Carlo sample counts per budget.
      dtype: "float64" (default) or "float32" for the Monte Carlo accumulation.
      chunk: Monte Carlo chunk size.
      seconds: Monte Carlo claims: the budget in seconds per budget name (``{"quick": s, "full": s}``) that the
        rounds of :mod:`geomjax.claims.sequential` may spend (default :data:`~geomjax.claims.sequential.SECONDS`);
        ``n_samples[budget]`` is the first look's sample.
      notes: free text shown in the report (e.g. how the printed statement was read).
      witness: ``(budget, key) -> Evaluation``, a second computation of the same quantity that
        shares no code path with the first (exact closed form in float64, enumeration, quadrature,
        finite differences, or another Monte Carlo estimator), judged by the same rule (Monte Carlo
        claims: as a Tolerance with the claim's margin). A "does not hold" stands only when the
        witness rejects too; without a witness a refutation is reported "inconclusive".
      corrected_by: id of the claim registering the corrected form of a wrong printed statement
        (used by the erratum). Only a claim whose ``reading`` is "corrected" is offered as a fix.
      reading: how the claim reads its source, a key of :data:`READINGS` ("literal" by default: the
        statement as printed).
      scope: what the statement quantifies over, a key of :data:`SCOPES` ("universal" by default). A claim
        of scope "random" is refuted only over at least :data:`~geomjax.claims.rules.MIN_DRAWS` independent draws.
      error_kind: the kind of error a refutation of this claim is, a key of :data:`ERRATUM_KINDS` ("" for a claim
        that is not expected to fail; the erratum requires one for every refuted literal or intended reading).
      printed: the printed statement, quoted from the source (symbols transcribed), with the place in
        ``source``; the erratum quotes it.
      intended_by: for a typo: the id of the claim that checks the intended statement (its verdict is
        reported beside the typo).
    """

    id: str
    source: str
    statement: str
    predicted: Any = None
    sampler: Callable | None = None
    evaluate: Callable | None = None
    rule: Rule = MonteCarloRule()
    n_samples: Mapping[str, int] = field(default_factory=lambda: {"quick": 2**14, "full": 2**20})
    dtype: str = "float64"
    chunk: int = 4096
    seconds: Mapping[str, float] | None = None
    notes: str = ""
    witness: Callable | None = None
    corrected_by: str = ""
    reading: str = "literal"
    scope: str = "universal"
    error_kind: str = ""
    printed: str = ""
    intended_by: str = ""

    def __post_init__(self):
        if not self.id or any(ch.isspace() for ch in self.id):
            raise ValueError(f"Claim: id must be a non-empty string without spaces, got {self.id!r}")
        for name, value, allowed in (("reading", self.reading, READINGS), ("scope", self.scope, SCOPES),
                                     ("error_kind", self.error_kind, {"": "", **ERRATUM_KINDS})):
            if value not in allowed:
                raise ValueError(f"Claim {self.id}: {name} must be one of {sorted(allowed)}, got {value!r}")
        if (self.sampler is None) == (self.evaluate is None):
            raise ValueError(f"Claim {self.id}: give exactly one of `sampler` (Monte Carlo) or `evaluate`")
        if self.sampler is not None and not isinstance(self.rule, MonteCarloRule):
            raise ValueError(f"Claim {self.id}: a Monte Carlo claim needs a MonteCarloRule")
        if self.evaluate is not None and isinstance(self.rule, MonteCarloRule):
            raise ValueError(f"Claim {self.id}: a deterministic claim needs a Tolerance or Inequality rule")
        if self.sampler is not None:
            missing = [b for b in BUDGETS if b not in self.n_samples]
            if missing:
                raise ValueError(f"Claim {self.id}: n_samples lacks budgets {missing}")
            if self.predicted is None:
                raise ValueError(f"Claim {self.id}: a Monte Carlo claim needs a closed-form `predicted`")

    @property
    def group(self) -> str:
        """The source module short name (first component of the id)."""
        return self.id.split(".", 1)[0]

    @property
    def kind(self) -> str:
        return "monte_carlo" if self.sampler is not None else "deterministic"

    @property
    def margin_origin(self) -> str:
        """Where the claim's margin comes from (from its rule)."""
        r = self.rule
        return r.margin.origin if isinstance(r, MonteCarloRule) else r.margin_origin


@dataclass(frozen=True, eq=False)
class ClaimResult:
    """Outcome of checking one claim.

    Numbers are NumPy values: a scalar quantity is a Python ``float``, a vector one a float64
    ``numpy.ndarray`` (the shape of the claim's quantity). :meth:`ClaimResult.to_dict` is the one place that
    turns them into JSON lists (``claims.json``); :meth:`ClaimResult.from_dict` turns them back.

    Attributes:
      id, source, statement: copied from the claim.
      predicted: closed-form value (float or array; for inequalities the rhs at the worst instance).
      estimate: Monte Carlo mean / evaluated value / lhs at the worst instance (float or array).
      sem: standard error (Monte Carlo, or of a Monte Carlo number inside an evaluation) or None
        (an exact evaluation).
      verdict: "holds", "does not hold" or "inconclusive" (see :attr:`ClaimResult.holds`).
      details: JSON-able extras: ``kind`` (see :attr:`ClaimResult.kind`), rule, z-score or worst margin/ratio,
        sample count, dtype, seconds, budget, seed, extra tables.
      margin: δ at the worst element (the size of error that would make the statement wrong).
      margin_origin: where δ comes from.
      detectable_error: k·sem, the smallest error the test resolves at its sample size (0 for an
        exact evaluation).
      n: Monte Carlo sample count, or the number of compared elements / instances.
      reason: why a result is "inconclusive" (or what refuted it); "" for "holds".
      witnesses: for a refutation, the two independent computations that both reject the statement
        (JSON dicts with method, estimate, sem, predicted, verdict).
      observations: labelled facts that are not the verdict (e.g. a limit's finite-n deviation).

    Example:
      >>> r = ClaimResult(id="demo.mean", source="demo", statement="E U = 1/2", predicted=0.5,
      ...                 estimate=np.array([0.49, 0.51]), sem=np.array([0.01, 0.01]), verdict="inconclusive",
      ...                 details={"kind": "monte_carlo"})
      >>> r.holds is None, r.kind, r.estimate.shape
      (True, 'monte_carlo', (2,))
    """

    id: str
    source: str
    statement: str
    predicted: Any
    estimate: Any
    sem: Any
    verdict: str
    details: dict = field(default_factory=dict)
    margin: Any = None
    margin_origin: str = ""
    detectable_error: Any = None
    n: Any = None
    reason: str = ""
    witnesses: tuple = ()
    observations: dict = field(default_factory=dict)

    @property
    def holds(self) -> bool | None:
        """The verdict as a three-valued boolean: True ("holds"), False ("does not hold") or None
        ("inconclusive": not enough samples at the stated margin, a precondition not met, a refutation
        without its second witness, or the check raised — :attr:`reason` says which)."""
        return {"holds": True, "does not hold": False}.get(self.verdict)

    @property
    def kind(self) -> str:
        """How the claim was checked: "monte_carlo" (the mean of a sampler, estimated by
        :func:`geomjax.theory.montecarlo.estimate`) or "deterministic" (an evaluator's :class:`~geomjax.claims.rules.Evaluation`, judged
        by a :class:`Tolerance` or :class:`Inequality`); "" when the check raised before either ran."""
        return str(self.details.get("kind", ""))

    def __repr__(self) -> str:
        return _result_repr(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> "ClaimResult":
        """Inverse of :meth:`to_dict` (numbers as stored in claims.json; vectors back to arrays)."""
        return cls(id=d["id"], source=d["source"], statement=d["statement"], predicted=_value(d.get("predicted")),
                   estimate=_value(d.get("estimate")), sem=_value(d.get("sem")), verdict=d["verdict"],
                   details=dict(d.get("details", {})),
                   margin=d.get("margin"), margin_origin=d.get("margin_origin", ""),
                   detectable_error=d.get("detectable_error"), n=d.get("n"), reason=d.get("reason", ""),
                   witnesses=tuple(d.get("witnesses", ())), observations=dict(d.get("observations", {})))

    def to_dict(self) -> dict:
        """JSON-able dict: the fields above plus ``z_score`` ((estimate − predicted)/sem for Monte
        Carlo claims, else None)."""
        return _jsonable(
            {
                "id": self.id,
                "source": self.source,
                "statement": self.statement,
                "predicted": self.predicted,
                "estimate": self.estimate,
                "sem": self.sem,
                "z_score": self.details.get("z"),
                "verdict": self.verdict,
                "reason": self.reason,
                "margin": self.margin,
                "margin_origin": self.margin_origin,
                "detectable_error": self.detectable_error,
                "n": self.n,
                "witnesses": list(self.witnesses),
                "observations": self.observations,
                "details": self.details,
            }
        )


def _value(x):
    """A result's number: None, a string (non-numeric) and scalars as they are (floats), anything with more
    than one element as a float64 array (JSON lists and "nan"/"inf" strings from claims.json included)."""
    if x is None or isinstance(x, str) and x not in ("nan", "inf", "-inf"):
        return x
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        return x
    return float(a.reshape(())) if a.size == 1 and a.ndim == 0 else a


def _result_repr(r: "ClaimResult") -> str:
    """At most 12 lines: id and verdict, reason, source, statement (shortened), the numbers, kind, n, seconds."""
    def short(text: str, n: int = 90) -> str:
        text = " ".join(str(text).split())
        return text if len(text) <= n else text[: n - 3] + "..."

    lines = [f"ClaimResult({r.id}: {r.verdict}, holds={r.holds}"]
    if r.reason:
        lines.append(f"  reason: {short(r.reason)}")
    lines += [f"  source: {short(r.source)}", f"  statement: {short(r.statement)}"]
    for name in ("predicted", "estimate", "sem"):
        v = getattr(r, name)
        lines.append(f"  {name}: {summarize(v) if isinstance(v, np.ndarray) else _fmt(v)}")
    lines.append(f"  margin: {_fmt(r.margin)}, detectable_error: {_fmt(r.detectable_error)}, n: {_fmt(r.n)}")
    lines.append(f"  kind: {r.kind or '—'}, budget: {r.details.get('budget', '—')}, seconds: {_fmt(r.details.get('seconds'))}")
    if r.witnesses:
        lines.append(f"  witnesses: {len(r.witnesses)} ({', '.join(short(w.get('method', ''), 40) for w in r.witnesses)})")
    if r.observations:
        lines.append(f"  observations: {summarize(r.observations)}")
    lines.append(")")
    return "\n".join(lines)
