"""geomjax.theory.smoothness (Song & Zhong §2.3, Theorem 1, App. F.1) against independent computations.

References: explicit Python loops over the printed index formulas (eqs. (4), (5)), NumPy FFTs
(np.fft.fft2 = F A Fᵀ of App. F.1 eq. (13)), SciPy's orthonormal DCT-II matrix, NumPy
least squares and spectral norms. All in float64 (rtol 1e-10) unless stated.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.fft

from geomjax import smoothness as sm
from tests.unit.test_shapes import unchecked_shapes

RTOL = 1e-10


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def centred_gram(seed: int, T: int, d: int = 5, smooth: bool = False) -> np.ndarray:
    """G = P Pᵀ for T positions with Σ_t pos_t = 0 (doubly centred, PSD), float64."""
    rng = np.random.default_rng(seed)
    if smooth:
        t = (np.arange(T) + 0.5) / T
        P = np.stack([np.cos(np.pi * j * t) * rng.standard_normal() / j for j in range(1, d + 1)], 1)
    else:
        P = rng.standard_normal((T, d))
    P = P - P.mean(0)
    return P @ P.T


def reflect_loops(G: np.ndarray) -> np.ndarray:
    """Eq. (4) from the printed 1-based definitions G⁽²⁾_{t,t'} = G_{t,T+1−t'} etc."""
    T = G.shape[0]
    Gt = np.zeros((2 * T, 2 * T))
    for t in range(1, T + 1):
        for u in range(1, T + 1):
            Gt[t - 1, u - 1] = G[t - 1, u - 1]
            Gt[t - 1, T + u - 1] = G[t - 1, T + 1 - u - 1]
            Gt[T + t - 1, u - 1] = G[T + 1 - t - 1, u - 1]
            Gt[T + t - 1, T + u - 1] = G[T + 1 - t - 1, T + 1 - u - 1]
    return Gt


def fd_loops(A: np.ndarray, m: int, scale: float) -> np.ndarray:
    """Eq. (5) with the periodic extension, by explicit loops, applied m times."""
    N = A.shape[0]
    for _ in range(m):
        B = np.zeros_like(A)
        for t in range(N):
            for u in range(N):
                B[t, u] = scale * (A[t, u] - A[(t - 1) % N, u] - A[t, (u - 1) % N] + A[(t - 1) % N, (u - 1) % N])
        A = B
    return A


def dct_projector(T: int, k: int) -> np.ndarray:
    """Orthogonal projector onto the first k orthonormal DCT-II vectors (SciPy)."""
    D = scipy.fft.dct(np.eye(T), type=2, norm="ortho", axis=0)  # rows = basis vectors
    return D[:k].T @ D[:k]


# ----------------------------------------------------------------------------------------------
# eqs. (4), (5)
# ----------------------------------------------------------------------------------------------


def test_double_center_is_HGH():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((7, 7))
    G = A @ A.T
    H = np.eye(7) - np.ones((7, 7)) / 7
    np.testing.assert_allclose(np.asarray(sm.double_center(G)), H @ G @ H, rtol=RTOL, atol=1e-12)


@pytest.mark.parametrize("T", [2, 5, 8])
def test_reflected_gram_matches_eq4(T):
    G = centred_gram(T, T) + 0.1 * np.eye(T)  # any symmetric matrix
    np.testing.assert_array_equal(np.asarray(sm.reflected_gram(G)), reflect_loops(G))


@pytest.mark.parametrize("T, m", [(3, 1), (4, 2), (6, 3)])
def test_finite_difference_matches_eq5_loops(T, m):
    G = centred_gram(10 + T, T)
    Gt = reflect_loops(G)
    D = np.asarray(sm.finite_difference(Gt, m))
    ref = fd_loops(Gt, m, T**2)
    np.testing.assert_allclose(D, ref, rtol=1e-9, atol=1e-9 * np.abs(ref).max())
    # periodic differences have zero row and column sums
    np.testing.assert_allclose(D.sum(0), 0, atol=1e-8 * np.abs(D).max())
    # the proof's scale N² per order
    np.testing.assert_allclose(
        np.asarray(sm.finite_difference(Gt, m, scale=float((2 * T) ** 2))), 4.0**m * ref, rtol=1e-9,
        atol=1e-9 * 4.0**m * np.abs(ref).max(),
    )


@pytest.mark.parametrize("m", [1, 2, 3])
def test_finite_difference_of_a_pure_cosine(m):
    """G = ccᵀ, c_t = cos(π(t−½)/T) the DCT frequency-1 vector, so G̃ = c̃c̃ᵀ with c̃ 2T-periodic.
    Closed form: j periodic differences of c̃ give (−2T sin(π/2T))^j·{sin, −cos, ...}(π(t−1−(j−1)/2)/T),
    whose sampled maximum is 1 for odd j and cos(π/(2T)) for even j."""
    T = 16
    c = np.cos(np.pi * (np.arange(1, T + 1) - 0.5) / T)
    D = np.asarray(sm.finite_difference(sm.reflected_gram(np.outer(c, c)), m))
    gain = (T * 2 * math.sin(math.pi / (2 * T))) ** (2 * m)
    peak = 1.0 if m % 2 else math.cos(math.pi / (2 * T)) ** 2
    np.testing.assert_allclose(np.abs(D).max(), gain * peak, rtol=1e-10)


def test_finite_difference_rounding_scale():
    G = np.outer(np.arange(4.0) - 1.5, np.arange(4.0) - 1.5)
    Gt = reflect_loops(G)
    assert sm.finite_difference_rounding(Gt, 2) == pytest.approx(np.finfo(np.float64).eps * (4 * 16) ** 2 * 2.25)


# ----------------------------------------------------------------------------------------------
# Bases and fits
# ----------------------------------------------------------------------------------------------


def test_low_frequency_basis_printed_and_dct():
    T, k = 9, 4
    printed = np.asarray(sm.low_frequency_basis(T, k, convention="printed"))
    ref = np.array([[math.cos((s - 0.5) * (t - 1) * math.pi / T) for s in range(1, k + 1)] for t in range(1, T + 1)])
    np.testing.assert_allclose(printed, ref, rtol=RTOL, atol=1e-14)
    assert np.all(printed[0] == 1.0)  # f_s starts with 1, as printed
    dct = np.asarray(sm.low_frequency_basis(T, k, convention="dct"))
    # unnormalised DCT-II: scipy's dct of e_t gives 2 cos(π s (2t+1)/(2T))
    D = scipy.fft.dct(np.eye(T), type=2, axis=0)
    np.testing.assert_allclose(dct, D[:k].T / 2, rtol=RTOL, atol=1e-14)


@pytest.mark.parametrize("convention", ["printed", "dct"])
def test_best_low_frequency_fit_against_numpy(convention):
    T, k = 12, 3
    G = centred_gram(1, T, d=6)
    F = np.asarray(sm.low_frequency_basis(T, k, convention=convention))
    Pi = F @ np.linalg.pinv(F)
    fit = sm.best_low_frequency_fit(G, k, convention=convention)
    np.testing.assert_allclose(np.asarray(fit.fit), Pi @ G @ Pi, rtol=1e-9, atol=1e-11)
    FB = F @ np.asarray(fit.B)
    np.testing.assert_allclose(FB @ FB.T, np.asarray(fit.fit), rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(float(fit.err_op), np.linalg.norm(G - Pi @ G @ Pi, 2), rtol=1e-9)
    I = np.eye(T)
    np.testing.assert_allclose(float(fit.err_op_lower), np.linalg.norm((I - Pi) @ G @ (I - Pi), 2), rtol=1e-9)
    assert float(fit.err_op_lower) <= float(fit.err_op) * (1 + 1e-12)


@pytest.mark.parametrize("k", [1, 2, 5, 8])
def test_proof_fit_symmetric_is_dct_projection(k):
    """App. F.1 with frequencies −(k−1)..k−1: the back-transform equals P_k G P_k (SciPy DCT-II)."""
    T = 8
    G = centred_gram(2, T, d=8)
    P = dct_projector(T, k)
    out = np.asarray(sm.proof_fit(G, k))
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, P @ G @ P, rtol=1e-9, atol=1e-12 * np.abs(G).max())


@pytest.mark.parametrize("k", [1, 3])
def test_proof_fit_printed_index_set_against_numpy_fft(k):
    """I = {1..k} ∪ {2T−k+1..2T}: N⁻²[F*(Â_II ⊕ 0)F*ᵀ]_{1:T,1:T} = ifft2(mask·fft2(G̃)) block; complex."""
    T = 6
    N = 2 * T
    G = centred_gram(3, T, d=4)
    A_hat = np.fft.fft2(reflect_loops(G))  # F A Fᵀ, F_{tt'} = ω^{(t−1)(t'−1)}
    keep = np.zeros(N, bool)
    keep[:k] = True
    keep[N - k :] = True
    ref = np.fft.ifft2(A_hat * np.outer(keep, keep))[:T, :T]
    out = np.asarray(sm.proof_fit(G, k, index_set="printed"))
    assert np.iscomplexobj(out)
    np.testing.assert_allclose(out, ref, rtol=1e-9, atol=1e-12 * np.abs(G).max())
    assert np.abs(ref.imag).max() > 1e-3 * np.abs(G).max()  # the imaginary part does not cancel


def test_dft_gamma_and_lemma1():
    N = 10
    g = np.asarray(sm.dft_gamma(N, dtype=jnp.complex128))
    ref = np.array([1.0] + [1.0 / (N * (1 - np.exp(-2j * np.pi * (t - 1) / N))) for t in range(2, N + 1)])
    np.testing.assert_allclose(g, ref, rtol=RTOL)
    x = np.random.default_rng(0).standard_normal(N)
    dx = N * (x - np.roll(x, 1))
    rhs = g * np.fft.fft(dx)
    rhs[0] += x.sum()
    np.testing.assert_allclose(np.fft.fft(x), rhs, rtol=1e-9, atol=1e-12)  # Lemma 1, eq. (14)
    # Lemma 2 as printed fails already at t = 2: |γ_2| > 1/8 (N ≥ 4)
    assert abs(g[1]) > 1 / 8


def brute_force_constant(T: int, k: int, m: int) -> float:
    """2[(4ab)^m + (4b²)^m] with a, b the largest |γ| over I∖{0} and J from the definition."""
    N = 2 * T
    gam = np.abs(np.array([1.0 / (N * (1 - np.exp(-2j * np.pi * j / N))) if j else 0.0 for j in range(N)]))
    signed = np.where(np.arange(N) <= N // 2, np.arange(N), np.arange(N) - N)
    I = (np.abs(signed) <= k - 1) & (signed != 0)
    J = np.abs(signed) >= k
    a = gam[I].max() if I.any() else 0.0
    b = gam[J].max()
    return 2 * ((4 * a * b) ** m * (k > 1) + (4 * b * b) ** m)


@pytest.mark.parametrize("T, k, m", [(4, 1, 1), (8, 3, 2), (16, 16, 3), (64, 20, 4)])
def test_corrected_constant(T, k, m):
    c = sm.corrected_constant(T, k, m)
    assert c == pytest.approx(brute_force_constant(T, k, m), rel=1e-12)
    assert c <= 4 / (4 * k) ** m * (1 + 1e-12)


@pytest.mark.parametrize("seed, smooth", [(0, False), (1, True), (2, True)])
def test_corrected_bound_holds_for_any_centred_psd(seed, smooth):
    """The recomputed bound (1/T)‖G − P_kGP_k‖_op ≤ c·‖Δ^(m,m)G̃‖_max is a theorem for every
    doubly centred PSD G (not only smooth ones); check it with NumPy norms."""
    T = 10
    G = centred_gram(seed, T, d=T, smooth=smooth)
    Gt = reflect_loops(G)
    for m in (1, 2, 3):
        dmax = np.abs(fd_loops(Gt, m, T**2)).max()
        for k in range(1, T + 1):
            P = dct_projector(T, k)
            lhs = np.linalg.norm(G - P @ G @ P, 2) / T
            assert lhs <= sm.corrected_constant(T, k, m) * dmax * (1 + 1e-9), (m, k)


def test_theorem1_bound_and_rhs_against_numpy():
    T, k, m = 10, 3, 2
    G = centred_gram(4, T, d=T, smooth=True)
    dmax = np.abs(fd_loops(reflect_loops(G), m, T**2)).max()
    rhs_p = float(sm.theorem1_rhs(G, k, m))
    assert rhs_p == pytest.approx(6 / (8 * k) ** m * dmax, rel=1e-9)
    rhs_c = float(sm.theorem1_rhs(G, k, m, constant="corrected"))
    assert rhs_c == pytest.approx(brute_force_constant(T, k, m) * dmax, rel=1e-9)
    P = dct_projector(T, k)
    lhs, rhs = sm.theorem1_bound(G, k, m, basis="dct", fit="proof")
    assert float(lhs) == pytest.approx(np.linalg.norm(G - P @ G @ P, 2) / T, rel=1e-9)
    assert float(rhs) == pytest.approx(rhs_p, rel=1e-12)
    F = np.asarray(sm.low_frequency_basis(T, k, convention="printed"))
    Pi = F @ np.linalg.pinv(F)
    lhs_b, _ = sm.theorem1_bound(G, k, m, basis="printed", fit="best")
    assert float(lhs_b) == pytest.approx(np.linalg.norm(G - Pi @ G @ Pi, 2) / T, rel=1e-9)


def test_theorem1_table_against_numpy():
    T = 12
    G = centred_gram(5, T, d=4, smooth=True)
    ks, ms = (1, 2, 5, 12), (1, 3)
    tab = sm.theorem1_table(G, ks=ks, ms=ms)
    Gt = reflect_loops(G)
    I = np.eye(T)
    for j, m in enumerate(ms):
        dmax = np.abs(fd_loops(Gt, m, T**2)).max()
        assert tab.delta_max[j] == pytest.approx(dmax, rel=1e-9)
    for i, k in enumerate(ks):
        F = np.asarray(sm.low_frequency_basis(T, k, convention="printed"))
        Pi = F @ np.linalg.pinv(F)
        P = dct_projector(T, k)
        assert tab.lhs_printed[i] == pytest.approx(np.linalg.norm(G - Pi @ G @ Pi, 2) / T, rel=1e-8, abs=1e-13)
        assert tab.lhs_printed_lower[i] == pytest.approx(
            np.linalg.norm((I - Pi) @ G @ (I - Pi), 2) / T, rel=1e-8, abs=1e-13)
        assert tab.lhs_dct[i] == pytest.approx(np.linalg.norm(G - P @ G @ P, 2) / T, rel=1e-8, abs=1e-13)
        assert tab.lhs_dct_lower[i] == pytest.approx(
            np.linalg.norm((I - P) @ G @ (I - P), 2) / T, rel=1e-8, abs=1e-13)
        for j, m in enumerate(ms):
            assert tab.rhs_printed[i, j] == pytest.approx(6 / (8 * k) ** m * tab.delta_max[j], rel=1e-12)
    assert len(tab.rows()) == len(ks) * len(ms)
    # k = T: the DCT basis spans R^T, the fit is exact
    assert tab.lhs_dct[-1] < 1e-12 * np.abs(G).max()


def test_jit_matches_eager():
    G = centred_gram(6, 6)
    eager = np.asarray(sm.finite_difference(sm.reflected_gram(G), 2))
    jitted = np.asarray(jax.jit(lambda g: sm.finite_difference(sm.reflected_gram(g), 2))(jnp.asarray(G)))
    np.testing.assert_allclose(jitted, eager, rtol=1e-12, atol=1e-12 * np.abs(eager).max())
    pf = np.asarray(jax.jit(lambda g: sm.proof_fit(g, 2))(jnp.asarray(G)))
    np.testing.assert_allclose(pf, np.asarray(sm.proof_fit(G, 2)), rtol=1e-12, atol=1e-14)


# ----------------------------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------------------------


@unchecked_shapes()
def test_bad_input():
    G = centred_gram(7, 6)
    with pytest.raises(ValueError, match="square"):
        sm.reflected_gram(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="square"):
        sm.reflected_gram(np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match="at least 2"):
        sm.reflected_gram(np.ones((1, 1)))
    bad = G.copy()
    bad[0, 1] = np.nan
    with pytest.raises(ValueError, match="NaN/Inf"):
        sm.reflected_gram(bad)
    asym = G.copy()
    asym[0, 1] += 1.0
    with pytest.raises(ValueError, match="not symmetric"):
        sm.reflected_gram(asym)
    with pytest.raises(TypeError, match="real"):
        sm.reflected_gram(G.astype(np.complex128))
    with pytest.raises(ValueError, match="even size"):
        sm.finite_difference(np.zeros((5, 5)), 1)
    with pytest.raises(ValueError, match="m must be"):
        sm.finite_difference(np.zeros((6, 6)), 0)
    for k in (0, 7, True, 1.5):
        with pytest.raises(ValueError, match="k must be"):
            sm.proof_fit(G, k)
    with pytest.raises(ValueError, match="not doubly centred"):
        sm.proof_fit(G + 1.0, 2)
    with pytest.raises(ValueError, match="index_set"):
        sm.proof_fit(G, 2, index_set="half")
    with pytest.raises(ValueError, match="positive semi-definite"):
        sm.best_low_frequency_fit(-G, 2)
    with pytest.raises(ValueError, match="convention"):
        sm.low_frequency_basis(6, 2, convention="dst")
    with pytest.raises(ValueError, match="T must be"):
        sm.low_frequency_basis(1, 1)
    with pytest.raises(ValueError, match="N must be"):
        sm.dft_gamma(1)
    with pytest.raises(ValueError, match="constant"):
        sm.theorem1_rhs(G, 2, 1, constant="tight")
    with pytest.raises(ValueError, match="basis='dct'"):
        sm.theorem1_bound(G, 2, 1, basis="printed", fit="proof")
    with pytest.raises(ValueError, match="m must be"):
        sm.theorem1_table(G, ks=(1,), ms=(0,))


def test_float64_without_x64_is_computed_in_float64():
    """The dtype rule of geomjax.base._checks: float64 input is computed in float64 even with x64 off."""
    G = centred_gram(8, 4)
    with jax.enable_x64(False):
        out = sm.reflected_gram(G)
        assert out.dtype == jnp.float64
        out32 = sm.reflected_gram(G.astype(np.float32))  # float32 is kept as is
        assert out32.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(out32), np.asarray(out), rtol=1e-5, atol=1e-6)
