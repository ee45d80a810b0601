"""Tests of geomjax.theory.localization (Bao, Hataya & Karakida 2024) against independent computations."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import integrate, special, stats

from geomjax import localization as loc
from geomjax.models.toy import ToyTransformer, bao_config, head_weights
from tests.unit.test_shapes import unchecked_shapes


# ------------------------------------------------------------------------------------------------
# §2: piecewise-linear softmax against its case definition
# ------------------------------------------------------------------------------------------------


def _np_piecewise(omega):
    """(Γ, γ̃_0) from the three-case definition of Bao §2, with explicit loops."""
    T = omega.size
    Gamma = np.zeros((T, T))
    g0 = np.zeros(T)
    for i in range(T):
        gam = np.full(T, -1.0 / T**2)
        gam[i] += 1.0 / T
        val = gam @ omega + 1.0 / T
        if val < 0:
            Gamma[:, i], g0[i] = 0.0, 0.0
        elif val <= 1:
            Gamma[:, i], g0[i] = gam, 1.0 / T
        else:
            Gamma[:, i], g0[i] = 0.0, 1.0
    return Gamma, g0


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_piecewise_softmax_matches_definition():
    rng = np.random.default_rng(0)
    with jax.enable_x64(True):
        for T, scale in ((2, 5.0), (9, 30.0), (16, 100.0)):
            omega = rng.normal(size=T) * scale
            omega[0] = T * (T + 1.0)  # forces a score > 1 (clipped at 1)
            G_ref, g0_ref = _np_piecewise(omega)
            G, g0 = loc.piecewise_coefficients(jnp.asarray(omega))
            np.testing.assert_allclose(np.asarray(G), G_ref, rtol=0, atol=1e-15)
            np.testing.assert_allclose(np.asarray(g0), g0_ref, rtol=0, atol=0)
            S = np.asarray(loc.piecewise_softmax(jnp.asarray(omega)))
            np.testing.assert_allclose(S, G_ref.T @ omega + g0_ref, rtol=1e-12, atol=1e-14)
            assert {0.0, 1.0} <= set(np.round(S, 12)) or T < 9  # the clipped cases are exercised
            if T != 9:
                continue
            gamma, gamma0 = loc.taylor_coefficients(T, jnp.float64)
            # γ^i = ∇_i S(0): compare with the Jacobian of softmax at 0
            J = jax.jacobian(jax.nn.softmax)(jnp.zeros(T, jnp.float64))
            np.testing.assert_allclose(np.asarray(gamma), np.asarray(J), atol=1e-15)
            np.testing.assert_allclose(np.asarray(gamma0), np.full(T, 1.0 / T))


def test_frequency_from_probs_uses_shift_invariance():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(64, 12)) * 20.0
    probs = jax.nn.softmax(jnp.asarray(logits, jnp.float32), axis=-1)
    ref = np.mean([[0.0 <= (w[i] - w.mean()) / 12 + 1 / 12 <= 1.0 for i in range(12)] for w in logits], axis=0)
    np.testing.assert_allclose(np.asarray(loc.frequency_from_probs(probs)), ref, atol=1e-6)


# ------------------------------------------------------------------------------------------------
# eq. (6) against direct numerical integration of the Gaussian model
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["printed", "corrected"])
def test_rho_closed_form_vs_quadrature(form):
    s = (lambda t: 2 * t**2 + 7 / 12) if form == "printed" else (lambda t: 2 * t**2 - 2 * t + 7 / 12)
    with jax.enable_x64(True):
        for xi, eta in ((5.0, 0.1), (-3.0, 0.7), (0.3, 2.0), (11.0, 0.05)):
            for theta in (0.0, 0.2, 0.5, 0.77, 1.0):
                mu = (theta - 0.5) * xi * eta  # (i/T − ½) tr(W)/λ
                sd = math.sqrt(s(theta)) * eta  # √(s(θ) tr(W²)/λ²)
                ref, _ = integrate.quad(lambda x: stats.norm.pdf(x, mu, sd), 0.0, 1.0, epsabs=1e-13, epsrel=1e-12,
                                        points=[mu] if 0 < mu < 1 else None)
                got = float(loc.rho_theta(theta, xi, eta, form))
                assert abs(got - ref) < 1e-10, (xi, eta, theta, got, ref)
                # and the Gaussian approximation with Lemma 1's moments is the same number
                g = float(loc.gaussian_rho(mu, sd**2))
                assert abs(g - ref) < 1e-10


def test_lemma2_limits_numerically():
    with jax.enable_x64(True):
        th = jnp.asarray([0.1, 0.3, 0.6, 0.65, 0.9])
        np.testing.assert_allclose(np.asarray(loc.rho_theta(th, 1e7, 1.0 / 1e7)), [0, 0, 1, 1, 1], atol=1e-6)
        np.testing.assert_allclose(np.asarray(loc.rho_theta(th, 1e7, 5.0 / 1e7)), [0, 0, 1, 1, 0], atol=1e-6)
        np.testing.assert_allclose(np.asarray(loc.rho_limit(th, 5.0)), [0, 0, 1, 1, 0])
        np.testing.assert_allclose(np.asarray(loc.rho_limit(th, -1.0)), [1, 1, 0, 0, 0])


# ------------------------------------------------------------------------------------------------
# Lemma 1 against Monte Carlo (NumPy random walks, 5·sem)
# ------------------------------------------------------------------------------------------------


def _np_scores(rng, n, T, F, W, lam):
    d = F.shape[0]
    Z = np.cumsum(rng.normal(size=(n, T, d)), axis=1)
    X = Z @ F.T
    omega = np.einsum("ntd,de,ne->nt", X, W, X[:, -1]) / lam
    return (omega - omega.mean(axis=1, keepdims=True)) / T + 1.0 / T


def test_exact_moments_vs_monte_carlo():
    rng = np.random.default_rng(2)
    d, T, n = 6, 20, 40_000
    R = rng.uniform(-2.5, 2.5, size=(d, d))
    F = R.T / math.sqrt(d)
    Sig = F @ F.T
    A = rng.normal(size=(d, d)) * 0.4
    lam = math.sqrt(d)
    for W in (A + A.T, A):  # symmetric and asymmetric W_QK
        s = _np_scores(rng, n, T, F, W, lam)
        with jax.enable_x64(True):
            m, v = (np.asarray(x) for x in loc.exact_moments(jnp.asarray(W), jnp.asarray(Sig), T, lam))
        sem_m = s.std(axis=0, ddof=1) / math.sqrt(n)
        assert np.all(np.abs(s.mean(0) - m) <= 5 * sem_m)
        dev = (s - s.mean(0)) ** 2
        sem_v = dev.std(axis=0, ddof=1) / math.sqrt(n)
        assert np.all(np.abs(dev.mean(0) - v) <= 5 * sem_v + 1e-12)


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_lemma1_mean_vs_monte_carlo_and_vanishing_remainder():
    rng = np.random.default_rng(3)
    d, n = 6, 20_000
    B = np.linalg.qr(rng.normal(size=(d, d)))[0]
    W = (B * rng.normal(0.4, 0.3, size=d)) @ B.T
    lam = math.sqrt(d)
    F = np.eye(d)
    trW, trW2 = np.trace(W), np.trace(W @ W)
    for T in (16, 64):
        s = _np_scores(rng, n, T, F, W, lam)
        i = np.arange(1, T + 1)
        mu_printed = (i / T - 0.5) * trW / lam
        remainder = (1.0 - trW / (2 * lam)) / T  # exact o(1) term of the mean
        sem = s.std(axis=0, ddof=1) / math.sqrt(n)
        assert np.all(np.abs(s.mean(0) - (mu_printed + remainder)) <= 5 * sem)
    with jax.enable_x64(True):
        for T in (256, 4096):
            m, v = loc.exact_moments(jnp.asarray(W), jnp.eye(d), T, lam)
            mp, vp = loc.lemma1_moments(T, trW, trW2, lam, "printed")
            _, vc = loc.lemma1_moments(T, trW, trW2, lam, "corrected")
            assert float(jnp.max(jnp.abs(m - mp))) < 2.0 / T
            assert float(jnp.max(jnp.abs(v - vc))) < 10.0 * trW2 / lam**2 / T
            # the printed variance misses 2θ·tr(W²)/λ² (largest at θ = 1)
            np.testing.assert_allclose(float(vp[-1] - v[-1]), 2 * trW2 / lam**2, rtol=20.0 / T)


@pytest.mark.slow
def test_empirical_rho_matches_gaussian_prediction_isotropic():
    d, T, n = 16, 24, 3000
    key = jax.random.key(0)
    W, _ = loc.random_wqk(jax.random.key(1), d, 0.05, 0.3)
    lam = math.sqrt(d)
    out = loc.empirical_rho(key, jnp.stack([W, 2 * W]), jnp.eye(d), lam, T=T, n_seq=n, with_entropy=True)
    assert out["rho"].shape == (2, T) and out["entropy"].shape == (2,)
    with jax.enable_x64(True):
        m, v = loc.exact_moments(jnp.asarray(W, jnp.float64), jnp.eye(d), T, lam)
        g = np.asarray(loc.gaussian_rho(m, v))
    assert np.max(np.abs(np.asarray(out["rho"][0]) - g)) < 0.1
    # entropy lies in (0, ln T]
    assert np.all((np.asarray(out["entropy"]) > 0) & (np.asarray(out["entropy"]) <= math.log(T) + 1e-5))


# ------------------------------------------------------------------------------------------------
# eqs. (8), (9)
# ------------------------------------------------------------------------------------------------


def test_eq8_and_one_vs_rest_entropy():
    rng = np.random.default_rng(4)
    w = rng.normal(0.3, 0.7, size=50)
    with jax.enable_x64(True):
        a, b = loc.eigen_variance_identity(jnp.asarray(w))
        assert abs(float(a) - 50**2 * np.var(w)) < 1e-9 and abs(float(b) - (50 * np.sum(w**2) - np.sum(w) ** 2)) < 1e-9
        for T, gap in ((5, 0.3), (40, 2.0), (64, 9.0)):
            p = special.softmax(np.r_[gap, np.zeros(T - 1)])
            ref = -np.sum(p * np.log(p))
            assert abs(float(loc.one_vs_rest_entropy(gap, T)) - ref) < 1e-12
            # printed eq. (9) at ν → 0 is ln(1 + T) > ln T
            assert abs(float(loc.zhai_bound(0.0, T)) - math.log(1 + T)) < 1e-12


# ------------------------------------------------------------------------------------------------
# LocATER
# ------------------------------------------------------------------------------------------------


def _toy_params(n_heads=2, d=8, layers=2):
    cfg = bao_config(31, max_len=8, d_model=d, d_mlp=24, n_heads=n_heads, n_layers=layers)
    params = ToyTransformer(cfg).lazy_init(jax.random.key(0), jax.ShapeDtypeStruct((1, 8), jnp.int32))["params"]
    # make the weights larger than the init so the penalty is O(1)
    return jax.tree_util.tree_map(lambda x: x * 20.0, params), cfg


@pytest.mark.slow
def test_locater_penalty_value_and_gradients():
    params, cfg = _toy_params()
    k1, k2 = 3.0, 0.7
    ref = 0.0
    for layer in range(cfg.n_layers):
        hw = {k: np.asarray(v, np.float64) for k, v in head_weights(params, layer).items()}  # index on the host
        for h in range(cfg.n_heads):
            A = hw["W_q"][h] @ hw["W_k"][h].T
            ref += k1 * np.sum(A * A) + k2 * (np.trace(A) - 1.0) ** 2
    got = float(loc.locater_penalty(params, k1, k2))
    assert abs(got - ref) <= 1e-5 * abs(ref)
    # gradients: jax.grad of the penalty vs the (corrected) §6 formulae per head
    g = jax.jit(jax.grad(loc.locater_penalty), static_argnums=(1, 2))(params, k1, k2)
    for layer in range(cfg.n_layers):
        a = params[f"block_{layer}"]["attn"]
        q, k = np.asarray(a["q"]["kernel"], np.float64), np.asarray(a["k"]["kernel"], np.float64)
        gq_all, gk_all = (np.asarray(g[f"block_{layer}"]["attn"][n]["kernel"]) for n in ("q", "k"))
        for h in range(cfg.n_heads):
            W_Q = q[:, h, :].T  # paper layout (K, d): W_QK = W_Qᵀ W_K
            W_K = k[:, h, :].T
            tr = np.trace(W_Q.T @ W_K)
            exp_Q = k1 * 2 * W_K @ W_K.T @ W_Q + k2 * 2 * (tr - 1) * W_K
            exp_K = k1 * 2 * W_Q @ W_Q.T @ W_K + k2 * 2 * (tr - 1) * W_Q
            gq, gk = gq_all[:, h, :].T, gk_all[:, h, :].T
            np.testing.assert_allclose(gq, exp_Q, rtol=2e-4, atol=2e-4 * np.abs(exp_Q).max())
            np.testing.assert_allclose(gk, exp_K, rtol=2e-4, atol=2e-4 * np.abs(exp_K).max())
    # only q/k kernels receive a gradient
    flat = jax.tree_util.tree_flatten_with_path(g)[0]
    for path, leaf in flat:
        name = "/".join(str(getattr(p, "key", p)) for p in path)
        if not (name.endswith("q/kernel") or name.endswith("k/kernel")):
            assert np.max(np.abs(np.asarray(leaf))) == 0.0, name


def test_locater_grad_formulas_printed_vs_corrected():
    rng = np.random.default_rng(5)
    with jax.enable_x64(True):
        W_Q = jnp.asarray(rng.normal(size=(4, 7)))
        W_K = jnp.asarray(rng.normal(size=(4, 7)))
        f = lambda a, b: (jnp.trace(a.T @ b) - 1.0) ** 2
        gq = jax.grad(f, 0)(W_Q, W_K)
        gk = jax.grad(f, 1)(W_Q, W_K)
        c = loc.locater_grads_corrected(W_Q, W_K)
        p = loc.locater_grads_printed(W_Q, W_K)
        np.testing.assert_allclose(np.asarray(c["mean_Q"]), np.asarray(gq), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(c["mean_K"]), np.asarray(gk), rtol=1e-12)
        assert not np.allclose(np.asarray(p["mean_Q"]), np.asarray(gq))
        s = lambda a, b: jnp.sum((a.T @ b) ** 2)
        np.testing.assert_allclose(np.asarray(p["scale_Q"]), np.asarray(jax.grad(s, 0)(W_Q, W_K)), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(p["scale_K"]), np.asarray(jax.grad(s, 1)(W_Q, W_K)), rtol=1e-12)


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_locater_loss_and_optax_transformation_agree():
    params, _ = _toy_params(n_heads=1, layers=1)
    k1, k2 = 2.0, 0.5
    task = lambda p: jnp.sum(p["embed"]["embedding"] ** 2) * 1e-3
    loss = loc.locater_loss(task, k1, k2)
    g_loss = jax.grad(loss)(params)
    tx = optax.chain(loc.add_locater_gradient(k1, k2), optax.sgd(1.0))
    state = tx.init(params)
    upd, _ = tx.update(jax.grad(task)(params), state, params)
    for a, b in zip(jax.tree_util.tree_leaves(upd), jax.tree_util.tree_leaves(g_loss)):
        np.testing.assert_allclose(np.asarray(a), -np.asarray(b), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="needs params"):
        tx.update(jax.grad(task)(params), state)


def test_locater_on_gpt2_and_bert_layouts():
    rng = np.random.default_rng(6)
    mk = lambda: {"kernel": jnp.asarray(rng.normal(size=(8, 2, 4)), jnp.float32), "bias": jnp.zeros((2, 4))}
    gpt2 = {"wte": {"embedding": jnp.zeros((5, 8))}, "h_0": {"attn": {"q": mk(), "k": mk(), "v": mk()}},
            "h_1": {"attn": {"q": mk(), "k": mk(), "v": mk()}}}
    bert = {"layer_0": {"attn": {"q": mk(), "k": mk(), "v": mk()}}}
    assert [x[0] for x in loc.find_qk_heads(gpt2)] == ["h_0/attn", "h_1/attn"]
    assert [x[0] for x in loc.find_qk_heads(bert)] == ["layer_0/attn"]
    t = loc.locater_terms(gpt2)["h_1/attn"]
    q, k = np.asarray(gpt2["h_1"]["attn"]["q"]["kernel"]), np.asarray(gpt2["h_1"]["attn"]["k"]["kernel"])
    for h in range(2):
        A = q[:, h] @ k[:, h].T
        assert abs(float(t["scale"][h]) - np.sum(A * A)) < 1e-3 * np.sum(A * A)
        assert abs(float(t["trace"][h]) - np.trace(A)) < 1e-4 * (1 + abs(np.trace(A)))
    with pytest.raises(ValueError, match="no attention layer"):
        loc.find_qk_heads({"w": jnp.zeros(3)})


# ------------------------------------------------------------------------------------------------
# Bad input
# ------------------------------------------------------------------------------------------------


@unchecked_shapes()
def test_bad_input_errors():
    d = 4
    W, S = jnp.eye(d), jnp.eye(d)
    with pytest.raises(ValueError, match="λ must be finite and > 0"):
        loc.xi_eta(W, S, 0.0)
    with pytest.raises(ValueError, match="λ must be finite and > 0"):
        loc.empirical_rho(jax.random.key(0), W, S, -1.0, T=4, n_seq=4)
    with pytest.raises(ValueError, match="square"):
        loc.xi_eta(jnp.ones((3, 4)), S, 1.0)
    with pytest.raises(ValueError, match="same token dimension"):
        loc.exact_moments(jnp.eye(3), S, 8, 1.0)
    with pytest.raises(ValueError, match="T \\(number of tokens\\) must be >= 2"):
        loc.exact_moments(W, S, 1, 1.0)
    with pytest.raises(ValueError, match="T \\(number of tokens\\) must be >= 2"):
        loc.random_walk(jax.random.key(0), 1, S)
    with pytest.raises(ValueError, match="must lie in \\[0, 1\\]"):
        loc.rho_theta(1.2, 1.0, 1.0)
    with pytest.raises(ValueError, match="must lie in \\[0, 1\\]"):
        loc.rho_theta(jnp.asarray([-0.1, 0.5]), 1.0, 1.0)
    with pytest.raises(ValueError, match="η"):
        loc.rho_theta(0.5, 1.0, 0.0)
    with pytest.raises(ValueError, match="tr\\(W²\\)"):
        loc.xi_eta(jnp.asarray([[0.0, 1.0], [-1.0, 0.0]]), jnp.eye(2), 1.0)  # asymmetric: tr(W²) = −2
    with pytest.raises(ValueError, match="form must be"):
        loc.variance_profile(0.5, "other")
    with pytest.raises(ValueError, match="κ1 and κ2"):
        loc.locater_penalty({"attn": {"q": {"kernel": jnp.ones((2, 1, 2))}, "k": {"kernel": jnp.ones((2, 1, 2))}}}, -1.0, 0.0)


def test_mean_penalty_gradient_is_the_printed_or_the_true_formula():
    """geomjax.train.locater.mean_penalty: the value is (tr W_QK − 1)² either way; its gradient is §6's printed
    formula (gradient="printed") or the true one (autodiff), against the formulas evaluated directly."""
    from geomjax.train.locater import mean_penalty

    rng = np.random.default_rng(6)
    with jax.enable_x64(True):
        W_Q, W_K = jnp.asarray(rng.normal(size=(4, 4))), jnp.asarray(rng.normal(size=(4, 4)))
        tr = float(np.trace(np.asarray(W_Q).T @ np.asarray(W_K)))
        for form, ref in (("printed", loc.locater_grads_printed(W_Q, W_K)),
                          ("autodiff", loc.locater_grads_corrected(W_Q, W_K))):
            f = lambda a, b: mean_penalty(jnp.trace(a.T @ b)[None], 0.3, form)
            assert float(f(W_Q, W_K)) == pytest.approx(0.3 * (tr - 1) ** 2, rel=1e-12)
            gq, gk = jax.grad(f, (0, 1))(W_Q, W_K)
            np.testing.assert_allclose(np.asarray(gq), 0.3 * np.asarray(ref["mean_Q"]), rtol=1e-12)
            np.testing.assert_allclose(np.asarray(gk), 0.3 * np.asarray(ref["mean_K"]), rtol=1e-12)
        # the two differ (tr ≠ 2): the printed factor tr(W_QK) stands where the true gradient has 2
        assert abs(tr - 2) > 0.1
