"""geomjax.train: smoke training on tiny Shakespeare, exact resume, checkpoints, data parallelism,
schedules, decay masks and losses (against NumPy)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from geomjax import train
from geomjax.base.parallel import data_mesh


@pytest.fixture(scope="module")
def smoke_cfg(shakespeare_smoke):
    return shakespeare_smoke


@pytest.fixture(scope="module")
def full_run(shakespeare_smoke_run):
    """The session's uninterrupted smoke run (tests/conftest.py); read only."""
    return shakespeare_smoke_run


@pytest.mark.slow
def test_smoke_training_lowers_validation_loss(full_run, smoke_cfg):
    ev = full_run.history.evals
    assert [e["step"] for e in ev] == [0, 30, 60]
    assert abs(ev[0]["loss"] - np.log(65)) < 0.05  # an untrained char model is near uniform
    assert ev[-1]["loss"] < ev[0]["loss"] - 0.7
    loss = full_run.history.train["loss"]
    assert loss.shape == (smoke_cfg.total_steps,) and np.isfinite(loss).all()
    assert full_run.history.steps.tolist() == list(range(smoke_cfg.total_steps))
    assert int(full_run.state.step) == smoke_cfg.total_steps
    lr = full_run.history.train["lr"]
    np.testing.assert_allclose(lr[10], smoke_cfg.optim.lr, rtol=1e-6)  # end of the warm-up
    ckpts = [s for s, _ in train.list_checkpoints(full_run.run_dir / "checkpoints")]
    assert ckpts == [30, 60]
    written = json.loads((full_run.run_dir / "config.json").read_text())
    assert written["model"]["d_model"] == 32
    # the effective schedule (issue 37) is the one that ran: its last-step lr is the history's last lr, and the
    # cosine ends on final_lr at step 60
    sched = written["effective_schedule"]
    assert sched == full_run.schedule and (sched["horizon"], sched["total_steps"]) == (60, 60)
    assert np.float32(sched["lr_last_step"]) == np.float32(lr[-1]) and np.float32(sched["lr_first_step"]) == lr[0]
    np.testing.assert_allclose(sched["lr_end"], smoke_cfg.optim.final_lr, rtol=1e-6)


@pytest.mark.slow
def test_resume_reproduces_losses_exactly(full_run, smoke_cfg, tmp_path):
    first = train.fit(smoke_cfg, run_dir=tmp_path, progress=False, stop_at=30)
    assert int(first.state.step) == 30 and first.resumed_from is None
    assert [s for s, _ in train.list_checkpoints(tmp_path / "checkpoints")] == [30]
    second = train.fit(smoke_cfg, run_dir=tmp_path, progress=False)
    assert second.resumed_from == 30
    ref = full_run.history
    np.testing.assert_array_equal(first.history.train["loss"], ref.train["loss"][:30])
    np.testing.assert_array_equal(second.history.steps, np.arange(30, 60))
    np.testing.assert_array_equal(second.history.train["loss"], ref.train["loss"][30:])  # bit-for-bit
    np.testing.assert_array_equal(second.history.train["grad_norm"], ref.train["grad_norm"][30:])
    assert second.history.evals[-1] == ref.evals[-1]
    for a, b in zip(jax.tree_util.tree_leaves(second.state.params), jax.tree_util.tree_leaves(full_run.state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.slow
def test_fit_stop_rule_ends_the_run_exactly_and_a_resume_trains_no_further(full_run, smoke_cfg, tmp_path):
    """fit(stop=...): the validation loss of the session's run at step 30 meets an at-most rule at that value,
    so the run ends at 30 of 60 with the uninterrupted run's parameters (its checkpoint at 30, bit-for-bit);
    re-running the stopped run directory trains no further; how it ended is in the history file."""
    v30 = full_run.history.evals[1]["loss"]
    rule = train.StopRule("loss", v30, mode="at_most", origin="the session's run at step 30")
    res = train.fit(smoke_cfg, run_dir=tmp_path, progress=False, stop=rule)
    assert int(res.state.step) == 30 and res.history.stopped["by"] == "rule" and res.history.stopped["step"] == 30
    ref, _ = train.load_checkpoint(full_run.run_dir / "checkpoints" / "ckpt_00000030.npz", train.init_state(smoke_cfg))
    for a, b in zip(jax.tree_util.tree_leaves(res.state.params), jax.tree_util.tree_leaves(ref.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert json.loads((tmp_path / "history.json").read_text())["stopped"] == res.history.stopped
    again = train.fit(smoke_cfg, run_dir=tmp_path, progress=False, stop=rule)
    assert again.resumed_from == 30 and int(again.state.step) == 30 and len(again.history.steps) == 0
    assert again.history.stopped["by"] == "rule" and [e["step"] for e in again.history.evals] == [0, 30]


@pytest.mark.slow
def test_checkpoint_round_trip_and_errors(full_run, smoke_cfg, tmp_path):
    state = full_run.state
    path = train.save_checkpoint(tmp_path, state, smoke_cfg)
    template = train.init_state(smoke_cfg)
    restored, meta = train.load_checkpoint(path, template)
    assert meta["step"] == 60 and meta["config"]["model"]["n_layers"] == 2
    for a, b in zip(jax.tree_util.tree_leaves(restored), jax.tree_util.tree_leaves(state)):
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    wider = smoke_cfg.replace(model=smoke_cfg.model.replace(d_model=48))
    with pytest.raises(ValueError, match=r"parameter 'params/block_0/attn/k/kernel' has shape \(32, 2, 16\) "
                                         r"but the model expects \(48, 2, 24\)"):
        train.load_checkpoint(path, train.init_state(wider))
    deeper = smoke_cfg.replace(model=smoke_cfg.model.replace(n_layers=3))
    with pytest.raises(ValueError, match=r"missing entries \['params/block_2"):
        train.load_checkpoint(path, train.init_state(deeper))
    bad = tmp_path / "ckpt_00000099.npz"
    bad.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ValueError, match="corrupted"):
        train.load_checkpoint(bad, template)
    with pytest.raises(FileNotFoundError):
        train.load_checkpoint(tmp_path / "none.npz", template)
    # fit() resuming from a run directory written by another model shape fails the same way
    run = tmp_path / "run"
    train.save_checkpoint(run / "checkpoints", state, smoke_cfg)
    with pytest.raises(ValueError, match="params/block_0/attn/k/kernel"):
        train.fit(wider, run_dir=run, progress=False)


def test_init_state_parameters_are_flax_init_bit_for_bit(smoke_cfg):
    """init_state draws the parameters with lazy_init (no forward pass): the same bits as model.init."""
    cfg = smoke_cfg
    want = train.build_programs(cfg).model.init(jax.random.fold_in(jax.random.key(cfg.seed), 0),
                                                jnp.zeros((1, cfg.seq_len), jnp.int32))["params"]
    got = train.init_state(cfg).params
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert g.dtype == w.dtype and np.array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.slow
def test_data_parallel_step_matches_single_device(smoke_cfg):
    cfg = smoke_cfg
    data, _, _ = train.load_task_data(cfg)
    mesh = data_mesh(4)
    p1 = train.build_programs(cfg)
    p4 = train.build_programs(cfg, mesh)
    s1 = train.init_state(cfg, p1)
    s4 = train.init_state(cfg, p4, mesh)
    step1 = train.jit_train_step(p1.step_fn)
    step4 = train.jit_train_step(p4.step_fn, mesh)
    assert "all-reduce" in step4.lower(s4, data).compile().as_text()  # gradients combined across devices
    for _ in range(2):
        s1, m1 = step1(s1, data)
        s4, m4 = step4(s4, data)
        np.testing.assert_allclose(float(m4["loss"]), float(m1["loss"]), rtol=2e-6)
    for a, b in zip(jax.tree_util.tree_leaves(s4.params), jax.tree_util.tree_leaves(s1.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    assert len(jax.tree_util.tree_leaves(s4.params)[0].sharding.device_set) == 4  # replicated on the mesh
    with pytest.raises(ValueError, match="not divisible by the 3 devices"):
        bad = cfg.replace(batch_size=16)
        train.jit_train_step(train.build_programs(bad, data_mesh(3)).step_fn, data_mesh(3))(
            train.init_state(bad, mesh=data_mesh(3)), data)


def test_schedules():
    c = train.OptimConfig(lr=1.0, warmup_steps=10, decay_steps=110, final_lr=0.1)
    f = train.make_schedule(c)
    np.testing.assert_allclose([float(f(s)) for s in (0, 5, 10)], [0.0, 0.5, 1.0], atol=1e-7)
    np.testing.assert_allclose(float(f(60)), 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * 0.5)), rtol=1e-6)
    np.testing.assert_allclose([float(f(110)), float(f(500))], [0.1, 0.1], rtol=1e-6)
    g = train.make_schedule(train.OptimConfig(lr=1e-3, schedule="constant", warmup_steps=10))
    np.testing.assert_allclose([float(g(s)) for s in (0, 3, 10, 10_000)],
                               [1e-3 * min(s / 10, 1) for s in (0, 3, 10, 10_000)], rtol=1e-6)  # Nanda's LambdaLR
    with pytest.raises(ValueError, match="decay_steps"):
        train.OptimConfig(warmup_steps=10, decay_steps=5)


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_decay_mask_and_adamw():
    params = {"embed": {"embedding": jnp.ones((3, 2))}, "ln": {"scale": jnp.ones(2), "bias": jnp.ones(2)},
              "attn": {"q": {"kernel": jnp.ones((2, 1, 2)), "bias": jnp.ones((1, 2))}}}
    m = train.decay_mask(params)
    assert m == {"embed": {"embedding": False}, "ln": {"scale": False, "bias": False},
                 "attn": {"q": {"kernel": True, "bias": False}}}
    assert train.decay_mask(params, decay_embeddings=True)["embed"]["embedding"] is True
    assert all(jax.tree_util.tree_leaves(train.decay_mask(params, "all")))
    # zero gradients: only decayed leaves move, by lr * wd * w (decoupled decay)
    tx, _ = train.make_optimizer(train.OptimConfig(lr=0.1, schedule="constant", weight_decay=0.5, grad_clip=1.0))
    st = tx.init(params)
    upd, _ = jax.jit(tx.update)(jax.tree_util.tree_map(jnp.zeros_like, params), st, params)  # one program
    new = optax.apply_updates(params, upd)
    np.testing.assert_allclose(new["attn"]["q"]["kernel"], 1 - 0.1 * 0.5, rtol=1e-6)
    np.testing.assert_array_equal(new["attn"]["q"]["bias"], 1.0)
    np.testing.assert_array_equal(new["embed"]["embedding"], 1.0)


def _np_ce(logits, y):
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return -np.take_along_axis(logp, y[..., None], -1)[..., 0]


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_losses_against_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 5, 7)).astype(np.float32) * 3
    y = rng.integers(0, 7, size=(3, 5))
    mask = rng.random((3, 5)) < 0.5
    ce = _np_ce(logits.astype(np.float64), y)
    np.testing.assert_allclose(float(train.cross_entropy(jnp.asarray(logits), jnp.asarray(y))), ce.mean(), rtol=1e-6)
    np.testing.assert_allclose(float(train.next_token_loss(jnp.asarray(logits), jnp.asarray(y), jnp.asarray(mask))),
                               ce[mask].mean(), rtol=1e-6)
    assert float(train.cross_entropy(jnp.asarray(logits), jnp.asarray(y), jnp.zeros((3, 5), bool))) == 0.0
    labels = rng.integers(0, 5, size=3)
    np.testing.assert_allclose(float(train.last_position_loss(jnp.asarray(logits), jnp.asarray(labels), 5)),
                               _np_ce(logits[:, -1, :5].astype(np.float64), labels).mean(), rtol=1e-6)
    ids = jnp.asarray(rng.integers(0, 7, size=(2, 6)))
    x, t, m = train.shift_for_next_token(ids, jnp.asarray([[0, 0, 1, 1, 1, 0]] * 2, bool))
    np.testing.assert_array_equal(t, ids[:, 1:])
    assert m.tolist() == [[False, True, True, True, False]] * 2
    perfect = jax.nn.one_hot(t, 7) * 10
    assert float(train.exact_match(perfect, t, m)) == 1.0
    wrong = perfect.at[0, 1].set(perfect[0, 1][::-1] + 0.5 * jnp.arange(7))
    assert float(train.exact_match(wrong, t, m)) == 0.5
    assert float(train.exact_match(perfect.at[0, 0].set(-perfect[0, 0]), t, m)) == 1.0  # unmasked position
    corrupted, sel = train.mask_tokens(jax.random.key(0), jnp.zeros((40, 50), jnp.int32) + 3, 99, 10)
    frac = float(sel.mean())
    assert 0.12 < frac < 0.18
    assert abs(float((corrupted[sel] == 99).mean()) - 0.8) < 0.05 and (corrupted[~sel] == 3).all()
