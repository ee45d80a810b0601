"""One interface to every geomjax model family: facts, hidden states, attention inputs, weights by role.

The geometry pipeline (Song & Zhong §2), the attention dissection (§4, eqs. (7)-(8)), the claims
and the Wertich experiments ask a model the same questions; each family answers them once here::

    m = model_interface(model)              # a GPT2 / Bert / Llama / Bloom / ToyTransformer / ToyRun
    m.facts                                 # d_model, n_layers, n_heads, n_kv_heads, head_dim, ...
    hs = m.hidden_states(params, ids)       # L+1 (B, T, d), Hugging Face output_hidden_states
    xs, att = m.attention_inputs(params, ids)   # what W_q / W_k multiply; probabilities (B, H, T, T)
    w = m.head_weights(params, layer)       # W_q (H, d, K), W_k, W_v (H_kv, d, K), W_o (H, K, d), ...
    qk = m.qk_matrices(params)              # W_QK (H, d, d) per block, GQA key heads shared
    f = m.mlp_weights(params, layer)        # W_in (d, F) [, W_gate (d, F)], W_out (F, d)

Conventions: ``hidden_states(final_norm=True)`` is Hugging Face's (the embedding output, then
every block; the last entry after the family's final norm — ln_f for GPT-2 / BLOOM / pre-LN toys,
RMSNorm for Llama / Mistral; BERT has none); ``final_norm=False`` gives the residual stream
before it (the Song & Zhong code's convention). The attention input is norm(h) for pre-norm
families (LayerNorm or RMSNorm with the block's own parameters) and h for BERT / post-LN toys.
Positions reach the scores through a learned table added to the input (GPT-2, BERT, toy), a rotation
of queries and keys (Llama, Mistral: :meth:`ModelInterface.rotary`) or an additive score bias
(BLOOM's ALiBi: :meth:`ModelInterface.score_bias`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax.numpy as jnp
import numpy as np

from geomjax.base._checks import compiled_cache
from geomjax.errors import GeomjaxError
from geomjax.models.bloom import alibi_bias
from geomjax.models.common import HFConfig, layer_norm, missing_head_message
from geomjax.models.family import Family, Parts
from geomjax.models.llama import apply_rotary
from geomjax.models.registry import FAMILIES, family_of
from geomjax.models.toy import ToyTransformer
from geomjax.models.toy_run import ToyRun
from geomjax.theory.positional import rotary_at
from geomjax.typing import Array, Float, Int, Params, Scalar, Shaped

__all__ = ["MODULES", "ModelFacts", "ModelInterface", "kv_expanded", "model_from_config", "model_interface"]

MODULES = {f.config_cls: f.module_cls for f in FAMILIES}
"""Config type -> Flax module of the Hugging Face ports (from the family records)."""


def model_from_config(config: HFConfig) -> Any:
    """Return the Flax module for a config of any ported family (:mod:`geomjax.models.registry`)."""
    return family_of(config).module_cls(config)


@dataclasses.dataclass(frozen=True)
class ModelFacts:
    """What every analysis needs to know about a model (hashable).

    Attributes:
      family: ``gpt2``, ``bert``, ``llama``, ``mistral``, ``bloom`` or ``toy``.
      d_model, n_layers, n_heads, head_dim, d_mlp, vocab_size: d, L, H, K, F, V.
      n_kv_heads: key/value heads (H_kv < H: grouped-query attention; query head h reads kv head
        h // (H / H_kv)).
      max_positions: longest input, or None when positions are unbounded (rotary, ALiBi).
      causal: the attention mask is causal.
      positions: ``learned`` (added to the input), ``sinusoidal``, ``rotary``, ``alibi`` or ``none``.
      norm: ``layernorm``, ``rmsnorm`` or ``none``; pre_norm: the attention input is norm(h).
      final_norm: the model has a final norm before the unembedding.
      bos_token_id: the id the family's tokenizer prepends to every text (Llama / Mistral / Gemma), else None.
    """

    family: str
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_mlp: int
    vocab_size: int
    max_positions: int | None
    causal: bool
    positions: str
    norm: str
    pre_norm: bool
    final_norm: bool
    bos_token_id: int | None = None


@dataclasses.dataclass(frozen=True)
class ModelInterface:
    """One model behind the common interface (hashable: usable as a ``jit`` static argument).

    Attributes:
      module: the Flax module (GPT2, Bert, Llama, Bloom or ToyTransformer).
      causal: BERT only: the attention mask to run with (None: ``config.causal``).
    """

    module: Any
    causal: bool | None = None

    # -- facts -----------------------------------------------------------------------------
    @functools.cached_property
    def facts(self) -> ModelFacts:
        return _facts(self.module, self.causal)

    @property
    def config(self):
        m = self.module
        return m.cfg if isinstance(m, ToyTransformer) else m.config

    @property
    def family(self) -> Family | None:
        """The :class:`~geomjax.models.family.Family` record of a Hugging Face port (None for a toy model)."""
        return None if isinstance(self.module, ToyTransformer) else family_of(self.config)

    @functools.cached_property
    def parts(self) -> Parts | None:
        """What the model is made of (:class:`~geomjax.models.family.Parts`: its family record with its config's
        switches); None for a toy model."""
        return None if self.family is None else self.family.parts(self.config)

    @property
    def block_prefix(self) -> str:
        """The blocks' name in the parameter tree and the module path (block l is ``{block_prefix}_{l}``)."""
        return "block" if self.family is None else self.family.blocks

    def layer_key(self, layer: int) -> str:
        """Name of block ``layer`` in the parameter tree."""
        return f"{self.block_prefix}_{layer}"

    def norm_affine(self, params: Params, *path: str) -> tuple[Float[Array, " d"], Float[Array, " d"] | None]:
        """The gain (d,) and bias (d,) or None of the norm module at ``path`` in the parameter tree, as the model
        applies it: the gain is offset + scale (Gemma's 1 + w: ``norm_offset`` of
        :class:`~geomjax.models.family.Parts`)."""
        p = params
        for key in path:
            p = p[key]
        off = 0.0 if self.parts is None else self.parts.norm_offset
        return (p["scale"] + off if off else p["scale"]), p.get("bias")

    # -- forward ---------------------------------------------------------------------------
    def forward(self, params: Params, ids: Int[Array, "B T"], *, return_attention: bool = False,
                compute_logits: bool = True, attention_mask: Int[Array, "B T"] | None = None,
                stop_at_layer: int | None = None) -> tuple[Float[Array, "B T out"] | None, Any]:
        """``(logits (B, T, V) or BERT's last hidden state (B, T, d) or None, Intermediates)`` of the
        family's module (:class:`~geomjax.models.common.Intermediates`; the toy's ``ToyIntermediates``).

        ``attention_mask`` (B, T): 1 real token, 0 padding (left or right): real tokens get their unpadded
        states (position ids counted over real tokens, padded keys masked). ``stop_at_layer``: run blocks
        0..stop_at_layer−1 only (no final norm, no logits). Toy models take neither.
        """
        m, fam = self.module, self.family
        if fam is None:
            if attention_mask is not None or stop_at_layer is not None:
                raise ValueError("the toy model takes no attention_mask / stop_at_layer; run it on unpadded ids")
            return m.apply({"params": params}, ids, deterministic=True, return_attention=return_attention)
        kw = dict(return_attention=return_attention, stop_at_layer=stop_at_layer)
        if fam.bidirectional:
            return m.apply({"params": params}, ids, attention_mask, causal=self.causal, **kw)
        return m.apply({"params": params}, ids, attention_mask, compute_logits=compute_logits, **kw)

    def hidden_states(self, params: Params, ids: Int[Array, "B T"], *, final_norm: bool = True,
                      attention_mask: Int[Array, "B T"] | None = None) -> tuple[Float[Array, "B T d"], ...]:
        """L+1 arrays (B, T, d): Hugging Face ``output_hidden_states`` (``final_norm``) or the residual stream;
        with a padding ``attention_mask`` (B, T) the states at real tokens are the unpadded ones."""
        _, inter = self.forward(params, ids, compute_logits=False, attention_mask=attention_mask)
        return tuple(inter.hidden_states if final_norm else inter.residual)

    def study_forward(self, *, final_norm: bool, bos: int | None = None):
        """``forward(params, ids (B, T)[, attention_mask (B, T)]) -> L+1 (B, T[+1], d)`` for the streaming
        geometry study and the extraction (a padding mask gives the unpadded states at real tokens).

        ``bos``: prepend this token id to every window (then position 0 is the BOS). The same function
        object is returned for equal arguments, so ``jit`` reuses its compilation across calls.
        """
        return _study_forward(self, bool(final_norm), None if bos is None else int(bos))

    def attention_inputs(self, params: Params, ids: Int[Array, "B T"]
                         ) -> tuple[tuple[Float[Array, "B T d"], ...], tuple[Float[Array, "B H T T"], ...]]:
        """Every block's attention input x (B, T, d) (what W_q / W_k multiply) and probabilities (B, H, T, T)."""
        _, inter = self.forward(params, ids, return_attention=True, compute_logits=False)
        xs = tuple(self.attention_input(params, layer, h) for layer, h in enumerate(inter.residual[:-1]))
        return xs, tuple(inter.attentions)

    def attention_input(self, params: Params, layer: int, h: Float[Array, "*batch d"]) -> Float[Array, "*batch d"]:
        """x = norm_1(h) (h: (..., d), usually (B, T, d)) for pre-norm families (the block's own parameters,
        applied once), else h."""
        if not self.facts.pre_norm:
            return h
        blk = params[self.layer_key(layer)]
        if self.family is not None:
            return self.family.attention_norm(self.config, blk, h)
        ln = blk["ln_1"]
        return layer_norm(h, ln["scale"], ln.get("bias", jnp.zeros_like(ln["scale"])), self.config.ln_eps)

    def qkv(self, params: Params, layer: int, x: Float[Array, "B T d"]
            ) -> tuple[Float[Array, "B T H K"], Float[Array, "B T Hkv K"], Float[Array, "B T Hkv K"]]:
        """Queries (B, T, H, K), keys and values (B, T, H_kv, K) of block ``layer`` from its attention
        input x (B, T, d) (:meth:`attention_input`), as the model computes them: queries and keys of
        rotary families rotated by position (their scores are q_t·k_s/√K, plus ALiBi for BLOOM)."""
        w = self.head_weights(params, layer)
        q, k, v = (jnp.einsum("btd,hdk->bthk", x, w[f"W_{n}"]) + w[f"b_{n}"][None, None] for n in ("q", "k", "v"))
        rot = self.rotary(x.shape[1], layer)
        if rot is not None:
            q, k = apply_rotary(q, *rot), apply_rotary(k, *rot)
        return q, k, v

    def rotary(self, T: int, layer: int = 0) -> tuple[Float[Array, "T R"], Float[Array, "T R"]] | None:
        """Rotary (cos, sin) tables (T, R) of block ``layer`` applied to queries and keys after projection
        (R = K, or GPT-NeoX's rotary_pct·K first coordinates), or None."""
        inv = self.rope_inv_freq(layer)
        return None if inv is None else rotary_at(inv, jnp.arange(T))

    def rope_inv_freq(self, layer: int = 0) -> Float[Array, " R2"] | None:
        """Rotary inverse frequencies (R/2,) of block ``layer`` (Gemma 3: local or global base), or None."""
        return self.config.layer_inv_freq(layer) if self.facts.positions == "rotary" else None

    def score_bias(self, T: int) -> Float[Array, "H T T"] | None:
        """Additive score bias (H, T, T) as the model adds it (BLOOM's ALiBi m_h·s), or None."""
        if self.facts.positions != "alibi":
            return None
        return jnp.broadcast_to(alibi_bias(self.facts.n_heads, T)[0], (self.facts.n_heads, T, T))

    # -- weights by role -------------------------------------------------------------------
    def head_weights(self, params: Params, layer: int) -> dict[str, Shaped[Array, "..."]]:
        """Per-head attention weights of block ``layer`` (x @ W convention).

        Returns W_q (H, d, K), W_k, W_v (H_kv, d, K), W_o (H, K, d), biases b_q (H, K), b_k, b_v
        (H_kv, K) and b_o (d,) (zeros when the family has none), and ``kv_head`` (H,) int: the key/
        value head query head h reads (h // (H / H_kv); the identity without grouped-query attention).
        """
        f = self.facts
        if not 0 <= int(layer) < f.n_layers:
            raise ValueError(f"layer must lie in [0, {f.n_layers}), got {layer}")
        a = params[self.layer_key(layer)]["attn"]
        out = {f"W_{n}": jnp.moveaxis(a[n]["kernel"], 1, 0) for n in ("q", "k", "v")}
        out["W_o"] = a["o"]["kernel"]
        dt = out["W_q"].dtype
        for n, H in (("q", f.n_heads), ("k", f.n_kv_heads), ("v", f.n_kv_heads)):
            out[f"b_{n}"] = a[n]["bias"] if "bias" in a[n] else jnp.zeros((H, f.head_dim), dt)
        out["b_o"] = a["o"]["bias"] if "bias" in a["o"] else jnp.zeros((f.d_model,), dt)
        out["kv_head"] = jnp.arange(f.n_heads) // (f.n_heads // f.n_kv_heads)
        return out

    def qk_matrices(self, params: Params) -> tuple[Float[Array, "H d d"], ...]:
        """W_QK = W_q,h W_k,kv(h)ᵀ, (H, d, d) per block (Bao §6; :func:`geomjax.theory.localization.qk_matrix`): the
        bilinear form x_i W_QK x_jᵀ of the attention score (before the 1/√K scale, biases and, for rotary
        families, the rotation by i − j). Grouped-query attention: head h reads key head ``kv_head[h]``."""
        out = []
        for layer in range(self.facts.n_layers):
            w = kv_expanded(self.head_weights(params, layer))
            out.append(jnp.einsum("hdk,hek->hde", w["W_q"], w["W_k"]))  # = localization.qk_matrix
        return tuple(out)

    def norm_weights(self, params: Params, layer: int) -> dict[str, Float[Array, " d"]]:
        """The block's norm parameters (d,), named by role (the family record's ``norms``): GPT-2 / BLOOM /
        GPT-NeoX / toy ``ln_1_*`` (feeds the attention) and ``ln_2_*`` (the MLP), ``*_scale`` and ``*_bias``;
        rotary RMSNorm families ``rms_1_scale``, ``rms_2_scale`` (Gemma 2/3 also ``rms_attn_out_scale``,
        ``rms_mlp_out_scale``; Gemma's gain is 1 + scale); BERT ``ln_attn_*`` (after the attention) and
        ``ln_out_*`` (after the MLP)."""
        blk = params[self.layer_key(layer)]
        names = (("ln_1", "ln_1"), ("ln_2", "ln_2")) if self.family is None else self.family.norms
        return {f"{role}_{k}": v for key, role in names if key in blk for k, v in blk[key].items()}

    def mlp_weights(self, params: Params, layer: int) -> dict[str, Float[Array, "_ _"]]:
        """MLP matrices of block ``layer``: W_in (d, F) and W_out (F, d); SwiGLU families also W_gate (d, F)
        (out = (silu(x W_gate) ⊙ x W_in) W_out). Empty for attention-only toys."""
        mlp = params[self.layer_key(layer)].get("mlp", {})
        if "gate" in mlp:
            return {"W_in": mlp["up"]["kernel"], "W_gate": mlp["gate"]["kernel"], "W_out": mlp["down"]["kernel"]}
        return {"W_in": mlp["fc"]["kernel"], "W_out": mlp["proj"]["kernel"]} if "fc" in mlp else {}

    def embed_unembed(self, params: Params) -> tuple[Float[Array, "V d"], Float[Array, "d V"]]:
        """Token embedding W_E (V, d) and unembedding W_U (d, V) (tied: W_Eᵀ; BERT's MLM decoder is tied)."""
        if self.family is None:
            E = params["embed"]["embedding"]
            return E, params["unembed"]["kernel"] if "unembed" in params else E.T
        E = params[self.family.embedding]["embedding"]
        if not self.family.bidirectional and not self.has_lm_head(params):  # a causal LM saved without its head
            raise GeomjaxError(missing_head_message(self.config))
        return E, params["lm_head"]["kernel"] if "lm_head" in params else E.T

    def has_lm_head(self, params: Params) -> bool:
        """Whether the model can give logits: tied families (and the toys) always can; an untied one
        needs its ``lm_head`` (a base checkpoint has none); BERT's output is its last hidden state."""
        if self.family is None:  # the toys read out through their embedding
            return True
        if self.family.bidirectional:
            return False
        return bool(getattr(self.config, "tie_word_embeddings", True)) or "lm_head" in params

    def scale_qk(self, params: Params, alpha: Scalar) -> Params:
        """params with every layer's W_q, W_k (kernels and biases) multiplied by α (scores × α²; the
        rotation of rotary families is linear, so they scale the same way)."""
        p = dict(params)
        for layer in range(self.facts.n_layers):
            key = self.layer_key(layer)
            blk, attn = dict(p[key]), dict(p[key]["attn"])
            for n in ("q", "k"):
                attn[n] = {k: v * alpha for k, v in attn[n].items()}
            blk["attn"], p[key] = attn, blk
        return p


@compiled_cache(maxsize=64)
def _study_forward(iface: ModelInterface, final_norm: bool, bos: int | None):
    def forward(params, ids, attention_mask=None):
        if bos is not None:
            ids = jnp.concatenate([jnp.full((ids.shape[0], 1), bos, ids.dtype), ids], axis=1)
            if attention_mask is not None:
                attention_mask = jnp.concatenate([jnp.ones((ids.shape[0], 1), attention_mask.dtype),
                                                  attention_mask], axis=1)
        return iface.hidden_states(params, ids, final_norm=final_norm, attention_mask=attention_mask)

    forward.__name__ = f"{iface.facts.family}_hidden_states"
    return forward


def _facts(m, causal: bool | None) -> ModelFacts:
    if isinstance(m, ToyTransformer):
        c = m.cfg
        if causal is not None and bool(causal) != c.causal:
            raise ValueError(f"the toy model has causal={c.causal}; causal={causal} cannot be overridden "
                             "(leave causal=None)")
        return ModelFacts("toy", c.d_model, c.n_layers, c.n_heads, c.n_heads, c.head_dim, c.d_mlp, c.vocab_size,
                          c.max_len, c.causal, c.pos_embedding, "none" if c.layer_norm == "none" else "layernorm",
                          c.layer_norm == "pre", c.layer_norm == "pre")
    c = getattr(m, "config", None)
    if isinstance(c, HFConfig):
        fam = family_of(c)
        if fam.bidirectional:
            causal = c.causal if causal is None else bool(causal)
        elif causal is None or causal:
            causal = True
        else:
            raise ValueError(f"{c.display_name} is always causal; leave causal=None")
        return ModelFacts(c.model_type, c.d_model, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim, c.d_mlp,
                          c.vocab_size, c.max_positions, causal, fam.positions, fam.norm, fam.pre_norm, fam.pre_norm,
                          c.bos_token_id if fam.prepends_bos else None)
    raise TypeError(f"unsupported model {type(m).__name__}; expected a geomjax port "
                    f"({', '.join(f.module_cls.__name__ for f in FAMILIES)}), ToyTransformer or ToyRun")


def model_interface(model: Any, *, causal: bool | None = None) -> ModelInterface:
    """The :class:`ModelInterface` of a geomjax model (a Flax module, a ToyRun, or an interface).

    Args:
      model: GPT2, Bert, Llama, Bloom, ToyTransformer, ToyRun or a ModelInterface.
      causal: BERT only: None uses ``config.causal``, True the causal mask (the Song & Zhong code's
        ``is_decoder=True``). Other families have their own mask; a contradicting value raises.

    Raises:
      ValueError: ``causal`` contradicts a causal-only model. TypeError: unsupported model.
    """
    if isinstance(model, ModelInterface):
        if causal is None or causal == model.causal:
            return model
        model = model.module
    if isinstance(model, ToyRun):
        model = model.model
    config = getattr(model, "config", None)
    bidirectional = isinstance(config, HFConfig) and family_of(config).bidirectional
    iface = ModelInterface(model, causal if bidirectional else None)
    _facts(model, causal)  # validates causal for every family
    return iface


def kv_expanded(w: dict[str, Shaped[Array, "..."]]) -> dict[str, Shaped[Array, "..."]]:
    """:meth:`ModelInterface.head_weights` with W_k, W_v, b_k, b_v repeated to one per query head
    (GQA's shared keys made explicit: entry h is kv head ``kv_head[h]``)."""
    idx = np.asarray(w["kv_head"])
    return {**w, **{k: w[k][idx] for k in ("W_k", "W_v", "b_k", "b_v")}}
