"""GPT-NeoX / Pythia (Black et al. 2022; Biderman et al. 2023) as a Flax linen module, numerically equal to
Hugging Face's GPTNeoXForCausalLM (eager attention).

Pre-LN decoder with parallel residual (``use_parallel_residual``, as every Pythia model):
x_{l+1} = x_l + attn(ln_1 x_l) + mlp(ln_2 x_l) (sequential x + attn, then + mlp when False); mlp =
proj(gelu(fc ·)); logits = final_layer_norm(x_L) @ W_U (untied ``embed_out``). Positions: rotary on the
first R = ``rotary_pct``·K coordinates of every query and key head (RoFormer eq. (34), Hugging Face's
rotate_half layout), the other K − R pass unrotated.

Parameter tree::

    embed_in/embedding (V, d)   final_layer_norm/{scale, bias}   lm_head/kernel (d, V) (untied)
    layers_<l>/ln_1, layers_<l>/ln_2: {scale, bias}
    layers_<l>/attn/{q,k,v}/kernel (d, H, K), bias (H, K);  layers_<l>/attn/o/kernel (H, K, d), bias (d,)
    layers_<l>/mlp/fc/kernel (d, F), bias;  layers_<l>/mlp/proj/kernel (F, d), bias

The fused ``query_key_value`` (3d, d) is laid out per head as (H, 3, K) on its output axis (transformers'
``view(..., H, 3K)`` then ``chunk(3)``) and is split into q, k, v by the table below.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import ClassVar

import flax.linen as nn
import jax.numpy as jnp

from geomjax.errors import GeomjaxError
from geomjax.models import hf_tables as ht
from geomjax.models.common import (
    ACTIVATIONS,
    BLOCK_HOOKS,
    MLP,
    CausalLM,
    Embed,
    HFStandardConfig,
    LayerNorm,
    hook_points,
    parallel_block,
    pre_norm_block,
)
from geomjax.models.family import Family
from geomjax.models.gpt2 import layer_norm_input
from geomjax.models.llama import LlamaAttention, build_config
from geomjax.theory.positional import rope_inv_freq, rotary_at
from geomjax.typing import Array, Bool, Float, Int

__all__ = ["GPTNeoX", "GPTNeoXConfig"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class GPTNeoXConfig(HFStandardConfig):
    """Hyperparameters of a GPT-NeoX / Pythia model (hashable; Hugging Face ``GPTNeoXConfig`` names).

    Attributes:
      vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
        max_position_embeddings: V, d, L, H (K = d / H), F, and the trained context (rotary positions are
        not bounded by it); required.
      rotary_pct: the rotated share R / K of every head (Pythia: 0.25).
      rope_theta: rotary base (``rotary_emb_base``).
      layer_norm_eps: LayerNorm eps.
      use_parallel_residual: x + attn(ln_1 x) + mlp(ln_2 x) (True) or sequential.
      attention_bias: biases on the fused qkv and the output projection.
      hidden_act: the MLP activation (``gelu``: erf form, as Pythia).
      tie_word_embeddings: logits use embed_in (Pythia: untied ``embed_out``).
      bos_token_id: BOS id (the Pythia tokenizer does not prepend it).
    """

    rotary_pct: float = 0.25
    rope_theta: float = 10000.0
    layer_norm_eps: float = 1e-5
    use_parallel_residual: bool = True
    attention_bias: bool = True
    hidden_act: str = "gelu"
    tie_word_embeddings: bool = False
    bos_token_id: int | None = 0

    model_type: ClassVar[str] = "gpt_neox"
    DISPLAY_NAME: ClassVar[str] = "GPT-NeoX"
    HF_FIELDS: ClassVar[dict[str, str]] = {
        k: v for k, v in HFStandardConfig.HF_FIELDS.items() if k != "max_positions"}
    # what the shared rotary attention (llama.LlamaAttention) reads
    qkv_bias: ClassVar[None] = None
    qk_norm: ClassVar[bool] = False
    attn_logit_softcapping: ClassVar[None] = None

    def __post_init__(self):
        self.check_sizes()
        if not 0 < self.rotary_ndims <= self.head_dim or self.rotary_ndims % 2:
            raise ValueError(f"GPTNeoXConfig: rotary_pct={self.rotary_pct} gives {self.rotary_ndims} rotated "
                             f"coordinates of head_dim={self.head_dim}; it must be even and in [2, head_dim]")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"GPTNeoXConfig: hidden_act={self.hidden_act!r} is not implemented ({tuple(ACTIVATIONS)})")

    @property
    def rotary_ndims(self) -> int:
        """R = int(K · rotary_pct), as transformers truncates it."""
        return int(self.head_dim * self.rotary_pct)

    @property
    def layer_norm_epsilon(self) -> float:
        return self.layer_norm_eps

    @property
    def attn_scale(self) -> float:
        return self.head_dim ** -0.5

    def layer_inv_freq(self, layer: int) -> Float[Array, " R2"]:
        """Rotary inverse frequencies (R/2,) (every layer): θ_i = theta^(−2i/R)."""
        return rope_inv_freq(self.rotary_ndims, self.rope_theta)


class GPTNeoXBlock(nn.Module):
    """One GPT-NeoX layer: parallel (x + attn(ln_1 x) + mlp(ln_2 x)) or sequential residual."""

    config: GPTNeoXConfig

    def setup(self):
        c = self.config
        self.ln_1 = LayerNorm(c.layer_norm_eps)
        self.attn = LlamaAttention(c)
        self.ln_2 = LayerNorm(c.layer_norm_eps)
        self.mlp = MLP(c.intermediate_size, c.hidden_size, c.hidden_act)
        self.hp = hook_points(*BLOCK_HOOKS)

    def __call__(self, x: Float[Array, "B T d"], mask: Bool[Array, "#B 1 #T T"], cos: Float[Array, "#B T R"],
                 sin: Float[Array, "#B T R"]) -> tuple[Float[Array, "B T d"], Float[Array, "B H T T"]]:
        block = parallel_block if self.config.use_parallel_residual else pre_norm_block
        return block(self.hp, x, self.ln_1, self.attn, self.ln_2, self.mlp, mask, cos, sin)


class GPTNeoX(CausalLM):
    """GPT-NeoX / Pythia causal language model returning ``(logits, Intermediates)`` (:class:`CausalLM`)."""

    config: GPTNeoXConfig

    def setup(self):
        c = self.config
        self.embed_in = Embed(c.vocab_size, c.hidden_size)
        self.layers = [GPTNeoXBlock(c) for _ in range(c.num_hidden_layers)]
        self.final_layer_norm = LayerNorm(c.layer_norm_eps)
        self.setup_read_out(c.vocab_size, c.tie_word_embeddings)

    def embed(self, ids: Int[Array, "B T"], mask: Bool[Array, "#B 1 #T T"], positions: Int[Array, "B T"] | None
              ) -> tuple[
            Float[Array, "B T d"], tuple[Bool[Array, "#B 1 #T T"], Float[Array, "#B T R"], Float[Array, "#B T R"]]]:
        """x_0 = embed_in[ids]; the blocks take the mask and the partial rotary tables at the position ids."""
        x = self.hook_embed(self.embed_in(ids))
        pos = jnp.arange(ids.shape[1])[None] if positions is None else positions
        cos, sin = rotary_at(self.config.layer_inv_freq(0), pos, x.dtype)
        return x, (mask, cos, sin)


# -- conversion: config.json reader and weight table ------------------------------------------------
_USED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
         "max_position_embeddings", "layer_norm_eps", "use_parallel_residual", "attention_bias", "hidden_act",
         "tie_word_embeddings", "bos_token_id", "rotary_pct", "rotary_emb_base", "rope_parameters", "rope_scaling")
_CHECKED: dict[str, object] = {**ht.CHECKED_COMMON, "is_decoder": None}  # always causal
_IGNORED = ht.IGNORED_COMMON | {"attention_dropout", "hidden_dropout", "use_flash_attention_2"}


def config_from_hf(cfg: Mapping, ignore_config_keys: Iterable[str] = ()) -> GPTNeoXConfig:
    """Build a :class:`GPTNeoXConfig` from a Hugging Face GPT-NeoX ``config.json`` dict (transformers 5's
    ``rope_parameters`` with ``partial_rotary_factor``, or the older ``rotary_pct`` / ``rotary_emb_base``).

    Raises:
      GeomjaxError: unknown keys, a rope type other than default, an activation not implemented, missing sizes.
    """
    what = "GPT-NeoX"
    ht.check_keys(cfg, _USED, _CHECKED, _IGNORED, what, ignore_config_keys)
    ht.require(cfg, ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"),
               what)
    params = dict(cfg.get("rope_parameters") or {})
    pct = params.pop("partial_rotary_factor", cfg.get("rotary_pct", 0.25))
    rope = ht.rope_from_hf(params, cfg.get("rope_scaling"), cfg.get("rotary_emb_base", 10000.0), what)
    if rope["rope_type"] != "default":
        raise GeomjaxError(f"{what} config: rope type {rope['rope_type']!r} is not implemented for GPT-NeoX")
    return build_config(
        GPTNeoXConfig, what, vocab_size=int(cfg["vocab_size"]), hidden_size=int(cfg["hidden_size"]),
        num_hidden_layers=int(cfg["num_hidden_layers"]), num_attention_heads=int(cfg["num_attention_heads"]),
        intermediate_size=int(cfg["intermediate_size"]),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)), rotary_pct=float(pct),
        rope_theta=rope["rope_theta"], layer_norm_eps=float(cfg.get("layer_norm_eps", 1e-5)),
        use_parallel_residual=bool(cfg.get("use_parallel_residual", True)),
        attention_bias=bool(cfg.get("attention_bias", True)), hidden_act=cfg.get("hidden_act", "gelu"),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)), bos_token_id=cfg.get("bos_token_id"))


TOP_TABLE: dict[str, ht.Transform] = {
    # under "gpt_neox."
    "embed_in.weight": ht.copy("embed_in", "embedding"),
    "final_layer_norm.weight": ht.copy("final_layer_norm", "scale"),
    "final_layer_norm.bias": ht.copy("final_layer_norm", "bias"),
}
HEAD_TABLE: dict[str, ht.Transform] = {
    "embed_out.weight": ht.transpose("lm_head", "kernel"),  # Linear (V, d) -> (d, V); untied
}
LAYER_TABLE: dict[str, ht.Transform] = {
    # under "gpt_neox.layers.{l}." -> under "layers_{l}/"
    "input_layernorm.weight": ht.copy("ln_1", "scale"),
    "input_layernorm.bias": ht.copy("ln_1", "bias"),
    "post_attention_layernorm.weight": ht.copy("ln_2", "scale"),
    "post_attention_layernorm.bias": ht.copy("ln_2", "bias"),
    # fused (3d, d), output axis laid out (H, 3, K) -> q, k, v (d, H, K)
    "attention.query_key_value.weight": ht.fused_qkv_per_head("attention.query_key_value"),
    "attention.dense.weight": ht.heads_out_kernel(transpose=True),  # (d, d) -> (H, K, d)
    "mlp.dense_h_to_4h.weight": ht.transpose("mlp", "fc", "kernel"),  # (F, d) -> (d, F)
    "mlp.dense_h_to_4h.bias": ht.copy("mlp", "fc", "bias"),
    "mlp.dense_4h_to_h.weight": ht.transpose("mlp", "proj", "kernel"),  # (d, F) -> (F, d)
    "mlp.dense_4h_to_h.bias": ht.copy("mlp", "proj", "bias"),
}
BIAS_TABLE: dict[str, ht.Transform] = {  # attention_bias=True
    "attention.query_key_value.bias": ht.fused_qkv_per_head("attention.query_key_value"),  # (3d,) -> (H, K) x 3
    "attention.dense.bias": ht.copy("attn", "o", "bias"),
}
LAYER_BUFFERS = ("attention.bias", "attention.masked_bias", "attention.rotary_emb.inv_freq")
"""Causal-mask and rotary buffers older Pythia checkpoints saved."""


def weight_table(c: GPTNeoXConfig) -> tuple[dict[str, ht.Transform], set[str]]:
    """{Hugging Face name below "gpt_neox.": transform} (``embed_out`` when untied) and the buffers."""
    table = dict(TOP_TABLE) | ({} if c.tie_word_embeddings else HEAD_TABLE)
    ht.per_layer(table, c.num_hidden_layers, "layers", "layers", LAYER_TABLE | (BIAS_TABLE if c.attention_bias else {}))
    return table, {f"layers.{i}.{b}" for i in range(c.num_hidden_layers) for b in LAYER_BUFFERS}


FAMILY = Family(
    name="gpt_neox", model_types=("gpt_neox",), config_cls=GPTNeoXConfig, module_cls=GPTNeoX,
    config_from_hf=config_from_hf, weight_table=weight_table, hf_prefix="gpt_neox.", blocks="layers",
    final_norm="final_layer_norm",
    embedding="embed_in", positions="rotary", norm="layernorm", pre_norm=True,
    norms=(("ln_1", "ln_1"), ("ln_2", "ln_2")), attention_norm=layer_norm_input, head_tensor="embed_out.weight",
    tiny={"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"], "vocab_size": 96, "hidden_size": 32,
          "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "rotary_pct": 0.5,
          "max_position_embeddings": 64})
