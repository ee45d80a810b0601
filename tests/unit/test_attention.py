"""Tests of geomjax.theory.attention and geomjax.tools.attention_probe (Song & Zhong §4: eq. (7), Fig. 4 head types,
eq. (8)/Fig. 5, entropy).

Expected values come from independent computations: the models' own attention probabilities (their
MultiHeadAttention forward), a NumPy re-implementation of LayerNorm + projections, explicit loops,
an explicit DCT matrix, and the full (V, V) OV circuit.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geomjax import attention as A
from geomjax import attention_probe as AP
from geomjax.models import Bert, BertConfig, GPT2, GPT2Config
from geomjax.models.toy import ToyConfig, ToyTransformer
from tests.unit.test_shapes import unchecked_shapes
from tests._marks import slow_beyond_first


def _random_params(model, ids0, seed):
    """Random parameters of the model's shapes (jax.eval_shape: no init compile); LayerNorm gains near 1,
    everything else N(0, 0.3²), so biases and gains are all nontrivial."""
    shapes = jax.eval_shape(model.init, jax.random.key(0), ids0)["params"]
    rng = np.random.default_rng(seed)

    def draw(path, sd):
        x = 0.3 * rng.normal(size=sd.shape)
        if "scale" in jax.tree_util.keystr(path):
            x = 1.0 + x
        return jnp.asarray(x, jnp.float32)

    return jax.tree_util.tree_map_with_path(draw, shapes)


@pytest.fixture(scope="module")
def models():
    T, V = 12, 40
    ids0 = jnp.zeros((1, T), jnp.int32)
    toy = ToyTransformer(ToyConfig(vocab_size=V, n_layers=2, n_heads=2, d_model=16, d_mlp=32, max_len=T))
    gpt = GPT2(GPT2Config(vocab_size=V, n_positions=T, n_embd=16, n_layer=2, n_head=2))
    bert = Bert(BertConfig(vocab_size=V, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=T, add_pooling_layer=False))
    out = {}
    for i, (name, m) in enumerate((("toy", toy), ("gpt2", gpt), ("bert", bert))):
        p = _random_params(m, ids0, 10 + i)
        out[name] = (m, p)
    ids = np.asarray(jax.random.randint(jax.random.key(5), (8, T), 0, V))
    return out, ids


def _np_layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def _np_scores(model, params, name, ids):
    """Pre-softmax scores (L, H, T, T) recomputed in NumPy from the residual stream and the raw parameters."""
    kw = {"bert": {"causal": True}, "gpt2": {"compute_logits": False}, "toy": {}}[name]
    _, inter = jax.jit(lambda pp, i: model.apply({"params": pp}, i, **kw))(params, ids)
    out = []
    for layer in range(2):
        if name == "bert":
            x = np.asarray(inter.hidden_states[layer], np.float64)
            a = params[f"layer_{layer}"]["attn"]
        else:
            blk = params[f"block_{layer}" if name == "toy" else f"h_{layer}"]
            h = np.asarray(inter.residual[layer], np.float64)
            x = _np_layer_norm(h, np.asarray(blk["ln_1"]["scale"]), np.asarray(blk["ln_1"]["bias"]), 1e-5)
            a = blk["attn"]
        q = np.einsum("td,dhk->htk", x[0], np.asarray(a["q"]["kernel"], np.float64)) + np.asarray(a["q"]["bias"])[:, None]
        k = np.einsum("td,dhk->htk", x[0], np.asarray(a["k"]["kernel"], np.float64)) + np.asarray(a["k"]["bias"])[:, None]
        out.append(q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1]))
    return np.stack(out)


@pytest.mark.parametrize("name", slow_beyond_first(["gpt2", "bert", "toy"]))
def test_exact_sum_equals_model_scores(models, name):
    (m, p), ids = models[0][name], models[1]
    causal = True if name == "bert" else None
    basis = AP.estimate_attention_basis(m, p, [ids[:4], ids[4:]], causal=causal)
    # the probe batch has the basis batches' shape, so the compiled forward is reused
    xs, atts = AP.attention_inputs_jit(m, p, ids[:4], causal=causal)
    xs = [x[:1] for x in xs]
    atts = [a[:1] for a in atts]
    ref = _np_scores(m, p, name, jnp.asarray(ids[:4]))
    for remove_mean in (True, False):
        for layer in range(2):
            w = AP.qk_weights(m, p, layer)
            parts = A.layer_qk_decomposition(xs[layer][0], basis, w, layer, remove_mean=remove_mean)
            np.testing.assert_allclose(np.asarray(parts.sum_of_parts()), ref[layer], rtol=1e-5, atol=2e-5)
            np.testing.assert_allclose(np.asarray(parts.total), ref[layer], rtol=1e-5, atol=2e-5)
            # the model's own attention probabilities (its MultiHeadAttention forward)
            np.testing.assert_allclose(np.asarray(parts.attention), np.asarray(atts[layer][0]), atol=1e-5)
            assert (float(jnp.max(jnp.abs(parts.mean))) > 0.0) == remove_mean
    if name == "toy":
        one = AP.head_qk_decomposition(m, p, basis, ids[0], 1, 1, causal=causal)
        np.testing.assert_allclose(np.asarray(one.sum_of_parts()), ref[1, 1], rtol=1e-5, atol=2e-5)


def test_components_match_numpy_bilinear_forms(models):
    (m, p), ids = models[0]["toy"], models[1]
    basis = AP.estimate_attention_basis(m, p, [ids[:4], ids[4:]])
    # μ and pos of block 1's attention input ln_1(h), recomputed in NumPy
    blk = p["block_1"]
    _, inter = jax.jit(lambda pp, i: m.apply({"params": pp}, i))(p, ids)
    x = _np_layer_norm(np.asarray(inter.residual[1], np.float64), np.asarray(blk["ln_1"]["scale"]),
                       np.asarray(blk["ln_1"]["bias"]), 1e-5)
    mu = x.mean((0, 1))
    pos = x.mean(0) - mu
    np.testing.assert_allclose(np.asarray(basis.mean[1]), mu, atol=1e-5)
    np.testing.assert_allclose(np.asarray(basis.pos[1]), pos, atol=1e-5)
    w = AP.qk_weights(m, p, 1)
    parts = A.qk_decomposition(jnp.asarray(x[2], jnp.float32), basis.mean[1], basis.pos[1], w["W_q"][0], w["W_k"][0],
                               w["b_q"][0], w["b_k"][0])
    W = np.asarray(blk["attn"]["q"]["kernel"][:, 0], np.float64) @ np.asarray(blk["attn"]["k"]["kernel"][:, 0],
                                                                               np.float64).T / math.sqrt(8)
    c = x[2] - mu - pos
    np.testing.assert_allclose(np.asarray(parts.pos_pos), pos @ W @ pos.T, atol=1e-5)
    np.testing.assert_allclose(np.asarray(parts.pos_cvec), pos @ W @ c.T, atol=1e-5)
    np.testing.assert_allclose(np.asarray(parts.cvec_pos), c @ W @ pos.T, atol=1e-5)
    np.testing.assert_allclose(np.asarray(parts.cvec_cvec), c @ W @ c.T, atol=1e-5)


def test_bad_inputs(models):
    (m, p), ids = models[0]["toy"], models[1]
    basis = AP.estimate_attention_basis(m, p, [ids[:, :6], ids[:, 6:]])  # 6 positions
    with pytest.raises(ValueError, match="layer must be"):
        AP.head_qk_decomposition(m, p, basis, ids[0, :6], 2, 0)
    with pytest.raises(ValueError, match="head must be"):
        AP.head_qk_decomposition(m, p, basis, ids[0, :6], 0, 5)
    with pytest.raises(ValueError, match="positional basis"):
        AP.head_qk_decomposition(m, p, basis, ids[0, :8], 0, 0)
    with pytest.raises(ValueError, match="layer must be"):
        AP.qk_weights(m, p, -1)
    w = AP.qk_weights(m, p, 0)
    with pytest.raises(ValueError, match="positional basis"):
        A.qk_decomposition(jnp.ones((7, 16)), basis.mean[0], basis.pos[0], w["W_q"][0], w["W_k"][0])
    with pytest.raises(ValueError, match="must lie in"):
        AP.attention_inputs_jit(m, p, np.full((1, 4), 99))
    with pytest.raises(ValueError, match="exceeds"):
        AP.attention_inputs_jit(m, p, np.zeros((1, 13), np.int32))
    with pytest.raises(ValueError, match="at least 2 windows"):
        AP.estimate_attention_basis(m, p, [ids[:1]])
    with pytest.raises(ValueError, match="causal"):
        AP.describe_model(models[0]["gpt2"][0], causal=False)


def _planted(ids, kind, H=1):
    """Attention that puts 0.9 on the pattern of ``kind`` (rest uniform over visible keys)."""
    T = len(ids)
    a = np.zeros((T, T))
    for t in range(T):
        if kind == "self_token":
            tgt = [s for s in range(t) if ids[s] == ids[t]]
        elif kind == "copying":
            tgt = [s for s in range(1, t + 1) if ids[s - 1] == ids[t]]
        elif kind == "neighbours":
            tgt = [t - 1] if t >= 1 else []
        else:
            tgt = []
        a[t, : t + 1] = 0.1 / (t + 1) if tgt else 1.0 / (t + 1)
        for s in tgt:
            a[t, s] += 0.9 / len(tgt)
    return a


def test_head_classification_on_planted_patterns():
    ids = np.asarray(A.repeated_random_tokens(jax.random.key(0), 8, 3, low=100, high=200)[0])
    assert ids.shape == (24,) and len(set(ids[:8].tolist())) == 8
    np.testing.assert_array_equal(ids[:8], ids[8:16])
    kinds = ["self_token", "copying", "neighbours", "uniform"]
    attn = np.stack([_planted(ids, k) for k in kinds])
    np.testing.assert_allclose(attn.sum(-1), 1.0)
    sc = A.head_pattern_scores(attn, ids, window=2)
    # query rows 8..23 carry each pattern: mass 0.9 + the uniform 0.1 share on it
    assert sc["self_token"][0] > 0.9 and sc["copying"][1] > 0.9 and sc["neighbours"][2] > 0.9
    # uniform head: score equals the baseline (explicit loop)
    rows = range(8, 24)
    base = np.mean([sum(1.0 / (t + 1) for s in range(t) if ids[s] == ids[t]) for t in rows])
    assert sc["self_token"][3] == pytest.approx(base, abs=1e-12)
    assert sc["self_token_baseline"][0] == pytest.approx(base, abs=1e-12)
    assert A.classify_heads(sc) == ["self_token", "copying", "neighbours", "other"]
    with pytest.raises(ValueError, match="no token occurs twice"):
        A.head_pattern_scores(attn[:, :8, :8], ids[:8])


def test_rotation_threshold_against_numpy():
    rng = np.random.default_rng(0)
    d, T = 12, 5
    W = rng.normal(size=(d, d)).astype(np.float32)
    P = rng.normal(size=(T, d)).astype(np.float32)
    _, _, Vh = np.linalg.svd(P.astype(np.float64), full_matrices=True)
    V = Vh.T
    R = np.asarray(A.rotate_offdiagonal(jnp.asarray(W), jnp.asarray(V, jnp.float32)), np.float64)
    Ref = np.zeros((d, d))
    for i in range(d):
        for j in range(d):
            Ref[i, j] = sum(V[a, i] * W[a, b] * V[b, j] for a in range(d) for b in range(d) if a != b)
    np.testing.assert_allclose(R, Ref, atol=1e-4)
    tau = float(A.universal_threshold(jnp.asarray(R, jnp.float32)))
    assert tau == pytest.approx(np.sqrt(2 * np.log(d**2)) * R.std(), rel=1e-5)
    thr = np.asarray(A.hard_threshold(jnp.asarray(R), tau))
    np.testing.assert_array_equal(thr, np.where(np.abs(R) > tau, R, 0.0))
    fr = A.topleft_energy_fraction(R, [1, 3, d])
    np.testing.assert_allclose(fr, [R[0, 0] ** 2 / (R**2).sum(), (R[:3, :3] ** 2).sum() / (R**2).sum(), 1.0])
    Q = np.asarray(A.haar_orthogonal(jax.random.key(1), d), np.float64)
    np.testing.assert_allclose(Q.T @ Q, np.eye(d), atol=1e-5)


def test_w_structure_on_planted_low_rank_plus_diagonal():
    rng = np.random.default_rng(1)
    d, T, K = 40, 16, 4
    P = np.cumsum(rng.normal(size=(T, d)), axis=0)
    P -= P.mean(0)
    _, _, Vh = np.linalg.svd(P, full_matrices=True)
    VK = Vh[:K].T
    Lm = rng.normal(size=(K, K))
    D = rng.normal(size=d)
    W = VK @ Lm @ VK.T + np.diag(D)
    L_fit, D_fit, res = A.low_rank_diag_fit(jnp.asarray(W, jnp.float32), jnp.asarray(VK, jnp.float32), n_iter=200)
    assert res < 2e-3
    np.testing.assert_allclose(np.asarray(VK @ np.asarray(L_fit) @ VK.T + np.diag(np.asarray(D_fit))), W, atol=5e-3)
    out = A.w_structure(jnp.asarray(W + 0.01 * rng.normal(size=(d, d)), jnp.float32), jnp.asarray(P, jnp.float32),
                        jax.random.key(0), Ks=(4, 8), n_random=4, fit_K=K)
    assert out["frac"][0] > 0.9 > out["frac_random"][0]
    assert out["fit_residual"] < 0.05 < out["fit_residual_random"]


def test_ov_copying_and_entropy_against_numpy():
    rng = np.random.default_rng(2)
    V, d, K, H = 7, 5, 3, 2
    E, U = rng.normal(size=(V, d)), rng.normal(size=(d, V))
    Wv, Wo = rng.normal(size=(H, d, K)), rng.normal(size=(H, K, d))
    got = A.ov_copying_scores(E, Wv, Wo, U)
    for h in range(H):
        lam = np.linalg.eigvals(E @ Wv[h] @ Wo[h] @ U)  # the full (V, V) circuit
        assert got[h] == pytest.approx(lam.real.sum() / np.abs(lam).sum(), abs=1e-9)
    a = A.causal_softmax(jnp.asarray(rng.normal(size=(2, 6, 6)), jnp.float32))
    an = np.asarray(a, np.float64)
    ref = np.mean([[-sum(an[b, t, s] * np.log(an[b, t, s]) for s in range(t + 1)) for t in range(1, 6)]
                   for b in range(2)], axis=1)
    np.testing.assert_allclose(np.asarray(A.attention_entropy(a)), ref, rtol=1e-5)


def test_matrix_smoothness_against_explicit_dct():
    rng = np.random.default_rng(3)
    T = 16
    M = rng.normal(size=(T, T))
    n = np.arange(T)
    D = np.sqrt(2.0 / T) * np.cos(np.pi * (2 * n[None, :] + 1) * n[:, None] / (2 * T))
    D[0] /= np.sqrt(2.0)
    F = D @ M @ D.T
    E = F**2
    E[0, 0] = 0
    hi = np.maximum(n[:, None], n[None, :]) / T >= 0.25
    got = A.matrix_smoothness(M)
    assert got["hf_dct"] == pytest.approx(E[hi].sum() / E.sum(), rel=1e-10)
    tv = (np.abs(np.diff(M, axis=0)).sum() + np.abs(np.diff(M, axis=1)).sum()) / (2 * T * (T - 1)) / M.std()
    assert got["tv"] == pytest.approx(tv, rel=1e-10)
    t = np.linspace(0, 1, T)
    smooth = A.matrix_smoothness(np.cos(2 * t[:, None]) + t[None, :] ** 2)
    assert smooth["tv"] < 0.3 and smooth["hf_dct"] < 0.01 and got["tv"] > 0.8 and got["hf_dct"] > 0.7
    with pytest.raises(ValueError), unchecked_shapes():  # geomjax's own message, not the test-time shape check
        A.matrix_smoothness(np.ones(5))
