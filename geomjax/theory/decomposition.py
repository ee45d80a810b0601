"""Mean decomposition of hidden states, Song & Zhong eqs. (2)-(3), in memory and streaming.

For one layer's hidden states h of shape (C, T, d) (C contexts, T positions, width d)::

    h[c, t] = mean + pos[t] + ctx[c] + resid[c, t]                        (eq. 2)
    mean    = (1/CT) sum_{c,t} h[c, t]
    pos[t]  = (1/C)  sum_c h[c, t] - mean                                  (eq. 3)
    ctx[c]  = (1/T)  sum_t h[c, t] - mean
    cvec    = ctx + resid = h - mean - pos

Because the design is balanced, the cross terms of the two-way ANOVA vanish::

    sum_{c,t} (h-mean)(h-mean)^T = C sum_t pos pos^T + T sum_c ctx ctx^T + sum_{c,t} resid resid^T

Streaming (``decompose_stream``) makes ONE pass over batches of contexts (B, T, d) and keeps
O(d^2 + T d + C d) numbers: never the C x T x d tensor. It is numerically safe when |mean| is
orders of magnitude above the residual scale (GPT-2 has channels at ~10^3 x). Context means m_c
are exact per batch (stored as m_c - K around a shift K), and the only d x d sum is taken around
a per-position shift p_hat fixed from the first batch; its exact correction is applied once at
the end::

    a[c,t] = h[c,t] - m_c - p_hat[t] = resid[c,t] + delta[t],   delta = pos - p_hat
    sum resid resid^T      = sum a a^T - C sum_t delta delta^T        (sum_c resid[c,t] = 0)
    sum (h-mean)(h-mean)^T = C sum pos pos^T + T sum ctx ctx^T + sum resid resid^T   (ANOVA)

The correction is tiny (delta = O(resid / sqrt(batch))), every other term is a sum of positive
semi-definite pieces, so float32 accumulation keeps float32 accuracy; float64 is available. Per
token the stream costs one rank-1 update of a d x d matrix (2 d^2 flops), half of what
accumulating the total second moment separately would cost.
``benchmarks/bench_decomposition.py`` and ``tests/unit/test_decomposition.py`` measure both.

The same update runs sharded over a 1-D ``"data"`` mesh (``jax.shard_map``; every sum is a
``psum``), giving the single-device statistics up to float rounding.
"""

from __future__ import annotations

import itertools
import typing
from collections.abc import Iterable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh, PartitionSpec as P

from geomjax.base._checks import (
    HIGHEST,
    check_accum_dtype,
    check_finite,
    check_no_silent_float64,
    compiled_cache,
    float64_aware,
    x64_context,
)
from geomjax.base._repr import with_compact_repr
from geomjax.errors import GeomjaxError, GeomjaxTypeError
from geomjax.base.parallel import AXIS, check_divisible, shard_batch
from geomjax.typing import Array, Float, Int

__all__ = [
    "Decomposition",
    "DecompositionStats",
    "decompose",
    "decompose_stream",
    "decompose_sharded",
    "StreamState",
    "stream_init",
    "stream_update",
    "stream_merge",
    "stream_finalize",
    "GRAM_PRECISIONS",
    "ClassScatter",
    "class_scatter_init",
    "class_scatter_update",
]

# ----------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------


def _check_dtype(x, where: str) -> None:
    dt = np.dtype(x.dtype)
    if not np.issubdtype(dt, np.floating) and dt.name not in ("bfloat16",):
        raise GeomjaxTypeError(f"{where}: hidden states must be floating point, got dtype {dt}")
    check_no_silent_float64(dt, where, "hidden states")


def _check_shape(shape, where: str, drop_first: bool, want_ndim: int = 3) -> tuple[int, int, int]:
    if len(shape) != want_ndim:
        raise GeomjaxError(
            f"{where}: expected hidden states of shape (C, T, d) (rank 3), got shape {tuple(shape)}"
        )
    C, T, d = (int(s) for s in shape)
    T_used = T - 1 if drop_first else T
    if T_used < 2:
        raise GeomjaxError(
            f"{where}: need at least 2 positions after drop_first={drop_first}, got T={T}"
        )
    if d < 1:
        raise GeomjaxError(f"{where}: width d must be >= 1, got shape {tuple(shape)}")
    return C, T_used, d


# ----------------------------------------------------------------------------------------------
# In-memory decomposition
# ----------------------------------------------------------------------------------------------


@with_compact_repr
@struct.dataclass
class Decomposition:
    """The four parts of eq. (2) for one layer, all in the input dtype.

    Attributes:
      mean:  (d,)      global mean mu.
      pos:   (T, d)    positional basis pos_t (sums to 0 over t).
      ctx:   (C, d)    context basis ctx_c (sums to 0 over c).
      resid: (C, T, d) residuals (sum to 0 over c and over t).

    Example:
      >>> import numpy as np, geomjax as gj
      >>> dec = gj.decompose(np.arange(24.0).reshape(2, 3, 4))  # (C, T, d) = (2, 3, 4), float64
      >>> dec.mean.shape, dec.pos.shape, dec.ctx.shape, dec.resid.shape
      ((4,), (3, 4), (2, 4), (2, 3, 4))
      >>> bool(np.allclose(dec.reconstruct(), np.arange(24.0).reshape(2, 3, 4)))
      True
    """

    mean: Float[Array, " d"]
    pos: Float[Array, "T d"]
    ctx: Float[Array, "C d"]
    resid: Float[Array, "C T d"]

    @property
    def cvec(self) -> Float[Array, "C T d"]:
        """cvec = ctx + resid = h - mean - pos, shape (C, T, d) (Song & Zhong §2)."""
        return self.ctx[:, None, :] + self.resid

    def reconstruct(self) -> Float[Array, "C T d"]:
        """h = mean + pos + ctx + resid (eq. 2), shape (C, T, d)."""
        return self.mean[None, None, :] + self.pos[None, :, :] + self.cvec


@jax.jit
def _decompose(h: Float[Array, "C T d"]) -> Decomposition:
    # Two-pass mean: the correction removes the rounding of the first pass, which would
    # otherwise reappear in resid (resid = hc - pos - ctx carries -1x any error of the mean).
    mean0 = jnp.mean(h, axis=(0, 1))
    hc0 = h - mean0[None, None, :]
    corr = jnp.mean(hc0, axis=(0, 1))
    mean = mean0 + corr
    hc = hc0 - corr[None, None, :]
    pos = jnp.mean(hc, axis=0)
    ctx = jnp.mean(hc, axis=1)
    resid = hc - pos[None, :, :] - ctx[:, None, :]
    return Decomposition(mean=mean, pos=pos, ctx=ctx, resid=resid)


@float64_aware(arrays=("h",))
def decompose(h: Float[Array, "C T d"], drop_first: bool = False) -> Decomposition:
    """Decompose hidden states h = mean + pos + ctx + resid (Song & Zhong eqs. (2)-(3)).

    Args:
      h: hidden states of one layer, shape (C, T, d) with C >= 2 contexts, T >= 2 positions.
      drop_first: drop position 0 before decomposing (the source code does: the first token
        acts as an attention sink). Default False in every library function (decompose,
        decompose_stream, decompose_sharded, extraction.decompose_model_stream): nothing is dropped
        unless asked. T then counts the remaining positions.

    Returns:
      ``Decomposition`` with mean (d,), pos (T, d), ctx (C, d), resid (C, T, d) and the derived
      ``cvec`` (C, T, d), in h's dtype (float64 for NumPy float64 or list input: the dtype rule of
      :mod:`geomjax.base._checks`). The mean is removed first, with a second pass that corrects its
      rounding, so a large mean does not cost precision.

    The NaN/Inf check needs concrete values: under ``jit``/``vmap``/``grad`` it is skipped and a
    NaN in h propagates to the outputs.

    Raises:
      ValueError: wrong rank, C < 2, T < 2 (after ``drop_first``), NaN/Inf (outside ``jit``).
      TypeError: non-float input.

    Example (a planted positional signal pos_t = t·e₀ is recovered exactly; lists are accepted):
      >>> import numpy as np, geomjax as gj
      >>> h = np.zeros((3, 4, 2)); h[:, :, 0] = np.arange(4.0)   # (C, T, d), every context the same
      >>> dec = gj.decompose(h.tolist())
      >>> np.asarray(dec.pos[:, 0]).tolist(), dec.pos.dtype
      ([-1.5, -0.5, 0.5, 1.5], dtype('float64'))
    """
    _check_dtype(h, "decompose")
    C, _, _ = _check_shape(np.shape(h), "decompose", drop_first)
    if C < 2:
        raise GeomjaxError(f"decompose: need at least 2 contexts (C >= 2), got C={C}")
    check_finite(h, "hidden states h", "decompose")
    h = jnp.asarray(h)
    if drop_first:
        h = h[:, 1:, :]
    return _decompose(h)


# ----------------------------------------------------------------------------------------------
# Streaming decomposition
# ----------------------------------------------------------------------------------------------


@typing.no_type_check  # JAX rebuilds it with ShapeDtypeStruct leaves (plan_step); fields stay annotated
@with_compact_repr
@struct.dataclass
class StreamState:
    """Sufficient statistics of the one-pass decomposition (all in the accumulation dtype).

    Attributes:
      shift:        (d,)   K, the first batch's mean.
      pos_shift:    (T, d) p_hat, the first batch's mean within-context deviation per position.
      n_contexts:   ()     number of contexts seen (int32).
      sum_ctx:      (d,)   sum_c (m_c - K).
      sum_within:   (T, d) sum_c a[c, t], a = h - m_c - p_hat.
      s_within:     (d, d) sum_{c,t} a a^T.
    """

    shift: Array
    pos_shift: Array
    n_contexts: Array
    sum_ctx: Array
    sum_within: Array
    s_within: Array


@with_compact_repr
@struct.dataclass
class DecompositionStats:
    """Result of the streaming decomposition (Song & Zhong eqs. (2)-(3)) for one layer.

    Attributes:
      mean: (d,) global mean.  pos: (T, d).  ctx: (C, d).
      n_contexts: C.  n_positions: T.
      centered_second_moment: (d, d) sum_{c,t} (h-mean)(h-mean)^T.
      resid_second_moment:    (d, d) sum_{c,t} resid resid^T.
      accum_dtype: "float32" or "float64", the dtype every sum was accumulated in. Float64
        arrays stay float64; do further JAX arithmetic on them under ``jax.enable_x64(True)``
        (or convert with ``np.asarray``), since JAX truncates float64 when x64 is off.
    With a leading layer axis L on every array when produced by a stacked stream.

    Example:
      >>> import numpy as np, geomjax as gj
      >>> st = gj.decompose_stream([np.ones((2, 3, 4)), np.zeros((2, 3, 4))])   # two batches of (B, T, d)
      >>> st.n_contexts, st.n_positions, st.pos.shape, np.asarray(st.ctx[:, 0]).tolist()
      (4, 3, (3, 4), [0.5, 0.5, -0.5, -0.5])
    """

    mean: Array
    pos: Array
    ctx: Array
    centered_second_moment: Array
    resid_second_moment: Array
    n_contexts: int = struct.field(pytree_node=False)
    n_positions: int = struct.field(pytree_node=False)
    accum_dtype: str = struct.field(pytree_node=False)

    @property
    def pos_second_moment(self) -> Array:
        """C * sum_t pos_t pos_t^T, shape (d, d): the positional share of the ANOVA identity."""
        with x64_context(self.accum_dtype):
            return self.n_contexts * jnp.einsum("...td,...te->...de", self.pos, self.pos)

    @property
    def ctx_second_moment(self) -> Array:
        """T * sum_c ctx_c ctx_c^T, shape (d, d): the context share of the ANOVA identity."""
        with x64_context(self.accum_dtype):
            return self.n_positions * jnp.einsum("...cd,...ce->...de", self.ctx, self.ctx)

    @property
    def cvec_second_moment(self) -> Array:
        """sum_{c,t} cvec cvec^T = T sum_c ctx ctx^T + sum resid resid^T, shape (d, d)."""
        with x64_context(self.accum_dtype):
            return self.ctx_second_moment + self.resid_second_moment


def _gram(x: Array) -> Array:
    """x^T x for x of shape (..., d) flattened over all leading axes -> (d, d).

    One GEMM (2d² flops per row). NumPy's ``x.T @ x`` calls BLAS syrk, which computes one
    triangle (half the flops); XLA has no syrk, and a block-triangular emulation was slower
    inside the fused update (benchmarks/RESULTS.md).
    """
    flat = x.reshape(-1, x.shape[-1])
    return jnp.matmul(flat.T, flat, precision=HIGHEST)


GRAM_PRECISIONS = ("highest", "bf16x3")


def _gram_bf16x3(x: Array) -> Array:
    """x^T x from three bfloat16 products with float32 accumulation (tensor cores on GPU / TPU).

    x = hi + lo with hi = bf16(x), lo = bf16(x − hi); x^T x ≈ hiᵀhi + hiᵀlo + loᵀhi (loᵀlo, ~2^-16 of
    the result, dropped). benchmarks/RESULTS.md measures its error against float64.
    """
    flat = x.reshape(-1, x.shape[-1]).astype(jnp.float32)
    hi = flat.astype(jnp.bfloat16)
    lo = (flat - hi.astype(jnp.float32)).astype(jnp.bfloat16)

    def dot(a, b):
        return jnp.matmul(a.T, b, preferred_element_type=jnp.float32)

    cross = dot(hi, lo)
    return (dot(hi, hi) + (cross + cross.T)).astype(x.dtype)


def _sum_leading(a: Array) -> Array:
    """Σ_i a[i] over the leading axis, as a GEMV with a ones vector.

    Same sum as ``jnp.sum(a, axis=0)``, but XLA:CPU reduces over a major axis of a (B, T, d)
    array ~35× slower than it runs the equivalent matrix-vector product (measured in
    benchmarks/RESULTS.md); on GPU both are fast.
    """
    flat = a.reshape(a.shape[0], -1)
    ones = jnp.ones((a.shape[0],), a.dtype)
    return jnp.matmul(ones, flat, precision=HIGHEST).reshape(a.shape[1:])


def _mean_middle(x: Array) -> Array:
    """mean over axis 1 of (B, T, d) as a batched GEMV (see :func:`_sum_leading`)."""
    w = jnp.full((x.shape[1],), 1.0 / x.shape[1], x.dtype)
    return jnp.einsum("btd,t->bd", x, w, precision=HIGHEST)


# The streaming accumulator: stream_init / stream_update / stream_merge / stream_finalize. Pure
# functions (jit, vmap over layers and shard_map over a "data" axis compose with them); the drivers
# below (decompose_stream, decompose_sharded) and geomjax.tools.extraction.decompose_model_stream jit them.


def stream_init(
    first_batch: Float[Array, "B T d"], accum_dtype: str = "float32", *, axis_name: str | None = None
) -> StreamState:
    """Empty streaming state whose shifts come from the first batch (B, T, d) (module docstring).

    K = mean of the batch, p_hat[t] = mean_c (h[c, t] - m_c); both only fix where the sums are
    taken, so any batch gives exact final statistics (the correction is applied in
    :func:`stream_finalize`). The first batch is not accumulated: pass it to :func:`stream_update`
    as usual. Inside ``shard_map`` over ``axis_name`` the shifts are averaged across devices
    (equal-sized shards give the global batch's shifts), so every device holds the same state.
    Pure and traceable; computed in ``accum_dtype`` (call it under
    ``geomjax.base._checks.x64_context(accum_dtype)`` for float64 when JAX x64 is off).
    """
    dtype = check_accum_dtype(accum_dtype, "stream_init")
    check_no_silent_float64(dtype, "stream_init", "accum_dtype")
    x = jnp.asarray(first_batch).astype(dtype)
    B, T, d = x.shape
    reduce_mean = (lambda a: a) if axis_name is None else partial(jax.lax.pmean, axis_name=axis_name)
    m = _mean_middle(x)  # (B, d)
    z = jnp.zeros
    return StreamState(
        shift=reduce_mean(_sum_leading(m) / B),
        pos_shift=reduce_mean(_sum_leading(x - m[:, None, :]) / B),
        n_contexts=jnp.zeros((), jnp.int32),
        sum_ctx=z((d,), dtype),
        sum_within=z((T, d), dtype),
        s_within=z((d, d), dtype),
    )


def stream_merge(state: StreamState, other: StreamState) -> StreamState:
    """The state of both streams: ``other``'s sums added to ``state``'s (the ANOVA sums are additive).

    Both must have been started with the same shifts (one :func:`stream_init`, as on every device
    of a sharded stream); the shifts of ``state`` are kept. Pure and traceable.
    """
    return state.replace(
        n_contexts=state.n_contexts + other.n_contexts,
        sum_ctx=state.sum_ctx + other.sum_ctx,
        sum_within=state.sum_within + other.sum_within,
        s_within=state.s_within + other.s_within,
    )


def stream_update(
    state: StreamState, batch: Float[Array, "B T d"], *, axis_name: str | None = None, gram: str = "highest"
) -> tuple[StreamState, Float[Array, "B d"], Array]:
    """Add one batch of contexts (B, T, d) to the state (the per-batch sums of the module docstring).

    Returns ``(state, m, finite)``: the new state, m_c - K of shape (B, d) (the shifted context
    means, which :func:`stream_finalize` needs in stream order), and whether the batch was all
    finite (a bool scalar). Inside ``shard_map`` over ``axis_name`` (each device holding its rows
    of the batch) the sums are ``psum``-reduced and ``finite`` covers every device, so the state
    stays identical on all devices. ``gram``: ``"highest"`` (float32 Grams at HIGHEST precision, the
    default) or ``"bf16x3"`` (three bfloat16 products, float32 accumulation: tensor cores; float32 state
    only). Pure and traceable; the drivers jit it with the state donated.
    """
    x = batch.astype(state.s_within.dtype) - state.shift[None, None, :]
    m = _mean_middle(x)  # (B, d): m_c - K
    a = x - m[:, None, :] - state.pos_shift[None, :, :]
    sums = state.replace(
        n_contexts=jnp.asarray(batch.shape[0], jnp.int32),
        sum_ctx=jnp.sum(m, axis=0),
        sum_within=_sum_leading(a),
        s_within=_gram_bf16x3(a) if gram == "bf16x3" and a.dtype == jnp.float32 else _gram(a),
    )
    finite = jnp.all(jnp.isfinite(batch))
    if axis_name is not None:
        sums = sums.replace(
            n_contexts=jax.lax.psum(sums.n_contexts, axis_name),
            sum_ctx=jax.lax.psum(sums.sum_ctx, axis_name),
            sum_within=jax.lax.psum(sums.sum_within, axis_name),
            s_within=jax.lax.psum(sums.s_within, axis_name),
        )
        finite = jax.lax.pmin(finite.astype(jnp.int32), axis_name) > 0
    return stream_merge(state, sums), m, finite


_init_jit = jax.jit(stream_init, static_argnames=("accum_dtype", "axis_name"))
_update_jit = jax.jit(stream_update, donate_argnums=(0,))


@compiled_cache(maxsize=8)
def _sharded_update(mesh: Mesh):
    """:func:`stream_update` under ``shard_map`` over ``mesh`` (the batch sharded over contexts)."""
    mapped = jax.shard_map(
        partial(stream_update, axis_name=AXIS),
        mesh=mesh,
        in_specs=(P(), P(AXIS)),
        out_specs=(P(), P(AXIS), P()),
    )
    return jax.jit(mapped, donate_argnums=(0,))


@partial(jax.jit, static_argnames=("n_positions",))
def _finalize(state: StreamState, ctx_shifted: Array, n_positions: int):
    C = state.n_contexts.astype(state.s_within.dtype)
    dmean = state.sum_ctx / C  # mean - K
    mean = state.shift + dmean
    delta = state.sum_within / C  # pos - p_hat
    pos = state.pos_shift + delta
    ctx = ctx_shifted - dmean[None, :]
    resid = state.s_within - C * _gram(delta)
    centered = C * _gram(pos) + n_positions * _gram(ctx) + resid
    # Exact symmetry (the sums are symmetric up to rounding of the two triangles).
    centered = 0.5 * (centered + centered.T)
    resid = 0.5 * (resid + resid.T)
    return mean, pos, ctx, centered, resid


def stream_finalize(
    state: StreamState, ctx_shifted: Float[Array, "C d"], n_positions: int, accum_dtype: str
) -> DecompositionStats:
    """Turn accumulated sums into mean, pos, ctx and the two second moments (exact shifts).

    ``ctx_shifted`` is the concatenation, in stream order, of the ``m`` every
    :func:`stream_update` returned; ``n_positions`` is T (after any dropped position).
    """
    with x64_context(accum_dtype):
        mean, pos, ctx, centered, resid = _finalize(state, ctx_shifted, n_positions)
    return DecompositionStats(
        mean=mean,
        pos=pos,
        ctx=ctx,
        centered_second_moment=centered,
        resid_second_moment=resid,
        n_contexts=int(state.n_contexts),
        n_positions=int(n_positions),
        accum_dtype=accum_dtype,
    )


@with_compact_repr
@struct.dataclass
class ClassScatter:
    """Streamed class statistics of a point cloud (Song & Zhong App. C): enough for the cluster
    compactness Tr(Σ_B Σ_W⁺) and the PCA without keeping the (N, d) points.

    Attributes:
      counts: (K,) points per class.
      means:  (K, d) class means.
      within: (d, d) within-class scatter Σ_k Σ_{i∈k} (x_i − m_k)(x_i − m_k)ᵀ.
    With a leading layer axis when vmapped over layers.
    """

    counts: Array
    means: Array
    within: Array


def class_scatter_init(num_classes: int, d: int, accum_dtype: str = "float64") -> ClassScatter:
    """Empty :class:`ClassScatter` of K classes in R^d (call under ``x64_context`` for float64)."""
    dtype = check_accum_dtype(accum_dtype, "class_scatter_init")
    z = jnp.zeros
    return ClassScatter(counts=z((num_classes,), dtype), means=z((num_classes, d), dtype), within=z((d, d), dtype))


def class_scatter_update(acc: ClassScatter, x: Float[Array, "N d"], codes: Int[Array, " N"]) -> ClassScatter:
    """Add N points x (N, d) of classes ``codes`` (N,) in [0, K) (Chan et al.'s pairwise update).

    The batch's points are centred on their own class means before their Gram is taken, and the
    batch is merged with W += W_b + Σ_k n_k n_bk / (n_k + n_bk) (m_bk − m_k)(m_bk − m_k)ᵀ, so no sum
    of squares of uncentred points (and no cancellation) occurs in any dtype. Pure and traceable.
    """
    dtype = acc.within.dtype
    x = x.astype(dtype)
    onehot = (codes[:, None] == jnp.arange(acc.counts.shape[0])[None, :]).astype(dtype)  # (N, K)
    n_b = jnp.sum(onehot, axis=0)
    safe = jnp.where(n_b > 0, n_b, jnp.ones((), dtype))
    m_b = jnp.matmul(onehot.T, x, precision=HIGHEST) / safe[:, None]
    centred = x - jnp.matmul(onehot, m_b, precision=HIGHEST)
    n_new = acc.counts + n_b
    w = jnp.where(n_new > 0, acc.counts * n_b / jnp.where(n_new > 0, n_new, 1), 0)
    delta = m_b - acc.means
    dev = delta * jnp.sqrt(w)[:, None]
    within = acc.within + _gram(centred) + jnp.matmul(dev.T, dev, precision=HIGHEST)
    means = acc.means + delta * jnp.where(n_new > 0, n_b / jnp.where(n_new > 0, n_new, 1), 0)[:, None]
    return ClassScatter(counts=n_new, means=means, within=within)


def decompose_stream(
    batches: Iterable[Float[Array, "_B T d"] | list],  # list: a nested list, converted like an array
    drop_first: bool = False,
    *,
    accum_dtype: str = "float32",
    mesh: Mesh | None = None,
    progress: bool | str = False,
    total: int | None = None,
) -> DecompositionStats:
    """One-pass decomposition statistics (Song & Zhong eqs. (2)-(3)) over batches of contexts.

    Memory is O(d^2 + T d + C d): independent of C T d. Sums are taken around shifts from the
    first batch and corrected exactly at the end (see the module docstring), so a mean 10^3 x
    the residual scale costs no precision.

    Args:
      batches: iterable of hidden-state batches, each (B, T, d) (B may vary; T and d may not).
      drop_first: drop position 0 of every context (the source code's convention).
      accum_dtype: "float32" (default) or "float64" (enabled locally even when JAX x64 is off).
      mesh: optional 1-D ``"data"`` mesh; every batch is then sharded over its contexts and the
        sums are combined with ``psum`` (B must be divisible by the number of devices).
      progress: show a tqdm progress bar (a string sets its description).
      total: number of batches, for the progress bar.

    Returns:
      ``DecompositionStats`` (mean (d,), pos (T, d), ctx (C, d), centered and residual second
      moments (d, d), n_contexts, n_positions, accum_dtype).

    Raises:
      ValueError: empty stream, wrong rank, T or d changing between batches, C < 2, T < 2,
        NaN/Inf (the error names the first bad batch).
      TypeError: non-float input, or a float64 batch after a float32 first batch while JAX float64
        is disabled (a float64 or list first batch switches float64 on for the whole stream, the dtype
        rule of :mod:`geomjax.base._checks`).

    Example (the streamed statistics equal the in-memory decomposition):
      >>> import numpy as np, geomjax as gj
      >>> h = np.random.default_rng(0).normal(size=(6, 5, 3))    # (C, T, d) float64
      >>> st = gj.decompose_stream([h[:4], h[4:]], accum_dtype="float64")   # batches of 4 and 2 contexts
      >>> bool(np.allclose(st.pos, gj.decompose(h).pos, atol=1e-12)), st.accum_dtype
      (True, 'float64')
    """
    iterator = iter(batches)
    first = next(iterator, None)
    if first is None:
        raise GeomjaxError("decompose_stream: the stream of batches is empty")
    iterator = itertools.chain([first], iterator)
    check_accum_dtype(accum_dtype, "decompose_stream")
    with x64_context(first):
        return _decompose_stream(iterator, drop_first, accum_dtype, mesh, progress, total)


def _decompose_stream(iterator, drop_first, accum_dtype, mesh, progress, total) -> DecompositionStats:
    """The body of :func:`decompose_stream` (its dtype context already entered)."""
    if progress:
        from tqdm.auto import tqdm

        desc = progress if isinstance(progress, str) else "decompose"
        iterator = iter(tqdm(iterator, total=total, desc=desc, unit="batch"))
    state: StreamState | None = None
    ctx_chunks: list[Array] = []
    finite_flags: list[Array] = []
    shape_Td: tuple[int, int] | None = None
    update = None
    with x64_context(accum_dtype):
        for i, batch in enumerate(iterator):
            if not hasattr(batch, "dtype"):
                batch = np.asarray(batch)
            _check_dtype(batch, f"decompose_stream (batch {i})")
            B, T_used, d = _check_shape(np.shape(batch), f"decompose_stream (batch {i})", drop_first)
            if shape_Td is None:
                shape_Td = (T_used, d)
            elif shape_Td != (T_used, d):
                raise GeomjaxError(
                    f"decompose_stream: batch {i} has (T, d) = {(T_used, d)} but earlier batches "
                    f"had {shape_Td}; every batch must have the same positions and width"
                )
            if B == 0:
                raise GeomjaxError(f"decompose_stream: batch {i} is empty (B = 0)")
            x = batch[:, 1:, :] if drop_first else batch
            if mesh is not None:
                check_divisible(B, mesh, f"decompose_stream: batch {i} size")
                x = shard_batch(x, mesh)
            else:
                x = jnp.asarray(x)
            if state is None:
                state = _init_jit(x, accum_dtype)
                update = _update_jit if mesh is None else _sharded_update(mesh)
            state, m, finite = update(state, x)
            ctx_chunks.append(m)
            finite_flags.append(finite)
            if len(finite_flags) >= 2:
                # Back-pressure: at most two steps in flight, so a fast producer cannot queue
                # every batch on the device (peak memory would grow with C·T·d again).
                finite_flags[-2].block_until_ready()
    if state is None:
        raise GeomjaxError("decompose_stream: the stream of batches is empty")
    flags = np.asarray(jax.device_get(finite_flags))
    if not flags.all():
        first = int(np.argmin(flags))
        raise GeomjaxError(f"decompose_stream: batch {first} contains NaN/Inf hidden states")
    if int(state.n_contexts) < 2:
        raise GeomjaxError(
            f"decompose_stream: need at least 2 contexts in total, got {int(state.n_contexts)}"
        )
    with x64_context(accum_dtype):
        ctx_shifted = jnp.concatenate(ctx_chunks, axis=0)
    return stream_finalize(state, ctx_shifted, shape_Td[0], accum_dtype)


def decompose_sharded(
    h: Float[Array, "C T d"],
    mesh: Mesh,
    batch_size: int | None = None,
    drop_first: bool = False,
    accum_dtype: str = "float32",
) -> DecompositionStats:
    """Streaming statistics of an in-memory (C, T, d) array, sharded over a ``"data"`` mesh.

    Splits the C contexts into batches of ``batch_size`` (default: all at once; must divide C
    and be divisible by the mesh size) and runs :func:`decompose_stream` with ``mesh``.

    Example (a one-device mesh; with more devices each batch is split over them):
      >>> import numpy as np, geomjax as gj
      >>> h = np.random.default_rng(0).normal(size=(4, 5, 3)).astype(np.float32)
      >>> st = gj.decompose_sharded(h, gj.parallel.data_mesh(1), batch_size=2)
      >>> bool(np.allclose(st.pos, gj.decompose(h).pos, atol=1e-6)), st.n_contexts
      (True, 4)
    """
    C = int(np.shape(h)[0])
    bs = C if batch_size is None else int(batch_size)
    if bs < 1 or C % bs:
        raise GeomjaxError(
            f"decompose_sharded: batch_size {bs} must divide the number of contexts C={C}"
        )
    return decompose_stream(
        (h[i : i + bs] for i in range(0, C, bs)),
        drop_first=drop_first,
        accum_dtype=accum_dtype,
        mesh=mesh,
    )


def stats_summary(stats: DecompositionStats) -> dict[str, Any]:
    """Plain-Python summary (norms and traces) of a DecompositionStats, for metrics.json."""
    tr = lambda a: float(jnp.trace(a))  # noqa: E731
    return {
        "n_contexts": stats.n_contexts,
        "n_positions": stats.n_positions,
        "accum_dtype": stats.accum_dtype,
        "mean_norm": float(jnp.linalg.norm(stats.mean)),
        "trace_centered": tr(stats.centered_second_moment),
        "trace_pos": tr(stats.pos_second_moment),
        "trace_ctx": tr(stats.ctx_second_moment),
        "trace_resid": tr(stats.resid_second_moment),
    }
