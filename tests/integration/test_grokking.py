"""geomjax.train.grokking: presets, data split, last-position forward, smoke training, exact resume."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geomjax.models.toy import ToyTransformer
from geomjax.train import grokking as gk
from geomjax.train.loop import StopRule
from geomjax.train.tasks import ModularOptions, modular_config


def test_presets_match_reference():
    # paper: Nanda et al.'s code (learned positions); blog: the blog's text (§3 no positions; §4 10,000 epochs
    # with ReLU, §8 the ReLU-free variant, 20,000)
    for preset, relu, epochs, pos in (("paper", True, 50_000, "learned"), ("blog", True, 10_000, "none"),
                                      ("blog", False, 20_000, "none")):
        c = gk.grokking_config(preset, relu=relu)
        t = c.train
        m, o = t.model, t.optim
        assert c.epochs == epochs and t.options == ModularOptions(113, 0.3) and t.batch_size == 0
        assert (m.vocab_size, m.n_out, m.d_model, m.n_heads, m.head_dim, m.d_mlp, m.n_layers) == (114, 114, 128, 4, 32, 512, 1)
        assert m.activation == ("relu" if relu else "none") and m.layer_norm == "none" and m.pos_embedding == pos
        assert not m.tie_embeddings
        assert not m.attn_bias and m.mlp_bias and m.init == "nanda"
        assert (o.lr, o.weight_decay, o.b1, o.b2, o.warmup_steps, o.schedule, o.decay) == (1e-3, 1.0, 0.9, 0.98, 10, "constant", "all")
    assert gk.grokking_config("cpu", relu=False).train.model.activation == "none"
    cpu = gk.grokking_config("cpu")  # learned positions (the second setting): the blog's 30% split, lr 2e-3
    assert (cpu.train.options.train_frac, cpu.epochs, cpu.train.optim.lr, cpu.log_every) == (0.3, gk.CPU_EPOCHS, 2e-3, 10)
    assert cpu.train.model.pos_embedding == "learned"
    from geomjax.sources.clock.claims import GROK_STOP, SEEDS, claim_config

    for relu in (True, False):  # the clock claims train the blog's model at the blog's lengths, in chunks of 100
        full, blog = claim_config("full", relu), gk.grokking_config("blog", relu=relu)
        assert full.train == blog.train and full.chunk_epochs == 100 and full.stop is None
        quick = claim_config("quick", relu)  # the same runs, stopped once every seed has grokked
        assert quick.train == blog.train and quick.stop == GROK_STOP
    assert SEEDS == {"full": 32, "quick": 32}  # the same 32 runs: quick stops them at grokking, full trains on
    assert modular_config("blog").total_steps == 10_000 and modular_config("blog", relu=False).total_steps == 20_000
    with pytest.raises(ValueError, match="preset"):
        gk.grokking_config("huge")
    with pytest.raises(ValueError, match="log_every"):
        gk.GrokkingConfig(gk.grokking_config("smoke").train, log_every=7)


def test_data_split():
    cfg = gk.grokking_config("smoke")
    p = cfg.train.options.p
    d = gk.grokking_data(cfg)
    x = np.concatenate([np.asarray(d.x_train), np.asarray(d.x_test)])
    y = np.concatenate([np.asarray(d.y_train), np.asarray(d.y_test)])
    assert len(d.y_train) == int(0.3 * p * p) and len(y) == p * p
    assert np.all(x[:, 2] == p)  # "=" is token p
    pairs = {(int(a), int(b)) for a, b in x[:, :2]}
    assert pairs == {(a, b) for a in range(p) for b in range(p)}  # disjoint and complete
    np.testing.assert_array_equal(y, (x[:, 0] + x[:, 1]) % p)
    d2 = gk.grokking_data(cfg)
    np.testing.assert_array_equal(np.asarray(d.x_train), np.asarray(d2.x_train))
    d3 = gk.grokking_data(cfg.replace(seed=1))
    assert not np.array_equal(np.asarray(d.x_train), np.asarray(d3.x_train))


@pytest.mark.slow
@pytest.mark.parametrize("pos", ["learned", "none"])
def test_last_position_logits_match_model(pos):
    cfg = gk.grokking_config("smoke")
    m = cfg.train.model.replace(attn_bias=True, pos_embedding=pos)
    model = ToyTransformer(m)
    params = jax.jit(lambda k: jax.tree_util.tree_map(lambda v: v + 0.1 * jax.random.normal(k, v.shape),
                                                      model.init(k, jnp.zeros((1, 3), jnp.int32))["params"]))(jax.random.key(1))
    x = gk.grokking_data(cfg).x_train
    want = jax.jit(lambda prm: model.apply({"params": prm}, x)[0][:, -1])(params)
    got = jax.jit(lambda prm: gk.last_position_logits(prm, x, m))(params)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)
    assert ("pos_embed" in params) == (pos == "learned")
    with pytest.raises(ValueError, match="n_layers"):
        gk.last_position_logits(params, x, m.replace(n_layers=2))
    with pytest.raises(ValueError, match="sinusoidal"):
        gk.last_position_logits(params, x, m.replace(pos_embedding="sinusoidal"))


@pytest.mark.slow
def test_smoke_training_and_exact_resume(tmp_path):
    cfg = gk.grokking_config("smoke").replace(epochs=100, chunk_epochs=50)
    full = gk.train_grokking(cfg, tmp_path / "a", progress=False)
    h = full.history
    assert h["epoch"].tolist() == list(range(0, cfg.epochs + 1, cfg.log_every))
    assert h["train_loss"][-1] < 0.5 * h["train_loss"][0] and h["train_acc"][-1] > h["train_acc"][0]
    # metrics computed in the scan equal an independent evaluation of the final parameters
    d = gk.grokking_data(cfg)
    model = ToyTransformer(cfg.train.model)
    logits = np.asarray(jax.jit(lambda prm: model.apply({"params": prm}, d.x_test)[0][:, -1, : cfg.train.options.p])(full.state.params), np.float64)
    y = np.asarray(d.y_test)
    ce = np.mean(np.log(np.sum(np.exp(logits - logits.max(1, keepdims=True)), 1)) + logits.max(1) - logits[np.arange(len(y)), y])
    np.testing.assert_allclose(h["test_loss"][-1], ce, rtol=1e-4)
    np.testing.assert_allclose(h["test_acc"][-1], np.mean(np.argmax(logits, 1) == y), atol=1e-6)
    sq = sum(float(np.sum(np.asarray(v, np.float64) ** 2)) for v in jax.tree_util.tree_leaves(full.state.params))
    np.testing.assert_allclose(h["sq_weights"][-1], sq, rtol=1e-5)
    # interrupted at epoch 50, then resumed: bit-identical parameters and history
    part = gk.train_grokking(cfg, tmp_path / "b", progress=False, stop_at=50)
    assert int(part.state.step) == 50
    res = gk.train_grokking(cfg, tmp_path / "b", progress=False)
    assert res.resumed_from == 50
    for u, v in zip(jax.tree_util.tree_leaves(full.state.params), jax.tree_util.tree_leaves(res.state.params)):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
    for k in (*gk.METRICS, *gk.DENSE):
        np.testing.assert_array_equal(h[k], res.history[k])
    # per-epoch train metrics: one per epoch, and the logged train loss at epoch 50 is that of the params after 50
    assert h["dense_epoch"].tolist() == list(range(cfg.epochs))
    np.testing.assert_allclose(h["dense_train_loss"][50], h["train_loss"][h["epoch"].tolist().index(50)], rtol=1e-5)
    snaps = gk.param_snapshots(tmp_path / "b", gk.grokking_init(cfg).params)
    assert [e for e, _ in snaps] == list(range(0, cfg.epochs + 1, cfg.chunk))
    loaded = gk.load_grokking_run(tmp_path / "a", cfg)
    np.testing.assert_array_equal(loaded.history["test_acc"], h["test_acc"])
    assert json.loads((tmp_path / "a" / "grokking_config.json").read_text())["preset"] == "smoke"
    with pytest.raises(ValueError, match="different config"):
        gk.train_grokking(cfg.replace(seed=5), tmp_path / "a", progress=False)
    ms = gk.grokking_milestones({"epoch": np.array([0, 10, 20, 30]), "train_acc": np.array([0.1, 1.0, 1.0, 1.0]),
                                 "test_acc": np.array([0.0, 0.2, 0.995, 1.0])})
    assert ms == {"train_100": 10, "test_99": 20}


@pytest.mark.slow  # ~11 s of CPU (400 smoke epochs, 3 compiles); the loop's rule itself: tests/unit/test_train_loop.py
def test_stop_rule_ends_the_run_is_recorded_and_resume_is_exact(tmp_path):
    """GrokkingConfig.stop: the run ends after the first chunk whose logged metrics meet the rule (the
    smoke model memorises: train accuracy 1.0 at the logs of epochs 110 and 120, so chunks of 50 stop at
    150, not at the cap of 300); the stop is recorded; an interrupted run resumes to the same epoch and
    bit-identical parameters; a stopped run loads and trains no further; the rule changes the cache key."""
    rule = StopRule("train_acc", 1.0, patience=2, origin="test: memorised")
    base = gk.grokking_config("smoke").replace(chunk_epochs=50)
    cfg = base.replace(stop=rule)
    assert gk.config_hash(cfg) != gk.config_hash(base) and "stop" not in gk.run_json(base)
    a = gk.train_grokking(cfg, tmp_path / "a", progress=False)
    h = a.history
    assert int(a.state.step) == 150 == h["epoch"][-1] and len(h["dense_epoch"]) == 150
    assert a.stopped["by"] == "rule" and a.stopped["step"] == 150 and a.stopped["rule"]["patience"] == 2
    assert np.all(h["train_acc"][-2:] == 1.0) and not np.all(h["train_acc"][h["epoch"] <= 100][-2:] == 1.0)
    assert json.loads((tmp_path / "a" / "history.json").read_text())["stopped"] == a.stopped
    b1 = gk.train_grokking(cfg, tmp_path / "b", progress=False, stop_at=100)
    assert int(b1.state.step) == 100 and b1.stopped is None
    with pytest.raises(ValueError, match="resume it"):
        gk.load_grokking_run(tmp_path / "b", cfg)
    b = gk.train_grokking(cfg, tmp_path / "b", progress=False)
    assert b.resumed_from == 100 and int(b.state.step) == 150 and b.stopped == a.stopped
    for u, v in zip(jax.tree_util.tree_leaves(a.state.params), jax.tree_util.tree_leaves(b.state.params)):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
    for k in (*gk.METRICS, *gk.DENSE):
        np.testing.assert_array_equal(h[k], b.history[k])
    again = gk.train_grokking(cfg, tmp_path / "b", progress=False)  # already stopped: no further training
    assert again.resumed_from == 150 and int(again.state.step) == 150 and again.stopped["by"] == "rule"
    loaded = gk.load_grokking_run(tmp_path / "a", cfg)
    assert loaded.stopped == a.stopped and int(loaded.state.step) == 150
    np.testing.assert_array_equal(loaded.history["test_acc"], h["test_acc"])
    capped = gk.train_grokking(base.replace(epochs=100, stop=StopRule("test_acc", 0.99)), None, progress=False)
    assert capped.stopped["by"] == "cap" and capped.stopped["step"] == 100
    with pytest.raises(ValueError, match="stop.metric"):
        base.replace(stop=StopRule("accuracy", 0.99))
