"""geomjax.sources.clock.claims: a statement about the recipe's trained model decided over seeds (the same evidence for
"holds" as for "does not hold"), against closed forms of the Clopper–Pearson bounds."""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr

from geomjax.sources.clock import claims as clock
from geomjax.claims.rules import Evaluation

RULE = clock._threshold(0.01, "test")
ALPHA = 2 * ndtr(-5.0)  # the registry's ±5σ two-sided level


def _seeds(accs, pre=()):
    out = []
    for s, a in enumerate(accs):
        ev = Evaluation(lhs=np.array([0.99]), rhs=np.array([a]))
        ev.precondition = "did not grok" if s in pre else None
        out.append((s, ev, 1.0))
    return out


def _judge(ev):
    upper, lower = float(ev.lhs[0]), float(ev.lhs_lower[0])
    return "holds" if upper <= clock.ALLOWED_FRACTION else "does not hold" if lower > clock.ALLOWED_FRACTION else "inconclusive"


def test_every_seed_agreeing_decides_both_ways_at_the_same_k():
    # k of K seeds all on one side: the Clopper–Pearson bound of 0 (or K) of K is (α/2)^(1/K) from the far end
    for K in (21, 22, 32):
        edge = (ALPHA / 2) ** (1 / K)
        ok = clock._over_seeds("t", RULE, _seeds([1.0] * K), "m")
        bad = clock._over_seeds("t", RULE, _seeds([0.5] * K), "m")
        np.testing.assert_allclose(ok.lhs[0], 1 - edge, rtol=1e-9)
        np.testing.assert_allclose(bad.lhs_lower[0], edge, rtol=1e-9)
        want = "holds" if 1 - edge <= 0.5 else "inconclusive"
        assert _judge(ok) == want and _judge(bad) == want.replace("holds", "does not hold")
        assert ok.draws == K and ok.observations["seeds"].startswith(f"{K} of {K} seeds hold")
    assert (ALPHA / 2) ** (1 / 21) < 0.5 < (ALPHA / 2) ** (1 / 22)  # 22 seeds: the fewest that decide


def test_undecided_seeds_never_fail_and_few_seeds_state_what_is_needed():
    ev = clock._over_seeds("t", RULE, _seeds([1.0, 0.2], pre=(1,)), "m")
    assert ev.details["failing"] == 0 and ev.details["undecided"] == 1
    assert [r["verdict"] for r in ev.details["seeds"]] == ["holds", "inconclusive"]
    assert _judge(ev) == "inconclusive" and ev.details["draws_needed"] == 32 and "about 32 independent draws" in ev.needs
