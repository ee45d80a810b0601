"""Registry of checked statements: Claim, verdict rules, ClaimResult, run().

A :class:`Claim` is one quantitative statement of a source document, with the place it is printed
(``source``, e.g. "Song & Zhong Theorem 1, eq. (6)"), what it predicts, how to check it, and the
rule that turns the check into a verdict:

Three verdicts (:func:`decide`, one pure function, is the whole rule for equalities):

* Every claim declares its **margin** δ — the size of error that would make the statement wrong —
  and where that number comes from (``margin_origin``: the statement's printed precision, a
  numerical or physical scale; never a number tuned to pass). With e = estimate − predicted and s its
  standard error (0 for an exact evaluation; the Monte Carlo sem whenever a Monte Carlo number
  enters), elementwise and at the same k = 5 standard errors both ways:

  - **holds** iff |e| + k·s ≤ δ for every element — the two one-sided tests "error ≥ +δ" and
    "error ≤ −δ" are both rejected at kσ (an equivalence test);
  - **does not hold** iff |e| − k·s > δ for some element — the error exceeds the margin at kσ;
  - **inconclusive** otherwise, with a reason (not enough samples to decide at the stated margin,
    precondition not met, budget too small, no second witness, non-finite numbers).

  Each result reports ``detectable_error`` = k·s (the smallest error the test resolves at its
  sample size ``n``; "holds" needs detectable_error ≤ δ − |e|).
* Monte Carlo claims (``sampler`` given): the mean of ``sampler(key)`` is estimated with
  :func:`geomjax.theory.montecarlo.estimate` and judged by :func:`decide` with the claim's
  :class:`MonteCarloRule` margin.
* Deterministic claims (``evaluate`` given): the evaluator returns an :class:`Evaluation`, judged
  by the claim's rule: :class:`Tolerance` (margin δ = atol + rtol·|predicted|, judged by
  :func:`decide` with the evaluation's ``sem`` when a Monte Carlo number is inside) or
  :class:`Inequality` (lhs ≤ rhs for every instance: the margin is the certified ``slack``, at least
  the float64 rounding floor rtol·max(|lhs|, |rhs|), or for a threshold statement the tolerance its
  threshold already contains (``Inequality.margin``, reported, not added twice); with a
  certified interval [lhs_lower, lhs] widened by k·sem it is "holds" when lhs + k·sem ≤ rhs − slack
  everywhere, "does not hold" when lhs_lower − k·sem > rhs + slack somewhere, and "inconclusive"
  otherwise).
* **Limits** (n → ∞ statements) are checked along a sequence of sizes: :func:`fit_limit` fits
  v(n) = L + c·n^(−r) and :func:`limit_evaluation` judges the extrapolated L (with its standard
  error) against the printed limit; the finite-n deviation is reported as an observation.
* **Preconditions**: an evaluation with ``precondition`` set (e.g. "the model did not grok at this
  budget; `full` suffices") is "inconclusive".
* **Two witnesses for every refutation**: a "does not hold" on a claim is kept only when the
  claim's ``witness`` — a second, independent computation (exact closed form in float64,
  enumeration, quadrature, finite differences, or a Monte Carlo estimator sharing no code path) —
  rejects the statement too; otherwise the result is "inconclusive". Both numbers are reported
  (``witnesses``).

* **Readings, scopes and kinds** (issue 33): every claim records its *reading* (:data:`READINGS`: the
  statement as printed, as evidently intended, geomjax's correction, or geomjax's own extension), what
  it quantifies over (:data:`SCOPES`: every instance, a random instance — decided over at least
  :data:`MIN_DRAWS` independent draws, a fraction with its interval (:func:`over_draws`) — or one
  particular instance) and, where it can be refuted, the *kind* of error a refutation is
  (:data:`ERRATUM_KINDS`). The erratum (:func:`to_erratum`) groups by kind and lists as the authors'
  statements that do not hold only literal or intended readings of kind wrong statement, wrong
  constant or over-general statement; typos carry the intended statement's verdict beside them.

Claims live in modules ``geomjax.claims.<source>`` (``song_zhong``, later ``wertich``, ``bao``,
``clock``) that call :func:`register` on import; :func:`all_claims` and :func:`run` import every
such module that exists.
"""

from __future__ import annotations

import contextlib
import contextvars
import fnmatch
import functools
import importlib
import inspect
import json
import math
import pkgutil
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import jax
import numpy as np
from scipy.stats import beta, norm

from geomjax.theory import montecarlo
from geomjax.base._repr import summarize
from geomjax.errors import GeomjaxError
from geomjax.base.io import to_jsonable

__all__ = [
    "Claim",
    "ClaimResult",
    "Evaluation",
    "MonteCarloRule",
    "Tolerance",
    "Inequality",
    "register",
    "annotate",
    "unregister",
    "all_claims",
    "select_claims",
    "run",
    "run_claim",
    "write_results",
    "to_markdown",
    "BUDGETS",
    "VERDICTS",
    "N_SIGMA",
    "Margin",
    "Decision",
    "decide",
    "fit_limit",
    "limit_evaluation",
    "exact_witness",
    "READINGS",
    "SCOPES",
    "ERRATUM_KINDS",
    "MIN_DRAWS",
    "binomial_interval",
    "over_draws",
    "FULL_VERDICTS",
    "record_full_verdicts",
    "load_full_verdicts",
    "contradicts",
    "to_erratum",
    "erratum_summary",
    "erratum_groups",
    "results_as_records",
    "ClaimInfo",
    "table",
    "format_table",
    "cost_class",
    "load_quick_seconds",
    "record_quick_seconds",
    "RunMemo",
    "run_memo",
    "per_run",
]

BUDGETS = ("quick", "full")
VERDICTS = ("holds", "does not hold", "inconclusive")
Budget = Literal["quick", "full"]

# ----------------------------------------------------------------------------------------------
# Rules and evaluations
# ----------------------------------------------------------------------------------------------


N_SIGMA = 5.0  # the standard for both rejection and equivalence (DESIGN.md: 5σ)

#: How a claim reads its source (``Claim.reading``). Only "literal" and "intended" readings are the authors'
#: statements; a refuted "corrected" or "extension" claim is never listed as an error of the source.
READINGS = {
    "literal": "the statement as printed, with its symbols and constants",
    "intended": ("what the authors evidently meant where the printed form has an evident typo (basis, index, "
                 "sign the proof does not use) or leaves a constant unspecified (an O(·), 'for a certain constant'): "
                 "the rate or the existence of a constant is tested, never a constant geomjax chose"),
    "corrected": "geomjax's corrected form of a printed statement that does not hold (offered as its fix)",
    "extension": ("a statement the source does not make: a recomputed constant of a proof, a reading of a "
                  "qualitative remark on one model, a justification geomjax gives; never an accusation"),
}

#: What a claim quantifies over (``Claim.scope``).
SCOPES = {
    "universal": "every instance (an identity or 'for all'): one certified counterexample refutes it",
    "random": ("a random instance ('an anisotropic Σ', 'random W', 'a trained model'): decided over at least "
               "MIN_DRAWS independent draws, the failing fraction reported with its interval (over_draws)"),
    "instance": "one particular instance (a figure's, a trained model, a fixed parameter set): the claim says which",
}

#: The kind of error a refutation is (``Claim.error_kind``), in the order the erratum lists them. The first three are
#: statements that do not hold; a typo and a proof gap are not.
ERRATUM_KINDS = {
    "wrong statement": "the statement, read as printed or as plainly meant, is false",
    "wrong constant": "the form is right, a printed constant or factor is not",
    "over-general statement": "true for some of the instances the statement covers, false for others it names",
    "typo/notation": ("the printed symbols say something false, the evident intended statement (its verdict beside "
                      "it) is what is checked for truth"),
    "proof gap": "a step of a proof is false or unjustified; the statement it serves is not refuted by it",
}

#: Statements that do not hold, as opposed to typos and proof gaps.
REFUTING_KINDS = ("wrong statement", "wrong constant", "over-general statement")

#: The fewest independent draws over which a statement about random instances may be refuted.
MIN_DRAWS = 32


@dataclass(frozen=True)
class Margin:
    """The size of error that would make a statement wrong: δ = abs + rel·scale.

    Attributes:
      abs: absolute part of δ.
      rel: relative part; ``scale`` is max |predicted| over the elements (or, when that is 0, the
        per-sample standard deviation of a Monte Carlo quantity), so a vector claim has one δ.
      origin: where the number comes from (the statement's printed precision, a numerical or
        physical scale). Required: a margin without an origin is rejected.
    """

    abs: float = 0.0
    rel: float = 0.0
    origin: str = ""

    def __post_init__(self):
        if self.abs < 0 or self.rel < 0:
            raise ValueError(f"Margin: abs and rel must be >= 0, got {self.abs}, {self.rel}")
        if not self.origin.strip():
            raise ValueError("Margin: state where the margin comes from (origin)")

    def value(self, predicted, sd=None) -> float:
        """δ for a prediction (array) and, optionally, the per-sample standard deviation."""
        p = np.abs(np.asarray(predicted, dtype=float))
        scale = float(np.max(p)) if p.size and np.all(np.isfinite(p)) else 0.0
        if scale == 0.0 and sd is not None:
            sd_ = np.asarray(sd, dtype=float)
            scale = float(np.max(sd_)) if sd_.size and np.all(np.isfinite(sd_)) else 0.0
        return self.abs + self.rel * scale


#: Default for Monte Carlo checks of exact identities (a formula stated with no approximation).
EXACT_IDENTITY = Margin(
    rel=0.01,
    origin=("exact identity: any error makes it wrong; 1% of the quantity's scale (max |predicted|, "
            "else the per-sample sd) is the resolution at which the check calls it holding — every "
            "wrong printed form found differs by more (a wrong constant, factor or missing term)"),
)


@dataclass(frozen=True)
class MonteCarloRule:
    """Judged by :func:`decide`: holds iff |estimate − predicted| + n_sigma·sem ≤ δ everywhere."""

    n_sigma: float = N_SIGMA
    margin: Margin = EXACT_IDENTITY

    def describe(self) -> str:
        """The rule in words (shown under the Markdown table)."""
        return (f"Monte Carlo: holds iff |estimate − predicted| + {self.n_sigma:g}·sem ≤ margin (every element); "
                f"does not hold iff |estimate − predicted| − {self.n_sigma:g}·sem > margin (some element); "
                "else inconclusive")


@dataclass(frozen=True)
class Tolerance:
    """Margin δ = atol + rtol·|predicted| (elementwise), judged by :func:`decide`.

    ``origin`` says where atol/rtol come from (float64 rounding, the statement's printed digits, a
    physical scale); required unless the tolerance is float64 rounding (rtol ≤ 1e-8, atol ≤ 1e-8).
    """

    rtol: float = 1e-10
    atol: float = 0.0
    origin: str = ""
    n_sigma: float = N_SIGMA

    def __post_init__(self):
        if not self.origin.strip() and (self.rtol > 1e-8 or self.atol > 1e-8):
            raise ValueError(f"Tolerance(rtol={self.rtol}, atol={self.atol}): state its origin")

    @property
    def margin_origin(self) -> str:
        return self.origin or "float64 rounding of an exact evaluation"

    def describe(self) -> str:
        """The rule in words (shown under the Markdown table)."""
        return (f"holds iff |value − predicted| + {self.n_sigma:g}·sem ≤ {self.atol:g} + {self.rtol:g}·|predicted| "
                "(every element; sem = 0 for an exact evaluation)")


@dataclass(frozen=True)
class Inequality:
    """lhs ≤ rhs for every instance (``slack`` per instance absorbs certified rounding).

    Attributes:
      origin: where the margin comes from.
      n_sigma: k for the Monte Carlo error band.
      rtol: float64 rounding floor of the certified slack: the slack of an instance is at least
        rtol·max(|lhs|, |rhs|) (default 1e-12: a few hundred ulps, the rounding of an evaluation of
        moderate depth), so an exact inequality has a nonzero margin that a rounding error cannot
        cross. 0 for integer/epoch comparisons.
      margin: for a threshold statement (rhs = the ideal value minus a tolerance fixed in the
        statement, e.g. "accuracy ≥ 0.99" for "the model is accurate"), the tolerance the threshold
        already contains (absolute, in lhs units). It is reported as the claim's margin and is NOT
        added again to the comparison. 0 for an exact inequality (the margin is then the slack).
    """

    origin: str = ("inequality: any certified violation refutes it; margin = the certified rounding slack "
                   "(at least 1e-12 relative: float64 rounding)")
    n_sigma: float = N_SIGMA
    rtol: float = 1e-12
    margin: float = 0.0

    def __post_init__(self):
        if self.rtol < 0 or self.margin < 0:
            raise ValueError(f"Inequality: rtol and margin must be >= 0, got {self.rtol}, {self.margin}")

    @property
    def margin_origin(self) -> str:
        return self.origin

    def describe(self) -> str:
        """The rule in words (shown under the Markdown table)."""
        return (
            f"holds iff lhs + {self.n_sigma:g}·sem ≤ rhs − slack for every instance; does not hold iff "
            f"lhs_lower − {self.n_sigma:g}·sem > rhs + slack for some instance (lhs_lower = lhs unless a "
            "certified lower bound is given; sem = 0 unless a Monte Carlo number is inside); else inconclusive"
        )


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` returns: verdict, reason (for inconclusive), detectable error, worst element."""

    verdict: str
    reason: str
    detectable_error: float
    margin: float
    worst: int


def decide(error, sem, margin, n_sigma: float = N_SIGMA) -> Decision:
    """The three-way verdict of an equality claim (the one place the rule lives).

    With e = estimate − predicted, s its standard error and δ the margin (all broadcast
    elementwise; s = 0 for an exact evaluation):

      holds          iff |e| + k·s ≤ δ for every element (two one-sided tests at kσ: equivalence)
      does not hold  iff |e| − k·s > δ for some element   (the error exceeds δ at kσ)
      inconclusive   otherwise, or when any number is not finite.

    Args:
      error: estimate − predicted, any shape.
      sem: standard error(s) of the estimate (broadcast to ``error``), ≥ 0.
      margin: δ (broadcast), ≥ 0.
      n_sigma: k (5 by default, the standard used for rejection).

    Returns:
      :class:`Decision` with ``detectable_error`` = max k·s (the smallest error resolvable at this
      sample size), the margin at the worst element and the index of the worst element (flattened).
    """
    e = np.abs(np.asarray(error, dtype=float)).reshape(-1)
    s = np.broadcast_to(np.asarray(sem, dtype=float), np.shape(error)).reshape(-1)
    d = np.broadcast_to(np.asarray(margin, dtype=float), np.shape(error)).reshape(-1)
    if e.size == 0:
        return Decision("inconclusive", "nothing to compare", 0.0, 0.0, 0)
    detect = float(np.max(n_sigma * s)) if np.all(np.isfinite(s)) else float("inf")
    if not (np.all(np.isfinite(e)) and np.all(np.isfinite(s)) and np.all(np.isfinite(d))):
        bad = int(np.argmin(np.isfinite(e) & np.isfinite(s)))
        return Decision("inconclusive", "a number is not finite (estimate, standard error or margin)",
                        detect, float(d[bad]) if np.isfinite(d[bad]) else float("nan"), bad)
    low, high = e - n_sigma * s, e + n_sigma * s
    if np.any(low > d):
        w = int(np.argmax(low - d))
        return Decision("does not hold", f"error {e[w]:.3g} − {n_sigma:g}·sem exceeds the margin {d[w]:.3g}",
                        detect, float(d[w]), w)
    w = int(np.argmax(high - d))
    if np.all(high <= d):
        return Decision("holds", "", detect, float(d[w]), w)
    return Decision(
        "inconclusive",
        f"not enough samples to decide at the stated margin: |error| {e[w]:.3g} ± {n_sigma:g}·sem "
        f"{n_sigma * s[w]:.3g} straddles the margin {d[w]:.3g}",
        detect, float(d[w]), w)


@dataclass
class Evaluation:
    """What a deterministic evaluator (or a witness) returns.

    Attributes:
      value: array compared with ``predicted`` (Tolerance rule).
      lhs, rhs: arrays of the two sides (Inequality rule), same shape.
      lhs_lower: optional certified lower bound of lhs (Inequality rule); defaults to lhs.
      slack: optional non-negative array/float, an error bar on rhs − lhs (e.g. rounding).
      sem: standard error of ``value`` (or of lhs) when a Monte Carlo number is inside; 0 for an
        exact evaluation. It enters the verdict (:func:`decide`).
      n: the sample count behind ``sem`` (None: the number of compared elements/instances).
      draws: for a claim of scope "random": the number of independent random instances behind the verdict
        (:func:`over_draws` sets it); a refutation with fewer than :data:`MIN_DRAWS` is inconclusive.
      precondition: None when the claim's presupposition is met; otherwise what was not met and the
        budget that suffices (the verdict is then "inconclusive").
      method: how the number was computed (shown with the witnesses).
      observations: labelled facts reported with the result that are not the verdict (e.g. the
        finite-n deviation of a limit statement).
      details: JSON-able extra information (tables, parameters, variants).
    """

    value: Any = None
    lhs: Any = None
    rhs: Any = None
    lhs_lower: Any = None
    slack: Any = 0.0
    sem: Any = 0.0
    n: int | None = None
    draws: int | None = None
    precondition: str | None = None
    method: str = ""
    observations: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)


Rule = MonteCarloRule | Tolerance | Inequality


def binomial_interval(k: int, n: int, n_sigma: float = N_SIGMA) -> tuple[float, float]:
    """Clopper–Pearson interval of a fraction k/n at the coverage of ±``n_sigma`` normal standard errors
    (two-sided 1 − 2Φ(−k_σ); 5σ: 1 − 5.7e-7, the registry's standard for a verdict).

    Args:
      k: successes (here: failing draws), 0 ≤ k ≤ n.  n: draws, n ≥ 1.

    Returns:
      (lower, upper), 0 ≤ lower ≤ k/n ≤ upper ≤ 1.
    """
    k, n = int(k), int(n)
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"binomial_interval: need 0 <= k <= n, n >= 1; got k={k}, n={n}")
    alpha = 2.0 * float(norm.sf(n_sigma))
    lo = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def over_draws(fails, holds, *, allowed_fraction: float, method: str, details: Mapping | None = None,
               n_sigma: float = N_SIGMA) -> Evaluation:
    """A statement about a random instance decided over independent draws (Claim.scope "random"; issue 33 item 2).

    Each draw j is certified to violate the statement (``fails[j]``), certified to satisfy it (``holds[j]``) or
    neither (within its own Monte Carlo error band). The failing fraction f is judged against
    ``allowed_fraction`` f₀ (the share of draws the statement may miss, declared with the claim's margin origin)
    by the :class:`Inequality` rule: lhs = the upper Clopper–Pearson bound (:func:`binomial_interval`, ±5σ
    coverage) of the draws not certified to hold, lhs_lower = the lower bound of the draws certified to fail,
    rhs = f₀. So "holds" says a random draw violates the statement with probability below f₀, "does not hold"
    that it does with probability above f₀, both at 5σ; neither is decided by one draw.

    Args:
      fails, holds: (N,) booleans, one per independent draw (not both true for a draw).
      allowed_fraction: f₀ in [0, 1).
      method: how each draw was checked (shown with the witnesses).
      details: extra JSON-able details (per-draw numbers).

    Returns:
      :class:`Evaluation` with ``draws`` = N and details ``draws``, ``failing`` (certified), ``undecided``,
      ``fraction_failing`` and its ``interval``.
    """
    f = np.asarray(fails, dtype=bool).reshape(-1)
    h = np.asarray(holds, dtype=bool).reshape(-1)
    if f.shape != h.shape or f.size == 0 or np.any(f & h):
        raise ValueError("over_draws: fails and holds need one entry per draw (at least one), never both true")
    if not 0.0 <= allowed_fraction < 1.0:
        raise ValueError(f"over_draws: allowed_fraction must be in [0, 1), got {allowed_fraction}")
    n, k_fail, k_not_hold = int(f.size), int(f.sum()), int((~h).sum())
    lower = binomial_interval(k_fail, n, n_sigma)[0]
    upper = binomial_interval(k_not_hold, n, n_sigma)[1]
    info = {"draws": n, "failing": k_fail, "undecided": int(k_not_hold - k_fail), "fraction_failing": k_fail / n,
            "interval": [lower, upper], "interval_level": f"Clopper–Pearson, ±{n_sigma:g}σ coverage",
            "allowed_fraction": allowed_fraction}
    return Evaluation(lhs=np.array([upper]), lhs_lower=np.array([lower]), rhs=np.array([allowed_fraction]),
                      n=n, draws=n, method=method, details={**info, **dict(details or {})},
                      observations={"failing draws": f"{k_fail} of {n} (fraction {k_fail / n:.3g}, interval "
                                                     f"[{lower:.3g}, {upper:.3g}] at ±{n_sigma:g}σ)"})


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
        of scope "random" is refuted only over at least :data:`MIN_DRAWS` independent draws.
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
        :func:`geomjax.theory.montecarlo.estimate`) or "deterministic" (an evaluator's :class:`Evaluation`, judged
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


# ----------------------------------------------------------------------------------------------
# Registry
# ----------------------------------------------------------------------------------------------

_REGISTRY: dict[str, tuple[Claim, str]] = {}
_NOT_SOURCE_MODULES = {"registry"}


def register(claim: Claim) -> Claim:
    """Add ``claim`` to the registry (returns it, so it can be used as an expression).

    Re-registering an id from the same module (e.g. after a reload) replaces it; the same id from
    another module raises ValueError.
    """
    return _add(claim, _caller_module())


def register_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], **common) -> list[Claim]:
    """Register a table of claims that share fields (a check, a rule and its margin, a prediction): one
    :class:`Claim` per row, ``Claim(**common, **dict(zip(columns, row)))`` — ``columns`` name the
    :class:`Claim` fields that differ from row to row (at least ``id``), ``common`` gives the rest. The
    claims' module is the caller's, as with :func:`register`.

    Returns:
      The registered claims, in row order.

    Raises:
      ValueError: a row whose length differs from the number of columns, or a column also in ``common``.
    """
    origin = _caller_module()
    if set(columns) & set(common):
        raise ValueError(f"register_table: {sorted(set(columns) & set(common))} given as a column and in common")
    for row in rows:
        if len(row) != len(columns):
            raise ValueError(f"register_table: row {row[:1]} has {len(row)} fields for {len(columns)} columns")
    return [_add(Claim(**common, **dict(zip(columns, row))), origin) for row in rows]


def annotate(claim_id: str, **fields) -> Claim:
    """Set a registered claim's reading fields (``reading``, ``scope``, ``error_kind``, ``printed``, ``intended_by``,
    ``corrected_by``) after it was registered (e.g. by :func:`register_table`), from the module that registered it
    (or another module of the same source package, e.g. ``geomjax.claims.wertich``).

    Raises:
      KeyError: no claim ``claim_id``.  ValueError: another field, or a claim of another module.
    """
    allowed = {"reading", "scope", "error_kind", "printed", "intended_by", "corrected_by"}
    if set(fields) - allowed:
        raise ValueError(f"annotate: only {sorted(allowed)} can be set, got {sorted(set(fields) - allowed)}")
    claim, origin = _REGISTRY[claim_id]
    if _source_package(origin) != _source_package(_caller_module()):
        raise ValueError(f"annotate: {claim_id} is registered by {origin}; annotate it from its source's modules")
    return _add(replace(claim, **fields), origin)


def _source_package(module: str) -> str:
    """"geomjax.claims.wertich" for "geomjax.claims.wertich.ch6" (a source split into modules), else the module."""
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["geomjax", "claims"] else module


def _add(claim: Claim, origin: str) -> Claim:
    """Add ``claim`` registered by the module ``origin`` (see :func:`register`)."""
    if not isinstance(claim, Claim):
        raise TypeError(f"register: expected a Claim, got {type(claim).__name__}")
    if claim.id in _REGISTRY and _REGISTRY[claim.id][1] != origin:
        raise ValueError(
            f"register: claim id {claim.id!r} is already registered by {_REGISTRY[claim.id][1]}"
        )
    _REGISTRY[claim.id] = (claim, origin)
    return claim


def unregister(claim_id: str) -> None:
    """Remove a claim (tests use this to clean up claims they registered)."""
    _REGISTRY.pop(claim_id, None)


def _caller_module() -> str:
    frame = inspect.currentframe()
    try:
        f = frame.f_back.f_back if frame and frame.f_back else None
        return f.f_globals.get("__name__", "?") if f else "?"
    finally:
        del frame


def _source_modules() -> list[str]:
    pkg = sys.modules[__package__]  # geomjax.claims, imported before this module (its package)
    return sorted(
        name
        for _, name, ispkg in pkgutil.iter_modules(pkg.__path__)
        if not name.startswith("_") and name not in _NOT_SOURCE_MODULES
    )


def _discover(only: set[str] | None = None) -> None:
    """Import geomjax.claims.<source> modules (those present).

    Raises:
      ImportError: a claims module fails to import — its claims would otherwise silently vanish
        from ``verify``; the message names the module.
    """
    for name in _source_modules():
        if only is not None and name not in only:
            continue
        try:
            importlib.import_module(f"geomjax.claims.{name}")
        except Exception as exc:
            raise ImportError(
                f"geomjax.claims: could not import the claims module geomjax.claims.{name} ({exc!r}); "
                "its claims cannot be checked — fix the module (or remove it from geomjax/claims/)"
            ) from exc


def all_claims() -> list[Claim]:
    """Every registered claim (after importing every geomjax.claims.<source> module), sorted by id."""
    _discover()
    return [c for _, (c, _) in sorted(_REGISTRY.items())]


def _matches(claim: Claim, pattern: str) -> bool:
    """An exact id, an id prefix ("wertich.s6_2_2.eq6_12" matches "wertich.s6_2_2.eq6_12_printed";
    "bao" matches every Bao claim) or an id glob ("song_zhong.theorem1.*")."""
    p = pattern.strip()
    if not p:
        return False
    return claim.id.startswith(p) or fnmatch.fnmatchcase(claim.id, p)


def select_claims(select: str | Sequence[str] | None = None) -> list[Claim]:
    """Claims matching ``select``.

    Args:
      select: None (all), or one pattern or a list of patterns. A pattern matches a claim when it
        is the claim's id, a prefix of it (the source module "bao", "song_zhong.theorem1") or an id
        glob ("song_zhong.*.printed"). Statement and source text are not searched.

    Returns:
      Matching claims sorted by id (possibly empty).
    """
    claims = all_claims()
    if select is None:
        return claims
    patterns = [select] if isinstance(select, str) else list(select)
    return [c for c in claims if any(_matches(c, p) for p in patterns)]


def _select_strict(select, who: str) -> list[Claim]:
    """:func:`select_claims`, raising GeomjaxError for a pattern that matches no claim."""
    selected = select_claims(select)
    if select is not None:
        patterns = [select] if isinstance(select, str) else list(select)
        registered = all_claims()
        unmatched = [p for p in patterns if not any(_matches(c, p) for c in registered)]
        if unmatched:
            groups = sorted({c.group for c in registered})
            raise GeomjaxError(
                f"{who}: select pattern(s) {unmatched} match no claim; use an exact id, an id prefix "
                f"(a source module {groups}, e.g. 'bao.lemma1') or an id glob"
            )
    return selected


# ----------------------------------------------------------------------------------------------
# The table of claims (nothing is run)
# ----------------------------------------------------------------------------------------------

QUICK_SECONDS = Path(__file__).with_name("quick_seconds.json")


@dataclass(frozen=True)
class ClaimInfo:
    """One row of :func:`table`: what a claim is and what checking it costs, known without running it.

    Attributes:
      id, source: the claim's id and where it is printed.
      kind: "monte_carlo" (the mean of ``sampler``, :class:`MonteCarloRule`) or "deterministic"
        (``evaluate`` judged by its rule).
      rule: "monte_carlo", "tolerance" or "inequality".
      seconds_quick, seconds_full: recorded wall-clock seconds of the check at each budget (2-core CPU):
        quick from ``quick_seconds.json``, full from the recorded full verdicts (``full_verdicts.json``);
        None where not recorded.
      cost: the cost class of the larger recorded time (a check's seconds include its compilation, which a
        claim sharing a compiled program with one checked before it skips): "< 1 s", "seconds" (< 1 min),
        "minutes" (< 1 h), "hours", or "not recorded".
    """

    id: str
    source: str
    kind: str
    rule: str
    seconds_quick: float | None
    seconds_full: float | None
    cost: str


def cost_class(seconds: float | None) -> str:
    """"< 1 s", "seconds" (< 60 s), "minutes" (< 1 h), "hours"; "not recorded" for None."""
    if seconds is None:
        return "not recorded"
    return "< 1 s" if seconds < 1 else "seconds" if seconds < 60 else "minutes" if seconds < 3600 else "hours"


def load_quick_seconds(path: str | Path = QUICK_SECONDS) -> dict[str, float]:
    """{id: seconds} of the recorded quick-budget checks ({} if none)."""
    p = Path(path)
    return {k: float(v) for k, v in json.loads(p.read_text())["seconds"].items()} if p.is_file() else {}


def record_quick_seconds(results: Sequence[ClaimResult], path: str | Path = QUICK_SECONDS) -> Path:
    """Store the seconds of quick-budget results (``run(budget="quick")``) for :func:`table`; other ids keep
    their earlier record, ids no longer registered are dropped."""
    if any(r.details.get("budget") != "quick" for r in results):
        raise GeomjaxError("record_quick_seconds: every result must come from budget 'quick'")
    rec = load_quick_seconds(path) | {r.id: float(r.details["seconds"]) for r in results if "seconds" in r.details}
    known = {c.id for c in all_claims()}
    note = ("wall-clock seconds of each claim's check at budget quick (`geomjax verify --budget quick`, "
            "details.seconds) on a 2-core CPU, often under load: a rough cost, not a benchmark")
    Path(path).write_text(json.dumps({"budget": "quick", "note": note,
                                      "seconds": {k: rec[k] for k in sorted(rec) if k in known}}, indent=1) + "\n")
    return Path(path)


def table(select: str | Sequence[str] | None = None) -> list[ClaimInfo]:
    """Every registered claim (or those matching ``select``, see :func:`select_claims`) with its source,
    kind, rule and recorded cost — read from the registry and the recorded timings, without checking
    (or compiling) anything. A pattern that matches no claim raises :class:`GeomjaxError`.

    Example:
      >>> rows = table("wertich.s4_3_2")
      >>> [(r.id, r.kind, r.rule) for r in rows][:1]
      [('wertich.s4_3_2.approx_corrected', 'deterministic', 'tolerance')]
    """
    quick, full = load_quick_seconds(), load_full_verdicts()
    rows = []
    for c in _select_strict(select, "table"):
        rule = {MonteCarloRule: "monte_carlo", Tolerance: "tolerance", Inequality: "inequality"}[type(c.rule)]
        sq = quick.get(c.id)
        sf = full.get(c.id, {}).get("seconds")
        sf = None if sf is None else float(sf)
        rows.append(ClaimInfo(id=c.id, source=c.source, kind=c.kind, rule=rule, seconds_quick=sq,
                              seconds_full=sf, cost=cost_class(max((s for s in (sq, sf) if s is not None), default=None))))
    return rows


def format_table(rows: Sequence[ClaimInfo]) -> str:
    """Plain-text columns of :func:`table` rows (``geomjax verify --list``)."""
    def sec(x):
        return "—" if x is None else f"{x:.3g}"

    head = ("id", "kind", "rule", "quick s", "full s", "cost", "source")
    body = [(r.id, r.kind, r.rule, sec(r.seconds_quick), sec(r.seconds_full), r.cost, r.source) for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head) - 1)]
    return "\n".join("  ".join(x[i].ljust(widths[i]) for i in range(len(widths))) + "  " + x[-1]
                     for x in [head, *body]) + "\n"


# ----------------------------------------------------------------------------------------------
# Running claims
# ----------------------------------------------------------------------------------------------


def _claim_key(seed: int, claim_id: str):
    """Independent key per claim: fold_in(key(seed), crc32(id)); unaffected by the selection."""
    return jax.random.fold_in(jax.random.key(seed), zlib.crc32(claim_id.encode()) & 0x7FFFFFFF)


def _resolve_predicted(claim: Claim, budget: str):
    p = claim.predicted
    return p(budget) if callable(p) else p


def _summary(x):
    """A float if size 1, else a float64 array (:meth:`ClaimResult.to_dict` makes lists of it)."""
    a = np.array(x, dtype=float)
    return float(a.reshape(())) if a.size == 1 else a


def _flat_tree(t) -> np.ndarray:
    return np.concatenate([np.asarray(l, dtype=float).reshape(-1) for l in jax.tree_util.tree_leaves(t)])


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


def _judge_inequality(rule: Inequality, ev: Evaluation, claim_id: str, details: dict):
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
        out = _judge_inequality(rule, ev, claim.id, details)
    else:
        tol = rule if isinstance(rule, Tolerance) else Tolerance(origin="Monte Carlo margin", n_sigma=rule.n_sigma)
        out = _judge_tolerance(tol, ev, _resolve_predicted(claim, budget), details, mc_margin=mc_margin)
    dec, predicted, estimate, sem, n = out
    if ev.precondition:
        dec = Decision("inconclusive", f"precondition not met: {ev.precondition}", dec.detectable_error,
                       dec.margin, dec.worst)
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
                           f"this check drew {draws if draws is not None else 'an unstated number'} ({res.reason})"))


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
# Results shared by the claims of one run
# ----------------------------------------------------------------------------------------------


class RunMemo:
    """The results that several claims of ONE run share (one expensive computation, e.g. a Monte Carlo
    sample or a forward pass of a real model, read by several checks), keyed by (function, arguments).

    :func:`run` and :func:`run_claim` open one with :func:`run_memo` for the duration of the call and
    drop it afterwards (``pipeline.run_claims`` keeps it open over the report hooks too), so two runs
    never see each other's results and nothing survives a run. Functions opt in with :func:`per_run`.
    """

    def __init__(self):
        self._values: dict = {}

    def __len__(self) -> int:
        return len(self._values)

    def get_or_compute(self, key, compute: Callable[[], Any]):
        """The value stored under ``key``, computing and storing ``compute()`` the first time."""
        if key not in self._values:
            self._values[key] = compute()
        return self._values[key]


_CURRENT_MEMO: contextvars.ContextVar[RunMemo | None] = contextvars.ContextVar("geomjax_claims_run_memo", default=None)


@contextlib.contextmanager
def run_memo():
    """Context manager yielding the :class:`RunMemo` of the current run: the one already open (a
    :func:`run_claim` inside :func:`run`), else a fresh one that is dropped when the block exits."""
    current = _CURRENT_MEMO.get()
    if current is not None:
        yield current
        return
    memo = RunMemo()
    token = _CURRENT_MEMO.set(memo)
    try:
        yield memo
    finally:
        _CURRENT_MEMO.reset(token)


def per_run(fn: Callable) -> Callable:
    """Decorator: inside a run (:func:`run_memo` open) ``fn(*args)`` is computed once and shared by the
    run's claims; outside a run every call computes afresh. Arguments must be hashable; they are keyed
    after binding to ``fn``'s signature, so ``f(b)`` and ``f(b, seed=0)`` share one value when 0 is the default."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def shared(*args, **kwargs):
        memo = _CURRENT_MEMO.get()
        if memo is None:
            return fn(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        key = (fn, tuple(bound.arguments.items()))
        return memo.get_or_compute(key, lambda: fn(*args, **kwargs))

    return shared


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
) -> list[ClaimResult]:
    """Check every selected claim and optionally write ``claims.json`` and ``claims.md``.

    Args:
      select: see :func:`select_claims` (None = every claim).
      budget: "quick" (seconds, for tests and CI) or "full" (more samples / larger instances).
      seed: base seed; claim ``id`` uses ``fold_in(key(seed), crc32(id))``, so a claim's result
        does not depend on which other claims are selected.
      out_dir: directory to write ``claims.json`` and ``claims.md`` into (created if needed).
      errors: "raise" (default) re-raises an exception from a claim; "record" turns it into an
        "inconclusive" result whose details hold the error.
      mesh: optional 1-D "data" mesh over which Monte Carlo samples are sharded.
      progress: show a tqdm bar over the claims (stderr) naming the claim being checked.

    Returns:
      One :class:`ClaimResult` per selected claim, sorted by id.

    Raises:
      ValueError: unknown budget or errors mode, or a ``select`` pattern that matches no claim.
    """
    if budget not in BUDGETS:
        raise ValueError(f"run: budget must be one of {BUDGETS}, got {budget!r}")
    if errors not in ("raise", "record"):
        raise ValueError(f"run: errors must be 'raise' or 'record', got {errors!r}")
    selected = _select_strict(select, "run")
    results = []
    bar = None
    if progress:
        from tqdm.auto import tqdm  # display only

        bar = tqdm(selected, desc="claims", unit="claim", leave=True)
    with run_memo():
        for claim in bar if bar is not None else selected:
            if bar is not None:
                bar.set_postfix_str(claim.id, refresh=True)
            results.append(_run_or_record(claim, budget, seed, mesh, errors))
    if out_dir is not None:
        write_results(results, out_dir, budget=budget, seed=seed)
    return results


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
    :class:`Tolerance`) against the printed limit; the finite-n values are an observation ("finite-n
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
# ----------------------------------------------------------------------------------------------

FULL_VERDICTS = Path(__file__).with_name("full_verdicts.json")


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def load_full_verdicts(path: str | Path = FULL_VERDICTS) -> dict:
    """The recorded ``full`` results: {id: {"verdict", "reason", "date", "commit", "source", "statement",
    "margin", "margin_origin", "detectable_error", "n", "witnesses"}} ({} if none)."""
    p = Path(path)
    return json.loads(p.read_text())["claims"] if p.is_file() else {}


def record_full_verdicts(results: Sequence[ClaimResult], path: str | Path = FULL_VERDICTS) -> Path:
    """Update the recorded ``full`` results with ``results`` (run at budget "full"), stamped with the date
    and commit; claims not in ``results`` keep their earlier record (so per-source runs accumulate). Ids
    no longer registered are dropped."""
    if any(r.details.get("budget") != "full" for r in results):
        raise ValueError("record_full_verdicts: every result must come from budget 'full'")
    p = Path(path)
    rec = load_full_verdicts(p)
    date, commit = time.strftime("%Y-%m-%d", time.gmtime()), _git_commit()
    for r in results:
        rec[r.id] = _jsonable({"verdict": r.verdict, "reason": r.reason, "date": date, "commit": commit,
                               "source": r.source, "statement": r.statement, "margin": r.margin,
                               "margin_origin": r.margin_origin, "detectable_error": r.detectable_error,
                               "n": r.n, "seconds": r.details.get("seconds"), "witnesses": list(r.witnesses),
                               **_draws_record(r)})
    known = {c.id for c in all_claims()}
    rec = {k: rec[k] for k in sorted(rec) if k in known}
    p.write_text(json.dumps({"budget": "full", "claims": rec}, indent=1, ensure_ascii=False) + "\n")
    return p


def contradicts(verdict: str, recorded: str) -> bool:
    """True iff one verdict is "holds" and the other "does not hold" (inconclusive never contradicts)."""
    return {verdict, recorded} == {"holds", "does not hold"}


# ----------------------------------------------------------------------------------------------
# Erratum
# ----------------------------------------------------------------------------------------------

_SOURCE_TITLES = {
    "song_zhong": "Song & Zhong (2023), \"Uncovering hidden geometry in Transformers via disentangling position and context\"",
    "wertich": "Wertich (2024), \"Gaussian statistics of attention\" (thesis)",
    "bao": "Bao, Hataya & Karakida (2024), \"Self-attention networks localize when QK-eigenspectrum concentrates\"",
    "clock": "The clock blog (modular addition) and Nanda et al., \"Progress measures for grokking\"",
}


def _witness_line(w: dict, inequality: bool = False) -> str:
    sem = f" ± {_fmt(w['sem'])}" if w.get("sem") not in (None, 0, 0.0) else ""
    if inequality:  # estimate = lhs, predicted = rhs at the worst instance
        return f"{w['method']}: lhs {_fmt(w['estimate'])}{sem} against rhs {_fmt(w['predicted'])} (the statement needs lhs ≤ rhs)"
    return f"{w['method']}: {_fmt(w['estimate'])}{sem} against the printed {_fmt(w['predicted'])}"


_SECTIONS = (
    ("Statements that do not hold", REFUTING_KINDS,
     "The authors' statements, read as printed or as plainly meant, that two independent computations reject."),
    ("Typos and notation", ("typo/notation",),
     "The printed symbols say something false; the evident intended statement is checked and its verdict shown. "
     "These are not statements that do not hold."),
    ("Proof gaps", ("proof gap",),
     "A step of a proof is false; the statement it serves is not refuted by it (its own verdict is shown where "
     "checked). These are not statements that do not hold."),
)
_OWN = ("geomjax's own readings that do not hold",
        "Statements the sources do not make (a reading geomjax gave a qualitative remark, a justification or a "
        "recomputed constant of geomjax's): refuted, but never an error of the source.")


_UNCLASSIFIED = ("Refutations not yet classified",
                 "Refuted literal or intended readings whose claim names no kind of error or quotes no printed statement "
                 "yet (Claim.error_kind, Claim.printed): not to be read as errors of the source until classified.")


def _erratum_section(claim: "Claim | None") -> str:
    """The erratum section of a refuted claim: its kind's section, :data:`_OWN` for geomjax's own readings, or
    :data:`_UNCLASSIFIED` for an authors' reading without a kind or a quoted statement."""
    if claim is None or claim.reading in ("corrected", "extension"):
        return _OWN[0]
    if not claim.error_kind or not claim.printed:
        return _UNCLASSIFIED[0]
    return next(title for title, kinds, _ in _SECTIONS if claim.error_kind in kinds)


def erratum_groups(records: Mapping[str, Mapping]) -> dict[str, dict[str, list[str]]]:
    """{section title: {source group: [ids]}} of the refuted records (verdict "does not hold"), each claim in the
    section of its kind (:data:`ERRATUM_KINDS`; geomjax's own readings apart; a refuted literal or intended reading
    without a kind or a quoted statement under "Refutations not yet classified")."""
    by_id = {c.id: c for c in all_claims()}
    out: dict[str, dict[str, list[str]]] = {t: {} for t, _, _ in _SECTIONS} | {_OWN[0]: {}, _UNCLASSIFIED[0]: {}}
    for cid in sorted(records):
        if records[cid]["verdict"] == "does not hold":
            out[_erratum_section(by_id.get(cid))].setdefault(cid.split(".", 1)[0], []).append(cid)
    return out


def erratum_summary(groups: Mapping[str, Mapping[str, Sequence[str]]]) -> str:
    """The Markdown summary block (:func:`erratum_groups`: per source, the ids of the printed statements that do
    not hold; then the typos, proof gaps and geomjax's own readings) that docs/findings.md carries between
    ``<!-- errata:begin -->`` and ``<!-- errata:end -->``."""
    lines = ["<!-- errata:begin (generated by `geomjax verify --budget full --erratum`; do not edit) -->"]
    refuted = groups.get(_SECTIONS[0][0], {})
    for group in sorted(refuted):
        ids = sorted(refuted[group])
        lines.append(f"- {group}: {len(ids)} printed statement(s) do not hold — " + ", ".join(f"`{i}`" for i in ids))
    for title, label in ((_SECTIONS[1][0], "typos (the intended statement checked)"),
                         (_SECTIONS[2][0], "proof gaps (the statement served not refuted)"),
                         (_OWN[0], "geomjax's own readings that do not hold (not the sources' statements)"),
                         (_UNCLASSIFIED[0], "refutations not yet classified")):
        ids = sorted(i for g in groups.get(title, {}).values() for i in g)
        if ids:
            lines.append(f"- {label}: " + ", ".join(f"`{i}`" for i in ids))
    lines.append("<!-- errata:end -->")
    return "\n".join(lines) + "\n"


def _draws_line(r: Mapping, c: "Claim | None") -> str:
    scope = c.scope if c is not None else "universal"
    d = r.get("draws")
    if scope != "random" or not d:
        return f"{scope} — {SCOPES[scope]}"
    lo, hi = d["interval"]
    return (f"random — {d['failing']} of {d['draws']} independent draws certified to fail (fraction "
            f"{_fmt(d['fraction_failing'])}, interval [{_fmt(lo)}, {_fmt(hi)}] at 5σ; allowed fraction "
            f"{_fmt(d['allowed_fraction'])})")


def _linked(records: Mapping[str, Mapping], by_id: Mapping[str, "Claim"], cid: str) -> str:
    """'statement (`id`: verdict)' of a linked claim (intended or corrected form)."""
    c, rv = by_id.get(cid), records.get(cid)
    verdict = rv["verdict"] if rv is not None else "not recorded"
    return f"{c.statement if c is not None else cid} (`{cid}`: **{verdict}**)"


def _erratum_entry(cid: str, r: Mapping, c: "Claim | None", records, by_id, budget: str) -> list[str]:
    """One paragraph of the erratum: where printed, the printed statement quoted, the kind, the reading tested,
    the instances, the intended or corrected form with its verdict, both witnesses and the reproducing command."""
    out = [f"#### `{cid}`", "", f"- **Where printed:** {r['source']}"]
    if c is not None and c.printed:
        out.append(f"- **As printed:** “{c.printed}”")
    if c is not None and c.error_kind:
        out.append(f"- **Kind:** {c.error_kind} — {ERRATUM_KINDS[c.error_kind]}")
    reading = c.reading if c is not None else "literal"
    out.append(f"- **Reading tested:** {reading} ({READINGS[reading]}): {r['statement']}")
    out.append(f"- **Instances:** {_draws_line(r, c)}")
    if c is not None and c.intended_by:
        out.append(f"- **Intended statement:** {_linked(records, by_id, c.intended_by)}")
    if c is not None and c.corrected_by:
        corr = by_id.get(c.corrected_by)
        if corr is not None and corr.reading == "corrected" and records.get(corr.id, {}).get("verdict") == "holds":
            out.append(f"- **Corrected form:** {_linked(records, by_id, c.corrected_by)}")
        else:
            out.append(f"- **Corrected form:** none established ({_linked(records, by_id, c.corrected_by)})")
    if c is not None and c.notes:
        out.append(f"- **Remark:** {c.notes}")
    out.append(f"- **Margin:** {_fmt(r.get('margin'))} ({r.get('margin_origin', '')})")
    ineq = c is not None and isinstance(c.rule, Inequality)
    out += [f"- **Witness {i}:** {_witness_line(w, ineq)}" for i, w in enumerate(r.get("witnesses", []), 1)]
    return out + [f"- **Reproduce:** `geomjax verify --source {cid} --budget {budget}`", ""]


def to_erratum(records: Mapping[str, Mapping], *, budget: str = "full") -> str:
    """The erratum (Markdown) from recorded results ({id: record}, as :func:`load_full_verdicts` returns or
    :func:`results_as_records` builds), grouped by kind (:func:`erratum_groups`): the statements that do not hold
    (wrong statements, wrong constants, over-general statements), typos with the intended statement's verdict,
    proof gaps, and geomjax's own readings that do not hold; each entry one paragraph (:func:`_erratum_entry`);
    then the summary block (:func:`erratum_summary`)."""
    by_id = {c.id: c for c in all_claims()}
    groups = erratum_groups(records)
    dates = sorted({str(r.get("date", "")) for r in records.values()} - {""})
    commits = sorted({str(r.get("commit", "")) for r in records.values()} - {""})
    out = ["# Errata of the source documents", "",
           ("Generated by `geomjax verify --recorded --erratum docs/ERRATA.md` from the recorded full results"
            if budget == "full" else f"Generated by `geomjax verify --budget {budget} --erratum` from this run's results")
           + f" (dates {', '.join(dates) or '—'}; commits {', '.join(commits) or '—'}). Each entry quotes a "
           "printed statement with its place, names the reading tested (literal: as printed; intended: as evidently "
           "meant, where the print has a typo or an unspecified constant), what it quantifies over (every instance, "
           f"a random instance — decided over at least {MIN_DRAWS} independent draws — or one particular instance) "
           "and the kind of error, and gives the two independent computations (the witnesses) that both reject it "
           "beyond its margin at 5σ. Statements whose check is inconclusive are not listed.", ""]
    for title, kinds, blurb in _SECTIONS:
        if not any(groups[title].values()):
            continue
        out += [f"## {title}", "", blurb, ""]
        ids = sorted(i for g in groups[title].values() for i in g)
        for kind in kinds:
            mine = [i for i in ids if by_id[i].error_kind == kind]
            if not mine:
                continue
            if len(kinds) > 1:
                out += [f"### {kind[0].upper() + kind[1:]}s", ""]
            for cid in mine:
                out += _erratum_entry(cid, records[cid], by_id.get(cid), records, by_id, budget)
    for title, blurb in (_OWN, _UNCLASSIFIED):
        ids = sorted(i for g in groups[title].values() for i in g)
        if ids:
            out += [f"## {title}", "", blurb, ""]
            for cid in ids:
                out += _erratum_entry(cid, records[cid], by_id.get(cid), records, by_id, budget)
    out += ["## Summary", "", erratum_summary(groups)]
    return "\n".join(out)


def results_as_records(results: Sequence[ClaimResult]) -> dict:
    """{id: record} of results, the form :func:`to_erratum` reads (date/commit left empty)."""
    return {r.id: _jsonable({"verdict": r.verdict, "reason": r.reason, "source": r.source, "statement": r.statement,
                             "margin": r.margin, "margin_origin": r.margin_origin, "witnesses": list(r.witnesses),
                             **_draws_record(r)})
            for r in results}


_DRAWS_KEYS = ("draws", "failing", "undecided", "fraction_failing", "interval", "allowed_fraction")


def _draws_record(r: ClaimResult) -> dict:
    """{"draws": {...}} for a result decided over random draws (:func:`over_draws`), else {}."""
    if "interval" not in r.details or "draws" not in r.details:
        return {}
    return {"draws": {k: r.details[k] for k in _DRAWS_KEYS if k in r.details}}


# ----------------------------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------------------------


def _jsonable(x):
    """claims.json values under the one JSON rule (:func:`geomjax.base.io.to_jsonable`); other objects as their repr."""
    return to_jsonable(x, unknown=repr)


def _fmt(x) -> str:
    if x is None:
        return "—"
    if isinstance(x, np.ndarray):
        x = x.reshape(-1).tolist() if x.size != 1 else float(x.reshape(()))
    if isinstance(x, (list, tuple)):
        if len(x) > 4:
            return "[" + ", ".join(_fmt(v) for v in x[:3]) + f", … ({len(x)} values)]"
        return "[" + ", ".join(_fmt(v) for v in x) + "]"
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def _md_escape(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _check_column(r: ClaimResult) -> str:
    d = r.details
    if "error" in d:
        return "error: " + d["error"][:80]
    if d.get("kind") == "monte_carlo":
        return f"z = {d['worst_abs_z']:.3g} (n = {d['n_samples']}, {d['dtype']})"
    if "worst_ratio_lhs_over_rhs" in d:
        if r.verdict == "does not hold":
            return f"worst certified lhs/rhs = {d['worst_ratio_lower_over_rhs']:.3g} ({d['n_violations_certified']}/{d['n_instances']} violations)"
        return f"worst lhs/rhs = {d['worst_ratio_lhs_over_rhs']:.3g} over {d['n_instances']}"
    if "worst_abs_error" in d:
        return f"worst |err| = {d['worst_abs_error']:.3g} (allowed {d['allowed_at_worst']:.3g})"
    return ""


def _verdict_column(r: ClaimResult) -> str:
    v = f"**{r.verdict}**"
    if r.verdict == "inconclusive" and r.reason:
        v += f" ({r.reason})"
    return v


def _witness_text(w: dict, inequality: bool = False) -> str:
    sem = f" ± {_fmt(w['sem'])}" if w.get("sem") not in (None, 0, 0.0) else ""
    if inequality:  # estimate = lhs, predicted = rhs at the worst instance
        return f"{w['method']}: lhs {_fmt(w['estimate'])}{sem} vs rhs {_fmt(w['predicted'])} (needs lhs ≤ rhs)"
    return f"{w['method']}: {_fmt(w['estimate'])}{sem} vs {_fmt(w['predicted'])}"


def to_markdown(results: Sequence[ClaimResult]) -> str:
    """A Markdown table of results (one row per claim: margin and its origin, detectable error, n,
    verdict with its reason), the witnesses of every refutation, observations and the rules used."""
    lines = [
        "| id | source | statement | predicted | estimate | sem | check | margin | detectable | n | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            "| "
            + " | ".join(
                _md_escape(v)
                for v in (
                    r.id, r.source, r.statement, _fmt(r.predicted), _fmt(r.estimate), _fmt(r.sem),
                    _check_column(r), _fmt(r.margin), _fmt(r.detectable_error), _fmt(r.n), _verdict_column(r),
                )
            )
            + " |"
        )
    wit = [(r.id, r.witnesses, str(r.details.get("rule", "")).startswith("holds iff lhs")) for r in results if r.witnesses]
    if wit:
        lines += ["", "Witnesses (two independent computations behind each refutation):", ""]
        lines += [f"- `{i}`: " + "; ".join(_md_escape(_witness_text(w, ineq)) for w in ws) for i, ws, ineq in wit]
    obs = [(r.id, r.observations) for r in results if r.observations]
    if obs:
        lines += ["", "Observations (reported, not verdicts):", ""]
        lines += [f"- `{i}`: {_md_escape(json.dumps(_jsonable(o), ensure_ascii=False))}" for i, o in obs]
    origins = [(r.id, r.margin_origin) for r in results if r.margin_origin]
    if origins:
        lines += ["", "Margins (where each number comes from):", ""]
        lines += [f"- `{i}`: {_md_escape(o)}" for i, o in origins]
    rules = sorted({r.details.get("rule", "") for r in results} - {""})
    if rules:
        lines += ["", "Verdict rules:", ""] + [f"- {_md_escape(x)}" for x in rules]
    notes = [(r.id, r.details["notes"]) for r in results if r.details.get("notes")]
    if notes:
        lines += ["", "Notes:", ""] + [f"- `{i}`: {_md_escape(n)}" for i, n in notes]
    return "\n".join(lines) + "\n"


def write_results(results: Sequence[ClaimResult], out_dir: str | Path, *, budget: str = "", seed: int = 0) -> tuple[Path, Path]:
    """Write ``claims.json`` (metadata + one object per result) and ``claims.md`` into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    counts = {v: sum(r.verdict == v for r in results) for v in VERDICTS}
    payload = {
        "budget": budget,
        "seed": seed,
        "jax_version": jax.__version__,
        "counts": counts,
        "results": [r.to_dict() for r in results],
    }
    jpath = out / "claims.json"
    jpath.write_text(json.dumps(payload, indent=2, ensure_ascii=False))
    mpath = out / "claims.md"
    header = (
        f"# Claims checked by geomjax\n\nbudget: {budget}, seed: {seed}; "
        + ", ".join(f"{v}: {n}" for v, n in counts.items())
        + "\n\n"
    )
    mpath.write_text(header + to_markdown(results))
    return jpath, mpath
