"""The model-facing half of the attention dissection (Song & Zhong §4, App. D).

:mod:`geomjax.theory.attention` holds the array math (eq. (7) QK decomposition, eq. (8) W structure, head
patterns, entropy); this module reads what that math needs from a model, through its one interface
(:func:`geomjax.models.model_interface`): a description of the model (:func:`describe_model`), each
block's *attention input* x and attention probabilities (:func:`attention_inputs`; x = norm_1(h)
for pre-norm models, h otherwise — see :mod:`geomjax.theory.attention` for why x is what is decomposed),
per-head weights with their position parameters (:func:`qk_weights`: rotary inverse frequencies,
ALiBi slopes, grouped-query keys expanded to one W_k per query head), the global mean μ and
positional basis pos of x estimated over windows (:func:`estimate_attention_basis`, eq. (2) applied
to x), and the eq. (7) parts of one head of a model for one sequence (:func:`head_qk_decomposition`).

Model support: every family behind :func:`geomjax.models.model_interface` — GPT-2, BERT, Llama,
Mistral, BLOOM and the toy transformer (or a :class:`geomjax.models.toy_run.ToyRun`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.theory.attention import AttentionBasis, QKParts, qk_decomposition
from geomjax.errors import GeomjaxError
from geomjax.models.common import check_input_ids
from geomjax.models.interface import kv_expanded, model_interface
from geomjax.theory.positional import alibi_slopes
from geomjax.typing import Array, Float, Int

__all__ = [
    "AttentionModel",
    "attention_inputs",
    "attention_inputs_jit",
    "describe_model",
    "embed_unembed",
    "estimate_attention_basis",
    "head_qk_decomposition",
    "qk_weights",
]


@dataclasses.dataclass(frozen=True)
class AttentionModel:
    """What the dissection needs to know about a model (hashable; from the model interface's facts).

    Attributes:
      kind: the family: ``"gpt2"``, ``"bert"``, ``"llama"``, ``"mistral"``, ``"bloom"`` or ``"toy"``.
      n_layers: L blocks.
      n_heads: H query heads per block.
      head_dim: K per head.
      d_model: d.
      max_positions: longest sequence the model takes (None: unbounded, rotary / ALiBi).
      causal: whether the attention is causal (BERT: the ``causal`` override, as the source code
        ran BERT with ``is_decoder=True``).
      pre_ln: the attention input is norm_1(h) (GPT-2, Llama, BLOOM, pre-LN toy) rather than h.
      n_kv_heads: key/value heads (< H: grouped-query attention).
      positions: ``learned``, ``sinusoidal``, ``none``, ``rotary`` or ``alibi``.
    """

    kind: str
    n_layers: int
    n_heads: int
    head_dim: int
    d_model: int
    max_positions: int | None
    causal: bool
    pre_ln: bool
    n_kv_heads: int = 0
    positions: str = "learned"


def describe_model(model: Any, *, causal: bool | None = None) -> AttentionModel:
    """Describe a model for the attention dissection (Song & Zhong §4), from its model interface.

    Args:
      model: a geomjax GPT2, Bert, Llama, Bloom, ToyTransformer, ToyRun or ModelInterface.
      causal: BERT only: None uses ``config.causal``; True gives the causal mask (the source code's
        ``is_decoder=True``). Other families use their own mask; passing a different value raises.

    Raises:
      ValueError: ``causal`` contradicts a causal-only model. TypeError: unsupported model.
    """
    try:
        f = model_interface(model, causal=causal).facts
    except ValueError as e:
        raise GeomjaxError(f"describe_model: {e}") from None
    return AttentionModel(f.family, f.n_layers, f.n_heads, f.head_dim, f.d_model, f.max_positions, f.causal,
                          f.pre_norm, f.n_kv_heads, f.positions)


def _check_layer(spec: AttentionModel, layer: int) -> int:
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= int(layer) < spec.n_layers:
        raise GeomjaxError(f"layer must be an int in [0, {spec.n_layers}) for this {spec.kind} model "
                         f"({spec.n_layers} layers), got {layer!r}")
    return int(layer)


def _check_head(spec: AttentionModel, head: int) -> int:
    if isinstance(head, bool) or not isinstance(head, (int, np.integer)) or not 0 <= int(head) < spec.n_heads:
        raise GeomjaxError(f"head must be an int in [0, {spec.n_heads}) for this {spec.kind} model "
                         f"({spec.n_heads} heads per layer), got {head!r}")
    return int(head)


def qk_weights(model: Any, params: dict, layer: int) -> dict[str, Float[Array, "..."]]:
    """Per-head query/key/value/output weights of one block, stacked by query head (eq. (8) inputs).

    Grouped-query attention (H_kv < H) is made explicit: entry h of W_k, W_v, b_k is the shared key/
    value head h // (H / H_kv) that query head h reads (``kv_head`` says which).

    Args:
      model: any model :func:`describe_model` accepts.
      params: the model's parameters.
      layer: block index in [0, L).

    Returns:
      dict with ``W_q``, ``W_k``, ``W_v`` (H, d, K), ``W_o`` (H, K, d), ``b_q``, ``b_k``, ``b_v`` (H, K)
      (zeros when the model has no attention biases), ``kv_head`` (H,), and the position parameters
      the scores use: ``rope_inv_freq`` (K/2,) for rotary models (zeros otherwise) and ``alibi_slope``
      (H,) for BLOOM (zeros otherwise); where the family has them (:data:`SCORE_OPTIONS`) the score
      ``scale`` (Gemma 2/3), the q/k RMSNorm gains ``q_norm``, ``k_norm`` (K,) and ``norm_eps`` (Qwen 3,
      Gemma 3) and the ``softcap`` (Gemma 2). Head h computes ``q = x @ W_q[h] + b_q[h]`` on the attention
      input x (then normalised and rotated where the family does).

    Raises:
      ValueError: layer out of range.
    """
    spec = describe_model(model)
    layer = _check_layer(spec, layer)
    m = model_interface(model)
    w = kv_expanded(m.head_weights(params, layer))
    out = {k: w[k] for k in ("W_q", "W_k", "W_v", "W_o", "b_q", "b_k", "b_v", "kv_head")}
    K, H = spec.head_dim, spec.n_heads
    inv = m.rope_inv_freq(layer)
    out["rope_inv_freq"] = jnp.asarray(np.zeros(K // 2, np.float32) if inv is None else inv)
    out["alibi_slope"] = jnp.asarray(alibi_slopes(H) if spec.positions == "alibi" else np.zeros(H, np.float32))
    return out | _score_options(m, params, layer)


def embed_unembed(model: Any, params: dict) -> tuple[Float[Array, "V d"], Float[Array, "d V"]]:
    """Token embedding W_E (V, d) and unembedding W_U (d, V) for the OV copying score.

    Tied models use W_U = W_Eᵀ (GPT-2, BLOOM; BERT, whose masked-LM decoder is tied to its word
    embeddings); untied ones (Llama, untied toys) their own read-out.
    """
    return model_interface(model).embed_unembed(params)


def attention_inputs(model: Any, params: dict, ids: Int[Array, "B T"], *, causal: bool | None = None
                     ) -> tuple[tuple[Float[Array, "B T d"], ...], tuple[Float[Array, "B H T T"], ...]]:
    """Every block's attention input x and attention probabilities for token ids (Song & Zhong §4.1).

    x is what W_q/W_k multiply: norm_1(h) for pre-norm models (LayerNorm or RMSNorm applied exactly
    once, with the block's own parameters), h for BERT and post-/no-LN toys.

    Args:
      model: any model :func:`describe_model` accepts.
      params: its parameters.
      ids: (B, T) token ids, T <= the model's positions.
      causal: BERT only (see :func:`describe_model`).

    Returns:
      (xs, attentions): L arrays (B, T, d) and L arrays (B, H, T, T) computed by the model itself.
    """
    describe_model(model, causal=causal)
    return model_interface(model, causal=causal).attention_inputs(params, ids)


@functools.partial(jax.jit, static_argnames=("model", "causal"))
def _attention_inputs_jit(model: Any, params, ids, causal):
    return attention_inputs(model, params, ids, causal=causal)


def attention_inputs_jit(model: Any, params: dict, ids: Int[Array, "B T"], *, causal: bool | None = None
                         ) -> tuple[tuple[Float[Array, "B T d"], ...], tuple[Float[Array, "B H T T"], ...]]:
    """:func:`attention_inputs` compiled once per (model config, causal, input shape) and reused across calls.

    The ids are checked eagerly (shape, length, vocabulary range) before the compiled call, so a bad id
    raises a ValueError instead of producing NaNs inside ``jit``.
    """
    spec = describe_model(model, causal=causal)
    m = model_interface(model, causal=causal)
    ids = check_input_ids(ids, m.facts.vocab_size, spec.max_positions or np.iinfo(np.int32).max,
                          what=f"{spec.kind} model")
    return _attention_inputs_jit(m, params, ids, causal)


def estimate_attention_basis(model: Any, params: dict, id_batches: Iterable[Int[Array, "_B T"]], *,
                             causal: bool | None = None) -> AttentionBasis:
    """Estimate μ and pos of every block's attention input over C windows (Song & Zhong eq. (2)).

    pos_t = mean_c x_{c,t} − μ and μ = mean_{c,t} x_{c,t}, accumulated in float64 on the host.

    Args:
      model, params: the model (see :func:`attention_inputs`).
      id_batches: iterable of (B, T) id windows, all with the same T (C = total windows >= 2).
      causal: BERT only.

    Raises:
      ValueError: fewer than 2 windows, T changing between batches, non-finite inputs.
    """
    total, n, T = None, 0, None
    describe_model(model, causal=causal)
    for b, ids in enumerate(id_batches):
        ids = np.asarray(ids)
        if ids.ndim != 2:
            raise GeomjaxError(f"estimate_attention_basis: batch {b} must be (B, T) ids, got shape {ids.shape}")
        if T is None:
            T = ids.shape[1]
        elif ids.shape[1] != T:
            raise GeomjaxError(f"estimate_attention_basis: batch {b} has T={ids.shape[1]}, earlier batches T={T}")
        xs = np.stack([np.asarray(x, np.float64)
                       for x in attention_inputs_jit(model, params, ids, causal=causal)[0]])  # (L, B, T, d)
        if not np.isfinite(xs).all():
            raise GeomjaxError(f"estimate_attention_basis: non-finite attention inputs in batch {b}")
        s = xs.sum(axis=1)
        total = s if total is None else total + s
        n += ids.shape[0]
    if n < 2:
        raise GeomjaxError(f"estimate_attention_basis: need at least 2 windows (contexts), got {n}")
    per_pos = total / n  # (L, T, d)
    mean = per_pos.mean(axis=1)
    pos = per_pos - mean[:, None, :]
    return AttentionBasis(jnp.asarray(mean, jnp.float32), jnp.asarray(pos, jnp.float32), n)


def head_qk_decomposition(model: Any, params: dict, basis: AttentionBasis, ids: Int[Array, " T"], layer: int, head: int, *,
                          causal: bool | None = None, remove_mean: bool = True) -> QKParts:
    """eq. (7) parts of one head of a model for one token sequence (Song & Zhong Fig. 4), checked inputs.

    Args:
      model, params: any model :func:`describe_model` accepts, and its parameters.
      basis: μ/pos of the model's attention inputs (:func:`estimate_attention_basis`, same ``causal``).
      ids: (T,) token ids, T <= the positions the basis was estimated on.
      layer, head: which head.
      causal: BERT only.
      remove_mean: see :func:`geomjax.theory.attention.qk_decomposition`.

    Returns:
      :class:`geomjax.theory.attention.QKParts` of (T, T) arrays.

    Raises:
      ValueError: layer or head out of range; T longer than the basis' positions.
    """
    spec = describe_model(model, causal=causal)
    layer, head = _check_layer(spec, layer), _check_head(spec, head)
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise GeomjaxError(f"head_qk_decomposition: ids must be one sequence (T,), got shape {ids.shape}")
    if basis.mean.shape[0] != spec.n_layers:
        raise GeomjaxError(f"head_qk_decomposition: the basis has {basis.mean.shape[0]} layers but the model "
                         f"{spec.n_layers}; estimate it with this model")
    if ids.shape[0] > basis.n_positions:
        raise GeomjaxError(f"head_qk_decomposition: the sequence has {ids.shape[0]} tokens but the positional basis was "
                         f"estimated on {basis.n_positions} positions; estimate it on windows of at least "
                         f"{ids.shape[0]} tokens or shorten the sequence")
    xs, _ = attention_inputs_jit(model, params, ids[None], causal=causal)
    w = qk_weights(model, params, layer)
    return qk_decomposition(xs[layer][0], basis.mean[layer], basis.pos[layer], w["W_q"][head], w["W_k"][head],
                            w["b_q"][head], w["b_k"][head], remove_mean=remove_mean, causal=spec.causal,
                            rope_inv_freq=w["rope_inv_freq"] if spec.positions == "rotary" else None,
                            alibi_slope=w["alibi_slope"][head] if spec.positions == "alibi" else None,
                            **{k: w[k] for k in SCORE_OPTIONS if k in w})


SCORE_OPTIONS = ("scale", "q_norm", "k_norm", "norm_eps", "softcap")
"""The :func:`qk_weights` entries a family adds when its scores are more than eq. (7)'s bilinear form."""


def _score_options(m, params: dict, layer: int) -> dict:
    """What a family does to the projected queries and keys beyond eq. (7)'s bilinear form: the score scale
    (Gemma 2/3), per-head q/k RMSNorm gains (Qwen 3; Gemma 3's 1 + w) and soft-capping (Gemma 2)."""
    c, out = m.config, {}
    if getattr(c, "query_pre_attn_scalar", None) is not None:
        out["scale"] = jnp.asarray(c.attn_scale, jnp.float32)
    if getattr(c, "qk_norm", False):
        a = params[m.layer_key(layer)]["attn"]
        out.update({f"{n}_norm": a[f"{n}_norm"]["scale"] + c.norm_offset for n in ("q", "k")},
                   norm_eps=jnp.asarray(c.rms_norm_eps, jnp.float32))
    if getattr(c, "attn_logit_softcapping", None) is not None:
        out["softcap"] = jnp.asarray(c.attn_logit_softcapping, jnp.float32)
    return out
