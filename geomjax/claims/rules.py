"""The verdict rules of the claims registry: margins, :func:`~geomjax.claims.rules.decide`, the rules and what an evaluation returns.

The three verdicts, for an equality, are decided by :func:`~geomjax.claims.rules.decide` (the one place the rule lives): with
e = estimate − predicted, s its standard error and δ the claim's margin, "holds" iff |e| + k·s ≤ δ for
every element, "does not hold" iff |e| − k·s > δ for some element, "inconclusive" otherwise (k = 5).
:class:`Tolerance` and :class:`Inequality` judge deterministic evaluations (:class:`Evaluation`);
:func:`over_draws` decides a statement about random instances over independent draws. The package
docstring of :mod:`geomjax.claims.registry` describes the whole rule set.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from scipy.special import betaincinv, ndtr, ndtri  # scipy.stats' beta.ppf / norm.sf / norm.isf, without its import cost

BUDGETS = ("quick", "full")
VERDICTS = ("holds", "does not hold", "inconclusive")
Budget = Literal["quick", "full"]

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
#: geomjax's own readings (a correction, an extension): never the source's statements, counted and listed apart.
OWN_READINGS = ("corrected", "extension")

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


#: Looks of the fixed schedule n₀·2^j, j = 0 … LOOKS − 1 (the largest sample is 2^(LOOKS−1)·n₀).
LOOKS = 12

def look_sigma(n_sigma: float = N_SIGMA, looks: int = LOOKS) -> float:
    """k of one look: Φ(−k) = Φ(−n_sigma)/looks (Bonferroni over the schedule; 5σ over 12 looks: k ≈ 5.46).

    Args:
      n_sigma: the single-look standard (5: one-sided error Φ(−5) = 2.9e-7).  looks: the schedule's looks, ≥ 1.
    """
    if looks < 1:
        raise ValueError(f"look_sigma: looks must be >= 1, got {looks}")
    return float(-ndtri(ndtr(-n_sigma) / looks))


@dataclass(frozen=True)
class MonteCarloRule:
    """Judged by :func:`~geomjax.claims.rules.decide`: holds iff |estimate − predicted| + n_sigma·sem ≤ δ everywhere."""

    n_sigma: float = N_SIGMA
    margin: Margin = EXACT_IDENTITY

    def describe(self) -> str:
        """The rule in words (shown under the Markdown table)."""
        k = look_sigma(self.n_sigma)
        return (f"Monte Carlo, sampled in rounds n₀·2^j (at most {LOOKS} looks, stopping at the first decided look): "
                f"holds iff |estimate − predicted| + {k:.3g}·sem ≤ margin (every element); "
                f"does not hold iff |estimate − predicted| − {k:.3g}·sem > margin (some element); else inconclusive "
                f"({k:.3g}σ per look: the {self.n_sigma:g}σ error split over the {LOOKS} looks, Bonferroni)")


@dataclass(frozen=True)
class Tolerance:
    """Margin δ = atol + rtol·|predicted| (elementwise), judged by :func:`~geomjax.claims.rules.decide`.

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
    """What :func:`~geomjax.claims.rules.decide` returns: verdict, reason (for inconclusive), detectable error, worst element."""

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
        exact evaluation. It enters the verdict (:func:`~geomjax.claims.rules.decide`).
      n: the sample count behind ``sem`` (None: the number of compared elements/instances).
      draws: for a claim of scope "random": the number of independent random instances behind the verdict
        (:func:`over_draws` sets it); a refutation with fewer than :data:`MIN_DRAWS` is inconclusive.
      precondition: None when the claim's presupposition is met; otherwise what was not met and the
        budget that suffices (the verdict is then "inconclusive").
      needs: what deciding would take when this evaluation cannot decide (e.g. the independent draws an
        :func:`over_draws` fraction needs at its point estimate); appended to an inconclusive verdict's reason.
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
    needs: str | None = None
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
    alpha = 2.0 * float(ndtr(-n_sigma))
    lo = 0.0 if k == 0 else float(betaincinv(k, n - k + 1, alpha / 2))
    hi = 1.0 if k == n else float(betaincinv(k + 1, n - k, 1 - alpha / 2))
    return lo, hi


def over_draws(fails, holds, *, allowed_fraction: float, method: str, details: Mapping | None = None,
               n_sigma: float = N_SIGMA, point_fails=None, seconds: float | None = None) -> Evaluation:
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
      point_fails: optional (N,) booleans, each draw's point estimate (its Monte Carlo error ignored) on the failing
        side. When the verdict cannot be decided they give :func:`draws_needed` at the point estimate f̂, stated in
        ``needs`` (with ``seconds``, the run's cost of the N draws, scaled to that many).
      seconds: CPU seconds the N draws took (for ``needs``).

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
    needs = None
    if point_fails is not None and not (upper <= allowed_fraction or lower > allowed_fraction):
        f_hat = float(np.mean(np.asarray(point_fails, dtype=bool)))
        need = draws_needed(f_hat, allowed_fraction, n_sigma)
        info |= {"point_fraction_failing": f_hat, "draws_needed": need}
        cost = (f" (≈ {need * seconds / n / 60:.3g} CPU min at this run's {seconds / n:.3g} s per draw)"
                if seconds is not None and math.isfinite(need) else "")
        needs = (f"about {need:.3g} independent draws{cost}, each resolved at ±{n_sigma:g}σ: the failing fraction's "
                 f"point estimate {f_hat:.3g} lies {abs(f_hat - allowed_fraction):.2g} from the allowed "
                 f"{allowed_fraction:g}, the smallest n whose Clopper–Pearson interval at f̂ clears f₀; this run drew {n}"
                 if math.isfinite(need) else
                 f"an unbounded number of draws: the failing fraction's point estimate {f_hat:.3g} equals the allowed "
                 f"{allowed_fraction:g}; this run drew {n}")
    return Evaluation(lhs=np.array([upper]), lhs_lower=np.array([lower]), rhs=np.array([allowed_fraction]),
                      n=n, draws=n, method=method, details={**info, **dict(details or {})}, needs=needs,
                      observations={"failing draws": f"{k_fail} of {n} (fraction {k_fail / n:.3g}, interval "
                                                     f"[{lower:.3g}, {upper:.3g}] at ±{n_sigma:g}σ)"})


def draws_needed(f_hat: float, allowed_fraction: float, n_sigma: float = N_SIGMA) -> float:
    """Independent draws :func:`over_draws` needs to decide a failing fraction f̂ against f₀ at ±n_sigma: the smallest
    n (≥ :data:`MIN_DRAWS`; doubling, then bisection) at which the Clopper–Pearson interval of round(f̂·n) of n
    (:func:`binomial_interval`) lies on one side of f₀; inf when f̂ = f₀ or past 2³⁰ draws. A planning number (f̂
    is itself an estimate, and each draw must also be resolved), not a guarantee."""
    f_hat, f0 = float(f_hat), float(allowed_fraction)
    if f_hat == f0:
        return math.inf

    def clears(n: int) -> bool:
        lo, hi = binomial_interval(min(n, max(0, round(f_hat * n))), n, n_sigma)
        return hi <= f0 if f_hat < f0 else lo > f0

    hi_n = MIN_DRAWS
    while not clears(hi_n):
        if hi_n > 2**30:
            return math.inf
        hi_n *= 2
    lo_n = hi_n // 2
    while hi_n - lo_n > 1 and lo_n >= MIN_DRAWS:
        mid = (lo_n + hi_n) // 2
        lo_n, hi_n = (lo_n, mid) if clears(mid) else (mid, hi_n)
    return float(hi_n)
