"""Spectral metrics of the positional basis: ScreeNOT rank, stable rank, relative norm, DCT energy.

Song & Zhong (2023) summarise the positional basis P = (pos_t) (T, d) of each layer by

* its rank estimate: ScreeNOT (Donoho, Gavish & Romanov 2023) with k = 20, strategy "i"
  (Table 1, Table 3),
* its stable rank Σσ_j²/σ_1² (Table 4),
* the explained ratio Σ_{j<=r}σ_j/Σ_jσ_j (computed in their code, unused in the paper),
* its relative norm ‖P‖op/‖M‖op against the centered hidden states (Table 1, Table 5),
* the top singular values of P, Cvec and R (Fig. 3 left),
* the 2D DCT of its normalized Gram matrix and the share of low frequencies (Fig. 3 right).

ScreeNOT
--------
:func:`screenot` reproduces the official ``screenot`` package (``adaptiveHardThresholding``):
same pseudo-noise construction for strategies "i", "0", "w", same functional
F(y) = y D'(y)/D(y) and root F(T) = -4 on (max z, ∞), same rank r = #{σ > T}. It differs only in
how the root is found: a fixed number (64) of bisection steps on t = log((y - z_max)/z_max) over
[log 1e-14, log 1e12] (so it is jit- and vmap-able and scale invariant), evaluating
y² - z_i² = (y - z_i)(y + z_i) with y - z_i = z_max·g + (z_max - z_i) (both terms >= 0, so no
cancellation), in float64. The official package bisects y to an absolute width of 1e-5, so its
threshold is only accurate to ~1e-5 absolute (poor for matrices whose singular values are
<~ 0.1); ours is accurate to float64 rounding at any scale. The bracket covers thresholds
from z_max(1 + 1e-14) to z_max(1 + 1e12); F -> -∞ at z_max and F -> -2 at ∞, so the root lies
inside for any non-degenerate spectrum (if all z are 0, F ≡ -2 has no root and T = 0). Stricter
than the official package: an unknown strategy raises even when k = 0, and k < 0 raises.

Dtypes: float64 NumPy/JAX inputs are computed in float64 even when JAX float64 is globally
disabled (the function runs inside ``jax.enable_x64(True)``); nothing is cast down. ScreeNOT's
threshold search is always float64. Value checks run eagerly on concrete inputs.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.base._checks import as_float_array, as_matrix as _matrix, check_finite
from geomjax.base._checks import check_nonzero_rows, check_square, float64_aware, is_concrete as _is_concrete, x64_context
from geomjax.errors import GeomjaxError, GeomjaxTypeError
from geomjax.theory.geometry import normalized_gram
from geomjax.typing import Array, Float, Int

__all__ = [
    "ScreeNOTResult",
    "screenot",
    "screenot_rank",
    "screenot_from_singular_values",
    "singular_values",
    "singular_values_from_second_moment",
    "stable_rank",
    "stable_rank_from_singular_values",
    "explained_ratio",
    "relative_norm",
    "relative_norm_from_moments",
    "dct_gram",
    "low_frequency_energy",
]

STRATEGIES = ("i", "0", "w")
_N_BISECT = 64
_LOG_GAP_LO = float(np.log(1e-14))
_LOG_GAP_HI = float(np.log(1e12))


# ----------------------------------------------------------------------------------------------
# ScreeNOT
# ----------------------------------------------------------------------------------------------


class ScreeNOTResult(NamedTuple):
    """Result of ScreeNOT on one matrix.

    Attributes:
      rank: int32 scalar, r = #{σ_j > threshold}; -1 if the input was non-finite under tracing.
      threshold: float64 scalar, the optimal hard threshold T (NaN for non-finite input).
      singular_values: (p,) σ_1 >= ... >= σ_p, p = min(n, m), in the input dtype.
    """

    rank: Array
    threshold: Array
    singular_values: Array


def _check_screenot_args(p: int, k, strategy) -> tuple[int, str]:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise GeomjaxTypeError(f"k (upper bound on the signal rank) must be a Python int, got {k!r}")
    k = int(k)
    if strategy not in STRATEGIES:
        raise GeomjaxError(f"unknown ScreeNOT strategy {strategy!r}; use one of {STRATEGIES}")
    if k < 0:
        raise GeomjaxError(f"k must be >= 0, got {k}")
    if k >= p:
        raise GeomjaxError(f"k too large: ScreeNOT needs k < min(n, m) = {p}, got k = {k}")
    if strategy == "i" and 2 * k + 1 >= p:
        raise GeomjaxError(
            f"k too large for the imputation strategy 'i': it needs 2k + 1 < min(n, m) = {p}, "
            f"got k = {k} (2k + 1 = {2 * k + 1}); use k <= {(p - 2) // 2} or strategy 'w'/'0'"
        )
    return k, strategy


def _check_shape(shape) -> tuple[int, int]:
    try:
        n, m = (int(s) for s in shape)
    except (TypeError, ValueError):
        raise GeomjaxError(f"shape must be a pair (n, m) of matrix dimensions, got {shape!r}")
    if n < 1 or m < 1:
        raise GeomjaxError(f"shape must have positive dimensions, got {(n, m)}")
    return n, m


def _pseudo_noise(s: jax.Array, k: int, strategy: str) -> jax.Array:
    """Pseudo-noise values z from descending σ (createPseudoNoise of the official package)."""
    if k == 0:
        return s
    rest = s[k:]
    if strategy == "0":
        top = jnp.zeros((k,), s.dtype)
    elif strategy == "w":
        top = jnp.full((k,), s[k], s.dtype)
    else:  # "i": l-th largest -> σ_(k+1) + a_l (σ_(k+1) - σ_(2k+1)), l = 1..k
        l = np.arange(1, k + 1, dtype=np.float64)
        a = (1.0 - ((l - 1.0) / k) ** (2.0 / 3.0)) / (2.0 ** (2.0 / 3.0) - 1.0)
        top = s[k] + jnp.asarray(a, s.dtype) * (s[k] - s[2 * k])
    return jnp.concatenate([top, rest])


def _F_plus_4(log_gap: jax.Array, u: jax.Array, gamma: float) -> jax.Array:
    """F(y) + 4 at y = 1 + exp(log_gap), for noise values u = z/z_max in [0, 1].

    Φ(y) = mean y/(y² - u²), Φ' = -mean (y² + u²)/(y² - u²)², D = Φ(γΦ + (1-γ)/y),
    D' = Φ'(γΦ + (1-γ)/y) + Φ(γΦ' - (1-γ)/y²), F = y D'/D. Every term of Φ, Φ', D, D' has a
    fixed sign, so the only cancellation risk is y - u, computed as g + (1 - u) exactly.
    """
    g = jnp.exp(log_gap)
    y = 1.0 + g
    q = (g + (1.0 - u)) * (y + u)  # y² - u² without cancellation
    phi = jnp.mean(y / q)
    dphi = -jnp.mean((y * y + u * u) / (q * q))
    inner = gamma * phi + (1.0 - gamma) / y
    D = phi * inner
    dD = dphi * inner + phi * (gamma * dphi - (1.0 - gamma) / (y * y))
    return y * dD / D + 4.0


@functools.partial(jax.jit, static_argnames=("gamma", "k", "strategy"))
def _screenot_core(sigma: jax.Array, gamma: float, k: int, strategy: str):
    """(rank, threshold) from descending float64 singular values."""
    finite = jnp.all(jnp.isfinite(sigma))
    z = _pseudo_noise(sigma, k, strategy)
    zmax = jnp.max(z)
    positive = zmax > 0
    scale = jnp.where(positive, zmax, 1.0)
    u = jnp.clip(z / scale, 0.0, 1.0)

    def step(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        below = _F_plus_4(mid, u, gamma) < 0.0  # F(mid) < -4: the root lies above mid
        return jnp.where(below, mid, lo), jnp.where(below, hi, mid)

    bracket = (jnp.asarray(_LOG_GAP_LO, sigma.dtype), jnp.asarray(_LOG_GAP_HI, sigma.dtype))
    lo, hi = jax.lax.fori_loop(0, _N_BISECT, step, bracket)
    thr = scale * (1.0 + jnp.exp(0.5 * (lo + hi)))
    # All pseudo-noise values zero: F ≡ -2 > -4 has no root; the infimum of {F >= -4} is 0.
    thr = jnp.where(positive, thr, 0.0)
    thr = jnp.where(finite, thr, jnp.nan)
    rank = jnp.sum(sigma > thr, dtype=jnp.int32)
    rank = jnp.where(finite, rank, jnp.int32(-1))
    return rank, thr


def _screenot_from_sorted(sigma: jax.Array, n: int, m: int, k: int, strategy: str):
    gamma = min(n / m, m / n)
    with x64_context("float64"):
        s64 = jnp.asarray(sigma).astype(jnp.float64)
        return _screenot_core(s64, gamma, k, strategy)


@float64_aware(arrays=("Y",))
def screenot(Y: Float[Array, "n m"], k: int, strategy: str = "i") -> ScreeNOTResult:
    """ScreeNOT optimal hard threshold and rank of Y (Donoho, Gavish & Romanov 2023).

    Same answer as the official ``screenot.adaptiveHardThresholding(Y, k, strategy)`` (rank
    identical, threshold to its 1e-5 absolute bisection width): σ = singular values of Y,
    pseudo-noise z replaces the k largest σ ("i": imputation σ_(k+1) + a_l(σ_(k+1) - σ_(2k+1)),
    a_l = (1 - ((l-1)/k)^{2/3})/(2^{2/3} - 1); "0": zero; "w": σ_(k+1)), γ = min(n/m, m/n),
    threshold T solves F(T) = -4 with F(y) = y D'(y)/D(y), D(y) = Φ(y)(γΦ(y) + (1-γ)/y),
    Φ(y) = mean_j y/(y² - z_j²); rank r = #{σ_j > T}. Song & Zhong (Table 1, Table 3) use
    k = 20, strategy "i" on P (T × d).

    jit/vmap: k and strategy are static; wrap as ``jax.vmap(lambda y: screenot(y, 20))``.
    The SVD runs in Y's dtype, the threshold search in float64.

    Args:
      Y: (n, m) matrix.
      k: upper bound on the signal rank, 0 <= k < min(n, m); strategy "i" needs 2k+1 < min(n, m).
      strategy: "i" (imputation, default), "0" (transport to zero) or "w" (winsorization).

    Returns:
      ScreeNOTResult(rank int32, threshold float64, singular_values (min(n, m),) descending).

    Raises:
      ValueError: Y not 2-D, NaN/Inf in Y, k out of range, or unknown strategy.
      TypeError: Y not floating point or k not an int.
    """
    Y = as_float_array(Y, "Y", 2, "(n, m)")
    n, m = Y.shape
    k, strategy = _check_screenot_args(min(n, m), k, strategy)
    check_finite(Y, "Y")
    sigma = _svals(Y)
    rank, thr = _screenot_from_sorted(sigma, n, m, k, strategy)
    return ScreeNOTResult(rank, thr, sigma)


@float64_aware(arrays=("Y",))
def screenot_rank(Y: Float[Array, "n m"], k: int, strategy: str = "i") -> Int[Array, ""]:
    """ScreeNOT rank r = #{σ_j(Y) > T} (Donoho, Gavish & Romanov 2023; Song & Zhong Table 3).

    Args:
      Y: (n, m) matrix.
      k: upper bound on the signal rank (Song & Zhong: 20).
      strategy: "i", "0" or "w" as :func:`screenot`.

    Returns:
      int32 scalar array (``int(...)`` it eagerly); the same r as the official package.

    Raises:
      ValueError, TypeError: as :func:`screenot`.
    """
    return screenot(Y, k, strategy).rank


@float64_aware(arrays=("sigma",))
def screenot_from_singular_values(
    sigma: Float[Array, " p"], shape: tuple[int, int], k: int, strategy: str = "i"
) -> ScreeNOTResult:
    """ScreeNOT threshold and rank from ALL singular values of an n×m matrix (Donoho et al. 2023).

    For callers that only have the spectrum, e.g. σ = sqrt(eig(XᵀX)) from a d×d second moment
    (:func:`singular_values_from_second_moment`); ``shape`` = (n, m) of the matrix X whose
    singular values these are (γ = min(n/m, m/n) depends on it). Same algorithm as
    :func:`screenot`.

    Args:
      sigma: (p,) all singular values, p = min(n, m), any order (sorted descending here).
      shape: (n, m) of the underlying matrix.
      k: upper bound on the signal rank, as :func:`screenot`.
      strategy: "i", "0" or "w".

    Returns:
      ScreeNOTResult with singular_values sorted descending.

    Raises:
      ValueError: sigma not 1-D, len(sigma) != min(shape), negative or NaN/Inf values, bad k
        or strategy.
    """
    n, m = _check_shape(shape)
    sigma = as_float_array(sigma, "sigma", 1, "(p,) with p = min(n, m)", finite=True)
    p = min(n, m)
    if sigma.shape[0] != p:
        raise GeomjaxError(
            f"sigma must hold all min(n, m) = {p} singular values of a {n}x{m} matrix, got "
            f"{sigma.shape[0]}"
        )
    k, strategy = _check_screenot_args(p, k, strategy)
    if _is_concrete(sigma) and bool(jnp.any(sigma < 0)):
        raise GeomjaxError("sigma holds negative values; singular values are >= 0")
    sigma = jnp.sort(sigma)[::-1]
    rank, thr = _screenot_from_sorted(sigma, n, m, k, strategy)
    return ScreeNOTResult(rank, thr, sigma)


# ----------------------------------------------------------------------------------------------
# Singular values, stable rank, explained ratio
# ----------------------------------------------------------------------------------------------


def _check_top(top, p: int) -> int | None:
    if top is None:
        return None
    top = int(top)
    if not 1 <= top <= p:
        raise GeomjaxError(f"top must be in [1, {p}] (number of singular values), got {top}")
    return top


@float64_aware(arrays=("X",))
def singular_values(X: Float[Array, "n m"], top: int | None = None) -> Float[Array, " k"]:
    """Singular values σ_1 >= σ_2 >= ... of X (Song & Zhong Fig. 3 left: top-60 of P, Cvec, R).

    Args:
      X: (n, m) matrix.
      top: keep the ``top`` largest (1 <= top <= min(n, m)); None keeps all min(n, m).

    Returns:
      (top,) or (min(n, m),) descending, in X's dtype.

    Raises:
      ValueError: X not 2-D, NaN/Inf, or top out of range.
    """
    X = _matrix(X, "X", "(n, m)", 1, "rows")
    top = _check_top(top, min(X.shape))
    s = _svals(X)
    return s if top is None else s[:top]


@jax.jit
def _svals(X: jax.Array) -> jax.Array:
    return jnp.linalg.svd(X, compute_uv=False)


@jax.jit
def _sv_from_moment(S):
    lam = jnp.linalg.eigvalsh(0.5 * (S + S.T))
    return jnp.sqrt(jnp.maximum(lam, 0.0))[::-1]


@float64_aware(arrays=("S",))
def singular_values_from_second_moment(
    S: Float[Array, "d d"], top: int | None = None
) -> Float[Array, " k"]:
    """Singular values of X from its second moment S = XᵀX: σ = sqrt(max(eig(S), 0)) descending.

    Lets Song & Zhong's Fig. 3 (left) spectra of Cvec and R (C·T × d) come from the streaming
    d×d sums Σ cvec cvecᵀ and Σ resid residᵀ without forming the matrices. S is symmetrised,
    (S + Sᵀ)/2, before ``eigvalsh``. Accuracy: σ_j carries an absolute error of about
    sqrt(eps·λ_max), so only singular values well above sqrt(eps)·σ_1 are accurate to
    relative eps; use float64 for small ones. If X has fewer rows n than d, the last d - n
    values are (numerically) zero.

    Args:
      S: (d, d) symmetric positive semi-definite second moment XᵀX.
      top: keep the ``top`` largest (1 <= top <= d); None keeps all d.

    Returns:
      (top,) or (d,) descending, in S's dtype.

    Raises:
      ValueError: S not square 2-D, NaN/Inf, or top out of range.
    """
    S = _matrix(S, "S", "(d, d)", 1, "rows")
    check_square(S, "S (the second moment)")
    top = _check_top(top, S.shape[0])
    s = _sv_from_moment(S)
    return s if top is None else s[:top]


@float64_aware(arrays=("sigma",))
def stable_rank_from_singular_values(sigma: Float[Array, " p"]) -> Float[Array, ""]:
    """Stable rank Σ_j σ_j²/σ_1² from singular values (Rudelson & Vershynin; Song & Zhong Table 4).

    Args:
      sigma: (p,) singular values, any order (σ_1 is taken as the maximum).

    Returns:
      Scalar in [1, p] (NaN if all σ are 0).

    Raises:
      ValueError: sigma not 1-D, empty, or NaN/Inf.
    """
    sigma = as_float_array(sigma, "sigma", 1, "(p,)", finite=True)
    if sigma.shape[0] < 1:
        raise GeomjaxError("sigma is empty")
    return _stable_rank_sv(sigma)


@jax.jit
def _stable_rank_sv(sigma: jax.Array) -> jax.Array:
    sq = sigma * sigma
    return jnp.sum(sq) / jnp.max(sq)


@float64_aware(arrays=("X",))
def stable_rank(X: Float[Array, "n m"]) -> Float[Array, ""]:
    """Stable rank ‖X‖_F²/‖X‖_op² = Σ_j σ_j²/σ_1² (Song & Zhong Table 4; source ``stable_rank``).

    Args:
      X: (n, m) matrix, e.g. the positional basis P (T, d).

    Returns:
      Scalar in [1, min(n, m)].

    Raises:
      ValueError: X not 2-D, NaN/Inf, or X all zeros.
    """
    X = _matrix(X, "X", "(n, m)", 1, "rows")
    s = _svals(X)
    if _is_concrete(s) and float(s[0]) == 0.0:
        raise GeomjaxError("X is all zeros; its stable rank is undefined")
    return _stable_rank_sv(s)


@float64_aware(arrays=("sigma", "r"))
def explained_ratio(sigma: Float[Array, " p"], r: int | Int[Array, ""]) -> Float[Array, ""]:
    """Explained ratio Σ_{j<=r} σ_j/Σ_j σ_j, unsquared σ (Song & Zhong source ``explained_ratio``).

    As the source code, σ are NOT squared (so this is not a variance fraction); r is usually
    the ScreeNOT rank. The paper computes but does not report it.

    Args:
      sigma: (p,) singular values; sorted descending here.
      r: number of leading values, 0 <= r <= p (may be traced).

    Returns:
      Scalar in [0, 1].

    Raises:
      ValueError: sigma not 1-D, NaN/Inf, negative values, or a concrete r outside [0, p].
    """
    sigma = as_float_array(sigma, "sigma", 1, "(p,)", finite=True)
    p = sigma.shape[0]
    if _is_concrete(r):
        r_int = int(r)
        if not 0 <= r_int <= p:
            raise GeomjaxError(f"r must be in [0, {p}], got {r_int}")
    if _is_concrete(sigma) and bool(jnp.any(sigma < 0)):
        raise GeomjaxError("sigma holds negative values; singular values are >= 0")
    return _explained_ratio(sigma, jnp.asarray(r, jnp.int32))


@jax.jit
def _explained_ratio(sigma: jax.Array, r: jax.Array) -> jax.Array:
    s = jnp.sort(sigma)[::-1]
    keep = jnp.arange(s.shape[0]) < r
    return jnp.sum(jnp.where(keep, s, jnp.zeros((), s.dtype))) / jnp.sum(s)


# ----------------------------------------------------------------------------------------------
# Relative norm
# ----------------------------------------------------------------------------------------------


def _op_norm(X: jax.Array) -> jax.Array:
    return jnp.linalg.svd(X, compute_uv=False)[0]


@float64_aware(arrays=("P", "M", "mean"))
def relative_norm(
    P: Float[Array, "T d"],
    M: Float[Array, "N d"],
    *,
    centered: bool = True,
    mean: Float[Array, " d"] | None = None,
) -> Float[Array, ""]:
    """Relative norm ‖P_tiled‖op / ‖M‖op of the positional basis (Song & Zhong Table 1, Table 5).

    The rows of M are hidden states ordered (context, position), N = C'·T; P's T rows repeat
    once per context (P_tiled, N × d, as the source code's ``np.concatenate([p]*nseq)``), so
    ‖P_tiled‖op = sqrt(N/T)·‖P‖op (if N == T, P is used as is). What M is, is the caller's
    choice:

    * paper's definition (M = h - μ, centered embeddings): pass the raw states with
      ``mean=μ`` (the corpus mean), or use :func:`relative_norm_from_moments` on all C contexts;
    * ``centered=True`` without ``mean``: M minus its own column mean (one version of the
      source's ``src/utils/metrics.py``, ``m - m.mean(0)`` over the 32 held-out sequences);
    * ``centered=False``: M as given. Passing the raw uncentered states P_tiled + cvec + μ of
      the 32 sequences reproduces the other version of that file (μ included), the one
      the source repository's current version computes. The public history holds both; which one produced the
      paper's Tables 1 and 5 is not recorded.

    Args:
      P: (T, d) positional basis.
      M: (N, d) hidden states, N a multiple of T.
      centered: subtract a mean from M's rows before the norm.
      mean: (d,) the mean to subtract when centered (default: M's column mean).

    Returns:
      Scalar ‖P_tiled‖op / ‖M - mean‖op.

    Raises:
      ValueError: wrong ranks, widths differ, N not a multiple of T, NaN/Inf, or ``mean`` given
        with centered=False.
    """
    P = _matrix(P, "P", "(T, d)", 1, "positions")
    M = _matrix(M, "M", "(N, d)", 1, "rows")
    T, d = P.shape
    N = M.shape[0]
    if M.shape[1] != d:
        raise GeomjaxError(f"P and M must have the same width d, got P {P.shape} and M {M.shape}")
    if N % T:
        raise GeomjaxError(
            f"M has {N} rows, not a multiple of T = {T}: its rows must be (context, position) "
            "hidden states so that P can be tiled once per context"
        )
    if mean is not None:
        if not centered:
            raise GeomjaxError("mean was given but centered=False; pass centered=True to use it")
        mean = as_float_array(mean, "mean", 1, "(d,)", finite=True)
        if mean.shape[0] != d:
            raise GeomjaxError(f"mean must have shape ({d},), got {tuple(mean.shape)}")
    dtype = jnp.result_type(P.dtype, M.dtype)
    if mean is not None:
        mean = mean.astype(dtype)
    return _relative_norm(P.astype(dtype), M.astype(dtype), bool(centered), mean)


@functools.partial(jax.jit, static_argnames="centered")
def _relative_norm(P, M, centered: bool, mean):
    if centered:
        mu = jnp.mean(M, axis=0) if mean is None else mean
        M = M - mu[None, :]
    reps = M.shape[0] // P.shape[0]
    return jnp.sqrt(jnp.asarray(reps, P.dtype)) * _op_norm(P) / _op_norm(M)


@float64_aware(arrays=("pos", "centered_second_moment"))
def relative_norm_from_moments(
    pos: Float[Array, "T d"],
    centered_second_moment: Float[Array, "d d"],
    n_contexts: int,
) -> Float[Array, ""]:
    """Relative norm ‖P_tiled‖op/‖H - μ‖op from streaming statistics (Song & Zhong Table 1, 5).

    The paper's definition over all C contexts, without materializing the C·T × d matrices:
    P_tiled (P repeated for each of the C contexts) has P_tiledᵀP_tiled = C·PᵀP, so
    ‖P_tiled‖op = sqrt(C)·‖P‖op; the centered states M = (h_{c,t} - μ) have MᵀM = S =
    Σ_{c,t}(h - μ)(h - μ)ᵀ, so ‖M‖op = sqrt(λ_max(S)). Equal to
    ``relative_norm(P, H.reshape(-1, d), centered=True)`` on the same C contexts (μ = their
    mean). Use float64 statistics when |μ| is large.

    Args:
      pos: (T, d) positional basis of the same C contexts.
      centered_second_moment: (d, d) S = Σ_{c,t} (h_{c,t} - μ)(h_{c,t} - μ)ᵀ.
      n_contexts: C, the number of contexts in S.

    Returns:
      Scalar sqrt(C)·σ_1(P) / sqrt(λ_max(S)).

    Raises:
      ValueError: wrong shapes, widths differ, NaN/Inf, n_contexts < 1.
    """
    P = _matrix(pos, "pos", "(T, d)", 1, "positions")
    S = _matrix(centered_second_moment, "centered_second_moment", "(d, d)", 1, "rows")
    d = P.shape[1]
    if S.shape != (d, d):
        raise GeomjaxError(
            f"centered_second_moment must have shape (d, d) = ({d}, {d}) to match pos, got "
            f"{tuple(S.shape)}"
        )
    if _is_concrete(n_contexts) and int(n_contexts) < 1:
        raise GeomjaxError(f"n_contexts must be >= 1, got {n_contexts}")
    dtype = jnp.result_type(P.dtype, S.dtype)
    return _relative_norm_moments(P.astype(dtype), S.astype(dtype), jnp.asarray(n_contexts, dtype))


@jax.jit
def _relative_norm_moments(P, S, c):
    lam_max = jnp.linalg.eigvalsh(0.5 * (S + S.T))[-1]
    return jnp.sqrt(c) * _op_norm(P) / jnp.sqrt(lam_max)


# ----------------------------------------------------------------------------------------------
# 2D DCT of the normalized Gram matrix
# ----------------------------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames="n_freq")
def _dct_gram(P: jax.Array, n_freq: int | None) -> jax.Array:
    F = jax.scipy.fft.dctn(normalized_gram(P), type=2, norm="ortho")
    return F if n_freq is None else F[:n_freq, :n_freq]


@float64_aware(arrays=("P",))
def dct_gram(P: Float[Array, "T d"], n_freq: int | None = None) -> Float[Array, "k k"]:
    """2D type-II DCT of the normalized positional Gram matrix (Song & Zhong Fig. 3 right, §2.2).

    P̂ = rows of P scaled to unit norm, G = P̂P̂ᵀ (T × T), F = D G Dᵀ with D the orthonormal
    DCT-II matrix (rows are the cosine basis vectors), i.e.
    ``jax.scipy.fft.dctn(G, type=2, norm="ortho")``. This equals the source code's
    ``f_dct.T @ g @ f_dct`` with ``f_dct = scipy.fftpack.dct(eye(T), type=2, norm="ortho")``.
    F[0, 0] is the DC term; Fig. 3 shows F[1:10, 1:10] (DC dropped), App. B.3 includes it.
    D is orthogonal, so Σ F² = Σ G² (Parseval).

    Args:
      P: (T, d) positional basis; no zero rows.
      n_freq: None returns the full (T, T) F (needed by :func:`low_frequency_energy`); an int
        1 <= n_freq <= T returns the top-left (n_freq, n_freq) block (DC included).

    Returns:
      (T, T) or (n_freq, n_freq) DCT coefficients, P's dtype.

    Raises:
      ValueError: P not 2-D, NaN/Inf, a zero row, or n_freq out of range.
    """
    P = _matrix(P, "P", "(T, d)", 1, "positions")
    check_nonzero_rows(P, "P")
    T = P.shape[0]
    if n_freq is not None:
        n_freq = int(n_freq)
        if not 1 <= n_freq <= T:
            raise GeomjaxError(f"n_freq must be in [1, T = {T}] or None, got {n_freq}")
    return _dct_gram(P, n_freq)


@float64_aware(arrays=("F",))
def low_frequency_energy(
    F: Float[Array, "T T"], k: int, *, include_dc: bool = True
) -> Float[Array, ""]:
    """Share of the DCT energy Σ F² in the k lowest frequencies (Song & Zhong Fig. 3 right, Thm 1).

    * ``include_dc=True``: Σ_{i,j<k} F_ij² / Σ_{i,j} F_ij² (top-left k×k block, DC included).
    * ``include_dc=False``: the DC row and column are removed from numerator and denominator:
      Σ_{1<=i,j<=k} F_ij² / Σ_{i,j>=1} F_ij² (frequencies 1..k, as Fig. 3's F[1:10, 1:10]).

    Args:
      F: (T, T) full DCT coefficients from ``dct_gram(P)`` (n_freq=None).
      k: number of lowest frequencies per axis, 1 <= k <= T (T - 1 without DC).
      include_dc: whether frequency 0 counts (see above).

    Returns:
      Scalar in [0, 1].

    Raises:
      ValueError: F not square 2-D, NaN/Inf, or k out of range.
    """
    F = as_float_array(F, "F", 2, "(T, T)", finite=True)
    check_square(F, "F (the DCT matrix)", shape_doc="(T, T)")
    T = F.shape[0]
    kmax = T if include_dc else T - 1
    k = int(k)
    if not 1 <= k <= kmax:
        raise GeomjaxError(
            f"k must be in [1, {kmax}] for a {T}x{T} F with include_dc={include_dc}, got {k}"
        )
    return _low_frequency_energy(F, k, bool(include_dc))


@functools.partial(jax.jit, static_argnames=("k", "include_dc"))
def _low_frequency_energy(F: jax.Array, k: int, include_dc: bool) -> jax.Array:
    E = F * F
    if not include_dc:
        E = E[1:, 1:]
    return jnp.sum(E[:k, :k]) / jnp.sum(E)
