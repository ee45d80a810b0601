"""geomjax.theory.spectral against independent references: the official `screenot` package, NumPy, SciPy.

Tolerances: float64 rtol 1e-10, float32 rtol 1e-5 unless a comment says why not. ScreeNOT's
threshold is compared at rtol 1e-4 (the official package bisects to an absolute width of 1e-5).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.fft
import scipy.fftpack
from screenot import ScreeNOT as official

from geomjax import spectral
from tests.unit.test_shapes import unchecked_shapes

RTOL64 = 1e-10
RTOL32 = 1e-5


def low_rank_plus_noise(seed: int, n: int, m: int, r: int, snr: float = 2.0) -> np.ndarray:
    """Y = U diag(s) Vᵀ + N(0, 1) noise with spikes above the bulk edge √n + √m."""
    rng = np.random.default_rng(seed)
    Y = rng.standard_normal((n, m))
    if r:
        U, _ = np.linalg.qr(rng.standard_normal((n, r)))
        V, _ = np.linalg.qr(rng.standard_normal((m, r)))
        s = snr * (np.sqrt(n) + np.sqrt(m)) * np.linspace(1.5, 0.8, r)
        Y += (U * s) @ V.T
    return Y


# (seed, n, m, planted rank, k, strategy): tall and wide, all strategies, k = 0 included.
CASES = [
    (0, 120, 60, 5, 10, "i"),
    (1, 60, 130, 5, 10, "i"),
    (2, 127, 96, 12, 20, "i"),
    (3, 90, 70, 3, 8, "0"),
    (4, 50, 140, 6, 12, "w"),
    (5, 80, 80, 0, 3, "i"),
    (6, 70, 40, 4, 0, "w"),
]


def official_answer(Y: np.ndarray, k: int, strategy: str) -> tuple[int, float]:
    _, thr, r = official.adaptiveHardThresholding(np.array(Y, np.float64), k, strategy)
    return int(r), float(thr)


@pytest.mark.parametrize("seed,n,m,r,k,strategy", CASES)
def test_screenot_matches_official_eager(seed, n, m, r, k, strategy):
    Y = low_rank_plus_noise(seed, n, m, r)
    r_ref, t_ref = official_answer(Y, k, strategy)
    res = spectral.screenot(Y, k, strategy)
    assert int(res.rank) == r_ref
    np.testing.assert_allclose(float(res.threshold), t_ref, rtol=1e-4)
    assert res.threshold.dtype == jnp.float64  # float64 search even with JAX x64 disabled
    assert res.singular_values.dtype == jnp.float64  # float64 input is not cast down
    np.testing.assert_allclose(
        np.asarray(res.singular_values), np.linalg.svd(Y, compute_uv=False), rtol=RTOL64
    )
    assert int(spectral.screenot_rank(Y, k, strategy)) == r_ref


@pytest.mark.parametrize("seed,n,m,r,k,strategy", CASES[:5])
def test_screenot_threshold_is_root_of_official_F(seed, n, m, r, k, strategy):
    """Our threshold solves the official package's own equation F(T; z, γ) = -4 (float64)."""
    Y = low_rank_plus_noise(seed, n, m, r)
    sigma = np.linalg.svd(Y, compute_uv=False)
    z = official.createPseudoNoise(sigma, k, strategy=strategy)
    gamma = min(n / m, m / n)
    thr = float(spectral.screenot(Y, k, strategy).threshold)
    assert thr > z.max()
    assert abs(official.F(thr, z, gamma) + 4.0) < 1e-9
    # F is increasing through the root: below it F < -4, above it F > -4.
    assert official.F(thr * (1 - 1e-6), z, gamma) < -4 < official.F(thr * (1 + 1e-6), z, gamma)


def test_screenot_jit_matches_official():
    Y = low_rank_plus_noise(2, 127, 96, 12)
    r_ref, t_ref = official_answer(Y, 20, "i")
    f = jax.jit(spectral.screenot, static_argnums=(1, 2))
    with jax.enable_x64(True):  # jit canonicalises its arguments: keep the float64 input
        res = f(jnp.asarray(Y), 20, "i")
    assert int(res.rank) == r_ref
    np.testing.assert_allclose(float(res.threshold), t_ref, rtol=1e-4)


def test_screenot_vmap_over_stack_float32():
    shapes = [(3, 100, 70, 4), (4, 100, 70, 6), (5, 100, 70, 0), (6, 100, 70, 9)]
    Ys = np.stack([low_rank_plus_noise(s, n, m, r) for s, n, m, r in shapes]).astype(np.float32)
    for strategy, k in (("i", 15), ("0", 10)):
        res = jax.jit(jax.vmap(lambda y: spectral.screenot(y, k, strategy)))(Ys)
        assert res.rank.shape == (4,) and res.threshold.dtype == jnp.float64
        for i, Y in enumerate(Ys):
            # Reference on the same float32 values; the float32 SVD moves σ by ~1e-7 relative.
            r_ref, t_ref = official_answer(Y, k, strategy)
            assert int(res.rank[i]) == r_ref
            np.testing.assert_allclose(float(res.threshold[i]), t_ref, rtol=1e-4)


def test_screenot_from_singular_values_of_second_moment():
    """σ from eigh of the d×d second moment (as from streaming statistics) gives the same answer."""
    Y = low_rank_plus_noise(7, 400, 60, 5)
    r_ref, t_ref = official_answer(Y, 10, "i")
    lam = np.linalg.eigh(Y.T @ Y)[0]
    sigma = np.sqrt(np.maximum(lam, 0.0))  # ascending; the function sorts
    res = spectral.screenot_from_singular_values(sigma, Y.shape, 10, "i")
    assert int(res.rank) == r_ref
    np.testing.assert_allclose(float(res.threshold), t_ref, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(res.singular_values), np.sort(sigma)[::-1], rtol=RTOL64)


def test_screenot_scale_invariant():
    """T(cY) = c T(Y) at any scale (the official package's absolute 1e-5 tolerance is not)."""
    Y = low_rank_plus_noise(0, 120, 60, 5)
    t1 = float(spectral.screenot(Y, 10).threshold)
    for c in (1e-6, 1e4):
        res = spectral.screenot(c * Y, 10)
        np.testing.assert_allclose(float(res.threshold), c * t1, rtol=1e-10)
        assert int(res.rank) == 5


@unchecked_shapes()
def test_screenot_bad_input():
    Y = low_rank_plus_noise(0, 30, 20, 2)
    with pytest.raises(ValueError, match=r"2k \+ 1 < min\(n, m\) = 20"):
        spectral.screenot(Y, 10, "i")  # 2k+1 = 21 >= 20
    with pytest.raises(ValueError, match="k < min"):
        spectral.screenot(Y, 20, "w")
    with pytest.raises(ValueError, match="k must be >= 0"):
        spectral.screenot(Y, -1, "0")
    with pytest.raises(ValueError, match="unknown ScreeNOT strategy"):
        spectral.screenot(Y, 2, "x")
    with pytest.raises(ValueError, match="rank-2"):
        spectral.screenot(Y[None], 2)
    bad = Y.copy()
    bad[3, 4] = np.nan
    with pytest.raises(ValueError, match="NaN/Inf"):
        spectral.screenot(bad, 2)
    bad[3, 4] = np.inf
    with pytest.raises(ValueError, match="NaN/Inf"):
        spectral.screenot_rank(bad, 2)
    with pytest.raises(TypeError, match="floating"):
        spectral.screenot(np.ones((30, 20), np.int32), 2)
    with pytest.raises(ValueError, match="all min\\(n, m\\) = 20 singular values"):
        spectral.screenot_from_singular_values(np.ones(19), (30, 20), 2)
    with pytest.raises(ValueError, match="negative"):
        spectral.screenot_from_singular_values(-np.ones(20), (30, 20), 2)


def test_screenot_traced_nonfinite_flags_rank():
    Y = low_rank_plus_noise(0, 30, 20, 2).astype(np.float32)
    Y[0, 0] = np.nan
    res = jax.jit(lambda y: spectral.screenot(y, 2))(Y)
    assert int(res.rank) == -1 and np.isnan(float(res.threshold))


# ----------------------------------------------------------------------------------------------
# Singular values, stable rank, explained ratio
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,rtol", [(np.float64, RTOL64), (np.float32, RTOL32)])
def test_singular_values_and_stable_rank(dtype, rtol):
    X = low_rank_plus_noise(11, 90, 40, 6).astype(dtype)
    s_ref = np.linalg.svd(X.astype(np.float64), compute_uv=False)
    s = spectral.singular_values(X)
    assert s.dtype == dtype
    np.testing.assert_allclose(np.asarray(s), s_ref, rtol=rtol)
    s7 = spectral.singular_values(X, top=7)
    np.testing.assert_allclose(np.asarray(s7), s_ref[:7], rtol=rtol)
    sr_ref = np.sum(s_ref**2) / s_ref[0] ** 2
    np.testing.assert_allclose(float(spectral.stable_rank(X)), sr_ref, rtol=rtol)
    with jax.enable_x64(dtype == np.float64):  # jit would otherwise cast float64 arguments down
        np.testing.assert_allclose(float(jax.jit(spectral.stable_rank)(X)), sr_ref, rtol=rtol)
    np.testing.assert_allclose(
        float(spectral.stable_rank_from_singular_values(s_ref.astype(dtype))), sr_ref, rtol=rtol
    )


@pytest.mark.parametrize("dtype,rtol", [(np.float64, RTOL64), (np.float32, RTOL32)])
def test_singular_values_from_second_moment(dtype, rtol):
    # Well-conditioned X (σ_min/σ_1 ~ 0.3): sqrt(eig(XᵀX)) keeps relative precision eps·κ².
    rng = np.random.default_rng(12)
    X = rng.standard_normal((500, 30)) + 3.0 * np.eye(500, 30)
    s_ref = np.linalg.svd(X, compute_uv=False)
    S = (X.T @ X).astype(dtype)
    s = spectral.singular_values_from_second_moment(S, top=20)
    assert s.dtype == dtype and s.shape == (20,)
    np.testing.assert_allclose(np.asarray(s), s_ref[:20], rtol=rtol)
    np.testing.assert_allclose(
        np.asarray(spectral.singular_values_from_second_moment(S)), s_ref, rtol=rtol
    )
    # Rank-deficient second moment: the zero eigenvalues come out as ~0, never NaN.
    Z = X[:10]
    sz = np.asarray(spectral.singular_values_from_second_moment((Z.T @ Z).astype(dtype)))
    assert np.all(np.isfinite(sz))
    np.testing.assert_allclose(sz[:10], np.linalg.svd(Z, compute_uv=False), rtol=rtol)


@pytest.mark.parametrize("dtype,rtol", [(np.float64, RTOL64), (np.float32, RTOL32)])
def test_explained_ratio(dtype, rtol):
    rng = np.random.default_rng(13)
    s = np.sort(rng.uniform(0.1, 5.0, 25))[::-1]
    for r in (0, 1, 7, 25):
        ref = s[:r].sum() / s.sum()
        got = spectral.explained_ratio(s.astype(dtype), r)
        np.testing.assert_allclose(float(got), ref, rtol=rtol, atol=0)
    # r traced under jit; input order does not matter.
    got = jax.jit(spectral.explained_ratio)(rng.permutation(s).astype(np.float32), jnp.int32(7))
    np.testing.assert_allclose(float(got), s[:7].sum() / s.sum(), rtol=RTOL32)


@unchecked_shapes()
def test_spectral_bad_input():
    X = np.ones((5, 4))
    with pytest.raises(ValueError, match="top must be in"):
        spectral.singular_values(X, top=5)
    with pytest.raises(ValueError, match="square"):
        spectral.singular_values_from_second_moment(X)
    with pytest.raises(ValueError, match="all zeros"):
        spectral.stable_rank(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="r must be in"):
        spectral.explained_ratio(np.ones(4), 5)
    with pytest.raises(ValueError, match="rank-2"):
        spectral.stable_rank(np.ones(3))
    with pytest.raises(ValueError, match="NaN/Inf"):
        spectral.singular_values(np.full((3, 3), np.nan))


# ----------------------------------------------------------------------------------------------
# Relative norm
# ----------------------------------------------------------------------------------------------


def _planted_states(seed: int, C: int, T: int, d: int, offset: float = 5.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mu = offset * rng.standard_normal(d)
    pos = np.cumsum(rng.standard_normal((T, d)), axis=0) * 0.3
    ctx = rng.standard_normal((C, d))
    return mu + pos[None] + ctx[:, None] + 0.5 * rng.standard_normal((C, T, d))


@pytest.mark.parametrize("dtype,rtol", [(np.float64, RTOL64), (np.float32, RTOL32)])
def test_relative_norm_variants(dtype, rtol):
    h = _planted_states(21, 6, 12, 10).astype(dtype)
    C, T, d = h.shape
    h64 = h.astype(np.float64)
    pos = h64.mean(0) - h64.mean((0, 1))
    M = h64.reshape(-1, d)
    Pt = np.tile(pos, (C, 1))  # source code: np.concatenate([p for _ in range(nseq)])
    opn = lambda A: np.linalg.norm(A, 2)  # noqa: E731
    mu_other = np.linspace(-1, 1, d)
    cases = [
        (dict(centered=False), opn(Pt) / opn(M)),
        (dict(centered=True), opn(Pt) / opn(M - M.mean(0))),
        (dict(mean=mu_other.astype(dtype)), opn(Pt) / opn(M - mu_other)),
    ]
    for kw, ref in cases:
        got = spectral.relative_norm(pos.astype(dtype), h.reshape(-1, d), **kw)
        np.testing.assert_allclose(float(got), ref, rtol=rtol)
    # P given already tiled (N == T): plain ratio.
    got = spectral.relative_norm(Pt.astype(dtype), h.reshape(-1, d), centered=False)
    np.testing.assert_allclose(float(got), opn(Pt) / opn(M), rtol=rtol)


@pytest.mark.parametrize("dtype,rtol", [(np.float64, RTOL64), (np.float32, RTOL32)])
def test_relative_norm_from_moments_equals_materialized(dtype, rtol):
    h = _planted_states(22, 9, 16, 12).astype(np.float64)
    C, T, d = h.shape
    mu = h.mean((0, 1))
    pos = h.mean(0) - mu
    Hc = (h - mu).reshape(-1, d)
    S = Hc.T @ Hc
    ref = np.linalg.norm(np.tile(pos, (C, 1)), 2) / np.linalg.norm(Hc, 2)
    got = spectral.relative_norm_from_moments(pos.astype(dtype), S.astype(dtype), C)
    np.testing.assert_allclose(float(got), ref, rtol=rtol)
    got2 = spectral.relative_norm(pos.astype(dtype), h.reshape(-1, d).astype(dtype), centered=True)
    np.testing.assert_allclose(float(got2), ref, rtol=rtol)


@unchecked_shapes()
def test_relative_norm_bad_input():
    P = np.ones((4, 3))
    with pytest.raises(ValueError, match="not a multiple of T"):
        spectral.relative_norm(P, np.ones((10, 3)))
    with pytest.raises(ValueError, match="same width"):
        spectral.relative_norm(P, np.ones((8, 2)))
    with pytest.raises(ValueError, match="centered=False"):
        spectral.relative_norm(P, np.ones((8, 3)), centered=False, mean=np.zeros(3))
    with pytest.raises(ValueError, match=r"shape \(d, d\) = \(3, 3\)"):
        spectral.relative_norm_from_moments(P, np.eye(4), 2)
    with pytest.raises(ValueError, match="n_contexts"):
        spectral.relative_norm_from_moments(P, np.eye(3), 0)


# ----------------------------------------------------------------------------------------------
# DCT of the normalized Gram matrix
# ----------------------------------------------------------------------------------------------


def _smooth_pos(T: int, d: int, seed: int = 31) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(T)[:, None] / T
    freqs = rng.uniform(0.5, 3.0, d)
    phases = rng.uniform(0, 2 * np.pi, d)
    return np.cos(2 * np.pi * t * freqs + phases) + 0.05 * rng.standard_normal((T, d))


@pytest.mark.parametrize("dtype,rtol", [(np.float64, RTOL64), (np.float32, RTOL32)])
def test_dct_gram_vs_scipy(dtype, rtol):
    P = _smooth_pos(40, 16)
    Ph = P / np.linalg.norm(P, axis=1, keepdims=True)
    G = Ph @ Ph.T
    F_ref = scipy.fft.dctn(G, type=2, norm="ortho")
    F = np.asarray(spectral.dct_gram(P.astype(dtype)))
    assert F.dtype == dtype
    # atol: entries of F near 0 cannot hold relative accuracy; scale of F is ‖G‖ ~ T.
    np.testing.assert_allclose(F, F_ref, rtol=rtol, atol=rtol * 40)
    # The source code's construction: f_dct = dct(eye(T)); F = f_dctᵀ G f_dct.
    f_dct = scipy.fftpack.dct(np.eye(40), type=2, norm="ortho")
    np.testing.assert_allclose(F_ref, f_dct.T @ G @ f_dct, rtol=1e-10, atol=1e-12)
    F10 = np.asarray(spectral.dct_gram(P.astype(dtype), n_freq=10))
    np.testing.assert_allclose(F10, F_ref[:10, :10], rtol=rtol, atol=rtol * 40)
    E = F_ref**2
    for k in (1, 5, 10):
        ref = E[:k, :k].sum() / E.sum()
        got = spectral.low_frequency_energy(F.astype(dtype), k)
        np.testing.assert_allclose(float(got), ref, rtol=rtol)
        ref_nodc = E[1 : k + 1, 1 : k + 1].sum() / E[1:, 1:].sum()
        got = spectral.low_frequency_energy(F.astype(dtype), k, include_dc=False)
        np.testing.assert_allclose(float(got), ref_nodc, rtol=rtol)
    # Parseval: the full F carries all of G's energy.
    np.testing.assert_allclose(float(spectral.low_frequency_energy(F, 40)), 1.0, rtol=rtol)


@unchecked_shapes()
def test_dct_bad_input():
    P = _smooth_pos(8, 3)
    with pytest.raises(ValueError, match="n_freq"):
        spectral.dct_gram(P, n_freq=9)
    P0 = P.copy()
    P0[2] = 0.0
    with pytest.raises(ValueError, match="zero norm"):
        spectral.dct_gram(P0)
    with pytest.raises(ValueError, match="square"):
        spectral.low_frequency_energy(np.ones((3, 4)), 2)
    with pytest.raises(ValueError, match="k must be in"):
        spectral.low_frequency_energy(np.ones((4, 4)), 4, include_dc=False)
