"""BLOOM (BigScience 2022) as a Flax linen module, numerically equal to Hugging Face's BloomForCausalLM.

Pre-LN decoder without position embeddings: x_0 = LN_emb(E[ids]) (the embedding LayerNorm);
x_{l+1} = x_l + attn(ln_1 x_l), then + mlp(ln_2 ·) with mlp = proj(gelu_tanh(fc ·)); logits =
ln_f(x_L) @ Eᵀ (tied). Positions enter only through ALiBi (Press et al. 2022, eq. (1)): head h adds
m_h · s to the score of key s (softmax-equivalent to −m_h (t − s); Hugging Face's form), with the
slopes of :func:`geomjax.theory.positional.alibi_slopes` (the geometric sequence 2^(−8h/n) for the largest power of two
n ≤ H, then every other slope of the 2n sequence for the remaining heads).

``model.apply({"params": params}, ids)`` returns ``(logits, Intermediates)``; ``hidden_states`` is
Hugging Face's ``output_hidden_states`` (the first entry after the embedding LayerNorm, the last after
``ln_f``), ``residual`` the same stream before ``ln_f``.

Parameter tree::

    word_embeddings/embedding (V, d)  word_embeddings_ln/{scale, bias}  ln_f/{scale, bias}
    [lm_head/kernel (d, V) when untied]
    h_<l>/ln_1, h_<l>/ln_2: {scale, bias}
    h_<l>/attn/{q,k,v}/kernel (d, H, K), bias (H, K);  h_<l>/attn/o/kernel (H, K, d), bias (d,)
    h_<l>/mlp/fc/kernel (d, 4d), bias;  h_<l>/mlp/proj/kernel (4d, d), bias
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import ClassVar

import flax.linen as nn
import jax.numpy as jnp

from geomjax.errors import GeomjaxError
from geomjax.models import hf_tables as ht
from geomjax.models.common import CausalLM, Embed, HFConfig, LayerNorm, PreLNBlock
from geomjax.models.family import Family
from geomjax.models.gpt2 import layer_norm_input
from geomjax.theory.positional import alibi_slopes
from geomjax.typing import Array, Bool, DType, Float, Int

__all__ = ["Bloom", "BloomConfig", "alibi_bias"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class BloomConfig(HFConfig):
    """Hyperparameters of a BLOOM model (hashable; Hugging Face ``BloomConfig`` names).

    Attributes:
      vocab_size, hidden_size, n_layer, n_head: V, d, L, H (K = d / H; MLP width 4d); required, as
        every port's sizes (:class:`geomjax.models.common.HFStandardConfig`).
      layer_norm_epsilon: LayerNorm eps.
      tie_word_embeddings: logits use the word embedding (BLOOM checkpoints do).
      bos_token_id: BOS id (BLOOM's tokenizer does not prepend it).
    """

    vocab_size: int
    hidden_size: int
    n_layer: int
    n_head: int
    layer_norm_epsilon: float = 1e-5
    tie_word_embeddings: bool = True
    bos_token_id: int | None = 1

    model_type = "bloom"
    DISPLAY_NAME: ClassVar[str] = "BLOOM"
    HF_FIELDS: ClassVar[dict[str, str]] = {"d_model": "hidden_size", "num_layers": "n_layer", "num_heads": "n_head"}

    def __post_init__(self):
        self.check_sizes()

    @property
    def d_mlp(self) -> int:
        return 4 * self.hidden_size


def alibi_bias(n_heads: int, T: int, dtype: DType = jnp.float32,
               positions: Int[Array, "#B T"] | None = None) -> Float[Array, "#B H 1 T"]:
    """ALiBi score bias m_h · s for key position s (broadcast over queries), shape (1 or B, H, 1, T);
    ``positions``: the keys' position ids (None: 0..T−1), as Hugging Face's cumulative-mask positions."""
    pos = jnp.arange(T, dtype=jnp.float32)[None] if positions is None else jnp.asarray(positions, jnp.float32)
    b = jnp.asarray(alibi_slopes(n_heads))[None, :, None] * pos[:, None, :]
    return b.astype(dtype)[:, :, None, :]


class Bloom(CausalLM):
    """BLOOM causal language model returning ``(logits, Intermediates)`` (:class:`CausalLM`; any T:
    ALiBi is unbounded; without padding the ALiBi key positions are 0..T−1, and Hugging Face's
    cumulative-mask positions agree)."""

    config: BloomConfig

    def setup(self):
        c = self.config
        self.word_embeddings = Embed(c.vocab_size, c.hidden_size)
        self.word_embeddings_ln = LayerNorm(c.layer_norm_epsilon)
        self.h = [PreLNBlock(c, "gelu_new") for _ in range(c.n_layer)]
        self.ln_f = LayerNorm(c.layer_norm_epsilon)
        self.setup_read_out(c.vocab_size, c.tie_word_embeddings)

    def embed(self, ids: Int[Array, "B T"], mask: Bool[Array, "#B 1 #T T"], positions: Int[Array, "B T"] | None
              ) -> tuple[Float[Array, "B T d"], tuple[Bool[Array, "#B 1 #T T"], Float[Array, "#B H 1 T"]]]:
        """x_0 = LN_emb(E[ids]); the blocks take the mask and the ALiBi bias at the keys' positions."""
        x = self.word_embeddings_ln(self.hook_embed(self.word_embeddings(ids)))
        return x, (mask, alibi_bias(self.config.n_head, ids.shape[1], x.dtype, positions))


# -- conversion: config.json reader and weight table ------------------------------------------------
_USED = ("vocab_size", "hidden_size", "n_embed", "n_layer", "num_hidden_layers", "n_head",
         "num_attention_heads", "layer_norm_epsilon", "tie_word_embeddings", "bos_token_id")
_CHECKED: dict[str, object] = {
    **ht.CHECKED_COMMON,
    "apply_residual_connection_post_layernorm": False,
    "slow_but_exact": False,
}
# Megatron-DeepSpeed training switches that bigscience's configs carry and transformers ignores
# (fused kernels, softmax precision, tensor-parallel slicing); n_inner is ignored by BloomMLP (4d).
_IGNORED = ht.IGNORED_COMMON | {
    "attention_dropout", "hidden_dropout", "pretraining_tp", "attention_softmax_in_fp32",
    "bias_dropout_fusion", "masked_softmax_fusion", "offset_alibi", "skip_bias_add", "skip_bias_add_qkv",
    "unk_token_id", "seq_length", "n_inner", "layer_norm_eps_fp32",
}


def config_from_hf(cfg: Mapping, ignore_config_keys: Iterable[str] = ()) -> BloomConfig:
    """Build a :class:`BloomConfig` from a Hugging Face BLOOM ``config.json`` dict, rejecting variants.

    Raises:
      GeomjaxError: ``apply_residual_connection_post_layernorm``, ``slow_but_exact``, unknown keys.
    """
    ht.check_keys(cfg, _USED, _CHECKED, _IGNORED, "BLOOM", ignore_config_keys)
    d = cfg.get("hidden_size", cfg.get("n_embed"))
    L = cfg.get("n_layer", cfg.get("num_hidden_layers"))
    H = cfg.get("n_head", cfg.get("num_attention_heads"))
    if None in (d, L, H) or "vocab_size" not in cfg:
        raise GeomjaxError("BLOOM config: needs vocab_size, hidden_size (n_embed), n_layer and n_head")
    try:
        return BloomConfig(vocab_size=int(cfg["vocab_size"]), hidden_size=int(d), n_layer=int(L), n_head=int(H),
                           layer_norm_epsilon=float(cfg.get("layer_norm_epsilon", 1e-5)),
                           tie_word_embeddings=bool(cfg.get("tie_word_embeddings", True)),
                           bos_token_id=cfg.get("bos_token_id"))
    except ValueError as e:
        raise GeomjaxError(f"BLOOM config: {e}") from None


TOP_TABLE: dict[str, ht.Transform] = {
    # under "transformer."
    "word_embeddings.weight": ht.copy("word_embeddings", "embedding"),
    "word_embeddings_layernorm.weight": ht.copy("word_embeddings_ln", "scale"),
    "word_embeddings_layernorm.bias": ht.copy("word_embeddings_ln", "bias"),
    "ln_f.weight": ht.copy("ln_f", "scale"),
    "ln_f.bias": ht.copy("ln_f", "bias"),
}
LAYER_TABLE: dict[str, ht.Transform] = {
    # under "transformer.h.{l}." -> under "h_{l}/"
    "input_layernorm.weight": ht.copy("ln_1", "scale"),
    "input_layernorm.bias": ht.copy("ln_1", "bias"),
    # fused (3d, d), output axis laid out (H, 3, K) (BloomAttention._reshape) -> q, k, v (d, H, K) / (H, K)
    "self_attention.query_key_value.weight": ht.fused_qkv_per_head("self_attention.query_key_value"),
    "self_attention.query_key_value.bias": ht.fused_qkv_per_head("self_attention.query_key_value"),
    "self_attention.dense.weight": ht.heads_out_kernel(transpose=True),  # (d, d) -> (H, K, d)
    "self_attention.dense.bias": ht.copy("attn", "o", "bias"),
    "post_attention_layernorm.weight": ht.copy("ln_2", "scale"),
    "post_attention_layernorm.bias": ht.copy("ln_2", "bias"),
    "mlp.dense_h_to_4h.weight": ht.transpose("mlp", "fc", "kernel"),  # (4d, d) -> (d, 4d)
    "mlp.dense_h_to_4h.bias": ht.copy("mlp", "fc", "bias"),
    "mlp.dense_4h_to_h.weight": ht.transpose("mlp", "proj", "kernel"),  # (d, 4d) -> (4d, d)
    "mlp.dense_4h_to_h.bias": ht.copy("mlp", "proj", "bias"),
}


def weight_table(c: BloomConfig) -> tuple[dict[str, ht.Transform], set[str]]:
    """{Hugging Face name below "transformer.": transform} (lm_head when untied); no buffers."""
    table = dict(TOP_TABLE) | ({} if c.tie_word_embeddings else ht.LM_HEAD_TABLE)
    ht.per_layer(table, c.n_layer, "h", "h", LAYER_TABLE)
    return table, set()


FAMILY = Family(
    name="bloom", model_types=("bloom",), config_cls=BloomConfig, module_cls=Bloom, config_from_hf=config_from_hf,
    weight_table=weight_table, hf_prefix="transformer.", blocks="h", final_norm="ln_f", embedding="word_embeddings",
    embed_norm="word_embeddings_ln", positions="alibi", norm="layernorm", pre_norm=True,
    norms=(("ln_1", "ln_1"), ("ln_2", "ln_2")), attention_norm=layer_norm_input,
    tiny={"model_type": "bloom", "architectures": ["BloomForCausalLM"], "vocab_size": 96, "hidden_size": 32,
          "n_layer": 2, "n_head": 4})
