"""geomjax.train.grokking_seeds: K seeds as one vmapped program equal the seeds trained alone; exact resume; a run
stopped by a rule continues into the run without it exactly."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from geomjax.train import grokking as gk
from geomjax.train.grokking_seeds import continues, load_grokking_seeds, seed_result, train_grokking_seeds
from geomjax.train.loop import StopRule

SEEDS = (0, 3)


@pytest.fixture(scope="module")
def cfg():
    """The smoke model (p 23) without positional embeddings (the clock blog's model), 40 epochs in chunks of 20."""
    c = gk.grokking_config("smoke").replace(epochs=40, chunk_epochs=20)
    return c.replace(train=c.train.replace(model=c.train.model.replace(pos_embedding="none")))


@pytest.mark.slow
def test_vmapped_seeds_equal_the_seeds_trained_alone(cfg, tmp_path):
    res = train_grokking_seeds(cfg, SEEDS, progress=False)
    assert res.history["test_acc"].shape == (cfg.epochs // cfg.log_every + 1, len(SEEDS))
    for j, s in enumerate(SEEDS):
        alone = gk.train_grokking(cfg.replace(seed=s), progress=False)
        got = seed_result(res, j)
        assert got.config == cfg.replace(seed=s) and "pos_embed" not in got.state.params
        for u, v in zip(jax.tree_util.tree_leaves(alone.state.params), jax.tree_util.tree_leaves(got.state.params)):
            # XLA batches the seeds' matmuls: float32 rounding, 40 Adam steps of lr 3e-3 on weights of order 0.1-1
            np.testing.assert_allclose(np.asarray(v), np.asarray(u), rtol=0, atol=1e-5)
        h = alone.history
        np.testing.assert_allclose(got.history["train_loss"], h["train_loss"], rtol=1e-4)
        np.testing.assert_allclose(got.history["dense_train_loss"], h["dense_train_loss"], rtol=1e-4)
        # an accuracy may differ by a pair whose two top logits tie within rounding
        n_test = 23 * 23 - int(0.3 * 23 * 23)
        np.testing.assert_allclose(got.history["test_acc"], h["test_acc"], atol=1.01 / n_test)


def _assert_same_state(a, b):
    for u, v in zip(jax.tree_util.tree_leaves(a.state), jax.tree_util.tree_leaves(b.state)):
        np.testing.assert_array_equal(np.asarray(jax.random.key_data(u) if jax.dtypes.issubdtype(u.dtype, jax.dtypes.prng_key) else u),
                                      np.asarray(jax.random.key_data(v) if jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key) else v))


@pytest.mark.slow
def test_seeds_run_resumes_and_continues_exactly(cfg, tmp_path):
    full = train_grokking_seeds(cfg, SEEDS, tmp_path / "a", progress=False)
    part = train_grokking_seeds(cfg, SEEDS, tmp_path / "b", progress=False, stop_at=20)
    assert part.epoch == 20
    with pytest.raises(ValueError, match="run at epoch 20"):
        load_grokking_seeds(tmp_path / "b", cfg, SEEDS)
    res = train_grokking_seeds(cfg, SEEDS, tmp_path / "b", progress=False)
    assert res.epoch == cfg.epochs
    _assert_same_state(full, res)
    loaded = load_grokking_seeds(tmp_path / "b", cfg, SEEDS)
    for k, v in full.history.items():
        np.testing.assert_array_equal(loaded.history[k], v)
    with pytest.raises(ValueError, match="different config"):
        train_grokking_seeds(cfg, (0, 4), tmp_path / "a", progress=False)

    # a run stopped by a rule (the clock claims' quick budget) is the beginning of the run without it (full)
    rule = StopRule("train_acc", 0.0, patience=2, origin="test: met at the first chunk (epoch 0 alone cannot)")
    early = train_grokking_seeds(cfg.replace(stop=rule, preset="early"), SEEDS, progress=False)
    assert early.epoch == 20 and early.stopped["by"] == "rule" and continues(cfg, early.config)
    cont = train_grokking_seeds(cfg, SEEDS, tmp_path / "c", progress=False, init_from=early)
    assert cont.epoch == cfg.epochs and np.asarray(jax.random.key_data(early.state.rng)).size  # not donated away
    _assert_same_state(full, cont)
    again = load_grokking_seeds(tmp_path / "c", cfg, SEEDS)
    for k, v in full.history.items():
        np.testing.assert_array_equal(again.history[k], v)
    with pytest.raises(ValueError, match="not the beginning"):
        train_grokking_seeds(cfg.replace(train=cfg.train.replace(optim=dataclasses.replace(cfg.train.optim, lr=1e-3))), SEEDS,
                             progress=False, init_from=early)
