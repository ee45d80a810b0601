"""The clock claims over vmapped seeds, end to end at smoke size (p 23, no positional embeddings, 2 seeds of 40
epochs): a quick run without the trained models says what trains them; each seed's number equals the NumPy float64
forward pass of that seed's weights, a seed that did not grok is undecided, and two seeds decide nothing (the verdict
names the seeds needed)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from geomjax.sources.clock import claims as clock
from geomjax.claims.registry import run_claim, select_claims
from geomjax.train import grokking as gk
from geomjax.train.loop import StopRule


def _smoke(budget, relu=True, seed=0):
    c = gk.grokking_config("smoke", relu=relu, seed=seed).replace(epochs=40, chunk_epochs=20)
    return c.replace(train=c.train.replace(model=c.train.model.replace(pos_embedding="none")))


@pytest.mark.slow
def test_clock_claims_over_seeds_plumbing(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOMJAX_CACHE", str(tmp_path))
    monkeypatch.setattr(clock, "claim_config", _smoke)
    monkeypatch.setitem(clock.SEEDS, "quick", 2)
    claim = select_claims("clock.mlp_affine")[0]
    assert claim.scope == "random"
    # a quick run reads the trained models and never trains them: untrained, it says so and what trains them
    out = run_claim(claim, "quick")
    assert out.verdict == "inconclusive" and "are not trained yet" in out.reason and "train_clock_seeds.py" in out.reason
    assert not (tmp_path / "grokking-seeds").exists()
    res = clock.budget_seeds("quick", True)
    assert res.seeds == (0, 1) and (tmp_path / "grokking-seeds").is_dir()
    ev = claim.evaluate("quick", jax.random.key(0))
    p = 23
    a, b = np.divmod(np.arange(p * p), p)
    for j, row in enumerate(ev.details["seeds"]):
        P = jax.tree_util.tree_map(lambda x: np.asarray(x[j], np.float64), jax.device_get(res.state.params))
        acc = np.mean(np.argmax(clock.numpy_clock_forward(P, p, relu=False)["logits"], 1) == (a + b) % p)
        np.testing.assert_allclose(row["rhs"], [acc], atol=1.01 / p**2)  # float32 vs float64: a tie may flip
        grokked = max(res.history["test_acc"][:, j]) >= 0.99
        assert (row["verdict"] == "inconclusive") or grokked, row  # not grokked: undecided, never failing
    an0, an1 = clock.seed_analyses("quick")[0]  # the embedding restriction (reported, not judged): the first seed's
    assert "sufficiency_embed" in an0 and "sufficiency_embed" not in an1
    emb1 = clock.trained_analyses("quick", 1)[0]["sufficiency_embed"]  # another seed's report computes its own
    assert "all" in emb1 and {str(k) for k in an1["key"]} <= set(emb1)
    wit = claim.witness("quick", jax.random.key(1))
    assert [r["seed"] for r in wit.details["seeds"]] == [0, 1]
    out = run_claim(claim, "quick")
    assert out.verdict == "inconclusive" and out.details["draws"] == 2
    assert "about 32 independent draws" in out.reason, out.reason


@pytest.mark.slow
def test_full_budget_continues_the_quick_runs(tmp_path, monkeypatch):
    """budget_seeds("full") continues the finished quick runs (the same seeds; quick stops them by its rule)."""
    monkeypatch.setenv("GEOMJAX_CACHE", str(tmp_path))

    def configs(budget, relu=True, seed=0):  # quick: the smoke runs stopped at their first chunk (20 of 40 epochs)
        c = _smoke(budget, relu, seed)
        rule = StopRule("train_acc", 0.0, patience=2, origin="test: met after the first chunk")
        return c.replace(stop=rule, preset="smoke-quick") if budget == "quick" else c

    monkeypatch.setattr(clock, "claim_config", configs)
    monkeypatch.setitem(clock.SEEDS, "quick", 2)
    monkeypatch.setitem(clock.SEEDS, "full", 2)
    quick = clock.budget_seeds("quick", True)
    assert quick.epoch == 20 and quick.stopped["by"] == "rule"
    full = clock.budget_seeds("full", True)
    n = len(quick.history["epoch"])
    assert full.epoch == 40 and list(full.history["epoch"][:n]) == list(quick.history["epoch"])
    for k in ("train_loss", "test_acc", "dense_train_loss"):
        m = len(quick.history[k])
        np.testing.assert_array_equal(full.history[k][:m], quick.history[k])
    assert full.seconds >= quick.seconds  # the quick run's training time is part of the full run's
    assert clock.finished_seeds(configs("full"), range(2)).epoch == 40  # cached in full's own folder
