"""Llama-2 / TinyLlama / Mistral as a Flax linen module, numerically equal to Hugging Face's
LlamaForCausalLM / MistralForCausalLM (eager attention).

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
from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from geomjax.models.common import (
    ATTENTION_HOOKS,
    BLOCK_HOOKS,
    CausalLM,
    Embed,
    HFStandardConfig,
    MLP_HOOKS,
    HookPoint,
    head_results,
    hook_points,
    pre_norm_block,
    scaled_dot_product_attention,
)
from geomjax.theory.positional import ROPE_TYPES, rope_inv_freq, rotary_from_inv_freq
from geomjax.typing import Array, Bool, DType, Float, Int

__all__ = ["Llama", "LlamaConfig", "RMSNorm", "apply_rotary", "rms_norm", "rotary_tables", "window_mask"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class LlamaConfig(HFStandardConfig):
    """Hyperparameters of a Llama-family model (hashable; Hugging Face ``LlamaConfig`` names).

    Attributes:
      vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size: V, d, L, H,
        F (:class:`HFStandardConfig`; required).
      max_position_embeddings: the context length the model was trained for (required; rotary
        positions are not bounded by it: recorded as a fact, not enforced).
      model_type: ``"llama"`` or ``"mistral"`` (the only difference: Mistral's sliding window).
      num_key_value_heads: H_kv (grouped-query attention: query head h reads key/value head
        h // (H / H_kv)); None: H, as in transformers.
      head_dim: K (may differ from d / H); None: d / H, as in transformers.
      rms_norm_eps: RMSNorm eps.
      rope_theta: rotary base.
      rope_type, rope_factor: ``"default"`` or ``"linear"`` (positions divided by the factor).
      attention_bias, mlp_bias: biases on q/k/v/o and on gate/up/down.
      tie_word_embeddings: logits use the input embedding (no ``lm_head``).
      sliding_window: None (full causal attention) or W (Mistral).
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
    tie_word_embeddings: bool = False
    sliding_window: int | None = None
    bos_token_id: int | None = 1

    # rotary positions are unbounded: no max_positions (HFConfig answers None)
    HF_FIELDS: ClassVar[dict[str, str]] = {
        **{k: v for k, v in HFStandardConfig.HF_FIELDS.items() if k != "max_positions"},
        "num_kv_heads": "num_key_value_heads"}

    def __post_init__(self):
        if self.num_key_value_heads is None:
            object.__setattr__(self, "num_key_value_heads", self.num_attention_heads)
        if self.head_dim is None and self.num_attention_heads >= 1:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if self.model_type not in ("llama", "mistral"):
            raise ValueError(f"LlamaConfig: model_type must be 'llama' or 'mistral', got {self.model_type!r}")
        self.check_sizes("head_dim")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"LlamaConfig: num_attention_heads={self.num_attention_heads} is not a multiple of "
                             f"num_key_value_heads={self.num_key_value_heads}")
        if self.head_dim % 2:
            raise ValueError(f"LlamaConfig: head_dim={self.head_dim} must be even for rotary embeddings")
        if self.rope_type not in ROPE_TYPES:
            raise ValueError(f"LlamaConfig: rope_type={self.rope_type!r} is not implemented (only {ROPE_TYPES})")
        if self.sliding_window is not None and self.sliding_window < 1:
            raise ValueError(f"LlamaConfig: sliding_window must be None or >= 1, got {self.sliding_window}")


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
    """RMSNorm with parameter ``scale`` (d,); see :func:`rms_norm`."""

    eps: float = 1e-6

    @nn.compact
    def __call__(self, x: Float[Array, "... d"]) -> Float[Array, "... d"]:
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), jnp.float32)
        return rms_norm(x, scale, self.eps)

    def norm_scale(self, x: Float[Array, "... d"]) -> Float[Array, "... 1"]:
        """The divisor sqrt(mean(x²) + eps) (..., 1) of :func:`rms_norm`, in float32 (TransformerLens ``hook_scale``)."""
        x32 = x.astype(jnp.float32)
        return jnp.sqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)


def rotary_tables(config: LlamaConfig, T: int, dtype: DType = jnp.float32
                  ) -> tuple[Float[Array, "T K"], Float[Array, "T K"]]:
    """cos, sin tables (T, K) of the rotary embedding at positions 0..T-1 (RoFormer eq. (34))."""
    inv_freq = rope_inv_freq(config.head_dim, config.rope_theta, config.rope_type, config.rope_factor)
    return rotary_from_inv_freq(inv_freq, T, dtype)


def apply_rotary(x: Float[Array, "B T H K"], cos: Float[Array, "T K"], sin: Float[Array, "T K"]
                 ) -> Float[Array, "B T H K"]:
    """Rotate queries or keys by their position: x cos + rotate_half(x) sin (Hugging Face layout).

    rotate_half([x1, x2]) = [−x2, x1] over the two halves of the head dimension. Linear in x, so
    the eq. (7) parts of the pre-rotation vectors can be rotated separately and still add up.
    """
    half = x.shape[-1] // 2
    rot = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[None, :, None, :] + rot * sin[None, :, None, :]


def window_mask(T: int, window: int | None) -> Bool[Array, "1 1 T T"] | None:
    """(1, 1, T, T) boolean "key s is within the window of query t": s > t − window (None: no window)."""
    if window is None:
        return None
    t = jnp.arange(T)
    return (t[None, :] > t[:, None] - window)[None, None]


class LlamaAttention(nn.Module):
    """Grouped-query self-attention with rotary queries/keys (per-head parameter layout)."""

    config: LlamaConfig

    def setup(self):
        c = self.config
        init = nn.initializers.normal(0.02)
        b = c.attention_bias
        self.q = nn.DenseGeneral((c.num_heads, c.head_dim), use_bias=b, kernel_init=init, name="q")
        self.k = nn.DenseGeneral((c.num_kv_heads, c.head_dim), use_bias=b, kernel_init=init, name="k")
        self.v = nn.DenseGeneral((c.num_kv_heads, c.head_dim), use_bias=b, kernel_init=init, name="v")
        self.o = nn.DenseGeneral(c.hidden_size, axis=(-2, -1), use_bias=b, kernel_init=init, name="o")
        self.hp = hook_points(*ATTENTION_HOOKS, "attn.q_rot", "attn.k_rot")

    def __call__(self, x: Float[Array, "B T d"], mask: Bool[Array, "#B 1 #T T"], cos: Float[Array, "T K"],
                 sin: Float[Array, "T K"]) -> tuple[Float[Array, "B T d"], Float[Array, "B H T T"]]:
        c, hp = self.config, self.hp
        rep = c.num_heads // c.num_kv_heads
        q = hp["attn_q_rot"](apply_rotary(hp["attn_q"](self.q(x)), cos, sin))
        k = hp["attn_k_rot"](apply_rotary(hp["attn_k"](self.k(x)), cos, sin))
        v = hp["attn_v"](self.v(x))
        if rep > 1:  # Hugging Face repeat_kv: kv head j serves query heads j*rep .. j*rep+rep-1
            k, v = jnp.repeat(k, rep, axis=2), jnp.repeat(v, rep, axis=2)
        z, probs = scaled_dot_product_attention(q, k, v, mask, c.head_dim ** -0.5, hooks=hp)
        z = hp["attn_z"](z)
        out = self.o(z)
        hp["attn_result"](head_results(z, self.o.variables["params"]["kernel"]))
        return out, probs


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)) (Shazeer 2020, eq. (6)); kernels gate, up (d, F), down (F, d)."""

    config: LlamaConfig

    def setup(self):
        c = self.config
        init = nn.initializers.normal(0.02)
        self.gate = nn.Dense(c.intermediate_size, use_bias=c.mlp_bias, kernel_init=init)
        self.up = nn.Dense(c.intermediate_size, use_bias=c.mlp_bias, kernel_init=init)
        self.down = nn.Dense(c.hidden_size, use_bias=c.mlp_bias, kernel_init=init)
        self.hp = hook_points(*MLP_HOOKS, "mlp.pre_linear")

    def __call__(self, x):
        hp = self.hp  # mlp.pre: the gate before silu; mlp.pre_linear: up(x); mlp.post: what down reads
        return self.down(hp["mlp_post"](jax.nn.silu(hp["mlp_pre"](self.gate(x))) * hp["mlp_pre_linear"](self.up(x))))


class LlamaBlock(nn.Module):
    """One pre-RMSNorm block: x + attn(rms_1 x), then + swiglu(rms_2 ·)."""

    config: LlamaConfig

    def setup(self):
        c = self.config
        self.input_norm = RMSNorm(c.rms_norm_eps)
        self.attn = LlamaAttention(c)
        self.post_norm = RMSNorm(c.rms_norm_eps)
        self.mlp = SwiGLU(c)
        self.hp = hook_points(*BLOCK_HOOKS)

    def __call__(self, x: Float[Array, "B T d"], mask: Bool[Array, "#B 1 #T T"], cos: Float[Array, "T K"],
                 sin: Float[Array, "T K"]) -> tuple[Float[Array, "B T d"], Float[Array, "B H T T"]]:
        return pre_norm_block(self.hp, x, self.input_norm, self.attn, self.post_norm, self.mlp, mask, cos, sin)


class Llama(CausalLM):
    """Llama / Mistral causal language model returning ``(logits, Intermediates)`` (:class:`CausalLM`;
    any T: rotary positions are unbounded)."""

    config: LlamaConfig
    PARTS: ClassVar[dict[str, str]] = {"blocks": "layers", "final_norm": "norm", "embedding": "embed_tokens"}

    def setup(self):
        c = self.config
        self.embed_tokens = Embed(c.vocab_size, c.hidden_size)
        self.layers = [LlamaBlock(c) for _ in range(c.num_hidden_layers)]
        self.norm = RMSNorm(c.rms_norm_eps)
        self.hook_ln_final = HookPoint("ln_final")
        self.hook_ln_final_scale = HookPoint("ln_final.scale")
        self.hook_embed = HookPoint("hook_embed")
        if not c.tie_word_embeddings:
            self.lm_head = nn.Dense(c.vocab_size, use_bias=False, kernel_init=nn.initializers.normal(0.02))

    def embed(self, ids: Int[Array, "B T"], mask: Bool[Array, "#B 1 #T T"]) -> tuple[
            Float[Array, "B T d"], tuple[Bool[Array, "#B 1 #T T"], Float[Array, "T K"], Float[Array, "T K"]]]:
        """x_0 = E[ids]; the blocks take the causal (and sliding-window) mask and the rotary tables."""
        T = ids.shape[1]
        x = self.hook_embed(self.embed_tokens(ids))
        win = window_mask(T, self.config.sliding_window)
        if win is not None:
            mask = mask & win
        cos, sin = rotary_tables(self.config, T, x.dtype)
        return x, (mask, cos, sin)
