"""Llama-2 / TinyLlama / Mistral as a Flax linen module, numerically equal to Hugging Face's
LlamaForCausalLM / MistralForCausalLM (eager attention); its rotary decoder also runs the families built
on it (Qwen 2/3, Gemma 1/2/3: ``qwen2.py``, ``qwen3.py``, ``gemma.py``, ...), switched by config fields.

Pre-norm decoder with RMSNorm, rotary position embeddings, SwiGLU MLP and grouped-query attention:
x_0 = E[ids]; x_{l+1} = x_l + attn(rms_1(x_l)), then + down(silu(gate(·)) * up(·)) of rms_2;
logits = rms_f(x_L) @ W_U (W_U = Eᵀ when ``tie_word_embeddings``). Queries and keys are rotated
after the projection (Su et al., RoFormer eq. (34), Hugging Face's "rotate_half" layout):
q̃_t = q_t cos(t θ) + rotate_half(q_t) sin(t θ), θ_i = rope_theta^(−2i/K) (/ factor for linear
scaling). Mistral's sliding window lets query t attend keys s with t − W < s ≤ t.

``model.apply({"params": params}, ids)`` returns ``(logits (B, T, V), Intermediates)`` with the
Hugging Face ``output_hidden_states`` convention (embedding output, then each block; the last entry
after the final RMSNorm) in ``inter.hidden_states`` and the pre-norm stream in ``inter.residual``.

Parameter tree::

    embed_tokens/embedding (V, d)   norm/scale (d,)   [lm_head/kernel (d, V) when untied]
    layers_<l>/input_norm/scale, layers_<l>/post_norm/scale (d,)
    layers_<l>/attn/q/kernel (d, H, K)  k/kernel, v/kernel (d, H_kv, K)  o/kernel (H, K, d)
        [biases q (H, K), k, v (H_kv, K), o (d,) when attention_bias]
    layers_<l>/mlp/gate/kernel, up/kernel (d, F)  down/kernel (F, d)  [biases when mlp_bias]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from geomjax.errors import GeomjaxError
from geomjax.models import hf_tables as ht
from geomjax.models.common import (
    ACTIVATIONS,
    ATTENTION_HOOKS,
    BLOCK_HOOKS,
    CausalLM,
    Embed,
    HFStandardConfig,
    MLP_HOOKS,
    head_results,
    hook_points,
    pre_norm_block,
    scaled_dot_product_attention,
)
from geomjax.models.family import Family
from geomjax.theory import positional
from geomjax.theory.positional import ROPE_TYPES, rope_inv_freq, rotary_at
from geomjax.typing import Array, Bool, DType, Float, Int

__all__ = ["Llama", "LlamaConfig", "RMSNorm", "RotaryConfig", "apply_rotary", "rms_norm", "rotary_tables",
           "window_mask"]

_LAYER_TYPES = ("full_attention", "sliding_attention")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RotaryConfig(HFStandardConfig):
    """Hyperparameters of a rotary pre-RMSNorm decoder (hashable; Hugging Face names): Llama's, and the
    switches of the families built on it (their config classes subclass this one and set the defaults).

    Attributes:
      vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size: V, d, L, H,
        F (:class:`HFStandardConfig`; required).
      max_position_embeddings: the context length the model was trained for (required; rotary
        positions are not bounded by it: recorded as a fact, not enforced).
      model_type: one of the subclass's ``MODEL_TYPES``.
      num_key_value_heads: H_kv (grouped-query attention: query head h reads key/value head
        h // (H / H_kv)); None: H, as in transformers.
      head_dim: K (may differ from d / H); None: d / H, as in transformers.
      rms_norm_eps: RMSNorm eps.
      rope_theta: rotary base (of the full-attention layers).
      rope_type, rope_factor: ``"default"`` or ``"linear"`` (positions divided by the factor).
      attention_bias, mlp_bias: biases on q/k/v/o and on gate/up/down.
      qkv_bias: biases on q, k, v only (Qwen 2); None: as ``attention_bias``.
      qk_norm: per-head RMSNorm of queries and keys before the rotation (Qwen 3, Gemma 3).
      norm_offset: RMSNorm gain is ``offset + scale`` (Gemma's ``1 + w``: 1.0; else 0.0).
      hidden_act: the gated MLP's activation: ``silu`` (SwiGLU) or ``gelu_pytorch_tanh`` (GeGLU, Gemma).
      scale_embeddings: x_0 = E[ids] · √d (Gemma).
      sandwich_norms: RMSNorms also on the attention and MLP outputs (Gemma 2/3).
      attn_logit_softcapping, final_logit_softcapping: c · tanh(· / c) on scores / logits (Gemma 2), or None.
      query_pre_attn_scalar: scores scaled by its −1/2 power (Gemma 2/3); None: K^(−1/2).
      tie_word_embeddings: logits use the input embedding (no ``lm_head``).
      sliding_window: None (full causal attention) or W (query t attends keys t − W < s ≤ t) on every
        layer (Mistral), or on the ``sliding_attention`` layers of ``layer_types``.
      layer_types: None, or L of ``full_attention`` / ``sliding_attention`` (Gemma 2/3 alternate them).
      local_rope_theta: rotary base of the sliding layers (Gemma 3's dual bases); None: ``rope_theta``.
      bos_token_id: the id the tokenizer prepends (None: none).
    """

    model_type: str = "llama"
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_type: str = "default"
    rope_factor: float = 1.0
    attention_bias: bool = False
    mlp_bias: bool = False
    qkv_bias: bool | None = None
    qk_norm: bool = False
    norm_offset: float = 0.0
    hidden_act: str = "silu"
    scale_embeddings: bool = False
    sandwich_norms: bool = False
    attn_logit_softcapping: float | None = None
    final_logit_softcapping: float | None = None
    query_pre_attn_scalar: float | None = None
    tie_word_embeddings: bool = False
    sliding_window: int | None = None
    layer_types: tuple[str, ...] | None = None
    local_rope_theta: float | None = None
    bos_token_id: int | None = 1

    MODEL_TYPES: ClassVar[tuple[str, ...]] = ()
    DISPLAY_NAMES: ClassVar[dict[str, str]] = {}
    # rotary positions are unbounded: no max_positions (HFConfig answers None)
    HF_FIELDS: ClassVar[dict[str, str]] = {
        **{k: v for k, v in HFStandardConfig.HF_FIELDS.items() if k != "max_positions"},
        "num_kv_heads": "num_key_value_heads"}

    @property
    def display_name(self) -> str:
        return self.DISPLAY_NAMES[self.model_type]

    def __post_init__(self):
        what = type(self).__name__
        if self.num_key_value_heads is None:
            object.__setattr__(self, "num_key_value_heads", self.num_attention_heads)
        if self.head_dim is None and self.num_attention_heads >= 1:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if self.layer_types is not None:
            object.__setattr__(self, "layer_types", tuple(self.layer_types))
        if self.model_type not in self.MODEL_TYPES:
            raise ValueError(f"{what}: model_type must be one of {self.MODEL_TYPES}, got {self.model_type!r}")
        self.check_sizes("head_dim")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"{what}: num_attention_heads={self.num_attention_heads} is not a multiple of "
                             f"num_key_value_heads={self.num_key_value_heads}")
        if self.head_dim % 2:
            raise ValueError(f"{what}: head_dim={self.head_dim} must be even for rotary embeddings")
        if self.rope_type not in ROPE_TYPES:
            raise ValueError(f"{what}: rope_type={self.rope_type!r} is not implemented (only {ROPE_TYPES})")
        if self.sliding_window is not None and self.sliding_window < 1:
            raise ValueError(f"{what}: sliding_window must be None or >= 1, got {self.sliding_window}")
        if self.hidden_act not in ("silu", "gelu_pytorch_tanh"):
            raise ValueError(f"{what}: hidden_act={self.hidden_act!r} is not implemented (silu, gelu_pytorch_tanh)")
        lt = self.layer_types
        if lt is not None and (len(lt) != self.num_hidden_layers or set(lt) - set(_LAYER_TYPES)):
            raise ValueError(f"{what}: layer_types must list {self.num_hidden_layers} of {_LAYER_TYPES}, got {lt}")
        if lt is not None and "sliding_attention" in lt and self.sliding_window is None:
            raise ValueError(f"{what}: sliding_attention layers need a sliding_window")

    def layer_window(self, layer: int) -> int | None:
        """The sliding window W of block ``layer`` (None: full causal attention)."""
        if self.layer_types is None or self.layer_types[layer] == "sliding_attention":
            return self.sliding_window
        return None

    def layer_inv_freq(self, layer: int) -> Float[Array, " K2"]:
        """Rotary inverse frequencies (K/2,) of block ``layer`` (Gemma 3's sliding layers: the local base)."""
        local = self.layer_types is not None and self.layer_types[layer] == "sliding_attention"
        if local and self.local_rope_theta is not None:
            return rope_inv_freq(self.head_dim, self.local_rope_theta)
        return rope_inv_freq(self.head_dim, self.rope_theta, self.rope_type, self.rope_factor)

    @property
    def attn_scale(self) -> float:
        """The score scale: query_pre_attn_scalar^(−1/2) (Gemma 2/3), else K^(−1/2)."""
        return (self.query_pre_attn_scalar if self.query_pre_attn_scalar is not None else self.head_dim) ** -0.5


@dataclasses.dataclass(frozen=True, kw_only=True)
class LlamaConfig(RotaryConfig):
    """Hyperparameters of a Llama-family model (:class:`RotaryConfig`; ``model_type`` ``"llama"`` or
    ``"mistral"``, the only difference being Mistral's sliding window)."""

    MODEL_TYPES: ClassVar[tuple[str, ...]] = ("llama", "mistral")
    DISPLAY_NAMES: ClassVar[dict[str, str]] = {"llama": "Llama", "mistral": "Mistral"}


def rms_norm(x: Float[Array, "... d"], scale: Float[Array, " d"], eps: float) -> Float[Array, "... d"]:
    """RMSNorm (Zhang & Sennrich 2019): scale · x / sqrt(mean(x²) + eps), statistics in float32.

    As Hugging Face's LlamaRMSNorm: the normalisation runs in float32, the result is cast back to
    x's dtype and then multiplied by ``scale``. Shapes: x (..., d), scale (d,).
    """
    x32 = x.astype(jnp.float32)
    var = jnp.mean(x32 * x32, axis=-1, keepdims=True)
    bshape = (1,) * (x.ndim - 1) + (-1,)
    return scale.reshape(bshape) * (x32 * jax.lax.rsqrt(var + eps)).astype(x.dtype)


class RMSNorm(nn.Module):
    """RMSNorm with parameter ``scale`` (d,) and gain ``offset + scale`` (Gemma: 1 + w); see :func:`rms_norm`."""

    eps: float = 1e-6
    offset: float = 0.0

    @nn.compact
    def __call__(self, x: Float[Array, "... d"]) -> Float[Array, "... d"]:
        init = nn.initializers.zeros if self.offset else nn.initializers.ones
        scale = self.param("scale", init, (x.shape[-1],), jnp.float32)
        return rms_norm(x, scale + self.offset if self.offset else scale, self.eps)

    def norm_scale(self, x: Float[Array, "... d"]) -> Float[Array, "... 1"]:
        """The divisor sqrt(mean(x²) + eps) (..., 1) of :func:`rms_norm`, in float32 (TransformerLens ``hook_scale``)."""
        x32 = x.astype(jnp.float32)
        return jnp.sqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)


def rotary_tables(config: RotaryConfig, T: int, dtype: DType = jnp.float32, layer: int = 0,
                  positions: Int[Array, "*b T"] | None = None) -> tuple[Float[Array, "*b T K"], Float[Array, "*b T K"]]:
    """cos, sin tables (1, T, K) of block ``layer``'s rotary embedding at positions 0..T-1, or (B, T, K) at
    the given position ids (RoFormer eq. (34))."""
    pos = jnp.arange(T)[None] if positions is None else positions
    return rotary_at(config.layer_inv_freq(layer), pos, dtype)


def apply_rotary(x: Float[Array, "B T H K"], cos: Float[Array, "*#b T R"], sin: Float[Array, "*#b T R"]
                 ) -> Float[Array, "B T H K"]:
    """Rotate queries or keys (B, T, H, K) by their position with (T, R) or (B, T, R) tables
    (:func:`geomjax.theory.positional.apply_rotary`: x cos + rotate_half(x) sin on the first R coordinates)."""
    cos, sin = (a if a.ndim == 3 else a[None] for a in (cos, sin))
    return positional.apply_rotary(x, cos[:, :, None, :], sin[:, :, None, :])


def window_mask(T: int, window: int | None) -> Bool[Array, "1 1 T T"] | None:
    """(1, 1, T, T) boolean "key s is within the window of query t": s > t − window (None: no window)."""
    if window is None:
        return None
    t = jnp.arange(T)
    return (t[None, :] > t[:, None] - window)[None, None]


class LlamaAttention(nn.Module):
    """Grouped-query self-attention with rotary queries/keys (per-head parameter layout); optional per-head
    q/k RMSNorm (Qwen 3, Gemma 3) and score soft-capping (Gemma 2).

    ``config`` is a :class:`RotaryConfig` or any config with the fields it reads (GPT-NeoX's:
    num_heads, num_kv_heads, head_dim, hidden_size, attention_bias, qkv_bias, qk_norm, rms_norm_eps,
    norm_offset, attn_scale, attn_logit_softcapping), hence annotated with their common base."""

    config: HFStandardConfig

    def setup(self):
        c = self.config
        init = nn.initializers.normal(0.02)
        b = c.attention_bias if c.qkv_bias is None else c.qkv_bias
        self.q = nn.DenseGeneral((c.num_heads, c.head_dim), use_bias=b, kernel_init=init, name="q")
        self.k = nn.DenseGeneral((c.num_kv_heads, c.head_dim), use_bias=b, kernel_init=init, name="k")
        self.v = nn.DenseGeneral((c.num_kv_heads, c.head_dim), use_bias=b, kernel_init=init, name="v")
        self.o = nn.DenseGeneral(c.hidden_size, axis=(-2, -1), use_bias=c.attention_bias, kernel_init=init,
                                 name="o")
        if c.qk_norm:
            self.q_norm = RMSNorm(c.rms_norm_eps, c.norm_offset)
            self.k_norm = RMSNorm(c.rms_norm_eps, c.norm_offset)
        self.hp = hook_points(*ATTENTION_HOOKS, "attn.q_rot", "attn.k_rot")

    def __call__(self, x: Float[Array, "B T d"], mask: Bool[Array, "#B 1 #T T"], cos: Float[Array, "#B T K"],
                 sin: Float[Array, "#B T K"]) -> tuple[Float[Array, "B T d"], Float[Array, "B H T T"]]:
        c, hp = self.config, self.hp
        rep = c.num_heads // c.num_kv_heads
        q, k = hp["attn_q"](self.q(x)), hp["attn_k"](self.k(x))
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = hp["attn_q_rot"](apply_rotary(q, cos, sin))
        k = hp["attn_k_rot"](apply_rotary(k, cos, sin))
        v = hp["attn_v"](self.v(x))
        if rep > 1:  # Hugging Face repeat_kv: kv head j serves query heads j*rep .. j*rep+rep-1
            k, v = jnp.repeat(k, rep, axis=2), jnp.repeat(v, rep, axis=2)
        z, probs = scaled_dot_product_attention(q, k, v, mask, c.attn_scale, hooks=hp,
                                                softcap=c.attn_logit_softcapping)
        z = hp["attn_z"](z)
        out = self.o(z)
        hp["attn_result"](head_results(z, self.o.variables["params"]["kernel"]))
        return out, probs


class GatedMLP(nn.Module):
    """down(act(gate(x)) * up(x)): SwiGLU (silu; Shazeer 2020, eq. (6)) or GeGLU (tanh GELU, Gemma); kernels
    gate, up (d, F), down (F, d)."""

    config: RotaryConfig

    def setup(self):
        c = self.config
        init = nn.initializers.normal(0.02)
        self.gate = nn.Dense(c.intermediate_size, use_bias=c.mlp_bias, kernel_init=init)
        self.up = nn.Dense(c.intermediate_size, use_bias=c.mlp_bias, kernel_init=init)
        self.down = nn.Dense(c.hidden_size, use_bias=c.mlp_bias, kernel_init=init)
        self.hp = hook_points(*MLP_HOOKS, "mlp.pre_linear")

    def __call__(self, x):
        act = jax.nn.silu if self.config.hidden_act == "silu" else ACTIVATIONS[self.config.hidden_act]
        hp = self.hp  # mlp.pre: the gate before the activation; mlp.pre_linear: up(x); mlp.post: what down reads
        return self.down(hp["mlp_post"](act(hp["mlp_pre"](self.gate(x))) * hp["mlp_pre_linear"](self.up(x))))


SwiGLU = GatedMLP  # the name Llama's code and docs use


class LlamaBlock(nn.Module):
    """One pre-RMSNorm block: x + attn(rms_1 x), then + mlp(rms_2 ·) (Gemma 2/3: each branch output also
    RMS-normed); ``layer`` picks the block's window and rotary base."""

    config: RotaryConfig
    layer: int = 0

    def setup(self):
        c = self.config
        self.input_norm = RMSNorm(c.rms_norm_eps, c.norm_offset)
        self.attn = LlamaAttention(c)
        self.post_norm = RMSNorm(c.rms_norm_eps, c.norm_offset)
        self.mlp = GatedMLP(c)
        if c.sandwich_norms:
            self.attn_out_norm = RMSNorm(c.rms_norm_eps, c.norm_offset)
            self.mlp_out_norm = RMSNorm(c.rms_norm_eps, c.norm_offset)
        self.hp = hook_points(*BLOCK_HOOKS)

    def __call__(self, x: Float[Array, "B T d"], masks: tuple[Bool[Array, "#B 1 #T T"], Bool[Array, "#B 1 #T T"]],
                 rotary: tuple[tuple[Float[Array, "#B T K"], Float[Array, "#B T K"]], ...]
                 ) -> tuple[Float[Array, "B T d"], Float[Array, "B H T T"]]:
        c = self.config
        mask = masks[c.layer_window(self.layer) is not None]
        cos, sin = rotary[self.layer]
        outs = (self.attn_out_norm, self.mlp_out_norm) if c.sandwich_norms else None
        return pre_norm_block(self.hp, x, self.input_norm, self.attn, self.post_norm, self.mlp, mask, cos, sin,
                              out_norms=outs)


class Llama(CausalLM):
    """Llama / Mistral (and Qwen 2/3, Gemma 1/2/3) causal language model returning ``(logits, Intermediates)``
    (:class:`CausalLM`; any T: rotary positions are unbounded)."""

    def scannable(self) -> bool:
        """Every block has the same window and rotary base (Gemma 2/3's alternating local/global layers do
        not): only then does block 0's module compute every layer (:meth:`CausalLM.scan_parts`)."""
        c = self.config
        return all(c.layer_window(layer) == c.layer_window(0)
                   and np.array_equal(np.asarray(c.layer_inv_freq(layer)), np.asarray(c.layer_inv_freq(0)))
                   for layer in range(c.num_hidden_layers))

    config: RotaryConfig

    def setup(self):
        c = self.config
        self.embed_tokens = Embed(c.vocab_size, c.hidden_size)
        self.layers = [LlamaBlock(c, layer) for layer in range(c.num_hidden_layers)]
        self.norm = RMSNorm(c.rms_norm_eps, c.norm_offset)
        self.setup_read_out(c.vocab_size, c.tie_word_embeddings)

    def embed(self, ids: Int[Array, "B T"], mask: Bool[Array, "#B 1 #T T"], positions: Int[Array, "B T"] | None
              ) -> tuple[
            Float[Array, "B T d"], tuple]:
        """x_0 = E[ids] (× √d when ``scale_embeddings``); the blocks take the causal mask with and without the
        sliding window and every layer's rotary tables at the position ids."""
        c, T = self.config, ids.shape[1]
        x = self.hook_embed(self.embed_tokens(ids))
        if c.scale_embeddings:
            x = x * jnp.asarray(c.hidden_size ** 0.5, x.dtype)
        win = window_mask(T, c.sliding_window)
        masks = (mask, mask if win is None else mask & win)
        tables = {}
        for layer in range(c.num_hidden_layers):  # one table per distinct base (Gemma 3: two)
            key = tuple(map(float, c.layer_inv_freq(layer)))
            if key not in tables:
                tables[key] = rotary_tables(c, T, x.dtype, layer, positions)
        rotary = tuple(tables[tuple(map(float, c.layer_inv_freq(layer)))] for layer in range(c.num_hidden_layers))
        return x, (masks, rotary)


# -- conversion: config.json reader and weight table ------------------------------------------------
USED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "rope_theta",
        "rope_parameters", "rope_scaling", "attention_bias", "mlp_bias", "tie_word_embeddings", "bos_token_id")
"""config.json keys every rotary decoder's reader uses (:func:`rotary_config_kwargs`)."""
CHECKED: dict[str, object] = {**ht.CHECKED_COMMON, "hidden_act": "silu", "partial_rotary_factor": 1.0}
# pretraining_tp > 1 only slices the same matmuls (Llama-2's configs carry it); not a different function.
IGNORED = ht.IGNORED_COMMON | {"attention_dropout", "pretraining_tp", "tie_encoder_decoder"}
SIZES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")


def rotary_config_kwargs(cfg: Mapping, what: str, rope: Mapping | None = None) -> dict:
    """The :class:`RotaryConfig` fields every rotary decoder reads the same way (sizes, eps, rope, biases,
    tying, BOS); an absent (or null) num_key_value_heads / head_dim is left to the config, which derives
    it as transformers does. ``rope``: the family's own rope fields (Gemma 3), else read here."""
    ht.require(cfg, SIZES, what)
    kv, K = cfg.get("num_key_value_heads"), cfg.get("head_dim")
    if rope is None:
        params = cfg.get("rope_parameters")
        if isinstance(params, Mapping) and ("sliding_attention" in params or "full_attention" in params):
            raise GeomjaxError(f"{what} config: per-layer-type rope_parameters are not implemented")
        rope = ht.rope_from_hf(params, cfg.get("rope_scaling"), cfg.get("rope_theta", 10000.0), what)
    return dict(
        model_type=cfg.get("model_type"), vocab_size=int(cfg["vocab_size"]), hidden_size=int(cfg["hidden_size"]),
        intermediate_size=int(cfg["intermediate_size"]), num_hidden_layers=int(cfg["num_hidden_layers"]),
        num_attention_heads=int(cfg["num_attention_heads"]), num_key_value_heads=None if kv is None else int(kv),
        head_dim=None if K is None else int(K),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        attention_bias=bool(cfg.get("attention_bias", False)), mlp_bias=bool(cfg.get("mlp_bias", False)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        bos_token_id=cfg.get("bos_token_id"), **rope)


def build_config(cls: type, what: str, **kw) -> HFStandardConfig:
    """``cls(**kw)`` with a config error as a one-line GeomjaxError naming the family."""
    try:
        return cls(**kw)
    except ValueError as e:
        raise GeomjaxError(f"{what} config: {e}") from None


def config_from_hf(cfg: Mapping, ignore_config_keys: Iterable[str] = ()) -> LlamaConfig:
    """Build a :class:`LlamaConfig` from a Hugging Face Llama or Mistral ``config.json`` dict.

    Mistral's ``sliding_window`` is honoured (None: full causal attention); for ``model_type``
    "llama" a sliding window is not a Llama attribute and is rejected as unknown.

    Raises:
      GeomjaxError: an activation other than silu, a rope type other than default/linear, partial
        rotary factors, unknown keys, missing sizes.
    """
    mt = cfg.get("model_type")
    what = "Mistral" if mt == "mistral" else "Llama"
    used = USED + (("sliding_window",) if mt == "mistral" else ())
    ht.check_keys(cfg, used, CHECKED, IGNORED, what, ignore_config_keys)
    kw = rotary_config_kwargs(cfg, what)
    return build_config(LlamaConfig, what, **kw, sliding_window=cfg.get("sliding_window") if mt == "mistral" else None)


TOP_TABLE: dict[str, ht.Transform] = {
    # under "model."
    "embed_tokens.weight": ht.copy("embed_tokens", "embedding"),
    "norm.weight": ht.copy("norm", "scale"),
}
LAYER_TABLE: dict[str, ht.Transform] = {
    # under "model.layers.{l}." -> under "layers_{l}/"
    "input_layernorm.weight": ht.copy("input_norm", "scale"),
    "post_attention_layernorm.weight": ht.copy("post_norm", "scale"),
    "self_attn.q_proj.weight": ht.linear_heads_in("q", kv=False),  # (H K, d) -> (d, H, K)
    "self_attn.k_proj.weight": ht.linear_heads_in("k", kv=True),  # (H_kv K, d) -> (d, H_kv, K)
    "self_attn.v_proj.weight": ht.linear_heads_in("v", kv=True),
    "self_attn.o_proj.weight": ht.heads_out_kernel(transpose=True),  # (d, H K) -> (H, K, d)
    "mlp.gate_proj.weight": ht.transpose("mlp", "gate", "kernel"),  # (F, d) -> (d, F)
    "mlp.up_proj.weight": ht.transpose("mlp", "up", "kernel"),
    "mlp.down_proj.weight": ht.transpose("mlp", "down", "kernel"),  # (d, F) -> (F, d)
}
QKV_BIAS_TABLE: dict[str, ht.Transform] = {  # attention_bias=True or qkv_bias=True (Qwen 2)
    "self_attn.q_proj.bias": ht.linear_heads_bias("q", kv=False),
    "self_attn.k_proj.bias": ht.linear_heads_bias("k", kv=True),
    "self_attn.v_proj.bias": ht.linear_heads_bias("v", kv=True),
}
O_BIAS_TABLE: dict[str, ht.Transform] = {"self_attn.o_proj.bias": ht.copy("attn", "o", "bias")}  # attention_bias
MLP_BIAS_TABLE: dict[str, ht.Transform] = {  # mlp_bias=True
    "mlp.gate_proj.bias": ht.copy("mlp", "gate", "bias"),
    "mlp.up_proj.bias": ht.copy("mlp", "up", "bias"),
    "mlp.down_proj.bias": ht.copy("mlp", "down", "bias"),
}
QK_NORM_TABLE: dict[str, ht.Transform] = {  # qk_norm=True (Qwen 3, Gemma 3): RMSNorm gains (K,)
    "self_attn.q_norm.weight": ht.copy("attn", "q_norm", "scale"),
    "self_attn.k_norm.weight": ht.copy("attn", "k_norm", "scale"),
}
SANDWICH_TABLE: dict[str, ht.Transform] = {  # sandwich_norms=True (Gemma 2/3): HF's names differ in role
    "post_attention_layernorm.weight": ht.copy("attn_out_norm", "scale"),  # on the attention output
    "pre_feedforward_layernorm.weight": ht.copy("post_norm", "scale"),  # the MLP input norm
    "post_feedforward_layernorm.weight": ht.copy("mlp_out_norm", "scale"),  # on the MLP output
}
LAYER_BUFFERS = ("self_attn.rotary_emb.inv_freq",)
"""Rotary inverse-frequency buffers older checkpoints saved."""


def weight_table(c: RotaryConfig) -> tuple[dict[str, ht.Transform], set[str]]:
    """{Hugging Face name below "model.": transform}, the tables the config's switches select, and the
    ignorable buffers; the same for every rotary decoder (Llama, Mistral, Qwen 2/3, Gemma 1/2/3)."""
    table = dict(TOP_TABLE) | ({} if c.tie_word_embeddings else ht.LM_HEAD_TABLE)
    layer = dict(LAYER_TABLE)
    for on, part in ((c.attention_bias or c.qkv_bias, QKV_BIAS_TABLE), (c.attention_bias, O_BIAS_TABLE),
                     (c.mlp_bias, MLP_BIAS_TABLE), (c.qk_norm, QK_NORM_TABLE), (c.sandwich_norms, SANDWICH_TABLE)):
        if on:
            layer.update(part)
    ht.per_layer(table, c.num_hidden_layers, "layers", "layers", layer)
    return table, {f"layers.{i}.{b}" for i in range(c.num_hidden_layers) for b in LAYER_BUFFERS}


def rms_norm_input(c: RotaryConfig, blk: Mapping, h: Float[Array, "*b d"]) -> Float[Array, "*b d"]:
    """norm_1(h) = rms_1(h) with the block's gain (Gemma: 1 + w), the attention input."""
    scale = blk["input_norm"]["scale"]
    return rms_norm(h, scale + c.norm_offset if c.norm_offset else scale, c.rms_norm_eps)


def rotary_family(name: str, model_types: tuple[str, ...], config_cls: type, reader, *, prepends_bos: bool,
                  tiny: Mapping | None = None) -> Family:
    """The :class:`Family` record of a rotary decoder running on :class:`Llama` (module, table, layout)."""
    return Family(
        name=name, model_types=model_types, config_cls=config_cls, module_cls=Llama, config_from_hf=reader,
        weight_table=weight_table, hf_prefix="model.", blocks="layers", final_norm="norm", embedding="embed_tokens",
        positions="rotary", norm="rmsnorm", pre_norm=True,
        norms=(("input_norm", "rms_1"), ("post_norm", "rms_2"), ("attn_out_norm", "rms_attn_out"),
               ("mlp_out_norm", "rms_mlp_out")),
        attention_norm=rms_norm_input, prepends_bos=prepends_bos, norm_eps="rms_norm_eps",
        out_norms=("attn_out_norm", "mlp_out_norm"), tiny=tiny)


FAMILY = rotary_family("llama", ("llama", "mistral"), LlamaConfig, config_from_hf, prepends_bos=True, tiny={
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 96, "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 64})
