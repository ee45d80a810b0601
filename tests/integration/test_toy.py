"""geomjax.models.toy: shapes, causality, ReLU-free variant, NumPy re-implementation (parity)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import erf

from geomjax.models.toy import (
    ToyConfig,
    ToyTransformer,
    bao_config,
    head_weights,
    nanda_config,
    nanogpt_config,
    param_count,
)
from tests._marks import slow_beyond_first
from tests.unit.test_shapes import unchecked_shapes


def init(cfg, B=2, T=None, seed=0):
    T = T or min(cfg.max_len, 7)
    model = ToyTransformer(cfg)
    ids = jax.random.randint(jax.random.key(seed + 1), (B, T), 0, cfg.vocab_size)
    params = random_params(model, ids, seed)
    return model, params, ids


def random_params(model, ids, seed=0, scale=0.3):
    """Parameters of the model's shapes (``jax.eval_shape``, nothing compiled) filled with NumPy
    normals; LayerNorm scales around 1. Independent of the model's own initializer (tested apart)."""
    shapes = jax.eval_shape(model.init, jax.random.key(0), ids)["params"]
    rng = np.random.default_rng(seed)

    def fill(path, s):
        x = rng.normal(0.0, scale, s.shape).astype(np.float32)
        return jnp.asarray(x + 1.0 if getattr(path[-1], "key", "") == "scale" else x)

    return jax.tree_util.tree_map_with_path(fill, shapes)


def run(model, params, ids, **kw):
    """Jitted apply (one compilation instead of one per primitive in eager mode)."""
    return jax.jit(lambda p, i: model.apply({"params": p}, i, **kw))(params, ids)


# ------------------------------------------------------------------------------ NumPy reference

def np_ln(x, p, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps) * p["scale"]
    return y + p["bias"] if "bias" in p else y


def np_act(x, name):
    if name == "relu":
        return np.maximum(x, 0)
    if name == "gelu":
        return 0.5 * x * (1 + erf(x / math.sqrt(2)))
    if name == "gelu_tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return x


def np_forward(cfg: ToyConfig, params, ids):
    """Float64 NumPy forward of the toy transformer, written from the definitions (one loop per head)."""
    P = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)
    ids = np.asarray(ids)
    B, T = ids.shape
    H, K = cfg.n_heads, cfg.head_dim
    x = P["embed"]["embedding"][ids] * (math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0)
    if cfg.pos_embedding == "learned":
        x = x + P["pos_embed"]["embedding"][:T]
    elif cfg.pos_embedding == "sinusoidal":
        pe = np.zeros((T, cfg.d_model))
        for t in range(T):
            for i in range(0, cfg.d_model, 2):
                pe[t, i] = math.sin(t / 10000 ** (i / cfg.d_model))
                if i + 1 < cfg.d_model:
                    pe[t, i + 1] = math.cos(t / 10000 ** (i / cfg.d_model))
        x = x + pe
    states = [x]

    def attn(h, a):
        out = np.zeros_like(h)
        for hh in range(H):
            q = h @ a["q"]["kernel"][:, hh, :] + (a["q"]["bias"][hh] if cfg.attn_bias else 0)
            k = h @ a["k"]["kernel"][:, hh, :] + (a["k"]["bias"][hh] if cfg.attn_bias else 0)
            v = h @ a["v"]["kernel"][:, hh, :] + (a["v"]["bias"][hh] if cfg.attn_bias else 0)
            s = q @ np.swapaxes(k, -1, -2) / math.sqrt(K)
            if cfg.causal:
                s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
            p = np.exp(s - s.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            out += (p @ v) @ a["o"]["kernel"][hh]
        return out + (a["o"]["bias"] if cfg.attn_bias else 0)

    def mlp(h, m):
        f = h @ m["fc"]["kernel"] + (m["fc"]["bias"] if cfg.mlp_bias else 0)
        return np_act(f, cfg.activation) @ m["proj"]["kernel"] + (m["proj"]["bias"] if cfg.mlp_bias else 0)

    for i in range(cfg.n_layers):
        blk = P[f"block_{i}"]
        if cfg.layer_norm == "pre":
            x = x + attn(np_ln(x, blk["ln_1"], cfg.ln_eps), blk["attn"])
            if cfg.d_mlp:
                x = x + mlp(np_ln(x, blk["ln_2"], cfg.ln_eps), blk["mlp"])
        elif cfg.layer_norm == "post":
            x = np_ln(x + attn(x, blk["attn"]), blk["ln_1"], cfg.ln_eps)
            if cfg.d_mlp:
                x = np_ln(x + mlp(x, blk["mlp"]), blk["ln_2"], cfg.ln_eps)
        else:
            x = x + attn(x, blk["attn"])
            if cfg.d_mlp:
                x = x + mlp(x, blk["mlp"])
        states.append(x)
    if cfg.layer_norm == "pre":
        x = np_ln(x, P["ln_f"], cfg.ln_eps)
    if cfg.tie_embeddings:
        logits = x @ P["embed"]["embedding"].T
    else:
        logits = x @ P["unembed"]["kernel"] + (P["unembed"]["bias"] if cfg.unembed_bias else 0)
    return logits, states


PARITY = {
    "pre_gelu_bias_tied": ToyConfig(vocab_size=23, n_layers=1, n_heads=2, d_model=16, d_mlp=24, max_len=9,
                                    tie_embeddings=True),
    "pre_nanogpt_nobias": nanogpt_config(23, n_layers=2, n_heads=2, d_model=16, d_mlp=24, max_len=9, dropout=0.0),
    "post_relu_sinusoidal": bao_config(23, max_len=9, d_model=16, d_mlp=24),
    "noln_nanda": nanda_config(22, d_model=16, n_heads=2, d_mlp=24, max_len=9),
    "noln_relu_free": nanda_config(22, d_model=16, n_heads=2, d_mlp=24, max_len=9, activation="none"),
    "bidirectional_nopos_attn_only": ToyConfig(vocab_size=23, n_layers=1, n_heads=4, d_model=16, d_mlp=0,
                                               max_len=9, pos_embedding="none", causal=False,
                                               activation="gelu_tanh", unembed_bias=True),
}


@pytest.mark.parametrize("name", sorted(PARITY))
def test_numpy_parity(name):
    cfg = PARITY[name]
    model, params, ids = init(cfg, B=3, T=9)  # random biases / LN params: every term is exercised
    logits, inter = run(model, params, ids)
    ref_logits, ref_states = np_forward(cfg, params, ids)
    np.testing.assert_allclose(np.asarray(logits), ref_logits, atol=1e-5, rtol=1e-5)
    assert len(inter.residual) == cfg.n_layers + 1
    for a, b in zip(inter.residual, ref_states):
        np.testing.assert_allclose(np.asarray(a), b, atol=1e-5, rtol=1e-5)
    if cfg.layer_norm == "pre":
        np.testing.assert_allclose(np.asarray(inter.hidden_states[-1]),
                                   np_ln(ref_states[-1], jax.tree_util.tree_map(np.asarray, params["ln_f"]),
                                         cfg.ln_eps), atol=1e-5)
    else:
        assert inter.final_ln is None
        for a, b in zip(inter.hidden_states, inter.residual):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("ln", slow_beyond_first(["pre", "post", "none"]))
@pytest.mark.parametrize("pos", slow_beyond_first(["none", "learned"]))
def test_shapes(ln, pos):
    cfg = ToyConfig(vocab_size=31, n_layers=3, n_heads=2, d_model=12, d_mlp=20, max_len=8, layer_norm=ln,
                    pos_embedding=pos, vocab_out=17)
    model, params, ids = init(cfg, B=2, T=8)
    logits, inter = run(model, params, ids, return_attention=True, return_mlp=True)
    assert logits.shape == (2, 8, 17) and logits.dtype == jnp.float32
    assert len(inter.hidden_states) == 4 and all(h.shape == (2, 8, 12) for h in inter.hidden_states)
    assert len(inter.attentions) == 3 and inter.attentions[0].shape == (2, 2, 8, 8)
    np.testing.assert_allclose(np.asarray(inter.attentions[1]).sum(-1), 1.0, rtol=1e-6)
    assert inter.mlp_post[0].shape == (2, 8, 20)
    assert ("pos_embed" in params) == (pos == "learned") and ("ln_f" in params) == (ln == "pre")
    hw = head_weights(params, 2)
    assert hw["W_q"].shape == (2, 12, 6) and hw["W_o"].shape == (2, 6, 12) and hw["b_q"].shape == (2, 6)
    _, inter2 = run(model, params, ids)
    assert inter2.attentions is None and inter2.mlp_post is None


@pytest.mark.parametrize("causal", slow_beyond_first([False, True]))
def test_causality(causal):
    cfg = ToyConfig(vocab_size=20, n_layers=2, n_heads=2, d_model=16, d_mlp=32, max_len=10, causal=causal)
    model, params, ids = init(cfg, B=1, T=10)
    t0 = 6
    ids2 = ids.at[0, t0].set((ids[0, t0] + 1) % 20)
    f = jax.jit(lambda i: model.apply({"params": params}, i)[0])
    a, b = np.asarray(f(ids)), np.asarray(f(ids2))
    if causal:
        np.testing.assert_array_equal(a[:, :t0], b[:, :t0])  # earlier logits exactly unchanged
        assert np.abs(a[:, t0:] - b[:, t0:]).max(-1).min() > 0
    else:
        assert np.abs(a[:, :t0] - b[:, :t0]).max(-1).min() > 0


def test_relu_free_mlp_is_linear():
    cfg = nanda_config(13, d_model=16, n_heads=2, d_mlp=24, activation="none")
    model, params, ids = init(cfg, B=4, T=3)
    _, inter = run(model, params, ids, return_mlp=True)
    post = np.asarray(inter.mlp_post[0])
    assert post.min() < 0  # a ReLU would have clipped these
    relu_cfg = cfg.replace(activation="relu")
    _, inter_r = run(ToyTransformer(relu_cfg), params, ids, return_mlp=True)
    np.testing.assert_allclose(np.asarray(inter_r.mlp_post[0]), np.maximum(post, 0), atol=1e-6)


@pytest.mark.slow
def test_nanda_init_and_preset():
    cfg = nanda_config()
    model = ToyTransformer(cfg)
    params = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, 3), jnp.int32))["params"]
    assert params["embed"]["embedding"].shape == (114, 128) and params["unembed"]["kernel"].shape == (128, 114)
    assert "bias" not in params["block_0"]["attn"]["q"] and "bias" in params["block_0"]["mlp"]["fc"]
    assert abs(float(jnp.std(params["embed"]["embedding"])) - 1 / math.sqrt(128)) < 0.05 / math.sqrt(128)
    assert abs(float(jnp.std(params["unembed"]["kernel"])) - 1 / math.sqrt(114)) < 0.05 / math.sqrt(114)
    assert abs(float(jnp.std(params["block_0"]["mlp"]["fc"]["kernel"])) - 1 / math.sqrt(128)) < 0.05 / math.sqrt(128)
    g = nanogpt_config(65, n_layers=2, d_model=128, n_heads=2, d_mlp=256)
    pg = jax.jit(ToyTransformer(g).init)(jax.random.key(0), jnp.zeros((1, 4), jnp.int32))["params"]
    assert "unembed" not in pg and "bias" not in pg["ln_f"]
    assert abs(float(jnp.std(pg["block_0"]["mlp"]["proj"]["kernel"])) - 0.02 / 2) < 0.001
    assert param_count(pg) > 0


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_dropout():
    cfg = ToyConfig(vocab_size=20, n_layers=1, n_heads=2, d_model=16, d_mlp=32, max_len=8, dropout=0.5)
    model, params, ids = init(cfg)
    a = run(model, params, ids)[0]
    drop = jax.jit(lambda p, i, k: model.apply({"params": p}, i, deterministic=False, rngs={"dropout": k})[0])
    b = drop(params, ids, jax.random.key(0))
    c = drop(params, ids, jax.random.key(0))
    assert not np.allclose(a, b)
    np.testing.assert_array_equal(b, c)
    np.testing.assert_array_equal(a, run(ToyTransformer(cfg.replace(dropout=0.0)), params, ids)[0])


def test_bad_input():
    cfg = ToyConfig(vocab_size=20, n_layers=1, n_heads=2, d_model=16, d_mlp=32, max_len=8)
    model, params, ids = init(cfg)
    with pytest.raises(ValueError, match="exceeds max_len=8"):
        model.apply({"params": params}, jnp.zeros((1, 9), jnp.int32))
    with pytest.raises(ValueError, match=r"\[0, 20\).*max 20"):
        model.apply({"params": params}, jnp.full((1, 4), 20, jnp.int32))
    with pytest.raises(ValueError, match="batch"), unchecked_shapes():  # geomjax's own message, not the shape hook's
        model.apply({"params": params}, jnp.zeros((4,), jnp.int32))
    with pytest.raises(ValueError, match="integers"), unchecked_shapes():
        model.apply({"params": params}, jnp.zeros((1, 4), jnp.float32))
    out = jax.jit(lambda i: model.apply({"params": params}, i)[0])(jnp.full((1, 4), 25, jnp.int32))
    assert np.isnan(np.asarray(out)).all()  # under jit: NaN, never another token's row
    with pytest.raises(ValueError, match="divisible"):
        ToyConfig(d_model=10, n_heads=3)
    with pytest.raises(ValueError, match="activation"):
        ToyConfig(activation="swish")
    with pytest.raises(ValueError, match="tie_embeddings"):
        ToyConfig(vocab_out=10, tie_embeddings=True)
