"""``geomjax.theory.localization.exact_rho``: Def. 1's ρ_i (Bao §3) under Assumption 1 by quadrature, checked against
SciPy's adaptive quadrature of Imhof's real form, against random walks, and against the NumPy witness of the claims
(:func:`geomjax.sources.bao.claims.numpy_exact_rho`: eigenvalues found numerically, complex Gil-Pelaez form)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate

from geomjax.sources.bao import claims as bao
from geomjax.errors import GeomjaxError
from geomjax.theory import localization as loc


def _draw(d, mean, scale, seed):
    with jax.enable_x64(True):
        _, F = loc.anisotropic_covariance(jax.random.key(seed), d, dtype=jnp.float64)
        W, _ = loc.random_wqk(jax.random.key(seed + 1), d, mean, scale, dtype=jnp.float64)
    return np.asarray(W), np.asarray(F)


def _imhof_scipy(W, F, lam, T, i):
    """ρ_i by scipy.integrate.quad of Imhof's real form with the weights of the dense (T·d)-dimensional quadratic form:
    score_i − 1/T = zᵀ A z, A = sym(c̃ 1ᵀ ⊗ M)/λ, c̃_s = Σ_{j≥s} (δ_ij − 1/T)/T (no closed-form reduction)."""
    d = W.shape[0]
    M = F.T @ W @ F
    c = (np.eye(T)[i] - 1.0 / T) / T
    C = np.cumsum(c[::-1])[::-1]
    K = np.kron(np.outer(C, np.ones(T)), M) / lam
    nu = np.linalg.eigvalsh((K + K.T) / 2)
    nu = nu[np.abs(nu) > 1e-14 * np.abs(nu).max()]

    def g(u):
        th = 0.5 * np.sum(np.arctan(2 * nu * u))
        rho = np.exp(0.25 * np.sum(np.log1p(4 * nu**2 * u**2)))
        return (np.sin(th + u / T) - np.sin(th - u * (1 - 1 / T))) / (u * rho)

    return integrate.quad(g, 0, np.inf, limit=1000, epsabs=1e-11)[0] / np.pi


@pytest.mark.parametrize("mean,scale", [(0.05, 0.3), (0.0, 1.0)])
def test_exact_rho_matches_dense_quadrature_and_the_witness(mean, scale):
    d, T = 8, 16
    lam = math.sqrt(d)
    W, F = _draw(d, mean, scale, 3)
    with jax.enable_x64(True):
        rho, err = (np.asarray(a) for a in loc.exact_rho(W, F, lam, T=T))
    ref = np.array([_imhof_scipy(W, F, lam, T, i) for i in range(T)])
    np.testing.assert_allclose(rho, ref, atol=1e-8)
    assert err.max() < 1e-7
    wit, _ = bao.numpy_exact_rho(W, F, lam, T)
    np.testing.assert_allclose(wit, ref, atol=1e-8)


def test_exact_rho_error_bar_is_honest_where_the_quadrature_struggles():
    """d = 4: eight χ² weights, the integrand decays like u⁻⁵ and oscillates far out; 256 panels do not reach 1e-8,
    and the error bar says so (it covers the deviation from SciPy's adaptive quadrature)."""
    d, T = 4, 8
    W, F = _draw(d, 0.05, 0.3, 3)
    with jax.enable_x64(True):
        rho, err = (np.asarray(a) for a in loc.exact_rho(W, F, 2.0, T=T))
    ref = np.array([_imhof_scipy(W, F, 2.0, T, i) for i in range(T)])
    assert np.all(np.abs(rho - ref) <= err) and err.max() > 1e-3


@pytest.mark.slow  # 2^15 random walks and two compiled precisions
def test_exact_rho_matches_random_walks_and_float32_stays_within_its_bar():
    d, T, n = 6, 16, 2**15
    lam = math.sqrt(d)
    W, F = _draw(d, 0.0, 1.0, 7)
    W = 0.5 * W
    with jax.enable_x64(True):
        rho, err = (np.asarray(a) for a in loc.exact_rho(W, F, lam, T=T))
        r32, e32 = (np.asarray(a, float) for a in loc.exact_rho(W.astype(np.float32), F.astype(np.float32), lam, T=T))
    emp = loc.empirical_rho(jax.random.key(5), jnp.asarray(W, jnp.float32), jnp.asarray(F, jnp.float32), lam, T=T, n_seq=n)
    assert np.all(np.abs(np.asarray(emp["rho"]) - rho) <= 5 * np.asarray(emp["sem"]) + 1e-9)
    assert np.all(np.abs(r32 - rho) <= e32) and e32.max() < 1e-4


def test_exact_rho_stacks_and_rejects_bad_input():
    d, T = 4, 8
    W, F = _draw(d, 0.1, 0.5, 11)
    with jax.enable_x64(True):
        one, _ = loc.exact_rho(W, F, 2.0, T=T)
        two, _ = loc.exact_rho(np.stack([W, 2 * W]), np.stack([F, F]), 2.0, T=T)
        np.testing.assert_allclose(np.asarray(two[0]), np.asarray(one), atol=1e-12)
        with pytest.raises(GeomjaxError, match="symmetric"):
            loc.exact_rho(W + np.triu(np.ones((d, d)), 1), F, 2.0, T=T)
        with pytest.raises(GeomjaxError, match="panels"):
            loc.exact_rho(W, F, 2.0, T=T, panels=3)
        with pytest.raises(GeomjaxError, match="temperature"):
            loc.exact_rho(W, F, 0.0, T=T)


def test_lemma1_exact_moments_three_exact_computations_agree():
    """bao.lemma1.exact_moments: the closed form (localization.exact_moments), Isserlis on the explicit (T·d)²
    quadratic form and the χ² weights of the witness agree to rounding."""
    pred = bao._lemma1_predicted("quick")
    np.testing.assert_allclose(bao._lemma1_isserlis("quick", None).value, pred, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(bao._lemma1_weights_witness("quick", None).value, pred, rtol=1e-12, atol=1e-14)
