"""Geometry of the positional and context bases: cosines, incoherence, clusters, PCA.

Song & Zhong (2023) measure how the positional basis P = (pos_t) (T, d) and the context basis
C = (ctx_c) (C, d) of one layer sit in R^d:

* normalized Gram matrix of [P; C] (Fig. 2),
* mutual incoherence max_{t,c} |cos(pos_t, ctx_c)| (§4, Table 1 last column),
* intra/inter-cluster mean |cos| of ctx given topic labels (Table 1),
* cluster compactness Tr(Σ_B Σ_W⁻¹) (App. C, Figs 24-26),
* projections on the top right singular vectors of P (Fig. 1 / PCA plots).

Conventions. Every function takes arrays for ONE layer; vmap over layers where natural.
Inputs keep their floating dtype: float64 NumPy/JAX inputs are computed in float64 even when JAX
float64 is globally disabled (the function then runs inside ``jax.enable_x64(True)``); nothing
is cast down. Under ``jax.jit`` the caller's dtype is whatever JAX gave the tracer. Value checks
(NaN/Inf, zero rows, label counts) run eagerly on concrete inputs and raise ``ValueError``;
under tracing they cannot raise and the result is NaN where the math is undefined.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.integrate
import scipy.special

from geomjax.base._checks import (
    HIGHEST as _HIGHEST,
    as_float_array,
    as_matrix as _matrix,
    check_finite,
    check_nonzero_rows,
    float64_aware,
    is_concrete as _is_concrete,
)
from geomjax.errors import GeomjaxError, GeomjaxTypeError
from geomjax.typing import Array, ArrayLike, Float, Int

__all__ = [
    "IncoherenceStats",
    "PCAProjection",
    "normalize_rows",
    "normalized_gram",
    "incoherence",
    "incoherence_stats",
    "cluster_similarity",
    "cluster_compactness",
    "compactness_from_scatter",
    "pca_from_scatter",
    "pca_projections",
    "mean_abs_cos_isotropic",
    "expected_max_abs_cos_isotropic",
]

def _labels(labels: ArrayLike, n: int, name: str = "labels") -> jax.Array:
    if not hasattr(labels, "dtype"):
        labels = np.asarray(labels)
    if labels.ndim != 1:
        raise GeomjaxError(f"{name} must be a rank-1 array of length {n}, got shape {labels.shape}")
    if labels.shape[0] != n:
        raise GeomjaxError(
            f"{name} has length {labels.shape[0]} but there are {n} rows to label; "
            "give exactly one label per row"
        )
    dt = np.dtype(labels.dtype)
    if not (np.issubdtype(dt, np.integer) or np.issubdtype(dt, np.bool_)):
        raise GeomjaxTypeError(f"{name} must hold integers (one class id per row), got dtype {dt}")
    return jnp.asarray(labels)


def _n_distinct(labels: jax.Array) -> int | None:
    return int(np.unique(np.asarray(labels)).size) if _is_concrete(labels) else None


# ----------------------------------------------------------------------------------------------
# Normalized Gram
# ----------------------------------------------------------------------------------------------


def _unit_rows(x: jax.Array) -> jax.Array:
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


@float64_aware(arrays=("X",))
def normalize_rows(X: Float[Array, "N d"]) -> Float[Array, "N d"]:
    """Rows scaled to unit L2 norm, x_i / ‖x_i‖ (Song & Zhong Fig. 2, P̄ and C̄).

    Args:
      X: (N, d) array; no row may be zero.

    Returns:
      (N, d) array of unit rows, same dtype.

    Raises:
      ValueError: wrong rank, NaN/Inf, or a zero row.
    """
    X = _matrix(X, "X", "(N, d)", 1, "vectors")
    check_nonzero_rows(X, "X")
    return _unit_rows(X)


@jax.jit
def _normalized_gram(X: jax.Array) -> jax.Array:
    Xh = _unit_rows(X)
    return jnp.matmul(Xh, Xh.T, precision=_HIGHEST)


@float64_aware(arrays=("X",))
def normalized_gram(X: Float[Array, "N d"]) -> Float[Array, "N N"]:
    """Normalized Gram matrix G = X̂ X̂ᵀ with unit rows x̂_i = x_i/‖x_i‖ (Song & Zhong Fig. 2).

    Fig. 2 of Song & Zhong is ``normalized_gram(jnp.concatenate([pos, ctx]))``: the (T+C)²
    matrix of cosines whose pos-pos block is smooth, pos-ctx block near 0 and ctx-ctx block
    clustered.

    Args:
      X: (N, d) vectors, one per row; no row may be zero.

    Returns:
      (N, N) matrix of cosines G_ij = cos(x_i, x_j), same dtype as X.

    Raises:
      ValueError: wrong rank, NaN/Inf, or a zero row.
    """
    X = _matrix(X, "X", "(N, d)", 1, "vectors")
    check_nonzero_rows(X, "X")
    return _normalized_gram(X)


# ----------------------------------------------------------------------------------------------
# Incoherence
# ----------------------------------------------------------------------------------------------


class IncoherenceStats(NamedTuple):
    """max and mean over all (t, c) of |cos(pos_t, ctx_c)|, scalars."""

    max: Array
    mean: Array


@functools.partial(jax.jit, static_argnames="chunk_size")
def _incoherence_parts(pos: jax.Array, ctx: jax.Array, chunk_size: int):
    P = _unit_rows(pos)
    n_ctx = ctx.shape[0]
    chunk = min(chunk_size, n_ctx)
    n_chunks = -(-n_ctx // chunk)

    def body(i, carry):
        mx, total = carry
        # The last chunk is shifted back so it stays in range; rows already seen are masked.
        start = jnp.minimum(i * chunk, n_ctx - chunk)
        block = jax.lax.dynamic_slice_in_dim(ctx, start, chunk, axis=0)
        keep = (start + jnp.arange(chunk)) >= i * chunk
        a = jnp.abs(jnp.matmul(P, _unit_rows(block).T, precision=_HIGHEST))  # (T, chunk)
        a = jnp.where(keep[None, :], a, jnp.zeros((), a.dtype))
        return jnp.maximum(mx, jnp.max(a)), total + jnp.sum(a)

    zero = jnp.zeros((), P.dtype)
    mx, total = jax.lax.fori_loop(0, n_chunks, body, (zero, zero))
    return mx, total / (pos.shape[0] * n_ctx)


def _incoherence_inputs(pos, ctx):
    pos = _matrix(pos, "pos", "(T, d)", 1, "positions")
    ctx = _matrix(ctx, "ctx", "(C, d)", 1, "contexts")
    if pos.shape[1] != ctx.shape[1]:
        raise GeomjaxError(
            f"pos and ctx must have the same width d, got pos {tuple(pos.shape)} and "
            f"ctx {tuple(ctx.shape)}"
        )
    check_nonzero_rows(pos, "pos")
    check_nonzero_rows(ctx, "ctx")
    dtype = jnp.result_type(pos.dtype, ctx.dtype)
    return pos.astype(dtype), ctx.astype(dtype)


@float64_aware(arrays=("pos", "ctx"))
def incoherence_stats(
    pos: Float[Array, "T d"], ctx: Float[Array, "C d"], *, chunk_size: int = 1024
) -> IncoherenceStats:
    """Max and mean of |cos(pos_t, ctx_c)| over all t, c (Song & Zhong §4 and Table 1 "Incoh").

    Song & Zhong §4 define the mutual incoherence as max_{t,c} |⟨pos_t/‖pos_t‖, ctx_c/‖ctx_c‖⟩|;
    the caption of their Table 1 calls the same column an *averaged* cosine similarity, so both
    are returned. Their public code never computed it.

    Memory is O((T + chunk_size)·d + T·chunk_size): ctx is processed ``chunk_size`` rows at a
    time (``lax.fori_loop``), never forming the full T×C cosine matrix.

    Args:
      pos: (T, d) positional basis; no zero rows.
      ctx: (C, d) context basis; no zero rows.
      chunk_size: number of contexts per block (static).

    Returns:
      IncoherenceStats(max, mean), scalars in the promoted dtype of pos and ctx.

    Raises:
      ValueError: wrong rank, different widths, NaN/Inf, or a zero row.
    """
    if int(chunk_size) < 1:
        raise GeomjaxError(f"chunk_size must be >= 1, got {chunk_size}")
    pos, ctx = _incoherence_inputs(pos, ctx)
    mx, mean = _incoherence_parts(pos, ctx, int(chunk_size))
    return IncoherenceStats(mx, mean)


@float64_aware(arrays=("pos", "ctx"))
def incoherence(
    pos: Float[Array, "T d"], ctx: Float[Array, "C d"], *, chunk_size: int = 1024
) -> Float[Array, ""]:
    """Mutual incoherence max_{t,c} |cos(pos_t, ctx_c)| (Song & Zhong §4, Table 1 last column).

    Args:
      pos: (T, d) positional basis; no zero rows.
      ctx: (C, d) context basis; no zero rows.
      chunk_size: contexts per block; memory O((T + chunk_size)·d).

    Returns:
      Scalar in [0, 1]: 0 when every pos_t is orthogonal to every ctx_c.

    Raises:
      ValueError: wrong rank, different widths, NaN/Inf, or a zero row.
    """
    return incoherence_stats(pos, ctx, chunk_size=chunk_size).max


# ----------------------------------------------------------------------------------------------
# Cluster similarity and compactness
# ----------------------------------------------------------------------------------------------


def _top_components(X: jax.Array, n_components: int) -> jax.Array:
    """X V_k: rows of X in the basis of its top-k right singular vectors (no centering)."""
    _, _, vt = jnp.linalg.svd(X, full_matrices=False)
    return jnp.matmul(X, vt[:n_components].T, precision=_HIGHEST)


@functools.partial(jax.jit, static_argnames="n_components")
def _cluster_similarity(ctx, labels, n_components):
    if n_components is not None:
        ctx = _top_components(ctx, n_components)
    c = _unit_rows(ctx)
    a = jnp.abs(jnp.matmul(c, c.T, precision=_HIGHEST))
    same = labels[:, None] == labels[None, :]
    zero = jnp.zeros((), a.dtype)
    intra = jnp.sum(jnp.where(same, a, zero)) / jnp.sum(same)
    inter = jnp.sum(jnp.where(same, zero, a)) / jnp.sum(~same)
    return intra, inter


@float64_aware(arrays=("ctx", "labels"))
def cluster_similarity(
    ctx: Float[Array, "C d"],
    labels: Int[Array, " C"],
    *,
    n_components: int | None = None,
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """Intra- and inter-cluster mean |cos| of the context basis (Song & Zhong Table 1).

    With ĉ_c = ctx_c/‖ctx_c‖ and A_ij = |⟨ĉ_i, ĉ_j⟩| over ordered pairs (i, j)::

        intra = mean{A_ij : labels_i == labels_j}   (diagonal i == j included, A_ii = 1)
        inter = mean{A_ij : labels_i != labels_j}

    exactly as the source code's ``avg_similarity_within_NoPCA`` / ``_between_NoPCA`` (used
    for Table 1), generalised from contiguous blocks of 64 to arbitrary labels. The source also
    has a variant that first replaces ctx by its top-20 principal coordinates U₂₀S₂₀ (no
    centering); pass ``n_components=20`` for it. Memory is O(C²).

    Args:
      ctx: (C, d) context basis, C >= 2; no zero rows.
      labels: (C,) integer topic/document id of each context; at least two distinct ids.
      n_components: optional number of principal directions to project on first (static).

    Returns:
      (intra, inter) scalars in [0, 1].

    Raises:
      ValueError: wrong rank, C < 2, len(labels) != C, a single distinct label, NaN/Inf,
        a zero row, or n_components outside [1, min(C, d)].
    """
    ctx = _matrix(ctx, "ctx", "(C, d)", 2, "contexts")
    labels = _labels(labels, ctx.shape[0])
    k = _n_distinct(labels)
    if k is not None and k < 2:
        raise GeomjaxError(
            "labels hold a single distinct value, so the inter-cluster similarity is undefined; "
            "give contexts from at least two topics"
        )
    if n_components is not None:
        n_components = int(n_components)
        if not 1 <= n_components <= min(ctx.shape):
            raise GeomjaxError(
                f"n_components must be in [1, min(C, d) = {min(ctx.shape)}], got {n_components}"
            )
    else:
        check_nonzero_rows(ctx, "ctx")
    return _cluster_similarity(ctx, labels, n_components)


@functools.partial(jax.jit, static_argnames="num_classes")
def _compactness(X, codes, num_classes, rtol):
    n = X.shape[0]
    onehot = (codes[:, None] == jnp.arange(num_classes)[None, :]).astype(X.dtype)  # (N, K)
    counts = jnp.sum(onehot, axis=0)  # (K,)
    safe = jnp.where(counts > 0, counts, jnp.ones((), X.dtype))
    means = jnp.matmul(onehot.T, X, precision=_HIGHEST) / safe[:, None]  # (K, d)
    grand = jnp.mean(X, axis=0)
    within = X - jnp.matmul(onehot, means, precision=_HIGHEST)
    sigma_w = jnp.matmul(within.T, within, precision=_HIGHEST) / n
    return _trace_ratio(sigma_w, _between(counts, means, grand) / n, rtol)


def _between(counts, means, grand):
    """Σ_k n_k (m_k − m)(m_k − m)ᵀ (d, d) from class sizes (K,), means (K, d) and the grand mean (d,)."""
    dev = (means - grand[None, :]) * jnp.sqrt(counts)[:, None]  # empty classes give 0 rows
    return jnp.matmul(dev.T, dev, precision=_HIGHEST)


def _trace_ratio(sigma_w, sigma_b, rtol):
    """Tr(Σ_B Σ_W⁺) with eigenvalues of Σ_W at or below rtol·λ_max treated as zero."""
    lam, q = jnp.linalg.eigh(sigma_w)
    keep = lam > rtol * jnp.max(lam)
    inv = jnp.where(keep, 1.0 / jnp.where(keep, lam, jnp.ones((), lam.dtype)), 0.0)
    # Tr(Σ_B Σ_W⁺) = Σ_j q_jᵀ Σ_B q_j / λ_j over the kept eigenpairs of Σ_W.
    quad = jnp.sum(q * jnp.matmul(sigma_b, q, precision=_HIGHEST), axis=0)
    return jnp.sum(quad * inv.astype(quad.dtype))


@jax.jit
def _scatter_compactness(counts, means, within, rtol):
    def one(counts, means, within):
        n = jnp.sum(counts)
        grand = jnp.matmul(counts, means, precision=_HIGHEST) / n
        between = _between(counts, means, grand)
        return _trace_ratio(within / n, between / n, rtol), within + between, grand

    for _ in range(within.ndim - 2):
        one = jax.vmap(one)
    return one(counts, means, within)


@float64_aware(arrays=("counts", "means", "within"))
def compactness_from_scatter(
    counts: Float[Array, "*L K"],
    means: Float[Array, "*L K d"],
    within: Float[Array, "*L d d"],
    *,
    rtol: float | None = None,
) -> tuple[Float[Array, "*L"], Float[Array, "*L d d"], Float[Array, "*L d"]]:
    """Cluster compactness Tr(Σ_B Σ_W⁺) (Song & Zhong App. C) from streamed class statistics.

    The same number as :func:`cluster_compactness` of the samples, from their sufficient statistics:
    class sizes n_k, class means m_k and the within-class scatter W = Σ_k Σ_{i∈k} (x_i − m_k)(x_i − m_k)ᵀ
    (e.g. ``geomjax.theory.decomposition.class_scatter_update``), so no (N, d) sample matrix is needed.
    Leading axes ``*L`` (e.g. layers) are mapped over.

    Returns:
      ``(compactness, total, grand)``: Tr(Σ_B Σ_W⁺) (same cut-off ``rtol`` as
      :func:`cluster_compactness`), the total scatter W + Σ_k n_k (m_k − m)(m_k − m)ᵀ (d, d) (for the
      PCA, :func:`pca_from_scatter`) and the grand mean m (d,).
    """
    within = as_float_array(within, "within", max(np.ndim(within), 2), "(*L, d, d)")
    d = within.shape[-1]
    if rtol is None:
        rtol = 10.0 * d * float(jnp.finfo(within.dtype).eps)
    counts = jnp.asarray(counts, within.dtype)
    return _scatter_compactness(counts, jnp.asarray(means, within.dtype), within, jnp.asarray(rtol, within.dtype))


@float64_aware(arrays=("X", "labels"))
def cluster_compactness(
    X: Float[Array, "N d"],
    labels: Int[Array, " N"],
    *,
    num_classes: int | None = None,
    rtol: float | None = None,
) -> Float[Array, ""]:
    """Cluster compactness Tr(Σ_B Σ_W⁺) (Song & Zhong App. C, Figs 24-26); larger = tighter.

    With N samples x_i, K classes of sizes n_k and means m_k, and grand mean m = mean_i x_i::

        Σ_W = (1/N) Σ_k Σ_{i in k} (x_i - m_k)(x_i - m_k)ᵀ
        Σ_B = (1/N) Σ_k n_k (m_k - m)(m_k - m)ᵀ          (Σ_W + Σ_B = total covariance, 1/N)

    Both use the same 1/N, so the ratio does not depend on it (the F-statistic convention
    1/(N-K), 1/(K-1) multiplies the result by (N-K)/(K-1)). Σ_W⁺ is the Moore-Penrose
    pseudo-inverse: eigenvalues of Σ_W at or below ``rtol·λ_max`` are treated as zero, so a
    singular Σ_W (d > N - K, or data in a subspace) is fine; directions where Σ_W vanishes are
    ignored. The paper does not state its normalisation or inverse; this is the standard LDA
    separability criterion.

    Args:
      X: (N, d) samples (e.g. ctx, cvec or raw hidden states flattened over contexts).
      labels: (N,) integer class of each sample. With ``num_classes=None`` labels must be
        concrete and may be any integers (they are re-encoded); with ``num_classes=K`` they must
        already lie in [0, K) and the function is traceable (empty classes are ignored).
      num_classes: optional static number of classes.
      rtol: relative eigenvalue cut-off of the pseudo-inverse; default 10·d·eps(dtype)
        (``jnp.linalg.pinv``'s default).

    Returns:
      Scalar Tr(Σ_B Σ_W⁺) >= 0.

    Raises:
      ValueError: wrong rank, N < 2, len(labels) != N, fewer than two classes, labels outside
        [0, num_classes), or NaN/Inf.
    """
    X = _matrix(X, "X", "(N, d)", 2, "samples")
    labels = _labels(labels, X.shape[0])
    if num_classes is None:
        if not _is_concrete(labels):
            raise GeomjaxError(
                "labels are traced: pass num_classes=K (static) with labels already in [0, K)"
            )
        uniq, codes = np.unique(np.asarray(labels), return_inverse=True)
        num_classes = int(uniq.size)
        labels = jnp.asarray(codes.reshape(-1).astype(np.int32))
    else:
        num_classes = int(num_classes)
        if _is_concrete(labels):
            lab = np.asarray(labels)
            if lab.min() < 0 or lab.max() >= num_classes:
                raise GeomjaxError(
                    f"labels must lie in [0, num_classes={num_classes}), got range "
                    f"[{lab.min()}, {lab.max()}]"
                )
            num_present = int(np.unique(lab).size)
        else:
            num_present = num_classes
        if num_present < 2:
            num_classes = num_present
    if num_classes < 2:
        raise GeomjaxError(
            "cluster compactness needs at least two distinct classes in labels, got "
            f"{num_classes}"
        )
    d = X.shape[1]
    if rtol is None:
        rtol = 10.0 * d * float(jnp.finfo(X.dtype).eps)
    return _compactness(X, labels, num_classes, jnp.asarray(rtol, X.dtype))


# ----------------------------------------------------------------------------------------------
# PCA projections
# ----------------------------------------------------------------------------------------------


class PCAProjection(NamedTuple):
    """Top right singular vectors of P and projections on them.

    Attributes:
      components: (k, d) orthonormal rows v_1..v_k (sign: largest-|entry| positive).
      singular_values: (k,) σ_1..σ_k of P.
      pos: (T, k) coordinates of the rows of P, P V_kᵀ.
      others: tuple of (..., k) coordinates of each extra array, X V_kᵀ.
    """

    components: Array
    singular_values: Array
    pos: Array
    others: tuple


def _fix_signs(v):
    """Rows of v (k, d) with each row's entry of largest magnitude made positive."""
    idx = jnp.argmax(jnp.abs(v), axis=1)
    sign = jnp.sign(jnp.take_along_axis(v, idx[:, None], axis=1))  # (k, 1)
    return v * jnp.where(sign == 0, jnp.ones((), v.dtype), sign)


@functools.partial(jax.jit, static_argnames=("k",))
def _top_eigvecs(scatter, k):
    _, q = jnp.linalg.eigh(0.5 * (scatter + jnp.swapaxes(scatter, -1, -2)))
    v = jnp.swapaxes(q[..., ::-1][..., :k], -1, -2)
    fix = _fix_signs
    for _ in range(scatter.ndim - 2):
        fix = jax.vmap(fix)
    return fix(v)


@float64_aware(arrays=("scatter",))
def pca_from_scatter(scatter: Float[Array, "*L d d"], n_components: int = 2) -> Float[Array, "*L k d"]:
    """The top principal directions (k, d) of a point cloud from its centred scatter matrix Σ (x−m)(x−m)ᵀ.

    The same directions (and signs: each row's largest-|entry| positive) as
    ``pca_projections(X, center=True).components``, from the d×d scatter instead of the (N, d) cloud:
    the top-k eigenvectors of the scatter are the top-k right singular vectors of the centred X.
    Leading axes ``*L`` are mapped over.
    """
    scatter = as_float_array(scatter, "scatter", max(np.ndim(scatter), 2), "(*L, d, d)")
    return _top_eigvecs(scatter, int(n_components))


@functools.partial(jax.jit, static_argnames=("n_components", "center"))
def _pca(P, others, n_components, center):
    if center:
        mu = P.mean(axis=0)
        P, others = P - mu[None], tuple(x - mu.reshape((1,) * (x.ndim - 1) + mu.shape) for x in others)
    _, s, vt = jnp.linalg.svd(P, full_matrices=False)
    v = _fix_signs(vt[:n_components])
    proj = lambda x: jnp.einsum("...d,kd->...k", x, v, precision=_HIGHEST)  # noqa: E731
    return v, s[:n_components], proj(P), tuple(proj(x) for x in others)


@float64_aware(arrays=("P",))
def pca_projections(
    P: Float[Array, "T d"],
    X_list: Sequence[Float[Array, "... d"] | list] = (),  # list: a nested list, converted like P
    n_components: int = 2,
    center: bool = False,
) -> PCAProjection:
    """Projections on the top right singular vectors of P (Song & Zhong Fig. 1 PCA plots; with
    ``center`` the principal components of any point cloud, e.g. App. C's Figs. 24-26).

    As the source code, P is NOT centered again by default (pos already sums to 0 over t): the
    components are the top-k right singular vectors v_j of P, and every array is projected as
    x ↦ (⟨x, v_j⟩)_j. With ``center=True`` the row mean m of P is removed first, from P and from
    every extra array (x ↦ (⟨x − m, v_j⟩)_j): the principal coordinates of a cloud of N points.
    Signs are fixed so that each v_j's entry of largest magnitude is positive.

    Args:
      P: (T, d) positional basis (or, centred, any (N, d) point cloud).
      X_list: other arrays with last axis d (e.g. cvec of 10 sequences, (10, T, d)).
      n_components: number k of components, 1 <= k <= min(T, d) (static).
      center: subtract P's row mean first (static).

    Returns:
      PCAProjection(components (k, d), singular_values (k,), pos (T, k), others (..., k) each).

    Raises:
      ValueError: wrong rank or width, k out of range, or NaN/Inf.
    """
    P = _matrix(P, "P", "(T, d)", 1, "positions")
    k = int(n_components)
    if not 1 <= k <= min(P.shape):
        raise GeomjaxError(f"n_components must be in [1, min(T, d) = {min(P.shape)}], got {k}")
    others = []
    for i, x in enumerate(X_list):
        if not hasattr(x, "dtype"):
            x = np.asarray(x)
        if x.ndim < 1 or x.shape[-1] != P.shape[1]:
            raise GeomjaxError(
                f"X_list[{i}] must have last axis d = {P.shape[1]}, got shape {tuple(x.shape)}"
            )
        x = as_float_array(x, f"X_list[{i}]", x.ndim, "(..., d)")
        check_finite(x, f"X_list[{i}]")
        others.append(x.astype(jnp.result_type(x.dtype, P.dtype)))
    v, s, pp, oo = _pca(P, tuple(others), k, bool(center))
    return PCAProjection(v, s, pp, oo)


def mean_abs_cos_isotropic(d: int) -> float:
    """E|cos(u, v)| for independent isotropic u, v in R^d: Γ(d/2) / (√π Γ((d+1)/2)).

    The scale of Song & Zhong's incoherence (Table 1, "Incoh"): cos² of two independent
    isotropic directions is Beta(1/2, (d−1)/2), so E|cos| = E√B gives the Gamma ratio above
    (≈ √(2/(π d)) for large d). Evaluated with log-Gamma, exact in float64 for any d ≥ 1.

    Args:
      d: the dimension (a positive integer).

    Returns:
      E|cos| as a Python float.

    Raises:
      ValueError: d < 1.
    """
    d = int(d)
    if d < 1:
        raise ValueError(f"mean_abs_cos_isotropic: d must be >= 1, got {d}")
    return math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / math.sqrt(math.pi)


def expected_max_abs_cos_isotropic(d: int, n: int) -> float:
    """E max_i |cos(u_i, v_i)| over n independent pairs of independent isotropic directions in R^d.

    The like-for-like scale of Song & Zhong's incoherence max_{t,c}|cos(pos_t, ctx_c)| (§4, Table 1)
    for n = T·C pairs of random directions: |cos|² of one pair is Beta(1/2, (d−1)/2), so
    P(|cos| ≤ x) = I_{x²}(1/2, (d−1)/2) (regularised incomplete beta) and
    E max = ∫_0^1 (1 − I_{x²}(1/2, (d−1)/2)^n) dx, evaluated by adaptive quadrature (scipy) in float64.
    n = 1 gives :func:`mean_abs_cos_isotropic`. (The T·C pairs of a study share their T and C vectors, so
    they are not independent; independent pairs are the reference.)

    Args:
      d: the dimension (a positive integer).
      n: the number of pairs (a positive integer).

    Returns:
      the expectation as a Python float.

    Raises:
      ValueError: d < 1 or n < 1.
    """
    d, n = int(d), int(n)
    if d < 1 or n < 1:
        raise ValueError(f"expected_max_abs_cos_isotropic: d and n must be >= 1, got d={d}, n={n}")
    if d == 1:
        return 1.0
    tail = lambda x: -math.expm1(n * math.log(max(scipy.special.betainc(0.5, (d - 1) / 2, x * x), 1e-300)))
    val, _ = scipy.integrate.quad(tail, 0.0, 1.0, limit=400, epsabs=1e-12, epsrel=1e-10)
    return float(val)
