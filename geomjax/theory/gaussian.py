"""Samplers and closed forms for the Gaussian / random-matrix statements of Wertich (2024),
"Gaussian statistics of attention" (thesis; chapters and equations cited as printed there).

Everything here is a pure JAX function (jit/vmap-able, explicit PRNG keys) unless its docstring
says it returns NumPy (fits and histograms used by reports). Equation numbers are the thesis's.
The claims that check these formulas against Monte Carlo live in :mod:`geomjax.sources.wertich`.

Conventions (made explicit because the thesis leaves them implicit):

* Joint Gaussian ``(x, y) ~ N((μ_X, μ_Y), [[Σ_X, Σ_XY], [Σ_YX, Σ_Y]])`` with the block convention
  ``Σ_XY = Cov(x, y) = E[(x − μ_X)(y − μ_Y)ᵀ]`` (the upper-right block). With ``C = AᵀB``,
  ``E⟨Ax, By⟩ = μ_XᵀCμ_Y + Tr(CᵀΣ_XY) = μ_XᵀCμ_Y + Tr(CΣ_YX)`` (:func:`bilinear_mean`). The thesis
  prints ``Tr(CΣ_XY)`` (eq. 6.2); its proof (eq. 6.7) uses ``E[yxᵀ] = μ_Yμ_Xᵀ + Σ_XY``, i.e. it
  silently means ``Σ_XY := Cov(y, x)``.
* "Xavier" for an n×n matrix is N(0, 1/n) entries (thesis §2.5); for n×m it is N(0, 2/(n+m)).
* Squared singular values of an n×m matrix with i.i.d. N(0, σ²) entries (p = min(n, m),
  q = max(n, m)) follow Marchenko–Pastur on [σ²(√q − √p)², σ²(√q + √p)²] (:func:`mp_density`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.base._checks import float64_aware
from geomjax.errors import GeomjaxError
from geomjax.typing import Array, Broadcastable, DType, Float, Key, Numeric, Real, Scalar

__all__ = [
    "xavier_variance", "xavier_normal", "haar_orthogonal", "random_spectrum_matrix", "sphere_uniform",
    "sphere_pair", "joint_gaussian", "gaussian_logpdf", "gaussian_entropy", "gaussian_mutual_information",
    "gaussian_kl", "linear_map_joint", "block2_eigenvalues", "lognormal_mean", "lognormal_mean_printed",
    "lognormal_var", "xavier_exp_mean_taylor", "xavier_exp_var_taylor", "softmax_ratio_mean",
    "softmax_ratio_mean_printed", "softmax_ratio_var", "softmax_entropy", "softmax_cross_entropy",
    "softmax_kl", "bilinear_mean", "bilinear_mean_printed", "bilinear_variance", "self_bilinear_mean",
    "mp_edges", "mp_density", "mp_density_printed", "mp_cdf", "mp_sample", "ks_distance", "wishart_moments",
    "sigma1_sq_tw", "random_orientation_trace_var", "random_orientation_trace_var_printed", "slerp", "slerp_printed",
    "slerp_ce_curve", "slerp_kl_curve", "slerp_kl_curves", "fit_cosine", "CosineFit", "fit_cosine_average",
    "AveragedCosineFit", "taylor_cross_noise", "taylor_noise_var", "taylor_noise_var_printed", "sphere_bilinear_var",
    "sphere_bilinear_var_printed",
    "bilinear_fourth_moment", "mixture_moments", "mixture_moments_mixture_reading",
    "random_attention_stack", "random_attention_stacks", "StackStats", "attention_entropy", "token_diversity",
]

# ----------------------------------------------------------------------------------------------
# Samplers
# ----------------------------------------------------------------------------------------------


def _float(dtype=None):
    return jnp.zeros((), dtype).dtype if dtype is not None else jnp.zeros(()).dtype


def xavier_variance(n_in: int, n_out: int) -> float:
    """Xavier/Glorot variance 2/(n_in + n_out) (thesis §2.5; 1/n for square n×n matrices)."""
    if n_in < 1 or n_out < 1:
        raise GeomjaxError(f"xavier_variance: dimensions must be >= 1, got ({n_in}, {n_out})")
    return 2.0 / (n_in + n_out)


@float64_aware  # dtype="float64" computes in float64 (x64 switched on for the call)
def xavier_normal(key: Key, shape: tuple[int, int], dtype: DType = None) -> Float[Array, "n m"]:
    """An n×m matrix with i.i.d. N(0, 2/(n+m)) entries (thesis §2.5 "Xavier"; N(0, 1/n) if square)."""
    if len(shape) != 2:
        raise GeomjaxError(f"xavier_normal: shape must be (n, m), got {shape}")
    s = math.sqrt(xavier_variance(shape[0], shape[1]))
    return s * jax.random.normal(key, shape, _float(dtype))


@float64_aware  # dtype="float64" computes in float64 (x64 switched on for the call)
def haar_orthogonal(key: Key, n: int, dtype: DType = None) -> Float[Array, "n n"]:
    """A Haar-distributed n×n orthogonal matrix, the "randomly oriented singular vectors" of thesis
    §6.2.5: the Q factor with positive diag(R) of a Gaussian matrix (Mezzadri 2007), computed by
    classical Gram–Schmidt with re-orthogonalisation (CGS2) in plain JAX ops, so it runs vmapped
    inside Monte Carlo scans without LAPACK custom calls."""
    z = jax.random.normal(key, (n, n), _float(dtype))

    def column(q, k):
        v = z[:, k]
        v = v - q @ (q.T @ v)  # columns >= k of q are still zero
        v = v - q @ (q.T @ v)
        return q.at[:, k].set(v / jnp.linalg.norm(v)), None

    q, _ = jax.lax.scan(column, jnp.zeros((n, n), z.dtype), jnp.arange(n))
    return q


@float64_aware(arrays=("singular_values",))
def random_spectrum_matrix(key: Key, singular_values: Float[Array, "n"]) -> Float[Array, "n n"]:
    """U diag(s) Vᵀ with independent Haar U, V (thesis §6.2.5: prescribed spectrum ŝ, random
    orientation). ``singular_values``: (n,)."""
    s = jnp.asarray(singular_values)
    n = s.shape[0]
    ku, kv = jax.random.split(key)
    u = haar_orthogonal(ku, n, s.dtype)
    v = haar_orthogonal(kv, n, s.dtype)
    return (u * s[None, :]) @ v.T


@float64_aware  # dtype="float64" computes in float64 (x64 switched on for the call)
def sphere_uniform(key: Key, n: int, radius: Scalar = 1.0, dtype: DType = None) -> Float[Array, "n"]:
    """A uniform point on the sphere S_l^{n−1} = {x ∈ R^n : ‖x‖ = l} (thesis §6.1.2 case 2)."""
    z = jax.random.normal(key, (n,), _float(dtype))
    return radius * z / jnp.linalg.norm(z)


@float64_aware  # dtype="float64" computes in float64 (x64 switched on for the call)
def sphere_pair(
    key: Key, n: int, k: Scalar, l1: Scalar = 1.0, l2: Scalar = 1.0, dtype: DType = None
) -> tuple[Float[Array, " n"], Float[Array, " n"]]:
    """(x, y) uniform on {(x, y) ∈ S_{l1}^{n−1} × S_{l2}^{n−1} : ⟨x, y⟩ = k·l1·l2} (thesis §6.3.1).

    x is uniform on its sphere; y = l2 (k x̂ + √(1−k²) u) with u uniform on the unit sphere of x̂^⊥
    (the rotation-invariant measure on the constrained set). Returns two (n,) arrays.
    """
    if n < 2:
        raise GeomjaxError(f"sphere_pair: n must be >= 2, got {n}")
    kx, ku = jax.random.split(key)
    xh = sphere_uniform(kx, n, 1.0, dtype)
    z = jax.random.normal(ku, (n,), xh.dtype)
    z = z - jnp.dot(z, xh) * xh
    u = z / jnp.linalg.norm(z)
    y = l2 * (k * xh + jnp.sqrt(jnp.maximum(1.0 - k * k, 0.0)) * u)
    return l1 * xh, y


def _psd_factor(cov):
    """A matrix F with F Fᵀ = cov for a symmetric PSD cov (eigendecomposition; works for singular)."""
    w, v = jnp.linalg.eigh(cov)
    return v * jnp.sqrt(jnp.maximum(w, 0.0))[None, :]


@float64_aware(arrays=("mean", "cov"))
def joint_gaussian(key: Key, mean: Float[Array, "D"], cov: Float[Array, "D D"]) -> Float[Array, "D"]:
    """One draw of N(mean, cov) (thesis eq. 4.1; cov symmetric PSD, possibly singular)."""
    mean = jnp.asarray(mean)
    z = jax.random.normal(key, mean.shape, mean.dtype)
    return mean + _psd_factor(jnp.asarray(cov, mean.dtype)) @ z


# ----------------------------------------------------------------------------------------------
# Joint Gaussians under linear maps (§4.2)
# ----------------------------------------------------------------------------------------------


@float64_aware(arrays=("x", "mean", "cov"))
def gaussian_logpdf(x: Float[Array, "d"], mean: Float[Array, "d"], cov: Float[Array, "d d"]) -> Float[Array, ""]:
    """log N(x; mean, cov) for a positive-definite cov (Cholesky)."""
    d = mean.shape[-1]
    c = jnp.linalg.cholesky(cov)
    z = jax.scipy.linalg.solve_triangular(c, x - mean, lower=True)
    return -0.5 * jnp.dot(z, z) - jnp.sum(jnp.log(jnp.diagonal(c))) - 0.5 * d * jnp.log(2 * jnp.pi)


@float64_aware(arrays=("cov",))
def gaussian_entropy(cov: Float[Array, "d d"]) -> Float[Array, ""]:
    """Differential entropy ½ log((2πe)^d |Σ|) in nats (thesis §4.2.2)."""
    d = cov.shape[-1]
    return 0.5 * (d * jnp.log(2 * jnp.pi * jnp.e) + jnp.linalg.slogdet(cov)[1])


@float64_aware(arrays=("cov",))
def gaussian_mutual_information(cov: Float[Array, "D D"], d1: int) -> Float[Array, ""]:
    """I(X; Y) = ½ log(|Σ_X||Σ_Y| / |Σ|) for (X, Y) jointly Gaussian, X the first d1 coordinates
    (thesis §4.2.2)."""
    ld = lambda m: jnp.linalg.slogdet(m)[1]
    return 0.5 * (ld(cov[:d1, :d1]) + ld(cov[d1:, d1:]) - ld(cov))


@float64_aware(arrays=("m0", "c0", "m1", "c1"))
def gaussian_kl(
    m0: Float[Array, " d"], c0: Float[Array, "d d"], m1: Float[Array, " d"], c1: Float[Array, "d d"]
) -> Float[Array, ""]:
    """KL(N(m0, c0) ‖ N(m1, c1)) in nats (thesis §4.2.2 "the same linear invariance ... KL")."""
    d = m0.shape[-1]
    s = jnp.linalg.solve(c1, c0)
    dm = m1 - m0
    return 0.5 * (jnp.trace(s) + dm @ jnp.linalg.solve(c1, dm) - d + jnp.linalg.slogdet(c1)[1] - jnp.linalg.slogdet(c0)[1])


@float64_aware(arrays=("L", "mean", "cov"))
def linear_map_joint(
    L: Float[Array, "d d"], mean: Float[Array, "T d"], cov: Float[Array, "T T d d"]
) -> tuple[Float[Array, "T d"], Float[Array, "T T d d"]]:
    """Thesis eq. (4.2): the law of (LX_1, …, LX_T) for a joint Gaussian with token means ``mean``
    (T, d) and blocks ``cov[i, j] = Σ_ij`` (T, T, d, d): means Lμ_i, blocks LΣ_ijLᵀ."""
    return mean @ L.T, jnp.einsum("ab,ijbc,dc->ijad", L, cov, L)


@float64_aware(arrays=("l1", "l2", "alpha"))
def block2_eigenvalues(
    l1: Broadcastable, l2: Broadcastable, alpha: Broadcastable
) -> tuple[Float[Array, "*#B"], Float[Array, "*#B"]]:
    """Eigenvalues (larger, smaller) of [[λ1², λ1λ2α], [λ1λ2α, λ2²]] (thesis §4.3.2, exact formula):
    (λ1² + λ2² ± √((λ1² + λ2²)² − 4λ1²λ2²(1 − α²)))/2."""
    s = l1**2 + l2**2
    r = jnp.sqrt(s**2 - 4 * l1**2 * l2**2 * (1 - alpha**2))
    return (s + r) / 2, (s - r) / 2


# ----------------------------------------------------------------------------------------------
# Log-normal moments and softmax ratios (§5.1.2, §5.3.1)
# ----------------------------------------------------------------------------------------------


@float64_aware(arrays=("mu", "s2"))
def lognormal_mean(mu: Broadcastable, s2: Broadcastable) -> Float[Array, "*#B"]:
    """E[exp X] = exp(μ + σ²/2) for X ~ N(μ, σ²) (correct form of thesis §5.1.2)."""
    return jnp.exp(mu + s2 / 2)


@float64_aware(arrays=("mu", "s2"))
def lognormal_mean_printed(mu: Broadcastable, s2: Broadcastable) -> Float[Array, "*#B"]:
    """E[exp X] as printed in thesis §5.1.2 / §5.3.1: exp((μ + σ²)/2) (wrong unless μ = 0)."""
    return jnp.exp((mu + s2) / 2)


@float64_aware(arrays=("mu", "s2"))
def lognormal_var(mu: Broadcastable, s2: Broadcastable) -> Float[Array, "*#B"]:
    """Var(exp X) = (exp(σ²) − 1) exp(2μ + σ²) (thesis §5.1.2, correct)."""
    return jnp.expm1(s2) * jnp.exp(2 * mu + s2)


def xavier_exp_mean_taylor(n: Broadcastable) -> Broadcastable:
    """Thesis eq. (5.1): E[exp x_i] ≈ 1 + 1/(2n) + 1/(8n²) for x_i ~ N(0, 1/n)."""
    return 1 + 1 / (2 * n) + 1 / (8 * n**2)


def xavier_exp_var_taylor(n: Broadcastable) -> Broadcastable:
    """Thesis eq. (5.2): Var(exp x_i) ≈ 1/n + 3/(2n²) for x_i ~ N(0, 1/n)."""
    return 1 / n + 3 / (2 * n**2)


@float64_aware(arrays=("mu_i", "mu_j", "s_i2", "s_j2", "s_ij"))
def softmax_ratio_mean(
    mu_i: Broadcastable, mu_j: Broadcastable, s_i2: Broadcastable, s_j2: Broadcastable, s_ij: Broadcastable
) -> Float[Array, "*#B"]:
    """E[p_i/p_j] = exp(μ_i − μ_j + (σ_i² + σ_j² − 2σ_ij)/2) (corrected thesis eq. 5.20)."""
    return jnp.exp(mu_i - mu_j + (s_i2 + s_j2 - 2 * s_ij) / 2)


@float64_aware(arrays=("mu_i", "mu_j", "s_i2", "s_j2", "s_ij"))
def softmax_ratio_mean_printed(
    mu_i: Broadcastable, mu_j: Broadcastable, s_i2: Broadcastable, s_j2: Broadcastable, s_ij: Broadcastable
) -> Float[Array, "*#B"]:
    """Thesis eq. (5.20) as printed: exp((μ_i − μ_j + σ_i² + σ_j² − 2σ_ij)/2)."""
    return jnp.exp((mu_i - mu_j + s_i2 + s_j2 - 2 * s_ij) / 2)


@float64_aware(arrays=("mu_i", "mu_j", "s_i2", "s_j2", "s_ij"))
def softmax_ratio_var(
    mu_i: Broadcastable, mu_j: Broadcastable, s_i2: Broadcastable, s_j2: Broadcastable, s_ij: Broadcastable
) -> Float[Array, "*#B"]:
    """Thesis eq. (5.21): Var(p_i/p_j) = (exp(s²) − 1) exp(2(μ_i − μ_j) + s²), s² = σ_i²+σ_j²−2σ_ij."""
    s2 = s_i2 + s_j2 - 2 * s_ij
    return jnp.expm1(s2) * jnp.exp(2 * (mu_i - mu_j) + s2)


@float64_aware(arrays=("x",))
def softmax_entropy(x: Float[Array, "*B n"]) -> Float[Array, " *B"]:
    """Entropy (nats) of softmax(x) along the last axis (thesis §5.2.3)."""
    logp = jax.nn.log_softmax(x, axis=-1)
    return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


@float64_aware(arrays=("x_target", "x"))
def softmax_cross_entropy(x_target: Float[Array, "*#B n"], x: Float[Array, "*#B n"]) -> Float[Array, "*#B"]:
    """H(Sm(x_target), Sm(x)) = −Σ Sm(x_target)_i log Sm(x)_i (nats; thesis §5.2.1, §5.2.4)."""
    return -jnp.sum(jax.nn.softmax(x_target, axis=-1) * jax.nn.log_softmax(x, axis=-1), axis=-1)


@float64_aware(arrays=("x_target", "x"))
def softmax_kl(x_target: Float[Array, "*#B n"], x: Float[Array, "*#B n"]) -> Float[Array, "*#B"]:
    """D_KL(Sm(x_target) ‖ Sm(x)) (nats; thesis §5.2.4 corollary)."""
    lp = jax.nn.log_softmax(x_target, axis=-1)
    return jnp.sum(jnp.exp(lp) * (lp - jax.nn.log_softmax(x, axis=-1)), axis=-1)


# ----------------------------------------------------------------------------------------------
# Bilinear forms (§6.2)
# ----------------------------------------------------------------------------------------------


@float64_aware(arrays=("C", "mu_x", "mu_y", "cov_xy"))
def bilinear_mean(
    C: Float[Array, "n n"], mu_x: Float[Array, " n"], mu_y: Float[Array, " n"], cov_xy: Float[Array, "n n"]
) -> Float[Array, ""]:
    """E[xᵀCy] = μ_XᵀCμ_Y + Tr(CᵀΣ_XY), Σ_XY = Cov(x, y) the upper-right block (corrected eq. 6.2).

    Shapes: C (n, n), mu_x, mu_y (n,), cov_xy (n, n)."""
    return mu_x @ C @ mu_y + jnp.trace(C.T @ cov_xy)


@float64_aware(arrays=("C", "mu_x", "mu_y", "cov_xy"))
def bilinear_mean_printed(
    C: Float[Array, "n n"], mu_x: Float[Array, " n"], mu_y: Float[Array, " n"], cov_xy: Float[Array, "n n"]
) -> Float[Array, ""]:
    """Thesis eq. (6.2) as printed: μ_XᵀCμ_Y + Tr(CΣ_XY) (with Σ_XY = Cov(x, y))."""
    return mu_x @ C @ mu_y + jnp.trace(C @ cov_xy)


@float64_aware(arrays=("C", "mu_x", "mu_y", "cov_x", "cov_y"))
def bilinear_variance(
    C: Float[Array, "n n"], mu_x: Float[Array, " n"], mu_y: Float[Array, " n"], cov_x: Float[Array, "n n"],
    cov_y: Float[Array, "n n"],
) -> Float[Array, ""]:
    """Thesis eq. (6.3), x ⟂ y: Var(xᵀCy) = Tr(Σ_X C Σ_Y Cᵀ) + μ_YᵀCᵀΣ_XCμ_Y + μ_XᵀCΣ_YCᵀμ_X."""
    return (jnp.trace(cov_x @ C @ cov_y @ C.T) + mu_y @ C.T @ cov_x @ C @ mu_y
            + mu_x @ C @ cov_y @ C.T @ mu_x)


@float64_aware(arrays=("C", "mu", "cov"))
def self_bilinear_mean(C: Float[Array, "n n"], mu: Float[Array, " n"], cov: Float[Array, "n n"]) -> Float[Array, ""]:
    """Thesis §6.2.4: E[xᵀCx] = Tr(CΣ_X) + μᵀCμ for x ~ N(μ, Σ_X)."""
    return jnp.trace(C @ cov) + mu @ C @ mu


# ----------------------------------------------------------------------------------------------
# Random matrices (§2.5, §6.2.2-§6.2.5)
# ----------------------------------------------------------------------------------------------


def mp_edges(n: int, m: int, sigma2: float = 1.0) -> tuple[float, float]:
    """Marchenko–Pastur support [σ²(√q − √p)², σ²(√q + √p)²] of the squared singular values of an
    n×m matrix with i.i.d. N(0, σ²) entries (p = min, q = max). Square: [0, 4nσ²] (eq. 6.12's 4nσ²)."""
    p, q = min(n, m), max(n, m)
    return sigma2 * (math.sqrt(q) - math.sqrt(p)) ** 2, sigma2 * (math.sqrt(q) + math.sqrt(p)) ** 2


@float64_aware(arrays=("x",))
def mp_density(x: Real[Numeric, " *B"], n: int, m: int, sigma2: Scalar = 1.0) -> Float[Array, " *B"]:
    """Marchenko–Pastur density of the p = min(n, m) squared singular values of an n×m N(0, σ²)
    matrix (corrected thesis §2.5): f(x) = √((b−x)(x−a)) / (2π σ² p x), a ≤ x ≤ b (mp_edges).
    Square n×n: √(x(4nσ² − x)) / (2π n σ² x) on [0, 4nσ²]."""
    a, b = mp_edges(n, m, sigma2)
    p = min(n, m)
    x = jnp.asarray(x)
    inside = (x > a) & (x < b)
    xs = jnp.where(inside, x, (a + b) / 2)
    f = jnp.sqrt(jnp.maximum((b - xs) * (xs - a), 0.0)) / (2 * jnp.pi * sigma2 * p * xs)
    return jnp.where(inside, f, 0.0)


@float64_aware(arrays=("x",))
def mp_density_printed(x: Real[Numeric, " *B"], sigma2: Scalar) -> Float[Array, " *B"]:
    """Thesis §2.5 as printed: f(x) = √(4σ²x − x²) / (2πσ²x) on [0, 4σ²] (n×n, entries N(0, σ²)).
    This is the law of σ_i²/n, not of σ_i² (the support misses the factor n)."""
    x = jnp.asarray(x)
    inside = (x > 0) & (x < 4 * sigma2)
    xs = jnp.where(inside, x, 2 * sigma2)
    return jnp.where(inside, jnp.sqrt(jnp.maximum(4 * sigma2 * xs - xs**2, 0.0)) / (2 * jnp.pi * sigma2 * xs), 0.0)


@float64_aware(arrays=("x",))
def mp_cdf(
    x: Real[Numeric, " *B"], n: int, m: int, sigma2: Scalar = 1.0, grid: int = 20001
) -> Float[np.ndarray, " *B"] | float:
    """CDF of :func:`mp_density` at ``x`` (NumPy, float64; trapezoid rule on a fine grid in
    θ with x = centre + half·cos θ, which removes the square-root edge singularities)."""
    a, b = mp_edges(n, m, sigma2)
    p = min(n, m)
    c, h = (a + b) / 2, (b - a) / 2
    th = np.linspace(np.pi, 0.0, grid)
    xs = c + h * np.cos(th)
    # f(x) dx with x = c + h cos θ: √((b−x)(x−a)) = h sin θ, dx = −h sin θ dθ
    if a == 0.0:  # square: x = h(1 + cos θ) and sin²θ/(1 + cos θ) = 1 − cos θ (no 0/0 at θ = π)
        integrand = h * (1 - np.cos(th)) / (2 * np.pi * sigma2 * p)
    else:
        integrand = (h * np.sin(th)) ** 2 / (2 * np.pi * sigma2 * p * xs)
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (integrand[1:] + integrand[:-1]) * np.abs(np.diff(th)))])
    cdf = cdf / cdf[-1]  # removes the (tiny) quadrature error; the law has no atom
    return np.interp(np.asarray(x, float), xs, cdf, left=0.0, right=1.0)


_batched_singular_values = jax.jit(jax.vmap(lambda a: jnp.linalg.svd(a, compute_uv=False)))


@float64_aware  # dtype="float64" computes in float64 (x64 switched on for the call)
def mp_sample(
    key: Key, n: int, m: int, sigma2: float, matrices: int, dtype: DType = None
) -> Float[Array, " N"]:
    """Pooled squared singular values of ``matrices`` i.i.d. n×m matrices with N(0, σ²) entries, sorted:
    (N,) with N = matrices·min(n, m). Their law tends to Marchenko–Pastur (:func:`mp_density`, :func:`mp_cdf`;
    thesis §2.5 and eq. 6.12)."""
    A = jax.random.normal(key, (matrices, n, m), _float(dtype)) * math.sqrt(sigma2)
    return jnp.sort((_batched_singular_values(A) ** 2).ravel())


def ks_distance(sample: Real[Numeric, " N"], cdf: Callable[[np.ndarray], np.ndarray]) -> float:
    """Kolmogorov–Smirnov statistic D_N = sup_x |F_N(x) − F(x)| of a SORTED (N,) sample to the CDF ``cdf``
    (vectorised, e.g. :func:`mp_cdf`): max over i of i/N − F(x_(i)) and F(x_(i)) − (i−1)/N (NumPy)."""
    sample = np.asarray(sample)
    n = sample.size
    F = cdf(sample)
    i = np.arange(1, n + 1)
    return float(max(np.max(i / n - F), np.max(F - (i - 1) / n)))


def wishart_moments(n: int, m: int, sigma2: float = 1.0) -> tuple[float, float]:
    """Exact E[Σσ_i²] = nmσ² and E[Σσ_i⁴] = nm(n+m+1)σ⁴ for an n×m N(0, σ²) matrix
    (moments of the Wishart matrix AᵀA; thesis eq. 6.13 and §2.5)."""
    return n * m * sigma2, n * m * (n + m + 1) * sigma2**2


def sigma1_sq_tw(n: int, sigma2: float = 1.0) -> float:
    """Johnstone (2001) Tracy–Widom approximation of E[σ_1²] for an n×n N(0, σ²) matrix:
    σ²(μ + s·E[TW₁]), μ = (√(n−1) + √n)², s = (√(n−1) + √n)(1/√(n−1) + 1/√n)^{1/3},
    E[TW₁] = −1.2065335745820 (the finite-n correction of thesis eq. 6.12's 4nσ²)."""
    a, b = math.sqrt(n - 1), math.sqrt(n)
    mu = (a + b) ** 2
    s = (a + b) * (1 / a + 1 / b) ** (1 / 3)
    return sigma2 * (mu + s * (-1.2065335745820))


@float64_aware(arrays=("sa", "sb"))
def random_orientation_trace_var(sa: Float[Array, "*#B n"], sb: Float[Array, "*#B n"]) -> Float[Array, "*#B"]:
    """Var Tr(ÂᵀB̂) = (Σσ̂_ai²)(Σσ̂_bi²)/n² for Â = U_A D_A V_Aᵀ, B̂ = U_B D_B V_Bᵀ with four independent
    Haar orthogonal matrices (corrected thesis §6.2.5; the mean is 0). sa, sb: (n,) spectra."""
    n = sa.shape[-1]
    return jnp.sum(sa**2, -1) * jnp.sum(sb**2, -1) / n**2


@float64_aware(arrays=("sa", "sb"))
def random_orientation_trace_var_printed(sa: Float[Array, "*#B n"], sb: Float[Array, "*#B n"]) -> Float[Array, "*#B"]:
    """Thesis §6.2.5 / eq. (6.34) as printed: Var Tr(ÂᵀB̂) = (1/n) Σ σ̂_ai² σ̂_bi² (true only for
    spectra with Σσ_a²σ_b² = (Σσ_a²)(Σσ_b²)/n, e.g. flat ones)."""
    n = sa.shape[-1]
    return jnp.sum(sa**2 * sb**2, -1) / n


# ----------------------------------------------------------------------------------------------
# SLERP and the cosine conjecture (§5.2.3-§5.2.4)
# ----------------------------------------------------------------------------------------------


@float64_aware(arrays=("v", "w", "t"))
def slerp(v: Float[Array, " n"], w: Float[Array, " n"], t: Real[Numeric, " *S"]) -> Float[Array, "*S n"]:
    """SLERP(v, w, t) = sin((1−t)θ)/sinθ · v + sin(tθ)/sinθ · w, θ = ∠(v, w) (thesis eq. 5.6; for
    ‖v‖ = ‖w‖ it stays on the sphere). ``t`` scalar or (T,) -> (n,) or (T, n)."""
    t = jnp.asarray(t)
    tt = t.reshape(-1, 1)
    cos = jnp.dot(v, w) / (jnp.linalg.norm(v) * jnp.linalg.norm(w))
    th = jnp.arccos(jnp.clip(cos, -1.0, 1.0))
    l1 = jnp.sin((1 - tt) * th) / jnp.sin(th)
    l2 = jnp.sin(tt * th) / jnp.sin(th)
    return (l1 * v[None, :] + l2 * w[None, :]).reshape(t.shape + v.shape)


@float64_aware(arrays=("v", "w", "t"))
def slerp_printed(v: Float[Array, " n"], w: Float[Array, " n"], t: Real[Numeric, " *S"]) -> Float[Array, "*S n"]:
    """SLERP with the weights printed in thesis §5.2.3: λ1(t) = sin((t−1)θ)/sinθ (sign error:
    it gives −v at t = 0), λ2(t) = sin(tθ)/sinθ."""
    t = jnp.asarray(t)
    tt = t.reshape(-1, 1)
    cos = jnp.dot(v, w) / (jnp.linalg.norm(v) * jnp.linalg.norm(w))
    th = jnp.arccos(jnp.clip(cos, -1.0, 1.0))
    out = (jnp.sin((tt - 1) * th) / jnp.sin(th)) * v[None, :] + (jnp.sin(tt * th) / jnp.sin(th)) * w[None, :]
    return out.reshape(t.shape + v.shape)


@float64_aware(arrays=("v", "w", "ts"))
def slerp_ce_curve(v: Float[Array, " n"], w: Float[Array, " n"], ts: Real[Array, " S"]) -> Float[Array, " S"]:
    """Thesis conjecture §5.2.4: H(Sm(w), Sm(SLERP(v, w, t))) on the grid ``ts`` (T,) -> (T,)."""
    return softmax_cross_entropy(w[None, :], slerp(v, w, ts))


@float64_aware(arrays=("v", "w", "ts"))
def slerp_kl_curve(v: Float[Array, " n"], w: Float[Array, " n"], ts: Real[Array, " S"]) -> Float[Array, " S"]:
    """Thesis Fig. 5.1: D_KL(Sm(w) ‖ Sm(SLERP(v, w, t))) on ``ts`` (T,) -> (T,)."""
    return softmax_kl(w[None, :], slerp(v, w, ts))


@float64_aware(arrays=("ts",))
def slerp_kl_curves(
    key: Key, n: int, pairs: int, ts: Real[Numeric, " S"], radius: Scalar = 1.0
) -> Float[Array, "P S"]:
    """Thesis Fig. 5.1: :func:`slerp_kl_curve` on ``ts`` (S,) for ``pairs`` independent orthogonal pairs v ⟂ w
    on S_l^{n−1}, l = ``radius`` (:func:`sphere_pair` with k = 0, keys ``split(key, pairs)``): (pairs, S).
    The dtype is that of ``ts`` (a NumPy float64 grid computes in float64)."""
    ts = jnp.asarray(ts)
    return _slerp_kl_curves(key, n, pairs, ts, jnp.asarray(radius, ts.dtype))


@functools.partial(jax.jit, static_argnums=(1, 2))
def _slerp_kl_curves(key, n, pairs, ts, radius):
    v, w = jax.vmap(lambda k: sphere_pair(k, n, 0.0, radius, radius))(jax.random.split(key, pairs))
    return jax.vmap(lambda a, b: slerp_kl_curve(a, b, ts))(v, w)


class CosineFit(NamedTuple):
    """Least-squares fit y ≈ a·cos(πt/2 + b) + c (thesis §5.2.4): parameters and residuals."""

    a: float
    b: float
    c: float
    residuals: np.ndarray
    rms: float
    max_abs: float


@float64_aware(arrays=("ts", "ys", "weights"))
def fit_cosine(
    ts: Real[Array, " S"], ys: Real[Array, " S"], weights: Real[Array, " S"] | None = None, offset: bool = True
) -> CosineFit:
    """Best a, b, c with y ≈ a·cos(πt/2 + b) + c (linear least squares in cos, sin, 1; NumPy float64).

    a·cos(πt/2 + b) = a cos b · cos(πt/2) − a sin b · sin(πt/2), so the fit is linear in
    (A, B, c) = (a cos b, −a sin b, c). ``offset=False`` fits c = 0 (eq. 5.17's form). ``weights``
    (T,) are inverse standard deviations (weighted least squares).
    """
    t = np.asarray(ts, float)
    y = np.asarray(ys, float)
    cols = [np.cos(np.pi * t / 2), np.sin(np.pi * t / 2)] + ([np.ones_like(t)] if offset else [])
    X = np.stack(cols, 1)
    w = np.ones_like(t) if weights is None else np.asarray(weights, float)
    coef, *_ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
    A, B = coef[0], coef[1]
    c = coef[2] if offset else 0.0
    res = y - X @ coef
    return CosineFit(float(np.hypot(A, B)), float(np.arctan2(-B, A)), float(c), res,
                     float(np.sqrt(np.mean(res**2))), float(np.max(np.abs(res))))


class AveragedCosineFit(NamedTuple):
    """:func:`fit_cosine_average`'s result: the mean curve and its standard error (S,), the weighted
    :class:`CosineFit` of the mean, and max |residual| / sem (over the points whose sem is not floored)."""

    mean: np.ndarray
    sem: np.ndarray
    fit: CosineFit
    max_residual_over_sem: float


@float64_aware(arrays=("ts", "curves"))
def fit_cosine_average(ts: Real[Numeric, " S"], curves: Real[Numeric, "P S"]) -> AveragedCosineFit:
    """Thesis §5.2.4 / Fig. 5.1: the average of ``curves`` (P, S) (e.g. :func:`slerp_kl_curves`) fitted by
    a·cos(πt/2 + b) + c (:func:`fit_cosine`), weighted by 1/sem (sem = std/√P over the P curves, NumPy float64).

    Where every curve takes the same value (KL = 0 at t = 1) the sem is 0 up to rounding: it is floored at
    10⁻³·max(sem) so the weights stay finite, and those points are left out of max |residual| / sem.
    """
    c = np.asarray(curves)
    mean, sem = c.mean(0), c.std(0, ddof=1) / math.sqrt(c.shape[0])
    floor = 1e-3 * sem.max()
    ok = sem > floor
    fit = fit_cosine(ts, mean, weights=1.0 / np.maximum(sem, floor))
    z = np.abs(fit.residuals[ok]) / sem[ok]
    return AveragedCosineFit(mean, sem, fit, float(z.max()))


# ----------------------------------------------------------------------------------------------
# Taylor "linearity" of exp (§5.3.2)
# ----------------------------------------------------------------------------------------------


@float64_aware(arrays=("lam", "V"))
def taylor_cross_noise(lam: Float[Array, "k"], V: Float[Array, "k n"]) -> Float[Array, "n"]:
    """The noise term Σ_{i<j} λ_iλ_j v_i∘v_j of thesis §5.3.2 (elementwise products; (n,))."""
    z = lam @ V
    return 0.5 * (z**2 - jnp.sum((lam[:, None] * V) ** 2, axis=0))


@float64_aware(arrays=("lam",))
def taylor_noise_var(lam: Float[Array, " k"], sigma2: Scalar) -> Float[Array, ""]:
    """Var of one component of Σ_{i<j}λ_iλ_j v_i v_j for independent v_i ~ N(0, σ²I):
    σ⁴ Σ_{i<j} λ_i²λ_j² = σ⁴ ((Σλ²)² − Σλ⁴)/2 (corrected §5.3.2)."""
    l2 = lam**2
    return sigma2**2 * (jnp.sum(l2) ** 2 - jnp.sum(l2**2)) / 2


def taylor_noise_var_printed(n: int, l: float) -> float:
    """Thesis §5.3.2 final value (n² − n)·(1/n⁴)·(2l²/n²) for the component variance with σ² = l/n
    (the "Jensen" bound it claims holds for every λ on the simplex)."""
    return (n**2 - n) / n**4 * 2 * l**2 / n**2


# ----------------------------------------------------------------------------------------------
# Hyperspheres (§6.3)
# ----------------------------------------------------------------------------------------------


def sphere_bilinear_var(n: int, lv: Broadcastable = 1.0, lw: Broadcastable = 1.0) -> Broadcastable:
    """Var_C(vᵀCw) = ‖v‖²‖w‖²/n for C with i.i.d. N(0, 1/n) entries, for any fixed v, w (mean 0):
    the correct form of thesis eq. (6.48), independent of ⟨v, w⟩."""
    return lv**2 * lw**2 / n


def sphere_bilinear_var_printed(n: int, k: Broadcastable) -> Broadcastable:
    """Thesis eq. (6.47)/(6.48) per pair: Var(v_iᵀCw_j) = k_ij²/n + (n−1)/n² (unit vectors)."""
    return k**2 / n + (n - 1) / n**2


def bilinear_fourth_moment(n: int) -> tuple[float, float]:
    """E[s²] = 1 and E[s⁴] = 3(1 + 2/n)² for s = xᵀCy, x, y ~ N(0, I_n/n), C_ij ~ N(0, 1) all
    independent (thesis §6.4; given x, y, s ~ N(0, ‖x‖²‖y‖²) and E‖x‖⁴ = 1 + 2/n): excess kurtosis
    12/n + 12/n², skewness 0."""
    return 1.0, 3.0 * (1 + 2 / n) ** 2


# ----------------------------------------------------------------------------------------------
# Attention as linear combinations of Gaussians (§7.1.1)
# ----------------------------------------------------------------------------------------------


@float64_aware(arrays=("lam", "mean", "cov"))
def mixture_moments(
    lam: Float[Array, "T T"], mean: Float[Array, "T d"], cov: Float[Array, "T T d d"]
) -> tuple[Float[Array, "T d"], Float[Array, "T T d d"]]:
    """Thesis §7.1.1: X̂_k = Σ_i λ_i^{(k)} X_i with fixed weights ``lam[k, i]`` and a joint Gaussian
    X (means (T, d), blocks (T, T, d, d)): mean Λμ (T, d) and blocks Σ_ij λ_i^{(k)}λ_j^{(l)} Σ_ij."""
    return lam @ mean, jnp.einsum("ki,lj,ijab->klab", lam, lam, cov)


@float64_aware(arrays=("lam_row", "mean", "cov"))
def mixture_moments_mixture_reading(
    lam_row: Float[Array, " T"], mean: Float[Array, "T d"], cov: Float[Array, "T T d d"]
) -> tuple[Float[Array, " d"], Float[Array, "d d"]]:
    """Mean and covariance of the Gaussian MIXTURE Σ_i λ_i N(μ_i, Σ_ii) (pick token i w.p. λ_i):
    μ̄ = Σλ_iμ_i, Σλ_i(Σ_ii + μ_iμ_iᵀ) − μ̄μ̄ᵀ. (What "Gaussian mixture" would mean; not §7.1.1's
    weighted sum.)"""
    mbar = lam_row @ mean
    diag = jnp.einsum("i,iiab->ab", lam_row, cov)
    second = diag + jnp.einsum("i,ia,ib->ab", lam_row, mean, mean)
    return mbar, second - jnp.outer(mbar, mbar)


# ----------------------------------------------------------------------------------------------
# Random attention stacks (§7.2.3)
# ----------------------------------------------------------------------------------------------


@float64_aware(arrays=("p",))
def attention_entropy(p: Float[Array, "*B Q K"]) -> Float[Array, " *B"]:
    """Mean row entropy (nats) of attention matrices (..., Q, K) (rows sum to 1) -> (...)."""
    return jnp.mean(-jnp.sum(jax.scipy.special.xlogy(p, p), axis=-1), axis=-1)  # 0·log 0 = 0


@float64_aware(arrays=("X",))
def token_diversity(X: Float[Array, "T d"]) -> Float[Array, ""]:
    """‖X − 1x̄ᵀ‖_F / ‖X‖_F (0 when all tokens are equal; thesis §7.2.3 "uniform embedding mixture")."""
    return jnp.linalg.norm(X - X.mean(0, keepdims=True)) / jnp.linalg.norm(X)


class StackStats(NamedTuple):
    """Per-layer statistics of a random attention stack: ``diversity`` (L+1,), layer 0 = input;
    ``entropy`` (L,), mean attention row entropy of each layer (nats)."""

    diversity: Array
    entropy: Array


def _rescale_to_norm(W, max_norm):
    s = jnp.linalg.norm(W, ord=2)
    return W * jnp.minimum(1.0, max_norm / s)


@float64_aware(arrays=("X",))
def random_attention_stack(key: Key, X: Float[Array, "T d"], n_layers: int, *, max_norm: Scalar = 2.0,
                           beta: Scalar = 1.0, layernorm: bool = False, sigma2: Scalar | None = None) -> StackStats:
    """Thesis §7.2.3: L single-head self-attention layers X ← β·Attn(X) + (1−β)·X (β = 1: no skip),
    optionally followed by a parameter-free LayerNorm, with W_q, W_k, W_v i.i.d. N(0, σ²) (default
    Xavier σ² = 1/d) rescaled so that every operator norm is ≤ ``max_norm`` (the hypothesis' q_max,
    k_max, v_max ≤ 2). Attn(X) = softmax(XW_qᵀ(XW_kᵀ)ᵀ/√d) XW_vᵀ.

    Returns :class:`StackStats` (token diversity per depth, attention entropy per layer).
    """
    T, d = X.shape
    s = math.sqrt(1.0 / d if sigma2 is None else sigma2)

    def layer(X, k):
        kq, kk, kv = jax.random.split(k, 3)
        W = [_rescale_to_norm(s * jax.random.normal(kk_, (d, d), X.dtype), max_norm) for kk_ in (kq, kk, kv)]
        q, kmat, v = X @ W[0].T, X @ W[1].T, X @ W[2].T
        p = jax.nn.softmax(q @ kmat.T / jnp.sqrt(d), axis=-1)
        Y = beta * (p @ v) + (1 - beta) * X
        if layernorm:
            Y = (Y - Y.mean(-1, keepdims=True)) / jnp.sqrt(Y.var(-1, keepdims=True) + 1e-12)
        return Y, (token_diversity(Y), attention_entropy(p[None])[0])

    _, (div, ent) = jax.lax.scan(layer, X, jax.random.split(key, n_layers))
    return StackStats(jnp.concatenate([token_diversity(X)[None], div]), ent)


@float64_aware  # dtype="float64" computes in float64 (x64 switched on for the call)
def random_attention_stacks(key: Key, stacks: int, T: int, d: int, n_layers: int, *, beta: Scalar = 1.0,
                            layernorm: bool = False, max_norm: Scalar = 2.0, dtype: DType = None) -> StackStats:
    """Thesis §7.2.3 over ``stacks`` independent draws: each of :func:`random_attention_stack` (``n_layers``
    layers, skip share ``beta``, optional LayerNorm, operator norms ≤ ``max_norm``) on its own input
    X ~ N(0, 1) of shape (T, d) (rows of norm ≈ √d, LayerNorm's scale). Returns :class:`StackStats` with
    ``diversity`` (stacks, n_layers + 1) and ``entropy`` (stacks, n_layers)."""

    def one(k):
        k1, k2 = jax.random.split(k)
        X = jax.random.normal(k1, (T, d), _float(dtype))
        return random_attention_stack(k2, X, n_layers, max_norm=max_norm, beta=beta, layernorm=layernorm)

    return jax.jit(jax.vmap(one))(jax.random.split(key, stacks))
