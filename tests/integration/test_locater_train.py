"""LocATER training (geomjax.train.locater, experiments/localization): smoke sweep, one step per κ2.

The vmapped sweep's first update is compared, for every κ2, with an independent single-run update:
jax.grad of cross-entropy + geomjax.theory.localization.locater_penalty(params, κ1, κ2) and one optax.adamw
step from the same initialisation, batch and dropout key.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from geomjax import localization as loc
from geomjax.train import locater as L
from geomjax.train.checkpoint import latest_checkpoint, load_checkpoint
from geomjax.train.state import step_keys

from experiments.localization.config import get_config


@pytest.mark.slow
def test_smoke_sweep_one_step_per_kappa2_matches_independent_runs(tmp_path):
    cfg = get_config("smoke")
    res = L.run_sweep(cfg, run_dir=tmp_path, progress=False, stop_at=1)
    K = len(cfg.kappa2s)
    assert res.steps.tolist() == [0]
    assert res.train["rho"].shape == (1, K, cfg.seq_len) and res.train["loss"].shape == (1, K)
    assert np.all((res.train["rho"] >= 0) & (res.train["rho"] <= 1))
    assert len(res.evals) == 2 and len(res.evals[0]["ppl"]) == K

    data = L.load_wikitext_words(cfg)
    prog = L.build(cfg, len(data.vocab))
    state0 = prog.init(jax.random.key(cfg.seed))
    stepped, _ = load_checkpoint(latest_checkpoint(tmp_path / "checkpoints"), state0)
    assert int(stepped.step) == 1

    # independent reference: the same batch and dropout key, one AdamW step per κ2
    k_data, k_drop = step_keys(state0.rng, jnp.zeros((), jnp.int32))
    n = data.train.size - (cfg.seq_len + 1)
    starts = np.asarray(jax.random.randint(k_data, (cfg.batch_size,), 0, n + 1))
    ids = jnp.asarray(np.stack([data.train[s:s + cfg.seq_len + 1] for s in starts]))
    p0 = jax.tree_util.tree_map(lambda x: x[0], state0.params)
    tx = optax.adamw(cfg.optim.lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=cfg.optim.weight_decay)

    @jax.jit
    def reference(p, penalty_k2):
        def objective(p):
            logits, _ = prog.model.apply({"params": p}, ids[:, :-1], deterministic=False, rngs={"dropout": k_drop})
            logz = jax.nn.logsumexp(logits, axis=-1)
            ce = jnp.mean(logz - jnp.take_along_axis(logits, ids[:, 1:, None], axis=-1)[..., 0])
            pen = loc.locater_penalty(p, cfg.kappa1, 0.0) + penalty_k2 * sum(
                (t["trace"][0] - 1.0) ** 2 for t in loc.locater_terms(p).values())
            return ce + pen, ce

        (_, ce), g = jax.value_and_grad(objective, has_aux=True)(p)
        upd, _ = tx.update(g, tx.init(p), p)
        return optax.apply_updates(p, upd), ce

    # the κ2 part of the penalty as locater_penalty computes it (checked separately below)
    assert abs(float(loc.locater_penalty(p0, 0.0, 1.0)) - sum(
        float((t["trace"][0] - 1.0) ** 2) for t in loc.locater_terms(p0).values())) < 1e-6
    for j, k2 in enumerate(cfg.kappa2s):
        p1, ce = reference(p0, jnp.float32(k2))
        assert abs(float(res.train["loss"][0, j]) - float(ce)) < 1e-4
        for a, b in zip(jax.tree_util.tree_leaves(p1), jax.tree_util.tree_leaves(stepped.params)):
            np.testing.assert_allclose(np.asarray(b[j]), np.asarray(a), rtol=1e-5, atol=1e-6)
        t = loc.locater_terms(p1)["block_0/attn"]
        assert abs(float(res.train["scale"][0, j]) - float(t["scale"][0])) <= 1e-4 * float(t["scale"][0]) + 1e-9


def test_config_validation_and_presets():
    assert get_config("paper").steps == 50_000 and get_config("paper").kappa1 == 100.0
    assert get_config("paper").kappa2s == (0.0, 1e-3, 1e-2, 1e-1, 1.0)
    with pytest.raises(ValueError, match="preset"):
        get_config("gpu")
    with pytest.raises(ValueError, match="must be >= 0"):
        L.LocaterConfig(kappa2s=(-1.0,))
    with pytest.raises(ValueError, match="multiple of steps_per_call"):
        L.LocaterConfig(steps=7, steps_per_call=5)
    with pytest.raises(ValueError, match="not shipped with geomjax.*--data-dir"):
        L.load_wikitext_words(L.LocaterConfig(train_split="train"))


@pytest.mark.slow  # two chunk compilations: ~20 s of CPU
def test_single_kappa2_run_equals_its_entry_in_a_sweep():
    """One κ2 runs unstacked (not vmapped over a batch axis of 1): same metrics and parameters as
    that κ2's entry of a two-κ2 sweep, to float32 rounding, after two steps."""
    base = L.LocaterConfig(kappa2s=(0.1, 1.0), steps=2, steps_per_call=2, eval_every=2, ckpt_every=0,
                           seq_len=8, batch_size=4, d_model=16, vocab_cap=64, optim=L.fairseq_adam(lr=1e-3))
    data = L.load_wikitext_words(base)
    stream = jnp.asarray(data.train)
    out = {}
    for cfg in (base, base.replace(kappa2s=(1.0,))):
        prog = L.build(cfg, len(data.vocab))
        out[len(cfg.kappa2s)] = prog.chunk(prog.init(jax.random.key(0)), stream)
    (sweep, m_sweep), (one, m_one) = out[2], out[1]
    assert m_one["loss"].shape == (2, 1) and m_one["rho"].shape == (2, 1, 8)
    for k in m_one:
        np.testing.assert_allclose(np.asarray(m_one[k])[:, 0], np.asarray(m_sweep[k])[:, 1], rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree_util.tree_leaves(one.params), jax.tree_util.tree_leaves(sweep.params)):
        np.testing.assert_allclose(np.asarray(a)[0], np.asarray(b)[1], rtol=1e-5, atol=1e-6)


def test_fairseq_init_matches_fairseqs_formulas():
    """init="fairseq" (the LocATER paper's toolkit): q/k/v Xavier-uniform with gain 1/√2, o and the MLP
    Xavier-uniform (bound gain·√(6/(fan_in + fan_out))), embeddings and output embedding N(0, 1/d), biases 0;
    the closed forms of fairseq's reset_parameters, checked by the bounds and standard deviations of a draw."""
    from geomjax.models.toy import ToyTransformer, bao_config

    d, V = 64, 500
    cfg = bao_config(V, max_len=8, d_model=d, d_mlp=d, tie_embeddings=False, init="fairseq")
    p = ToyTransformer(cfg).init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
    flat = {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(x)
            for path, x in jax.tree_util.tree_flatten_with_path(p)[0]}
    xavier = {"q/kernel": 2 ** -0.5, "k/kernel": 2 ** -0.5, "v/kernel": 2 ** -0.5, "o/kernel": 1.0,
              "fc/kernel": 1.0, "proj/kernel": 1.0}
    seen = set()
    for name, x in flat.items():
        for suffix, gain in xavier.items():
            if name.endswith(suffix):
                bound = gain * np.sqrt(6 / (2 * d))  # fan_in = fan_out = d for every one of these (1 head, d_mlp = d)
                assert np.abs(x).max() <= bound and np.abs(x).max() > 0.95 * bound, name
                assert np.std(x) == pytest.approx(bound / np.sqrt(3), rel=0.05), name
                seen.add(suffix)
        if name.endswith("bias") and "ln" not in name and "norm" not in name.lower():
            assert not np.any(x), name
    assert seen == set(xavier)
    for name in ("embed/embedding", "unembed/kernel"):
        x = next(v for k, v in flat.items() if k.endswith(name))
        assert np.std(x) == pytest.approx(d ** -0.5, rel=0.03), name
