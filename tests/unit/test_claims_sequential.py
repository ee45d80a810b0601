"""Sampling to a decision (geomjax.claims.sequential): the error rate of the sequential rule under optional stopping,
its power, and the Monte Carlo engine's rounds on a planted claim.

The rule splits the single-look error Φ(−n_sigma) over the schedule's looks (Bonferroni). At the registry's 5σ
(2.9e-7) no affordable simulation can see an error, so the rate is tested at n_sigma = 2 (nominal one-sided error
Φ(−2) = 2.3%), where thousands of simulated runs resolve it; the rule is the same function of n_sigma. The naive
rule (2σ at every look) is simulated too and must exceed the nominal rate: the test can fail.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from scipy.stats import norm

from geomjax import cli
from geomjax.claims import registry as R
from geomjax.claims.sequential import LOOKS, Stats, look_sigma, samples_needed, sequential_decision
from geomjax.theory import montecarlo

RUNS = 2000
N0 = 64


def _normal_drawer(rng, mu: float, sd: float = 1.0):
    """``(start, count) -> Stats`` of i.i.d. N(mu, sd²) draws (the count's sufficient statistics, drawn exactly:
    mean ~ N(mu, sd²/count), m2 ~ sd²·χ²(count − 1))."""
    def draw(start, count):
        return Stats(count, np.array([rng.normal(mu, sd / math.sqrt(count))]), np.array([sd**2 * rng.chisquare(count - 1)]))
    return draw


def _rate(mu: float, margin: float, n_sigma: float, looks: int, seed: int, runs: int = RUNS) -> dict:
    rng = np.random.default_rng(seed)
    out = {"holds": 0, "does not hold": 0, "inconclusive": 0}
    for _ in range(runs):
        o = sequential_decision(_normal_drawer(rng, mu), N0, 0.0, lambda st: np.array([margin]),
                                n_sigma=n_sigma, looks=looks)
        out[o.decision.verdict] += 1
    return {k: v / runs for k, v in out.items()}


def _slack(p: float) -> float:
    """3 binomial standard errors of a rate p over RUNS runs."""
    return 3 * math.sqrt(p * (1 - p) / RUNS)


def test_look_sigma_is_the_bonferroni_split_and_at_least_as_strict_as_5_sigma():
    assert look_sigma(5.0, 1) == pytest.approx(5.0)
    k = look_sigma(5.0, LOOKS)
    assert k > 5.0 and norm.sf(k) * LOOKS == pytest.approx(norm.sf(5.0), rel=1e-9)


def test_false_refutation_rate_of_true_statements_is_at_most_nominal():
    """True statements at the worst case (true error exactly on the margin): the chance that any of the 8 looks
    refutes is at most Φ(−2); the naive rule (2σ at each look, no split) exceeds it."""
    nominal = norm.sf(2.0)
    seq = _rate(mu=0.1, margin=0.1, n_sigma=2.0, looks=8, seed=1)
    assert seq["does not hold"] <= nominal + _slack(nominal)
    # the same runs judged at 2σ per look (the split switched off): optional stopping inflates the error
    rng = np.random.default_rng(1)
    naive = 0
    for _ in range(RUNS):
        o = sequential_decision(_normal_drawer(rng, 0.1), N0, 0.0, lambda st: np.array([0.1]), n_sigma=norm.isf(
            norm.sf(2.0) * 8), looks=8)  # look_sigma(x, 8) = 2 exactly
        naive += o.decision.verdict == "does not hold"
    assert o.k == pytest.approx(2.0) and naive / RUNS > nominal + _slack(nominal)


def test_false_holds_rate_of_false_statements_is_at_most_nominal():
    """False statements at the worst case (error just on the margin from outside): "holds" at most Φ(−2)."""
    nominal = norm.sf(2.0)
    seq = _rate(mu=0.1 + 1e-12, margin=0.1, n_sigma=2.0, looks=8, seed=2)
    assert seq["holds"] <= nominal + _slack(nominal)


def test_power_true_and_false_statements_are_decided():
    """Away from the margin the rule decides: a true statement (error 0, margin 0.1) holds, a false one (error 0.3)
    is refuted, in every run, at the registry's 5σ over 12 looks."""
    holds = _rate(mu=0.0, margin=0.1, n_sigma=5.0, looks=LOOKS, seed=3, runs=300)
    refuted = _rate(mu=0.3, margin=0.1, n_sigma=5.0, looks=LOOKS, seed=4, runs=300)
    assert holds["holds"] == 1.0 and refuted["does not hold"] == 1.0


def test_rounds_double_and_stop_at_the_first_decided_look():
    rng = np.random.default_rng(5)
    o = sequential_decision(_normal_drawer(rng, 0.0), N0, 0.0, lambda st: np.array([0.1]))
    ns = [n for n, _ in o.history]
    assert ns == [N0 * 2**j for j in range(len(ns))] and o.stopped == "decided" and o.decision.verdict == "holds"
    # with the error on the margin the schedule runs out undecided
    o = sequential_decision(_normal_drawer(rng, 0.1), N0, 0.0, lambda st: np.array([0.1]), looks=4)
    assert o.rounds == 4 and o.stopped == "last look of the schedule" and o.stats.n == 8 * N0


def test_time_budget_stops_before_a_round_that_would_not_fit():
    """A fake clock: every sample costs 1 ms; with a 0.5 s budget the rounds stop before the one that would not fit."""
    t = [0.0]

    def draw(start, count):
        t[0] += 1e-3 * count
        return Stats(count, np.array([0.1]), np.array([float(count - 1)]))

    o = sequential_decision(draw, N0, 0.0, lambda st: np.array([0.1]), seconds=0.5, clock=lambda: t[0])
    assert o.stopped == "time budget spent" and o.stats.n == 4 * N0 and o.seconds <= 0.5  # next round: +0.256 s


def test_samples_needed():
    assert samples_needed(0.05, 1.0, 0.1, 5.0) == pytest.approx((5.0 / 0.05) ** 2)
    assert samples_needed(0.2, 1.0, 0.1, 5.0) == pytest.approx((5.0 / 0.1) ** 2)
    assert samples_needed(0.1, 1.0, 0.1, 5.0) == math.inf


def _uniform(key):
    return jax.random.uniform(key, dtype="float64")


def test_engine_rounds_extend_one_sample_and_record_why_they_stopped():
    """A planted E[U] = 1/2 with a 0.01 margin: 256 draws cannot decide (5.46·0.29/16 > 0.01), the rounds extend
    the SAME sample (sample i uses fold_in(key, i)) until it holds; the record says how."""
    claim = R.Claim(id="testseq.uniform", source="test", statement="E U = 1/2", predicted=0.5, sampler=_uniform,
                    rule=R.MonteCarloRule(margin=R.Margin(abs=0.01, origin="test")), dtype="float64",
                    n_samples={"quick": 256, "full": 256}, chunk=256, seconds={"quick": 60.0, "full": 60.0})
    r = R.run_claim(claim)
    seq = r.details["sequential"]
    assert r.verdict == "holds" and seq["stopped"] == "decided" and seq["rounds"] > 1
    assert r.n == 256 * 2 ** (seq["rounds"] - 1) == seq["samples"]
    # the pooled estimate equals one fixed-size estimate over the same draws
    est = montecarlo.estimate(_uniform, R._claim_key(0, claim.id), r.n, chunk=256, dtype="float64")
    assert r.estimate == pytest.approx(float(est.mean), rel=1e-12)
    assert r.sem == pytest.approx(float(est.sem), rel=1e-9)


def test_run_time_budget_orders_cheapest_first_and_reports_claims_not_reached(capsys):
    """A time budget already spent: every selected claim is reported, inconclusive, "not reached"; the order is by
    recorded cost (claims without a record last)."""
    claims = [R.register(R.Claim(id=f"testseq.budget.{i}", source="test", statement="E U = 1/2", predicted=0.5,
                                 sampler=_uniform, dtype="float64", n_samples={"quick": 64, "full": 64}, chunk=64))
              for i in range(2)]
    try:
        out = R.run("testseq.budget", time_budget=1e-9)
        assert [r.id for r in out] == ["testseq.budget.0", "testseq.budget.1"]
        assert all(r.verdict == "inconclusive" and "not reached within the time budget" in r.reason for r in out)
        recorded = sorted(R.load_quick_seconds().items(), key=lambda kv: kv[1])[:2]
        known = [c for c in R.all_claims() if c.id in dict(recorded)]
        assert [c.id for c in R.cost_order(claims + known, "quick")] == [i for i, _ in recorded] + [c.id for c in claims]
    finally:
        for c in claims:
            R.unregister(c.id)
    with pytest.raises(R.GeomjaxError):
        R.run("bao.lemma1", time_budget=-1)


def test_verify_time_budget_must_be_positive(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["verify", "--source", "bao.lemma1", "--time-budget", "0"]) == 2
    assert "--time-budget must be a positive number" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing written before the error
