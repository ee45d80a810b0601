"""geomjax.theory.gaussian: samplers and closed forms against NumPy/SciPy and exact formulas (float64)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from geomjax import gaussian as G
from tests.unit.test_shapes import unchecked_shapes


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def _spd(rng, d):
    a = rng.normal(size=(d, d))
    return a @ a.T / d + 0.3 * np.eye(d)


def test_haar_orthogonal_and_random_spectrum():
    keys = jax.random.split(jax.random.key(0), 4000)
    Q = jax.vmap(lambda k: G.haar_orthogonal(k, 3))(keys)
    np.testing.assert_allclose(np.einsum("bij,bkj->bik", Q, Q), np.broadcast_to(np.eye(3), Q.shape), atol=1e-12)
    # Haar: E[Q_ij²] = 1/n and E[Q_11] = 0 (a QR without the sign fix has E[Q_11] < 0)
    q = np.asarray(Q)
    np.testing.assert_allclose((q**2).mean(0), np.full((3, 3), 1 / 3), atol=0.03)
    assert abs(q[:, 0, 0].mean()) < 0.03
    s = jnp.asarray([3.0, 1.0, 0.2])
    M = G.random_spectrum_matrix(jax.random.key(1), s)
    np.testing.assert_allclose(np.linalg.svd(np.asarray(M), compute_uv=False), [3.0, 1.0, 0.2], rtol=1e-12)


def test_xavier():
    assert G.xavier_variance(4, 4) == 0.25 and G.xavier_variance(2, 6) == 0.25
    W = G.xavier_normal(jax.random.key(0), (300, 500), jnp.float64)
    assert W.dtype == jnp.float64
    assert abs(float(W.var()) - 2 / 800) < 1e-4
    with unchecked_shapes(), pytest.raises(ValueError, match="shape"):
        G.xavier_normal(jax.random.key(0), (3,))
    with pytest.raises(ValueError, match=">= 1"):
        G.xavier_variance(0, 3)


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_sphere_samplers():
    x = G.sphere_uniform(jax.random.key(0), 7, 2.5, jnp.float64)
    assert abs(float(jnp.linalg.norm(x)) - 2.5) < 1e-12
    keys = jax.random.split(jax.random.key(1), 5000)
    X, Y = jax.vmap(lambda k: G.sphere_pair(k, 4, -0.3, 2.0, 0.5))(keys)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 2.0, rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(Y, axis=1), 0.5, rtol=1e-12)
    np.testing.assert_allclose(np.sum(np.asarray(X) * np.asarray(Y), 1), -0.3, rtol=1e-12)
    # uniform on the sphere: the first coordinate of x/l has density ∝ (1 − u²)^((n−3)/2), a Beta law
    u = (np.asarray(X)[:, 0] / 2.0 + 1) / 2
    assert stats.kstest(u, stats.beta(1.5, 1.5).cdf).pvalue > 1e-3
    with pytest.raises(ValueError, match="n must be"):
        G.sphere_pair(jax.random.key(0), 1, 0.0)


def test_joint_gaussian_and_logpdf():
    rng = np.random.default_rng(0)
    cov, mean = _spd(rng, 4), rng.normal(size=4)
    keys = jax.random.split(jax.random.key(0), 40000)
    z = np.asarray(jax.vmap(lambda k: G.joint_gaussian(k, jnp.asarray(mean), jnp.asarray(cov)))(keys))
    np.testing.assert_allclose(z.mean(0), mean, atol=0.03)
    np.testing.assert_allclose(np.cov(z.T), cov, atol=0.05)
    x = rng.normal(size=4)
    ref = stats.multivariate_normal(mean, cov).logpdf(x)
    assert abs(float(G.gaussian_logpdf(jnp.asarray(x), jnp.asarray(mean), jnp.asarray(cov))) - ref) < 1e-12


def test_entropy_mi_kl_against_scipy():
    rng = np.random.default_rng(1)
    c = _spd(rng, 4)
    assert abs(float(G.gaussian_entropy(jnp.asarray(c))) - stats.multivariate_normal(np.zeros(4), c).entropy()) < 1e-12
    h = stats.multivariate_normal(np.zeros(2), c[:2, :2]).entropy() + stats.multivariate_normal(np.zeros(2), c[2:, 2:]).entropy()
    mi = h - stats.multivariate_normal(np.zeros(4), c).entropy()
    assert abs(float(G.gaussian_mutual_information(jnp.asarray(c), 2)) - mi) < 1e-12
    m0, m1, c0, c1 = rng.normal(size=3), rng.normal(size=3), _spd(rng, 3), _spd(rng, 3)
    # KL by numerical integration of E_p0[log p0 − log p1] is expensive; use the 1-D closed form per
    # whitened axis instead: for diagonal covariances KL is a sum of 1-D KLs.
    d0, d1 = np.diag(np.diag(c0)), np.diag(np.diag(c1))
    kl1 = sum(math.log(math.sqrt(d1[i, i] / d0[i, i])) + (d0[i, i] + (m0[i] - m1[i]) ** 2) / (2 * d1[i, i]) - 0.5 for i in range(3))
    assert abs(float(G.gaussian_kl(*(jnp.asarray(a) for a in (m0, d0, m1, d1)))) - kl1) < 1e-12
    # full covariances: KL is invariant under a common invertible map (checked independently via slogdet)
    L = rng.normal(size=(3, 3)) + 2 * np.eye(3)
    a = G.gaussian_kl(*(jnp.asarray(v) for v in (m0, c0, m1, c1)))
    b = G.gaussian_kl(*(jnp.asarray(v) for v in (L @ m0, L @ c0 @ L.T, L @ m1, L @ c1 @ L.T)))
    assert abs(float(a) - float(b)) < 1e-10


def test_linear_map_joint_matches_kron():
    rng = np.random.default_rng(2)
    T, d = 3, 2
    cov = _spd(rng, T * d)
    mean = rng.normal(size=(T, d))
    L = rng.normal(size=(d, d))
    m, c = G.linear_map_joint(jnp.asarray(L), jnp.asarray(mean), jnp.asarray(cov.reshape(T, d, T, d).transpose(0, 2, 1, 3)))
    K = np.kron(np.eye(T), L)
    np.testing.assert_allclose(np.asarray(m).reshape(-1), K @ mean.reshape(-1), atol=1e-12)
    np.testing.assert_allclose(np.asarray(c).transpose(0, 2, 1, 3).reshape(T * d, T * d), K @ cov @ K.T, atol=1e-12)


def test_block2_eigenvalues():
    for l1, l2, a in [(0.3, 0.7, 0.2), (1.0, 1.0, -0.9), (0.5, 0.1, 0.0)]:
        hi, lo = G.block2_eigenvalues(l1, l2, a)
        ref = np.linalg.eigvalsh([[l1**2, l1 * l2 * a], [l1 * l2 * a, l2**2]])
        np.testing.assert_allclose([lo, hi], ref, atol=1e-14)


def test_lognormal_and_ratio_forms():
    mu, s2 = 0.4, 0.7
    assert abs(float(G.lognormal_mean(mu, s2)) - stats.lognorm(math.sqrt(s2), scale=math.exp(mu)).mean()) < 1e-12
    assert abs(float(G.lognormal_var(mu, s2)) - stats.lognorm(math.sqrt(s2), scale=math.exp(mu)).var()) < 1e-12
    assert abs(float(G.lognormal_mean_printed(0.0, s2)) - float(G.lognormal_mean(0.0, s2))) < 1e-15
    assert float(G.lognormal_mean_printed(mu, s2)) < float(G.lognormal_mean(mu, s2))
    # ratio p_i/p_j = exp(x_i − x_j), x_i − x_j ~ N(μ_i − μ_j, σ_i² + σ_j² − 2σ_ij)
    args = (0.3, -0.2, 0.5, 0.4, 0.1)
    d = stats.lognorm(math.sqrt(0.5 + 0.4 - 0.2), scale=math.exp(0.5))
    assert abs(float(G.softmax_ratio_mean(*args)) - d.mean()) < 1e-12
    assert abs(float(G.softmax_ratio_var(*args)) - d.var()) < 1e-12
    assert abs(float(G.softmax_ratio_mean_printed(*args)) - d.mean()) > 0.1
    n = 50.0
    assert abs(G.xavier_exp_mean_taylor(n) - math.exp(1 / (2 * n))) < 1 / n**3
    assert abs(G.xavier_exp_var_taylor(n) - (math.exp(2 / n) - math.exp(1 / n))) < 2 / n**3


def test_softmax_information_measures():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=6), rng.normal(size=6)
    p, q = np.exp(x) / np.exp(x).sum(), np.exp(y) / np.exp(y).sum()
    assert abs(float(G.softmax_entropy(jnp.asarray(x))) - stats.entropy(p)) < 1e-12
    assert abs(float(G.softmax_kl(jnp.asarray(x), jnp.asarray(y))) - stats.entropy(p, q)) < 1e-12
    assert abs(float(G.softmax_cross_entropy(jnp.asarray(x), jnp.asarray(y))) - (stats.entropy(p) + stats.entropy(p, q))) < 1e-12


def test_bilinear_closed_forms_against_exact_sums():
    rng = np.random.default_rng(4)
    n = 3
    C, mx, my = rng.normal(size=(n, n)), rng.normal(size=n), rng.normal(size=n)
    J = rng.normal(size=(2 * n, 2 * n))
    cov = J @ J.T
    sxy = cov[:n, n:]
    # E[xᵀCy] = Σ_ij C_ij E[x_i y_j] = Σ_ij C_ij (mx_i my_j + Cov(x_i, y_j))
    ref = sum(C[i, j] * (mx[i] * my[j] + sxy[i, j]) for i in range(n) for j in range(n))
    assert abs(float(G.bilinear_mean(*(jnp.asarray(a) for a in (C, mx, my, sxy)))) - ref) < 1e-12
    assert abs(float(G.bilinear_mean_printed(*(jnp.asarray(a) for a in (C, mx, my, sxy.T)))) - ref) < 1e-12
    # Var(xᵀCy), x ⟂ y: Isserlis-free check by the law of total variance, E_y[Var_x] + Var_y[E_x]
    cx, cy = cov[:n, :n], cov[n:, n:]
    var = np.trace(C @ cy @ C.T @ cx) + my @ C.T @ cx @ C @ my + np.trace(C.T @ np.outer(mx, mx) @ C @ cy)
    assert abs(float(G.bilinear_variance(*(jnp.asarray(a) for a in (C, mx, my, cx, cy)))) - var) < 1e-10
    ref_self = sum(C[i, j] * (mx[i] * mx[j] + cx[i, j]) for i in range(n) for j in range(n))
    assert abs(float(G.self_bilinear_mean(*(jnp.asarray(a) for a in (C, mx, cx)))) - ref_self) < 1e-12


def test_marchenko_pastur():
    for n, m, s2 in [(10, 10, 0.1), (5, 20, 2.0)]:
        a, b = G.mp_edges(n, m, s2)
        mass = integrate.quad(lambda x: float(G.mp_density(x, n, m, s2)), a, b, limit=200)[0]
        m1 = integrate.quad(lambda x: x * float(G.mp_density(x, n, m, s2)), a, b, limit=200)[0]
        assert abs(mass - 1) < 1e-6
        assert abs(m1 - max(n, m) * s2) < 1e-6 * max(n, m) * s2  # E σ_i² = Σσ²/p = nmσ²/min
        xs = np.linspace(a, b, 7)[1:-1]
        # x = a + r²: removes the 1/√x (square case) and √ edge singularities from the reference quadrature
        ref = [integrate.quad(lambda r: 2 * r * float(G.mp_density(a + r * r, n, m, s2)), 0, np.sqrt(u - a), limit=200)[0]
               for u in xs]
        np.testing.assert_allclose(G.mp_cdf(xs, n, m, s2), ref, atol=2e-5)
    assert abs(integrate.quad(lambda x: float(G.mp_density_printed(x, 0.3)), 0, 1.2)[0] - 1) < 1e-6
    assert G.wishart_moments(3, 4, 0.5) == (6.0, 12 * 8 * 0.25)
    assert 3.0 < G.sigma1_sq_tw(64, 1 / 64) < 4.0


def test_mp_sample_and_ks_distance_against_numpy_and_scipy():
    key = jax.random.key(7)
    x = np.asarray(G.mp_sample(key, 6, 4, 0.5, 3, "float64"))
    # the same draws, NumPy's SVD: 3 matrices × min(6, 4) squared singular values, pooled and sorted
    A = np.asarray(jax.random.normal(key, (3, 6, 4), jnp.float64)) * math.sqrt(0.5)
    ref = np.sort((np.linalg.svd(A, compute_uv=False) ** 2).ravel())
    assert x.shape == (12,)
    np.testing.assert_allclose(x, ref, rtol=1e-10)
    big = np.asarray(G.mp_sample(jax.random.key(8), 20, 20, 0.05, 8, "float64"))
    assert abs(big.mean() - 20 * 0.05) < 0.1  # E σ_i² = nmσ²/min(n, m) = 1 (wishart_moments / n)
    for sample, cdf in [(big, lambda u: G.mp_cdf(u, 20, 20, 0.05)),
                        (np.sort(np.random.default_rng(2).normal(size=50)), stats.norm.cdf)]:
        assert abs(G.ks_distance(sample, cdf) - stats.kstest(sample, cdf).statistic) < 1e-12


def test_random_orientation_forms_agree_on_flat_spectra():
    flat = jnp.full(5, 0.7)
    assert abs(float(G.random_orientation_trace_var(flat, flat)) - float(G.random_orientation_trace_var_printed(flat, flat))) < 1e-15
    a, b = jnp.asarray([2.0, 1.0, 0.1]), jnp.asarray([1.0, 0.5, 0.5])
    assert abs(float(G.random_orientation_trace_var(a, b)) - 5.01 * 1.5 / 9) < 1e-12


def test_slerp_and_cosine_fit():
    v, w = G.sphere_pair(jax.random.key(0), 5, 0.2)
    ts = jnp.linspace(0, 1, 5)
    path = G.slerp(v, w, ts)
    np.testing.assert_allclose(path[0], v, atol=1e-12)
    np.testing.assert_allclose(path[-1], w, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(path, axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(G.slerp_printed(v, w, 0.0), -v, atol=1e-12)
    ce = G.slerp_ce_curve(v, w, ts)
    kl = G.slerp_kl_curve(v, w, ts)
    np.testing.assert_allclose(np.asarray(ce - kl), float(G.softmax_entropy(w)), atol=1e-12)
    assert abs(float(kl[-1])) < 1e-14
    t = np.linspace(0, 1, 31)
    fit = G.fit_cosine(t, 0.7 * np.cos(np.pi * t / 2 - 0.4) + 2.0)
    assert abs(fit.a - 0.7) < 1e-12 and abs(fit.b + 0.4) < 1e-12 and abs(fit.c - 2.0) < 1e-12 and fit.max_abs < 1e-12


def test_slerp_kl_curves_ends_and_midpoint_against_scipy():
    key = jax.random.key(5)
    ts = np.linspace(0.0, 1.0, 11)
    curves = np.asarray(G.slerp_kl_curves(key, 6, 4, ts, 2.0))
    assert curves.shape == (4, 11)
    sm = lambda z: np.exp(z - z.max()) / np.exp(z - z.max()).sum()  # noqa: E731
    for c, k in zip(curves, jax.random.split(key, 4)):
        v, w = (np.asarray(a) for a in G.sphere_pair(k, 6, 0.0, 2.0, 2.0))
        assert abs(v @ w) < 1e-12 and abs(np.linalg.norm(v) - 2) < 1e-12 and abs(np.linalg.norm(w) - 2) < 1e-12
        # θ = π/2: SLERP(0) = v, SLERP(1/2) = (v + w)/√2, SLERP(1) = w
        assert abs(c[0] - stats.entropy(sm(w), sm(v))) < 1e-12
        assert abs(c[5] - stats.entropy(sm(w), sm((v + w) / math.sqrt(2)))) < 1e-12
        assert abs(c[-1]) < 1e-14


def test_fit_cosine_average_recovers_the_mean_cosine():
    t = np.linspace(0.0, 1.0, 21)
    s = np.array([-0.1, 0.1, -0.2, 0.2])  # Σs = 0: the mean is the cosine; sem ∝ 1 − t is 0 at t = 1
    curves = 0.7 * np.cos(np.pi * t / 2 - 0.4) + 2.0 + s[:, None] * (1 - t)[None, :]
    mean, sem, fit, z = G.fit_cosine_average(t, curves)
    np.testing.assert_allclose(mean, 0.7 * np.cos(np.pi * t / 2 - 0.4) + 2.0, atol=1e-14)
    np.testing.assert_allclose(sem, np.std(s, ddof=1) * (1 - t) / 2, atol=1e-14)
    assert abs(fit.a - 0.7) < 1e-10 and abs(fit.b + 0.4) < 1e-10 and abs(fit.c - 2.0) < 1e-10
    assert math.isfinite(z) and z < 1e-8  # the floored t = 1 point is left out


def test_taylor_noise():
    rng = np.random.default_rng(5)
    lam, V = rng.dirichlet(np.ones(4)), rng.normal(size=(4, 3))
    ref = sum(lam[i] * lam[j] * V[i] * V[j] for i in range(4) for j in range(i + 1, 4))
    np.testing.assert_allclose(G.taylor_cross_noise(jnp.asarray(lam), jnp.asarray(V)), ref, atol=1e-12)
    ref_var = 0.3**2 * sum(lam[i] ** 2 * lam[j] ** 2 for i in range(4) for j in range(i + 1, 4))
    assert abs(float(G.taylor_noise_var(jnp.asarray(lam), 0.3)) - ref_var) < 1e-15
    assert abs(G.taylor_noise_var_printed(4, 1.0) - 12 / 4**4 * 2 / 16) < 1e-15


def test_sphere_and_normality_forms():
    assert G.sphere_bilinear_var(16) == 1 / 16
    assert G.sphere_bilinear_var_printed(16, 0.0) == 15 / 256
    m2, m4 = G.bilinear_fourth_moment(10)
    # E s⁴ = 3 E[‖x‖⁴]E[‖y‖⁴], E‖x‖⁴ = (n² + 2n)/n² for x ~ N(0, I/n) (scaled chi-squared)
    assert m2 == 1.0 and abs(m4 - 3 * (100 + 20) ** 2 / 100**2) < 1e-12


def test_mixture_moments():
    rng = np.random.default_rng(6)
    T, d = 3, 2
    cov = _spd(rng, T * d)
    blocks = cov.reshape(T, d, T, d).transpose(0, 2, 1, 3)
    mean, lam = rng.normal(size=(T, d)), rng.dirichlet(np.ones(T), size=T)
    m, c = G.mixture_moments(jnp.asarray(lam), jnp.asarray(mean), jnp.asarray(blocks))
    K = np.kron(lam, np.eye(d))
    np.testing.assert_allclose(np.asarray(m).reshape(-1), K @ mean.reshape(-1), atol=1e-12)
    np.testing.assert_allclose(np.asarray(c).transpose(0, 2, 1, 3).reshape(T * d, T * d), K @ cov @ K.T, atol=1e-12)
    mb, cm = G.mixture_moments_mixture_reading(jnp.asarray(lam[0]), jnp.asarray(mean), jnp.asarray(blocks))
    ref_c = sum(lam[0, i] * (blocks[i, i] + np.outer(mean[i], mean[i])) for i in range(T)) - np.outer(lam[0] @ mean, lam[0] @ mean)
    np.testing.assert_allclose(np.asarray(cm), ref_c, atol=1e-12)


def test_random_attention_stacks_rows_and_no_skip_convergence():
    key = jax.random.key(11)
    st = G.random_attention_stacks(key, 3, 5, 4, 16, dtype="float64")
    assert st.diversity.shape == (3, 17) and st.entropy.shape == (3, 16)
    k1, k2 = jax.random.split(jax.random.split(key, 3)[1])  # row 1: its own input X ~ N(0, 1), (T, d)
    one = G.random_attention_stack(k2, jax.random.normal(k1, (5, 4), jnp.float64), 16)
    # diversity collapses from ~0.9 to float64 noise (~1e-16): each entry is compared at the scale of the
    # sequence (its largest, the input's), where the vmapped and the single program round differently
    scale = float(np.abs(np.asarray(one.diversity)).max())
    np.testing.assert_allclose(np.asarray(st.diversity[1]), np.asarray(one.diversity), rtol=1e-12, atol=1e-12 * scale)
    np.testing.assert_allclose(np.asarray(st.entropy[1]), np.asarray(one.entropy), rtol=1e-12)
    # no skip: every token converges to one (diversity → 0, attention entropy → log T), thesis §7.2.3
    assert np.all(np.asarray(st.diversity[:, -1] / st.diversity[:, 0]) < 1e-3)
    assert np.all(math.log(5) - np.asarray(st.entropy[:, -1]) < 1e-3)


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_random_attention_stack_matches_numpy_loop():
    key = jax.random.key(3)
    X = jax.random.normal(jax.random.key(4), (5, 4))
    st = G.random_attention_stack(key, X, 3, beta=0.5, layernorm=True)
    # NumPy re-implementation with the same weights
    Xn = np.asarray(X)
    div = [np.linalg.norm(Xn - Xn.mean(0)) / np.linalg.norm(Xn)]
    ents = []
    for k in jax.random.split(key, 3):
        Ws = []
        for kk in jax.random.split(k, 3):
            W = 0.5 * np.asarray(jax.random.normal(kk, (4, 4), jnp.float64))
            Ws.append(W * min(1.0, 2.0 / np.linalg.norm(W, 2)))
        q, kmat, v = Xn @ Ws[0].T, Xn @ Ws[1].T, Xn @ Ws[2].T
        s = q @ kmat.T / 2.0
        p = np.exp(s - s.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        ents.append(float(np.mean(-(p * np.log(p)).sum(1))))
        Y = 0.5 * p @ v + 0.5 * Xn
        Xn = (Y - Y.mean(1, keepdims=True)) / np.sqrt(Y.var(1, keepdims=True) + 1e-12)
        div.append(np.linalg.norm(Xn - Xn.mean(0)) / np.linalg.norm(Xn))
    np.testing.assert_allclose(np.asarray(st.diversity), div, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(st.entropy), ents, rtol=1e-10)
    assert float(G.token_diversity(jnp.ones((4, 3)))) == 0.0
    assert abs(float(G.attention_entropy(jnp.full((1, 4, 4), 0.25))[0]) - math.log(4)) < 1e-12
