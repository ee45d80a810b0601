"""Hidden-state extraction fused with the one-pass decomposition of every layer.

Each batch of token windows (B, T) goes through the jitted model and straight into the
streaming sufficient statistics of Song & Zhong eqs. (2)-(3) for all L+1 hidden states at once
(vmapped over layers). Only one batch of hidden states, (L+1, B, T, d), ever exists; C x T x d x L
is never materialised. With a ``"data"`` mesh, windows are sharded over devices and each device
accumulates its own partial sums inside ``jax.shard_map``, added once at the end, layer by layer. A
causal decoder runs as a :class:`ScanForward`: its blocks stacked and scanned, their weights FSDP-sharded
(one layer gathered at a time) and each layer's statistics updated inside the scan.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from geomjax.base._checks import check_accum_dtype, compiled_cache, x64_context
from geomjax.theory.decomposition import (
    GRAM_PRECISIONS,
    DecompositionStats,
    StreamState,
    stream_finalize,
    stream_init,
    stream_update,
)
from geomjax.models.common import CausalLM, attention_mask_4d
from geomjax.models.interface import model_interface
from geomjax.base.parallel import (AXIS, check_divisible, data_mesh, fsdp_spec, replicate, shard_batch,
                                   shard_params, to_host)
from geomjax.typing import Array, Int, PyTree

__all__ = ["COMPUTE_DTYPES", "ForwardFn", "ScanForward", "decompose_model_stream", "hidden_state_forward",
           "mixed_precision", "param_specs", "place_params", "scan_forward", "StepPlan", "plan_step"]

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


@dataclasses.dataclass(frozen=True)
class ScanForward:
    """A causal decoder's study forward as embed -> ``lax.scan`` over its stacked blocks -> final norm.

    The same L+1 hidden states as the model's ``study_forward`` (embedding output, then each block; the
    last after the final norm when ``final_norm``), but the blocks' parameters are stacked over layers
    (:meth:`ScanForward.stack`) and scanned, so a sharded (FSDP) model gathers one layer's weights at a time and
    :func:`decompose_model_stream` updates each layer's statistics inside the scan (one layer's
    states at a time, never (L+1, B, T, d)). Build it with :func:`scan_forward`.

    Attributes:
      model: a ``geomjax.models.common.CausalLM`` (GPT-2, BLOOM, Llama / Mistral).
      final_norm: the last state after the final norm (Hugging Face's ``output_hidden_states``).
      bos: token id prepended to every window, or None.
      compute_dtype: dtype of the forward's floating parameters (``"float32"``: as given).
      unroll: unroll the scan (only to count FLOPs: XLA's cost analysis counts a loop body once).
    """

    model: CausalLM
    final_norm: bool
    bos: int | None = None
    compute_dtype: str = "float32"
    unroll: bool = False

    @property
    def n_layers(self) -> int:
        return int(self.model.config.num_layers)

    @property
    def prefix(self) -> str:
        return self.model.config.FAMILY.blocks

    def stack(self, params: PyTree) -> dict:
        """``{"rest": the parameters outside the blocks (the untied read-out ``lm_head`` dropped: the study
        computes no logits), "blocks": the blocks' parameters stacked on a leading layer axis (L, ...)}``
        (NumPy in, NumPy out; JAX arrays are stacked with jnp; ShapeDtypeStructs give ShapeDtypeStructs)."""
        keys = [f"{self.prefix}_{i}" for i in range(self.n_layers)]
        missing = [k for k in keys if k not in params]
        if missing:
            raise ValueError(f"ScanForward.stack: parameters lack {missing[:3]} (not a {self.prefix}_<l> layout)")
        first = jax.tree.leaves(params[keys[0]])
        if all(isinstance(a, jax.ShapeDtypeStruct) for a in first):  # shapes only (a plan)
            def stack(a):
                return jax.ShapeDtypeStruct((len(a),) + a[0].shape, a[0].dtype)
        else:
            stack = np.stack if all(isinstance(a, np.ndarray) for a in first) else jnp.stack
        blocks = jax.tree.map(lambda *a: stack(a), *[params[k] for k in keys])
        # the read-out (lm_head) is never applied by the study: not placed on the devices
        return {"rest": {k: v for k, v in params.items() if k not in keys and k != "lm_head"}, "blocks": blocks}

    def cast(self, tree: PyTree) -> PyTree:
        """Floating leaves in ``compute_dtype`` (unchanged for float32: the checkpoint's dtype runs)."""
        if self.compute_dtype == "float32":
            return tree
        low = jnp.dtype(self.compute_dtype)
        return jax.tree.map(lambda a: a.astype(low) if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)

    def embed(self, rest: PyTree, ids: Int[Array, "B T"]):
        """x_0 (B, T', d) and the arguments every block takes (mask, rotary tables / ALiBi bias)."""
        if self.bos is not None:
            ids = jnp.concatenate([jnp.full((ids.shape[0], 1), self.bos, ids.dtype), ids], axis=1)
        mask = attention_mask_4d(ids.shape[1], None, causal=True)
        return self.model.apply({"params": rest}, ids, mask, None, method=type(self.model).embed)  # pad-free

    def block(self, p_layer: PyTree, x, block_args):
        """Block l's output (B, T', d) from its parameters (one layer of the stacked tree)."""
        return _parts(self.model)[0].apply({"params": p_layer}, x, *block_args)[0]

    def norm(self, rest: PyTree, x):
        """The final norm of x (B, T', d)."""
        return _parts(self.model)[1].apply({"params": rest[self.model.config.FAMILY.final_norm]}, x)

    def __call__(self, params: PyTree, ids: Int[Array, "B T"]) -> tuple:
        """forward(stacked params, ids) -> the L+1 states (B, T', d) as float32, scanned (no statistics)."""
        params = self.cast(params)
        x, args = self.embed(params["rest"], ids)

        def body(x, p_l):
            x = self.block(p_l, x, args)
            return x, x

        _, xs = jax.lax.scan(body, x, params["blocks"])
        states = [x] + [xs[i] for i in range(self.n_layers)]
        if self.final_norm:
            states[-1] = self.norm(params["rest"], states[-1])
        return tuple(h.astype(jnp.float32) for h in states)


@compiled_cache(maxsize=16)
def _parts(model):
    return model.scan_parts()


@compiled_cache(maxsize=32)
def scan_forward(model: CausalLM, final_norm: bool, bos: int | None = None,
                 compute_dtype: str = "float32") -> ScanForward:
    """The :class:`ScanForward` of a causal decoder (cached: equal arguments give the same object, so
    compiled steps are reused)."""
    if not isinstance(model, CausalLM):
        raise ValueError(f"scan_forward needs a causal decoder (GPT-2, BLOOM, Llama / Mistral), got "
                         f"{type(model).__name__}")
    if not model.scannable():
        raise ValueError(f"scan_forward: the blocks of this {type(model).__name__} differ by layer (alternating "
                         "windows or rotary bases), so one block module cannot compute every layer")
    if compute_dtype not in COMPUTE_DTYPES:
        raise ValueError(f"compute_dtype must be one of {COMPUTE_DTYPES}, got {compute_dtype!r}")
    return ScanForward(model, bool(final_norm), None if bos is None else int(bos), compute_dtype)


def _gather(tree: PyTree, specs: PyTree, skip: int = 0) -> PyTree:
    """Inside ``shard_map``: every FSDP-sharded leaf all-gathered along its sharded axis (``skip``:
    leading axes of the spec that the leaf no longer has, e.g. the layer axis of a scanned slice)."""
    def one(a, spec):
        axes = [i for i, s in enumerate(tuple(spec)) if s == AXIS]
        if not axes:
            return a
        return jax.lax.all_gather(a, AXIS, axis=axes[0] - skip, tiled=True)

    return jax.tree.map(one, tree, specs, is_leaf=lambda x: isinstance(x, P))


def _layer_stats(state: StreamState, y, is_first, *, drop_first, dtype, gram="highest"):
    """One layer's :func:`stream_update` of states y (B, T, d), accumulated on this device only; the
    first batch sets the shifts (averaged over the devices, so every device shares them)."""
    if drop_first:
        y = y[:, 1:, :]
    fresh = stream_init(y, accum_dtype=dtype, axis_name=AXIS)
    state = jax.tree.map(lambda f, s: jnp.where(is_first, f, s), fresh, state)
    return stream_update(state, y, gram=gram)


def _step_body(state: StreamState, params, ids, is_first, *, forward, drop_first, dtype, specs, gram):
    """One batch on one device: the forward pass, then every hidden state's statistics accumulated
    locally (no cross-device reduction until :func:`_reduce_layer`). ``state`` carries a leading
    device axis of size 1 here (the device's own sums)."""
    state = jax.tree.map(lambda a: a[0], state)
    stats = partial(_layer_stats, is_first=is_first, drop_first=drop_first, dtype=dtype, gram=gram)
    if isinstance(forward, ScanForward):
        params = forward.cast(params)
        rest = _gather(params["rest"], specs["rest"])
        x, args = forward.embed(rest, ids)

        def update(state, layer, y):  # layer `layer`'s statistics updated in place (no copy of the state)
            st, m, f = stats(jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, layer, 0, False), state), y)
            state = jax.tree.map(lambda a, b: jax.lax.dynamic_update_index_in_dim(a, b, layer, 0), state, st)
            return state, m, f

        def run_block(x, layer):  # block `layer` (1..L), its weights gathered inside the loop body
            p_l = jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, layer - 1, 0, False), params["blocks"])
            return forward.block(_gather(p_l, specs["blocks"], skip=1), x, args)

        def body(carry, layer):  # layer 0: the embedding output; layer l >= 1: block l
            x, state = carry
            x = jax.lax.cond(layer == 0, lambda x, _: x, run_block, x, layer)
            y = x
            if forward.final_norm:
                y = jnp.where(layer == forward.n_layers, forward.norm(rest, x), x)
            state, m_l, f_l = update(state, layer, y.astype(jnp.float32))
            return (x, state), (m_l, f_l)

        # The whole state is the loop's carry, updated in place layer by layer (no copy of it).
        (_, state), (m, fin) = jax.lax.scan(body, (x, state), jnp.arange(forward.n_layers + 1),
                                             unroll=forward.n_layers + 1 if forward.unroll else 1)
        finite = jnp.all(fin)
    else:
        x = jnp.stack(list(forward(params, ids)))  # (L, B, T, d)
        state, m, fin = jax.vmap(stats)(state, x)
        finite = jnp.all(fin)
    finite = jax.lax.pmin(finite.astype(jnp.int32), AXIS) > 0
    return jax.tree.map(lambda a: a[None], state), m, finite


def _state_shapes(n_dev: int, n_states: int, T: int, d: int, dtype: str) -> StreamState:
    """The stream state's shapes and dtypes (``jax.ShapeDtypeStruct`` leaves): :func:`stream_init`'s per
    hidden state (n_states, ...), with one slot of partial sums per device in front (n_dev, n_states, ...).
    Traced, not run."""
    one = jax.eval_shape(jax.vmap(partial(stream_init, accum_dtype=dtype)),
                         jax.ShapeDtypeStruct((n_states, 1, T, d), dtype))
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct((n_dev,) + a.shape, a.dtype), one)


def _empty_state(n_dev: int, n_states: int, T: int, d: int, dtype: str) -> StreamState:
    """Zero state (n_dev, n_states, ...) of :func:`_state_shapes` (replaced on the first step), on the host.

    Every entry is zero: it is what :func:`stream_init` gives for a zero batch (zero shifts and sums). Built
    with NumPy from the traced shapes, so a new (T, d, L) compiles nothing here (stream_init run eagerly
    compiled each of its operations for every new shape)."""
    return jax.tree.map(lambda a: np.zeros(a.shape, a.dtype), _state_shapes(n_dev, n_states, T, d, dtype))


def param_specs(forward: ForwardFn, params: PyTree, n: int) -> PyTree:
    """The ``PartitionSpec`` of every parameter for :func:`decompose_model_stream` on ``n`` devices:
    FSDP (:func:`geomjax.base.parallel.fsdp_spec`) for a :class:`ScanForward`'s stacked tree (the layer
    axis whole), replicated (``P()``) for any other forward."""
    if not isinstance(forward, ScanForward):
        return jax.tree.map(lambda a: P(), params)
    return {"rest": jax.tree.map(lambda a: fsdp_spec(a.shape, n), params["rest"]),
            "blocks": jax.tree.map(lambda a: fsdp_spec(a.shape, n, from_axis=1), params["blocks"])}


def _tree_key(specs: PyTree):
    """A hashable key of a spec tree (structure and specs), for the compiled-step cache."""
    leaves, treedef = jax.tree.flatten(specs, is_leaf=lambda x: isinstance(x, P))
    return treedef, tuple(leaves)


@compiled_cache(maxsize=32)
def _make_step(forward, drop_first, dtype, mesh, spec_key, gram="highest"):
    """The jitted step for (forward, conventions, mesh, parameter layout): ``shard_map`` over the
    ``"data"`` axis (one device: a 1-device mesh, the same program), the state donated."""
    treedef, leaves = spec_key
    specs = jax.tree.unflatten(treedef, leaves)
    body = partial(_step_body, forward=forward, drop_first=drop_first, dtype=dtype, specs=specs, gram=gram)
    mapped = jax.shard_map(
        body, mesh=mesh,
        in_specs=(P(AXIS), specs, P(AXIS), P()),
        out_specs=(P(AXIS), P(None, AXIS), P()),
        check_vma=False,
    )
    return jax.jit(mapped, donate_argnums=(0,))


@jax.jit
def _reduce_layer(state: StreamState, layer) -> StreamState:
    """Layer ``layer``'s state with the partial sums of every device added (the one reduction of a
    stream; shifts are shared): run layer by layer, so only one layer's d×d sum is ever gathered."""
    st = jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, layer, axis=1, keepdims=False), state)
    st = st.replace(n_contexts=jnp.sum(st.n_contexts), sum_ctx=jnp.sum(st.sum_ctx, 0),
                    sum_within=jnp.sum(st.sum_within, 0), s_within=jnp.sum(st.s_within, 0),
                        shift=st.shift[0], pos_shift=st.pos_shift[0])
    return st


def _device_ids(ids, i: int, T_in, drop_first: bool, mesh: Mesh, process_local: bool):
    """Batch ``i`` checked (integer (B, T), T fixed) and placed on the mesh, sharded over ``"data"``."""
    ids_np = np.asarray(ids)
    if ids_np.ndim != 2 or not np.issubdtype(ids_np.dtype, np.integer):
        raise ValueError(f"decompose_model_stream: batch {i} must be integer token ids of shape (B, T), "
                         f"got {ids_np.dtype} {ids_np.shape}")
    if T_in is None and ids_np.shape[1] - int(drop_first) < 2:
        raise ValueError(f"decompose_model_stream: windows of length {ids_np.shape[1]} leave "
                         f"fewer than 2 positions (drop_first={drop_first})")
    if T_in is not None and ids_np.shape[1] != T_in:
        raise ValueError(f"decompose_model_stream: batch {i} has T={ids_np.shape[1]}, earlier batches T={T_in}")
    if ids_np.dtype != np.int32:
        if ids_np.min(initial=0) < 0 or ids_np.max(initial=0) > np.iinfo(np.int32).max:
            raise ValueError(f"decompose_model_stream: batch {i} has ids outside int32")
        ids_np = ids_np.astype(np.int32)
    if not process_local:
        check_divisible(ids_np.shape[0], mesh, f"decompose_model_stream: batch {i} size")
    return shard_batch(ids_np, mesh, process_local=process_local)


def place_params(forward: ForwardFn, params: PyTree, mesh: Mesh) -> PyTree:
    """Parameters as :func:`decompose_model_stream` runs them on ``mesh``: a :class:`ScanForward`'s
    stacked (:meth:`ScanForward.stack`, unless already) and FSDP-sharded (each device holds 1/n of every
    matrix); any other forward's replicated."""
    if isinstance(forward, ScanForward):
        if not (isinstance(params, dict) and set(params) == {"rest", "blocks"}):
            params = forward.stack(params)
        return {"rest": shard_params(params["rest"], mesh),
                "blocks": shard_params(params["blocks"], mesh, from_axis=1)}
    return replicate(params, mesh)


def _finalize_layers(state: StreamState, ctx_chunks, T_used: int, accum_dtype: str) -> list[DecompositionStats]:
    """Reduce the devices' partial sums and finalize, layer by layer (one layer's d×d sum at a time)."""
    out = []
    for layer in range(state.shift.shape[1]):
        st_l = _reduce_layer(state, layer)
        ctx = jnp.concatenate([m[layer] for m in ctx_chunks], axis=0)
        if jax.process_count() > 1:  # global arrays -> the same host values in every process
            st_l = jax.tree.map(to_host, st_l)
            ctx = to_host(ctx)
        out.append(stream_finalize(st_l, ctx, T_used, accum_dtype))
    return out


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
    gram: str = "highest",
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 0,
) -> list[DecompositionStats]:
    """Run a model over token windows and decompose every layer in one pass (eqs. (2)-(3)).

    One code path for 1 device, n devices and several processes: a ``shard_map`` over the ``"data"``
    mesh (None: a 1-device mesh) in which every device runs the forward on its rows of each batch and
    accumulates its own partial sums of every layer (no cross-device reduction per batch); at the end
    the partial sums are added once, layer by layer (:func:`_reduce_layer`), and finalized.

    Args:
      forward: ``forward(params, ids) -> L+1 hidden states (B, T, d)`` (:func:`hidden_state_forward`;
        its parameters are replicated), or a :class:`ScanForward` (:func:`scan_forward`; the blocks
        are scanned, their parameters stacked and FSDP-sharded: one layer gathered at a time, each
        layer's statistics updated inside the scan).
      params: model parameters (host or device arrays; placed by :func:`place_params`).
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
      gram: the statistics' Grams: ``"highest"`` (float32 at HIGHEST precision, default) or ``"bf16x3"``
        (three bfloat16 products with float32 accumulation, tensor cores; float32 statistics only;
        :func:`geomjax.theory.decomposition.stream_update`).
      checkpoint, checkpoint_every: write the partial statistics (the devices' sums added) and the context
        means to this .npz every N batches; a later call with the same path skips the batches it holds
        and resumes (the same batches must be passed again, in the same order). The caller deletes it.

    Returns:
      One ``DecompositionStats`` per hidden state (L+1 of them), in layer order.

    Raises:
      ValueError: empty stream, non-integer or non-2-D ids, T changing, fewer than 2 windows,
        NaN/Inf hidden states (names the batch).
    """
    check_accum_dtype(accum_dtype, "decompose_model_stream")
    if gram not in GRAM_PRECISIONS:
        raise ValueError(f"decompose_model_stream: gram must be one of {GRAM_PRECISIONS}, got {gram!r}")
    iterator = iter(id_batches)
    if progress:
        from tqdm.auto import tqdm

        iterator = iter(tqdm(iterator, total=total, unit="batch",
                             desc=progress if isinstance(progress, str) else "extract"))
    mesh = mesh if mesh is not None else data_mesh(1)
    n_dev = mesh.shape[AXIS]
    params = place_params(forward, params, mesh)
    specs = param_specs(forward, params, n_dev)
    step, state, T_in, key = None, None, None, None
    ctx_chunks, flags = [], []
    resumed = _load_checkpoint(checkpoint, mesh) if checkpoint is not None else None
    n_done = 0 if resumed is None else resumed[3]
    with x64_context(accum_dtype):
        for i, ids in enumerate(iterator):
            if key is None:  # shapes only: nothing runs
                shapes = jax.eval_shape(forward, params, jax.ShapeDtypeStruct(np.shape(ids), jnp.int32))
                n_states, T_state, d = len(shapes), shapes[0].shape[1] - int(drop_first), shapes[0].shape[-1]
                key = f"{n_states},{T_state},{d},{accum_dtype},{drop_first},{gram}"
                if resumed is not None and resumed[2] != key:
                    raise ValueError(f"decompose_model_stream: the checkpoint was written for another stream "
                                     f"({resumed[2]}, this one is {key}); delete it or pass another path")
            if i < n_done:
                continue  # accumulated before the interruption (the checkpoint holds their sums)
            ids_dev = _device_ids(ids, i, T_in, drop_first, mesh, process_local)
            if step is None:
                T_in = ids_dev.shape[1]
                state, ctx_chunks = _start_state(resumed, n_dev, n_states, T_state, d, accum_dtype, mesh)
                step = _make_step(forward, drop_first, accum_dtype, mesh, _tree_key(specs), gram)
            state, m, finite = step(state, params, ids_dev, jnp.asarray(i == 0))
            ctx_chunks.append(m)
            flags.append(finite)
            if len(flags) >= 2:
                flags[-2].block_until_ready()  # back-pressure: at most two steps in flight
            if checkpoint is not None and checkpoint_every and (i + 1) % checkpoint_every == 0:
                _save_checkpoint(checkpoint, key, state, ctx_chunks, flags, i + 1)
        if state is None and resumed is not None:  # every batch was done before the interruption
            state, ctx_chunks = resumed[0], [resumed[1]]
        if state is None:
            raise ValueError("decompose_model_stream: the stream of token batches is empty")
        ok = np.asarray([to_host(f) for f in flags])
        if not ok.all():
            raise ValueError(f"decompose_model_stream: batch {n_done + int(np.argmin(ok))} produced NaN/Inf "
                             "hidden states")
        n_ctx = int(to_host(state.n_contexts[:, 0]).sum())
        if n_ctx < 2:
            raise ValueError(f"decompose_model_stream: need at least 2 windows, got {n_ctx}")
        return _finalize_layers(state, ctx_chunks, T_state, accum_dtype)


_SUMS = ("n_contexts", "sum_ctx", "sum_within", "s_within")


@jax.jit
def _reduce_devices(state: StreamState) -> StreamState:
    """Every layer's partial sums of all devices added (shifts shared): (L+1, ...) without the device axis."""
    return state.replace(**{k: jnp.sum(getattr(state, k), 0) for k in _SUMS},
                         shift=state.shift[0], pos_shift=state.pos_shift[0])


def _save_checkpoint(path, key: str, state: StreamState, ctx_chunks, flags, n_done: int) -> None:
    """The statistics after ``n_done`` batches (devices' sums added, one copy) and the context means so
    far, written atomically to ``path`` (.npz; process 0 writes)."""
    ok = np.asarray([to_host(f) for f in flags])
    if not ok.all():
        raise ValueError(f"decompose_model_stream: a batch before {n_done} produced NaN/Inf hidden states")
    reduced = jax.tree.map(to_host, _reduce_devices(state))
    ctx = np.concatenate([to_host(m) for m in ctx_chunks], axis=1)
    if jax.process_index() == 0:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "wb") as f:
            np.savez(f, key=np.asarray(key), n_done=np.asarray(n_done), ctx=ctx,
                     **{f"state_{k}": getattr(reduced, k) for k in _SUMS + ("shift", "pos_shift")})
        os.replace(tmp, path)


def _load_checkpoint(path, mesh: Mesh):
    """(state on the mesh, ctx (L+1, C_done, d), key, n_done) from a checkpoint, or None when there is none:
    the added sums in device slot 0, zero sums elsewhere, the shared shifts everywhere."""
    path = Path(path)
    if not path.exists():
        return None
    n_dev = mesh.shape[AXIS]
    with np.load(path) as z:
        a = {k: z[f"state_{k}"] for k in _SUMS + ("shift", "pos_shift")}
        ctx, key, n_done = z["ctx"], str(z["key"]), int(z["n_done"])

    def slots(v, shared):
        out = np.broadcast_to(v, (n_dev,) + v.shape).copy() if shared else np.zeros((n_dev,) + v.shape, v.dtype)
        out[0] = v
        return shard_batch(out, mesh)

    state = StreamState(**{k: slots(v, k in ("shift", "pos_shift")) for k, v in a.items()})
    return state, ctx, key, n_done


def _start_state(resumed, n_dev: int, n_states: int, T: int, d: int, dtype: str, mesh: Mesh):
    """The stream's first state and context means: zeros, or a checkpoint's (its key already checked)."""
    if resumed is not None:
        return resumed[0], [resumed[1]]
    state = _empty_state(n_dev, n_states, T, d, dtype)
    return jax.tree.map(lambda a: shard_batch(np.asarray(a), mesh), state), []


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """XLA's analysis of the compiled step of :func:`decompose_model_stream` (per device), from shapes.

    Attributes:
      n_devices: devices of the mesh; batch, seq_len: one step's (B, T) token windows (global).
      argument_bytes, output_bytes, alias_bytes, temp_bytes: ``compiled.memory_analysis()`` per device
        (arguments: this device's weight shards, statistics and ids; outputs alias the donated state).
      flops: ``compiled.cost_analysis()["flops"]`` per device and step (for a :class:`ScanForward`, from
        the 1- and 2-block models unrolled: XLA counts a loop body once, so the per-block FLOPs are
        extrapolated to L blocks).
      gram_flops: the statistics' Grams in it, (L+1) · (B/n) · T' · 2d² (the rest is the forward).
      n_states, d_model: L+1 and d.
    """

    n_devices: int
    batch: int
    seq_len: int
    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    flops: float
    gram_flops: float
    n_states: int
    d_model: int

    @property
    def peak_bytes(self) -> int:
        """Arguments + outputs − aliased + temporaries: the device memory the step needs while it runs."""
        return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes


def _sds(tree: PyTree, mesh: Mesh, specs: PyTree) -> PyTree:
    """ShapeDtypeStructs of ``tree`` carrying their NamedShardings on ``mesh``."""
    return jax.tree.map(lambda a, sp: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(mesh, sp)),
                        tree, specs, is_leaf=lambda x: isinstance(x, P))


def plan_step(forward: ForwardFn, param_shapes: PyTree, batch: int, seq_len: int, mesh: Mesh | None = None, *,
              accum_dtype: str = "float32", drop_first: bool = True) -> StepPlan:
    """Compile :func:`decompose_model_stream`'s step for these shapes and read XLA's analysis of it.

    Nothing is allocated: parameters, statistics and ids are ``jax.ShapeDtypeStruct`` with the same
    shardings the real run uses (:func:`param_specs`), so a 70B model's step is compiled on a CPU.

    Args:
      forward: as for :func:`decompose_model_stream` (a :class:`ScanForward` for causal decoders).
      param_shapes: the model's parameters as ShapeDtypeStructs (``jax.eval_shape`` of its init), in the
        model's own layout (stacked here for a ScanForward).
      batch, seq_len: windows per step (global; a multiple of the mesh's devices) and their length.
      mesh: the ``"data"`` mesh (None: one device).

    Returns:
      :class:`StepPlan` (memory per device, FLOPs per device and step).
    """
    mesh = mesh if mesh is not None else data_mesh(1)
    check_divisible(batch, mesh, "plan_step: batch")
    compiled, (n_states, T_state, d) = _compile_step(forward, param_shapes, batch, seq_len, mesh, accum_dtype,
                                                     drop_first)
    mem = compiled.memory_analysis()
    flops = _flops(compiled)
    if isinstance(forward, ScanForward):  # XLA counts a loop body once: count 1 and 2 unrolled layers
        f1, f2 = (_flops(_compile_step(*_first_layers(forward, param_shapes, k), batch, seq_len, mesh,
                                       accum_dtype, drop_first)[0]) for k in (1, 2))
        flops = f1 + (forward.n_layers - 1) * (f2 - f1)
    n = mesh.shape[AXIS]
    return StepPlan(n, batch, seq_len, int(mem.argument_size_in_bytes), int(mem.output_size_in_bytes),
                    int(mem.alias_size_in_bytes), int(mem.temp_size_in_bytes), flops,
                    float(n_states * (batch // n) * T_state * 2 * d * d), n_states, d)


def _flops(compiled) -> float:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float(cost.get("flops", 0.0))


def _first_layers(forward: ScanForward, param_shapes: PyTree, k: int):
    """The same model cut to its first k blocks, unrolled (for counting FLOPs), and its parameter shapes."""
    model = forward.model.clone(config=dataclasses.replace(forward.model.config, num_hidden_layers=k))
    keep = {f"{forward.prefix}_{i}" for i in range(k)}
    shapes = {key: v for key, v in param_shapes.items() if key in keep or not key.startswith(f"{forward.prefix}_")}
    return dataclasses.replace(forward, model=model, unroll=True), shapes


def _compile_step(forward, param_shapes, batch, seq_len, mesh, accum_dtype, drop_first):
    """The step of :func:`decompose_model_stream` compiled for shapes (nothing allocated), and
    (L+1, T', d)."""
    n = mesh.shape[AXIS]
    if isinstance(forward, ScanForward):
        param_shapes = forward.stack(param_shapes)
    specs = param_specs(forward, param_shapes, n)
    with x64_context(accum_dtype):
        params = _sds(param_shapes, mesh, specs)
        ids = jax.ShapeDtypeStruct((batch, seq_len), jnp.int32, sharding=NamedSharding(mesh, P(AXIS)))
        shapes = jax.eval_shape(forward, params, ids)
        n_states, T_state, d = len(shapes), shapes[0].shape[1] - int(drop_first), shapes[0].shape[-1]
        st = _state_shapes(n, n_states, T_state, d, accum_dtype)
        state = _sds(st, mesh, jax.tree.map(lambda a: P(AXIS), st))
        step = _make_step(forward, drop_first, accum_dtype, mesh, _tree_key(specs))
        return step.lower(state, params, ids, jax.ShapeDtypeStruct((), jnp.bool_)).compile(), (n_states, T_state, d)
