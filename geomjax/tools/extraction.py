"""Hidden-state extraction fused with the one-pass decomposition of every layer.

Each batch of token windows (B, T) goes through the jitted model and straight into the
streaming sufficient statistics of Song & Zhong eqs. (2)-(3) for all L+1 hidden states at once
(vmapped over layers). Only one batch of hidden states, (L+1, B, T, d), ever exists; C x T x d x L
is never materialised. With a ``"data"`` mesh, windows are sharded over devices, parameters are
replicated, and the sums are combined with ``psum`` inside ``jax.shard_map``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

from geomjax.base._checks import check_accum_dtype, compiled_cache, x64_context
from geomjax.theory.decomposition import (
    DecompositionStats,
    StreamState,
    stream_finalize,
    stream_init,
    stream_update,
)
from geomjax.models.interface import model_interface
from geomjax.base.parallel import AXIS, check_divisible, replicate, shard_batch, to_host
from geomjax.typing import Array, Int, PyTree

__all__ = ["COMPUTE_DTYPES", "ForwardFn", "decompose_model_stream", "hidden_state_forward", "mixed_precision"]

ForwardFn = Callable[..., Sequence[Array]]
"""forward(params, ids (B, T) int32) -> sequence of L+1 hidden states, each (B, T, d)."""


COMPUTE_DTYPES = ("float32", "bfloat16", "float16")


def mixed_precision(forward: ForwardFn, compute_dtype: str = "float32") -> ForwardFn:
    """Run ``forward(params, ids)`` in ``compute_dtype`` and return its states as float32.

    Mixed precision for the study: the floating parameters are cast to ``compute_dtype`` inside
    the (jitted) forward, so every matmul runs in that dtype, while the hidden states come back as
    float32 and the decomposition statistics accumulate in ``accum_dtype`` (float32 or float64).
    ``benchmarks/bench_decomposition.py --mixed`` measures the error against float32.

    Args:
      forward: ``forward(params, ids (B, T)) -> L+1 states (B, T, d)``.
      compute_dtype: ``"float32"`` (returns ``forward`` unchanged), ``"bfloat16"`` or ``"float16"``.
    """
    if compute_dtype not in COMPUTE_DTYPES:
        raise ValueError(f"compute_dtype must be one of {COMPUTE_DTYPES}, got {compute_dtype!r}")
    if compute_dtype == "float32":
        return forward
    low = jnp.dtype(compute_dtype)

    def cast(a):
        return a.astype(low) if jnp.issubdtype(a.dtype, jnp.floating) else a

    def low_forward(params, ids, *mask):
        states = forward(jax.tree.map(cast, params), ids, *mask)
        return tuple(h.astype(jnp.float32) for h in states)

    return low_forward


def hidden_state_forward(model, which: str = "hidden_states", compute_dtype: str = "float32") -> ForwardFn:
    """Wrap a geomjax model as ``forward(params, ids[, attention_mask]) -> L+1 hidden states`` (its model
    interface's :meth:`~geomjax.models.ModelInterface.study_forward`).

    With a padding ``attention_mask`` (B, T) (1 real token, 0 padding, left or right) the states at real tokens
    are those of the unpadded sequences (Hugging Face families; not the toy). :func:`decompose_model_stream`
    takes no mask, by design: eqs. (2)-(3) average every (window, position) cell, so its windows must be
    unpadded (pad-free fixed windows, as the study samples them).

    Args:
      model: any model :func:`geomjax.models.model_interface` accepts (GPT-2, BERT, Llama, Mistral,
        BLOOM, toy).
      which: ``"hidden_states"`` (Hugging Face convention; the last state after the final norm) or
        ``"residual"`` (every state before the final norm, as the Song & Zhong code).
      compute_dtype: see :func:`mixed_precision`.
    """
    if which not in ("hidden_states", "residual"):
        raise ValueError(f"which must be 'hidden_states' or 'residual', got {which!r}")
    forward = model_interface(model).study_forward(final_norm=which == "hidden_states")
    return mixed_precision(forward, compute_dtype)


def _step_body(state: StreamState, params, ids, is_first, *, forward, drop_first, dtype, axis_name):
    """One batch of windows: the forward pass, then :func:`~geomjax.theory.decomposition.stream_update` of
    every hidden state (vmapped over layers); the first batch also sets the shifts
    (:func:`~geomjax.theory.decomposition.stream_init`)."""
    states = forward(params, ids)
    x = jnp.stack(list(states))  # (L, B, T, d)
    if drop_first:
        x = x[:, :, 1:, :]
    fresh = jax.vmap(partial(stream_init, accum_dtype=dtype, axis_name=axis_name))(x)
    state = jax.tree.map(lambda f, s: jnp.where(is_first, f, s), fresh, state)
    state, m, finite = jax.vmap(partial(stream_update, axis_name=axis_name))(state, x)
    return state, m, jnp.all(finite)


def _empty_state(n_states: int, T: int, d: int, dtype: str) -> StreamState:
    """Zero state of the right shapes for ``n_states`` stacked layers (replaced on the first step)."""
    return jax.vmap(partial(stream_init, accum_dtype=dtype))(jnp.zeros((n_states, 1, T, d), dtype))


@compiled_cache(maxsize=32)
def _make_step(forward, drop_first, dtype, mesh):
    """The jitted step for (forward, conventions, mesh); cached so a repeated call with the same
    forward function reuses its compilation instead of re-tracing."""
    if mesh is None:
        body = partial(_step_body, forward=forward, drop_first=drop_first, dtype=dtype, axis_name=None)
        return jax.jit(body, donate_argnums=(0,))
    body = partial(_step_body, forward=forward, drop_first=drop_first, dtype=dtype, axis_name=AXIS)
    mapped = jax.shard_map(
        body, mesh=mesh,
        in_specs=(P(), P(), P(AXIS), P()),
        out_specs=(P(), P(None, AXIS), P()),
        check_vma=False,
    )
    return jax.jit(mapped, donate_argnums=(0,))


def decompose_model_stream(
    forward: ForwardFn,
    params: PyTree,
    id_batches: Iterable[Int[Array, "_B T"]],
    *,
    drop_first: bool = False,
    accum_dtype: str = "float32",
    mesh: Mesh | None = None,
    progress: bool | str = False,
    total: int | None = None,
    process_local: bool = False,
) -> list[DecompositionStats]:
    """Run a model over token windows and decompose every layer in one pass (eqs. (2)-(3)).

    Args:
      forward: ``forward(params, ids) -> L+1 hidden states (B, T, d)``; see
        :func:`hidden_state_forward`.
      params: model parameters (replicated on the mesh when one is given).
      id_batches: iterable of int token windows (B, T); B may vary, T may not.
      drop_first: drop position 0 from every window. Default False, as in :func:`geomjax.decompose` and
        :func:`geomjax.decompose_stream` (library functions drop nothing unless asked); the geometry
        study (``GeometryConfig.drop_first``, the CLI without ``--keep-first``) passes True, the
        source code's choice.
      accum_dtype: "float32" or "float64" accumulation of the statistics.
      mesh: optional 1-D ``"data"`` mesh; B must be divisible by its size.
      progress: tqdm progress bar (a string sets its description).
      total: number of batches, for the progress bar.
      process_local: multi-process runs only (after ``geomjax.base.parallel.initialize``): False means
        every process iterates the same global batches (each transfers its own devices' rows);
        True means each process passes only its own rows of every batch (B / n_processes of them).
        Every process receives the same, complete statistics.

    Returns:
      One ``DecompositionStats`` per hidden state (L+1 of them), in layer order.

    Raises:
      ValueError: empty stream, non-integer or non-2-D ids, T changing, fewer than 2 windows,
        NaN/Inf hidden states (names the batch).
    """
    check_accum_dtype(accum_dtype, "decompose_model_stream")
    iterator = iter(id_batches)
    if progress:
        from tqdm.auto import tqdm

        iterator = iter(tqdm(iterator, total=total, unit="batch",
                             desc=progress if isinstance(progress, str) else "extract"))
    step = None
    state = None
    ctx_chunks, flags = [], []
    T_in = None
    if mesh is not None:
        params = replicate(params, mesh)
    with x64_context(accum_dtype):
        for i, ids in enumerate(iterator):
            ids_np = np.asarray(ids)
            if ids_np.ndim != 2 or not np.issubdtype(ids_np.dtype, np.integer):
                raise ValueError(
                    f"decompose_model_stream: batch {i} must be integer token ids of shape (B, T), "
                    f"got {ids_np.dtype} {ids_np.shape}"
                )
            if T_in is None:
                T_in = ids_np.shape[1]
                if T_in - int(drop_first) < 2:
                    raise ValueError(f"decompose_model_stream: windows of length {T_in} leave "
                                     f"fewer than 2 positions (drop_first={drop_first})")
            elif ids_np.shape[1] != T_in:
                raise ValueError(f"decompose_model_stream: batch {i} has T={ids_np.shape[1]}, "
                                 f"earlier batches T={T_in}")
            if ids_np.dtype != np.int32:
                if ids_np.min(initial=0) < 0 or ids_np.max(initial=0) > np.iinfo(np.int32).max:
                    raise ValueError(f"decompose_model_stream: batch {i} has ids outside int32")
                ids_np = ids_np.astype(np.int32)
            if mesh is not None:
                if not process_local:
                    check_divisible(ids_np.shape[0], mesh, f"decompose_model_stream: batch {i} size")
                ids_dev = shard_batch(ids_np, mesh, process_local=process_local)
            else:
                ids_dev = jnp.asarray(ids_np)
            if step is None:
                shapes = jax.eval_shape(forward, params, ids_dev)
                n_states, d = len(shapes), shapes[0].shape[-1]
                state = _empty_state(n_states, T_in - int(drop_first), d, accum_dtype)
                if mesh is not None:
                    state = replicate(state, mesh)
                step = _make_step(forward, drop_first, accum_dtype, mesh)
            state, m, finite = step(state, params, ids_dev, jnp.asarray(i == 0))
            ctx_chunks.append(m)
            flags.append(finite)
            if len(flags) >= 2:
                flags[-2].block_until_ready()  # back-pressure: at most two steps in flight
    if state is None:
        raise ValueError("decompose_model_stream: the stream of token batches is empty")
    ok = np.asarray([to_host(f) for f in flags])
    if not ok.all():
        raise ValueError(f"decompose_model_stream: batch {int(np.argmin(ok))} produced NaN/Inf "
                         "hidden states")
    if jax.process_count() > 1:  # global arrays -> the same host values in every process
        state = jax.tree.map(to_host, state)
        ctx_chunks = [to_host(m) for m in ctx_chunks]
    n_ctx = int(state.n_contexts[0])
    if n_ctx < 2:
        raise ValueError(f"decompose_model_stream: need at least 2 windows, got {n_ctx}")
    with x64_context(accum_dtype):
        ctx_all = jnp.concatenate(ctx_chunks, axis=1)  # (L, C, d)
    T_used = T_in - int(drop_first)
    out = []
    for layer in range(ctx_all.shape[0]):
        st_l = jax.tree.map(lambda a, layer=layer: a[layer], state)
        out.append(stream_finalize(st_l, ctx_all[layer], T_used, accum_dtype))
    return out
