"""Sampling to a decision: Monte Carlo rounds on a fixed doubling schedule, judged at every look by
:func:`~geomjax.claims.rules.decide` with a Bonferroni split of the 5σ error over the schedule's looks.

A Monte Carlo claim draws its sample in rounds: the first look at n₀ samples (``Claim.n_samples[budget]``),
then n₀·2, n₀·4, … — at most :data:`LOOKS` looks, fixed in advance. After each round the cumulative
estimate is judged by the three-way rule with k = :func:`look_sigma` (n_sigma, LOOKS) standard errors
instead of n_sigma: the one-sided error of one look at kσ is Φ(−n_sigma)/LOOKS, so by the union bound the
chance that ANY look wrongly says "does not hold" (or wrongly says "holds") is at most Φ(−n_sigma) — the
error of today's single 5σ look (2.9·10⁻⁷), whatever the stopping time. Sampling stops at the first
decided look, when the next round would not fit in the claim's budget in seconds, or after the last
look; stopping early only drops looks, which the union bound allows (Bonferroni / alpha spending over a
fixed schedule of looks; docs/DESIGN.md, "Sampling to a decision").

:func:`sequential_decision` is the loop on plain NumPy statistics (the tests drive it with simulated
draws); :mod:`geomjax.claims.sampling` feeds it the claim's sampler.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from geomjax.claims.rules import LOOKS, N_SIGMA, Decision, decide, look_sigma

__all__ = ["LOOKS", "SECONDS", "look_sigma", "Stats", "SequentialOutcome", "sequential_decision", "samples_needed"]

#: Default budget of one Monte Carlo claim in process CPU seconds (``Claim.seconds`` overrides it per budget).
SECONDS = {"quick": 15.0, "full": 180.0}


@dataclass
class Stats:
    """Sufficient statistics of a sample (flattened float64): count, mean and m2 (sum of squared deviations)."""

    n: int
    mean: np.ndarray
    m2: np.ndarray

    def merge(self, other: "Stats") -> "Stats":
        """Chan, Golub & LeVeque's exact merge (the statistics of the pooled sample)."""
        n = self.n + other.n
        d = other.mean - self.mean
        return Stats(n, self.mean + d * (other.n / n), self.m2 + other.m2 + d * d * (self.n * other.n / n))

    @property
    def sd(self) -> np.ndarray:
        return np.sqrt(self.m2 / max(self.n - 1, 1))

    @property
    def sem(self) -> np.ndarray:
        return self.sd / math.sqrt(self.n)


@dataclass
class SequentialOutcome:
    """What :func:`sequential_decision` returns: the final statistics and decision, and how it got there.

    Attributes:
      stats, decision: the cumulative sample at the last look and its verdict (at k = ``k`` σ).
      rounds: looks taken.  seconds: wall time of the rounds.  stopped: why sampling stopped ("decided", "time
      budget spent", "last look of the schedule").  k: σ per look.  looks: the schedule's looks.
      history: (n, verdict) per look.
    """

    stats: Stats
    decision: Decision
    rounds: int
    seconds: float
    stopped: str
    k: float
    looks: int
    history: list = field(default_factory=list)


def sequential_decision(draw: Callable[[int, int], Stats], n0: int, predicted, margin: Callable[[Stats], np.ndarray],
                        *, n_sigma: float = N_SIGMA, looks: int = LOOKS, seconds: float = math.inf,
                        deadline: float | None = None, max_samples: int = 2**31 - 1,
                        clock: Callable[[], float] = time.process_time) -> SequentialOutcome:
    """Draw rounds on the schedule n₀·2^j until the rule decides, the budget is spent or the looks run out.

    Args:
      draw: ``(start, count) -> Stats`` of the samples start … start + count − 1 (a fixed sequence of draws).
      n0: samples at the first look, ≥ 2.
      predicted: the closed form (broadcast to the mean).
      margin: ``Stats -> δ`` (the margin may depend on the per-sample sd).
      n_sigma: the single-look standard; each look uses :func:`look_sigma` (n_sigma, looks).
      looks: the schedule's length (fixed before the first draw).
      seconds: budget in process CPU seconds (``clock``; less sensitive to a loaded machine than wall time): a
        round is started only when the last round's rate says it fits.
      max_samples: the largest sample the draws can index (the Monte Carlo driver's int32 indices); the
        schedule stops before a round past it (k stays the full schedule's: conservative).
      deadline: optional wall deadline (a ``time.perf_counter()`` value, the run's ``--time-budget``): no round
        starts after it.
      clock: the budget's time source (default ``time.process_time``; tests pass a fake one).

    Returns:
      :class:`SequentialOutcome`.
    """
    if n0 < 2:
        raise ValueError(f"sequential_decision: n0 must be >= 2, got {n0}")
    k = look_sigma(n_sigma, looks)
    t0 = clock()
    stats, history, rate, stopped = None, [], None, "last look of the schedule"
    for j in range(looks):
        count = n0 if j == 0 else stats.n  # doubling: the next look is at 2·n
        if j > 0:  # round 2 runs whenever time is left; it measures the rate (round 1 includes compilation)
            spent = clock() - t0
            if spent >= seconds or (rate is not None and spent + rate * count > seconds):
                stopped = "time budget spent"
                break
            if stats.n + count > max_samples:
                stopped = f"the largest sample the driver indexes ({max_samples})"
                break
            if deadline is not None and time.perf_counter() >= deadline:
                stopped = "the run's time budget spent"
                break
        t_round = clock()
        new = draw(0 if stats is None else stats.n, count)
        if j > 0:
            rate = (clock() - t_round) / count
        stats = new if stats is None else stats.merge(new)
        pred = np.broadcast_to(np.asarray(predicted, dtype=float), stats.mean.shape)
        dec = decide(stats.mean - pred, stats.sem, margin(stats), k)
        history.append((stats.n, dec.verdict))
        if dec.verdict != "inconclusive" or "not finite" in dec.reason:
            stopped = "decided" if dec.verdict != "inconclusive" else "a number is not finite"
            break
    return SequentialOutcome(stats, dec, len(history), clock() - t0, stopped, k, looks, history)


def samples_needed(error, sd, margin, k: float) -> float:
    """Samples the rule needs to decide, from the current error, per-sample sd and margin (all broadcast):
    holds needs k·sd/√n ≤ δ − |e|, does not hold k·sd/√n < |e| − δ; the max over elements (inf where |e| = δ)."""
    e = np.abs(np.asarray(error, dtype=float)).reshape(-1)
    s = np.broadcast_to(np.asarray(sd, dtype=float), np.shape(error)).reshape(-1)
    d = np.broadcast_to(np.asarray(margin, dtype=float), np.shape(error)).reshape(-1)
    gap = np.abs(d - e)
    with np.errstate(divide="ignore", invalid="ignore"):
        n = np.where(gap > 0, (k * s / gap) ** 2, np.inf)
    if np.any(e > d):  # one refuting element suffices
        return float(np.min(n[e > d]))
    return float(np.max(n)) if n.size else 0.0
