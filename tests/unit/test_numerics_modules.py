"""The public dtype rule (geomjax.base._checks.float64_aware) in fourier, localization and gaussian: a
NumPy float64 input is computed in float64 and equals an independent NumPy/SciPy float64
computation; a Python list gives the same result as the float64 array; float32 stays float32 (also
where the function used to cast its input to float32: fourier's ``*_was_cast32`` cases)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from geomjax import fourier as fo
from geomjax import gaussian as ga
from geomjax import localization as lo
from tests.unit.test_numerics import check_dtype_rule


@pytest.fixture(autouse=True)
def _x64_off():
    with jax.enable_x64(False):
        yield


RNG = np.random.default_rng(11)
P = 5
W = RNG.normal(size=(P + 1, 3))
ATT = RNG.random(size=(P, P))
XY = np.stack([np.cos(2 * np.pi * 2 * np.arange(P) / P), 0.5 * np.sin(2 * np.pi * 2 * np.arange(P) / P)], 1)
XY = XY + 0.1 * RNG.normal(size=(P, 2))
LOGITS = RNG.normal(size=(P * P, P))
OMEGA = RNG.normal(size=(2, 6))
X = RNG.normal(size=(6, 4))
WQK = RNG.normal(size=(4, 4))
WQK = (WQK + WQK.T) / 2 + 2 * np.eye(4)
A = RNG.normal(size=(4, 4))
SIGMA = A @ A.T / 4 + np.eye(4)
PROBS = np.exp(OMEGA) / np.exp(OMEGA).sum(-1, keepdims=True)
WQ, WK = RNG.normal(size=(4, 2)), RNG.normal(size=(4, 2))
M0, M1 = RNG.normal(size=4), RNG.normal(size=4)


def _np_fourier_basis(p):
    """Unit-norm rows const, cos 1, sin 1, …, written independently of geomjax.theory.fourier."""
    x = np.arange(p)
    rows = [np.full(p, 1 / math.sqrt(p))]
    for k in range(1, (p - 1) // 2 + 1):
        rows += [math.sqrt(2 / p) * np.cos(2 * np.pi * k * x / p), math.sqrt(2 / p) * np.sin(2 * np.pi * k * x / p)]
    return np.stack(rows)


def _np_r2(xy, k):
    p = len(xy)
    x = np.arange(p)
    D = np.stack([np.ones(p), np.cos(2 * np.pi * k * x / p), np.sin(2 * np.pi * k * x / p)], 1)
    res = xy - D @ np.linalg.lstsq(D, xy, rcond=None)[0]
    return 1 - np.sum(res**2) / np.sum((xy - xy.mean(0)) ** 2)


def _np_restricted(L, p, freqs):
    a, b = np.divmod(np.arange(p * p), p)
    U = np.stack([f(2 * np.pi * w * (a + b) / p) for w in freqs for f in (np.cos, np.sin)])
    U = U / np.linalg.norm(U, axis=1, keepdims=True)
    return U.T @ (U @ L) + L.mean(0, keepdims=True)


B = _np_fourier_basis(P)
C = XY[:, 0] - XY[:, 0].mean() + 1j * (XY[:, 1] - XY[:, 1].mean())

# (name, fn taking the argument tuple and returning one array, args, independent float64 value)
CASES = [
    # fourier: the *_was_cast32 ones used to cast their input to float32
    ("fourier_coefficients_was_cast32", lambda a: fo.fourier_coefficients(a[0], P), (W,), B @ W[:P]),
    ("attention_spectrum_was_cast32", lambda a: fo.attention_spectrum(a[0])["coeffs"], (ATT,), B @ ATT @ B.T),
    ("circle_fit_r2_was_cast32", lambda a: fo.circle_fit_r2(a[0], 2), (XY,), _np_r2(XY, 2)),
    ("complex_peak_fraction_was_cast32", lambda a: fo.complex_peak_fraction(a[0])["spectrum"], (XY,), np.abs(np.fft.fft(C)) ** 2),
    ("restricted_logits_was_cast32", lambda a: fo.restricted_logits(a[0], P, [1])[0], (LOGITS,), _np_restricted(LOGITS, P, [1])),
    ("frequency_energy", lambda a: fo.frequency_energy(a[0], P), (B @ W[:P],),
     np.array([np.sum((B @ W[:P])[0] ** 2)] + [np.sum((B @ W[:P])[2 * k - 1: 2 * k + 1] ** 2) for k in (1, 2)])),
    # localization
    ("linear_scores", lambda a: lo.linear_scores(a[0]), (OMEGA,), (OMEGA - OMEGA.mean(-1, keepdims=True)) / 6 + 1 / 6),
    ("softmax_input", lambda a: lo.softmax_input(*a, 0.5), (X, WQK), X @ (WQK @ X[-1]) / 0.5),
    ("xi_eta", lambda a: jnp.stack(lo.xi_eta(*a, 2.0)), (WQK, SIGMA),
     np.array([np.trace(WQK @ SIGMA) / math.sqrt(np.trace(WQK @ SIGMA @ WQK @ SIGMA)),
               math.sqrt(np.trace(WQK @ SIGMA @ WQK @ SIGMA)) / 2.0])),
    ("attention_entropy", lambda a: lo.attention_entropy(a[0]), (PROBS,), np.mean(-np.sum(PROBS * np.log(PROBS), -1), -1)),
    ("qk_matrix", lambda a: lo.qk_matrix(*a), (WQ, WK), WQ @ WK.T),
    # gaussian
    ("gaussian_logpdf", lambda a: ga.gaussian_logpdf(*a), (X[0], M0, SIGMA),
     stats.multivariate_normal(M0, SIGMA).logpdf(X[0])),
    ("gaussian_entropy", lambda a: ga.gaussian_entropy(a[0]), (SIGMA,), stats.multivariate_normal(cov=SIGMA).entropy()),
    ("gaussian_kl", lambda a: ga.gaussian_kl(*a), (M0, SIGMA, M1, np.eye(4) * 2.0),
     0.5 * (np.trace(SIGMA) / 2 + (M1 - M0) @ (M1 - M0) / 2 - 4 + 4 * math.log(2) - np.linalg.slogdet(SIGMA)[1])),
    ("softmax_entropy", lambda a: ga.softmax_entropy(a[0]), (OMEGA,), stats.entropy(np.exp(OMEGA), axis=-1)),
    ("token_diversity", lambda a: ga.token_diversity(a[0]), (X,),
     np.linalg.norm(X - X.mean(0)) / np.linalg.norm(X)),
]


@pytest.mark.parametrize("name,fn,args,want", CASES, ids=[c[0] for c in CASES])
def test_float64_numpy_and_lists_computed_in_float64(name, fn, args, want):
    check_dtype_rule(fn, args, want, tol64=1e-11, tol32=1e-4)


def test_float32_path_unchanged_by_the_rule():
    """Integer input still computes in float32 (the old cast), and float64 inputs are not downcast
    by the x64 context leaking: after a float64 call, float32 calls give float32 again."""
    assert fo.fourier_coefficients(np.arange(12).reshape(6, 2), P).dtype == jnp.float32
    fo.attention_spectrum(ATT)
    assert fo.attention_spectrum(ATT.astype(np.float32))["coeffs"].dtype == jnp.float32
    assert not jax.config.jax_enable_x64


@pytest.mark.parametrize("sample", [
    lambda k, dt: ga.xavier_normal(k, (3, 4), dt),
    lambda k, dt: ga.haar_orthogonal(k, 4, dt),
    lambda k, dt: ga.sphere_uniform(k, 5, 1.0, dt),
    lambda k, dt: lo.random_orthogonal(k, 4, dt),
    lambda k, dt: lo.anisotropic_covariance(k, 4, dtype=dt)[0],
])  # values differ between dtypes (jax.random draws float64 from 64-bit words), so only dtypes are compared
def test_samplers_honour_an_explicit_float64_dtype(sample):
    """dtype="float64" on a sampler computes in float64 even with JAX x64 off (and x64 stays off after)."""
    assert not jax.config.jax_enable_x64
    key = jax.random.key(0)
    for dt in ("float64", jnp.float64, np.float64):
        assert sample(key, dt).dtype == jnp.float64
    assert sample(key, jnp.float32).dtype == jnp.float32
    assert not jax.config.jax_enable_x64
    x = np.asarray(sample(key, "float64"))
    assert np.all(np.isfinite(x)) and np.abs(x).max() > 0
