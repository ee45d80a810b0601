"""BERT (Devlin et al. 2019) encoder as a Flax linen module, numerically equal to Hugging Face's BertModel.

Post-LN encoder: x_0 = LN(word[ids] + token_type[tt] + position[0..T-1]);
y = LN_attn(x + attn(x)); x_{l+1} = LN_out(y + mlp(y)). Bidirectional by default, causal with
``causal=True`` (Hugging Face ``is_decoder=True``, as the Song & Zhong code ran BERT). Inference
only (no dropout). No masked-LM head (MiniLM has none); the pooler is built when the checkpoint
has its weights (``BertConfig.add_pooling_layer``).

``model.apply({"params": params}, input_ids, attention_mask=None, token_type_ids=None)`` returns
``(last_hidden_state (B, T, d), Intermediates)`` with ``inter.hidden_states`` the L+1 states of
Hugging Face's ``output_hidden_states`` (BERT has no final LayerNorm, so ``inter.residual`` is the
same tuple and ``inter.final_ln`` is None).

Parameter tree::

    word_embeddings/embedding (V, d)  position_embeddings/embedding (P, d)
    token_type_embeddings/embedding (n_types, d)  embeddings_ln/{scale, bias}
    layer_<l>/attn/{q,k,v}/kernel (d, H, K), bias (H, K); layer_<l>/attn/o/kernel (H, K, d), bias (d,)
    layer_<l>/attn_ln/{scale, bias}; layer_<l>/mlp/fc (d, F); layer_<l>/mlp/proj (F, d);
    layer_<l>/out_ln/{scale, bias};  [pooler/kernel (d, d), bias (d,)]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import ClassVar

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from geomjax.errors import GeomjaxError
from geomjax.models import hf_tables as ht
from geomjax.models.common import (
    MLP,
    Embed,
    HFStandardConfig,
    Intermediates,
    LayerNorm,
    MultiHeadAttention,
    attention_mask_4d,
    check_input_ids,
    check_segment_ids,
    hook_points,
    positions_from_mask,
    run_blocks,
)
from geomjax.models.family import Family
from geomjax.typing import Array, ArrayLike, Bool, Float, Int

__all__ = ["Bert", "BertConfig", "BertLayer"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class BertConfig(HFStandardConfig):
    """Hyperparameters of a BERT encoder (hashable; Hugging Face ``BertConfig`` names).

    Attributes:
      vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
        max_position_embeddings: V, d, L, H (K = d / H), F, P (:class:`HFStandardConfig`; required).
      type_vocab_size: number of token types (segments).
      layer_norm_eps: LayerNorm eps.
      hidden_act: ``gelu`` (erf form) only.
      causal: default attention pattern (Hugging Face ``is_decoder``); overridable per call.
      add_pooling_layer: build the pooler (tanh(W h[:, 0] + b)).
    """

    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    causal: bool = False
    add_pooling_layer: bool = True

    model_type: ClassVar[str] = "bert"
    DISPLAY_NAME: ClassVar[str] = "BERT"

    def __post_init__(self):
        self.check_sizes("type_vocab_size")
        if self.hidden_act != "gelu":
            raise ValueError(
                f"BertConfig: hidden_act={self.hidden_act!r} is not implemented; only 'gelu' (erf) is"
            )


class BertLayer(nn.Module):
    """One post-LN BERT layer: y = LN(x + attn(x)); LN(y + mlp(y))."""

    config: BertConfig

    def setup(self):
        c = self.config
        self.attn = MultiHeadAttention(c.num_attention_heads, c.head_dim, c.hidden_size)
        self.attn_ln = LayerNorm(c.layer_norm_eps)
        self.mlp = MLP(c.intermediate_size, c.hidden_size, c.hidden_act)
        self.out_ln = LayerNorm(c.layer_norm_eps)
        self.hp = hook_points("hook_resid_pre", "attn.out", "hook_resid_mid", "mlp.out", "hook_resid_post")

    def __call__(self, x: Float[Array, "B T d"], mask: Bool[Array, "#B 1 #T T"] | None
                 ) -> tuple[Float[Array, "B T d"], Float[Array, "B H T T"]]:
        hp = self.hp
        x = hp["hook_resid_pre"](x)
        a, probs = self.attn(x, mask)
        y = hp["hook_resid_mid"](self.attn_ln(x + hp["attn_out"](a)))
        return hp["hook_resid_post"](self.out_ln(y + hp["mlp_out"](self.mlp(y)))), probs


class Bert(nn.Module):
    """BERT encoder returning ``(last_hidden_state, Intermediates)``."""

    config: BertConfig

    def setup(self):
        c = self.config
        d = c.hidden_size
        self.word_embeddings = Embed(c.vocab_size, d)
        self.position_embeddings = Embed(c.max_position_embeddings, d)
        self.token_type_embeddings = Embed(c.type_vocab_size, d)
        self.embeddings_ln = LayerNorm(c.layer_norm_eps)
        self.layer = [BertLayer(c) for _ in range(c.num_hidden_layers)]
        if c.add_pooling_layer:
            self.pooler = nn.Dense(d, kernel_init=nn.initializers.normal(0.02))
        self.hp = hook_points("hook_embed", "hook_pos_embed", "hook_token_type_embed")

    def __call__(
        self,
        input_ids: Int[ArrayLike, "B T"],
        attention_mask: Int[ArrayLike, "B T"] | None = None,
        token_type_ids: Int[ArrayLike, "B T"] | None = None,
        *,
        causal: bool | None = None,
        return_attention: bool = False,
        stop_at_layer: int | None = None,
    ) -> tuple[Float[Array, "B T d"], Intermediates]:
        """Compute BERT's last hidden state and every layer's hidden state for token ids (B, T).

        Args:
          input_ids: (B, T) integer ids in [0, vocab_size), T <= max_position_embeddings.
          attention_mask: optional (B, T), 1 for real tokens, 0 for padding (padding keys are
            never attended and position ids count real tokens only, so left or right padding gives
            every real token its unpadded states; padded positions get meaningless outputs).
          token_type_ids: optional (B, T) segment ids in [0, type_vocab_size); default zeros.
          causal: None uses ``config.causal``; True gives Hugging Face ``is_decoder=True``.
          return_attention: also return the L attention-probability arrays (B, H, T, T).
          stop_at_layer: run only layers 0..stop_at_layer−1 (None: all); the output is then the
            last state computed and there is no pooler output.

        Returns:
          ``(last_hidden_state (B, T, d), Intermediates)``; ``inter.pooler_output`` (B, d) when
          the config has the pooler.

        Raises:
          ValueError: bad shapes, T > max_position_embeddings, ids or token types out of range
            (checked eagerly; under ``jit`` a bad token id gives NaN outputs instead).
        """
        c = self.config
        ids = check_input_ids(input_ids, c.vocab_size, c.max_position_embeddings, what="BERT")
        am = check_segment_ids(attention_mask, ids.shape, 2, "attention_mask", "BERT")
        tt = check_segment_ids(token_type_ids, ids.shape, c.type_vocab_size, "token_type_ids", "BERT")
        if tt is None:
            tt = jnp.zeros(ids.shape, jnp.int32)
        T = ids.shape[1]
        pe = self.position_embeddings.embedding
        pos = (jnp.broadcast_to(pe[:T][None], ids.shape + (c.hidden_size,)) if am is None  # the unpadded program
               else pe[positions_from_mask(am, T)])
        hp = self.hp
        x = hp["hook_embed"](self.word_embeddings(ids)) + hp["hook_token_type_embed"](self.token_type_embeddings(tt))
        x = x + hp["hook_pos_embed"](pos)
        x = self.embeddings_ln(x)
        mask = attention_mask_4d(T, am, causal=c.causal if causal is None else bool(causal))
        states, probs = run_blocks(self.layer[:stop_at_layer], x, mask)
        x = states[-1]
        pooled = jnp.tanh(self.pooler(x[:, 0])) if c.add_pooling_layer and stop_at_layer is None else None
        inter = Intermediates(
            hidden_states=states,
            residual=states,
            final_ln=None,
            attentions=probs if return_attention else None,
            pooler_output=pooled,
        )
        return x, inter



# -- conversion: config.json reader and weight table ------------------------------------------------
_USED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
         "max_position_embeddings", "type_vocab_size", "layer_norm_eps", "hidden_act")
_CHECKED: dict[str, object] = {**ht.CHECKED_COMMON, "position_embedding_type": "absolute"}
_IGNORED = ht.IGNORED_COMMON | {"hidden_dropout_prob", "attention_probs_dropout_prob", "tie_word_embeddings"}


def config_from_hf(cfg: Mapping, ignore_config_keys: Iterable[str] = (), add_pooling_layer: bool = True
                   ) -> BertConfig:
    """Build a :class:`BertConfig` from a Hugging Face BERT ``config.json`` dict, rejecting variants.

    ``is_decoder`` becomes ``BertConfig.causal``.

    Raises:
      GeomjaxError: unsupported values (``position_embedding_type != "absolute"``, an activation
        other than ``gelu``, cross attention, ``embedding_size != hidden_size``) or unknown keys.
    """
    extra = set(ignore_config_keys) | {"is_decoder", "embedding_size"}
    ht.check_keys(cfg, _USED, _CHECKED, _IGNORED, "BERT", extra)
    act = cfg.get("hidden_act", "gelu")
    if act != "gelu":
        raise GeomjaxError(
            f"BERT config: hidden_act={act!r} is not implemented (only 'gelu', the erf form); use "
            "a standard BERT checkpoint"
        )
    if "embedding_size" in cfg and cfg["embedding_size"] != cfg.get("hidden_size"):
        raise GeomjaxError(
            f"BERT config: embedding_size={cfg['embedding_size']} differs from hidden_size "
            "(factorised embeddings, ALBERT-style) and is not implemented"
        )
    ht.require(cfg, ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings"), "BERT")
    kw = {k: cfg[k] for k in _USED if k in cfg}
    return BertConfig(**kw, causal=bool(cfg.get("is_decoder", False)), add_pooling_layer=add_pooling_layer)


TOP_TABLE: dict[str, ht.Transform] = {
    "embeddings.word_embeddings.weight": ht.copy("word_embeddings", "embedding"),
    "embeddings.position_embeddings.weight": ht.copy("position_embeddings", "embedding"),
    "embeddings.token_type_embeddings.weight": ht.copy("token_type_embeddings", "embedding"),
    "embeddings.LayerNorm.weight": ht.copy("embeddings_ln", "scale"),
    "embeddings.LayerNorm.bias": ht.copy("embeddings_ln", "bias"),
}
POOLER_TABLE: dict[str, ht.Transform] = {
    "pooler.dense.weight": ht.transpose("pooler", "kernel"),  # Linear (out, in)
    "pooler.dense.bias": ht.copy("pooler", "bias"),
}
LAYER_TABLE: dict[str, ht.Transform] = {
    # under "encoder.layer.{l}." -> under "layer_{l}/"
    "attention.self.query.weight": ht.heads_in("q", kv=False, check=False),  # (HK, d) -> (d, H, K)
    "attention.self.query.bias": ht.heads_in("q", kv=False, check=False),
    "attention.self.key.weight": ht.heads_in("k", kv=False, check=False),
    "attention.self.key.bias": ht.heads_in("k", kv=False, check=False),
    "attention.self.value.weight": ht.heads_in("v", kv=False, check=False),
    "attention.self.value.bias": ht.heads_in("v", kv=False, check=False),
    "attention.output.dense.weight": ht.heads_out_kernel(transpose=True),  # (d, HK) -> (H, K, d)
    "attention.output.dense.bias": ht.copy("attn", "o", "bias"),
    "attention.output.LayerNorm.weight": ht.copy("attn_ln", "scale"),
    "attention.output.LayerNorm.bias": ht.copy("attn_ln", "bias"),
    "intermediate.dense.weight": ht.transpose("mlp", "fc", "kernel"),  # (F, d) -> (d, F)
    "intermediate.dense.bias": ht.copy("mlp", "fc", "bias"),
    "output.dense.weight": ht.transpose("mlp", "proj", "kernel"),  # (d, F) -> (F, d)
    "output.dense.bias": ht.copy("mlp", "proj", "bias"),
    "output.LayerNorm.weight": ht.copy("out_ln", "scale"),
    "output.LayerNorm.bias": ht.copy("out_ln", "bias"),
}
BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
"""Non-parameter buffers (position / token-type index constants)."""


def weight_table(c: BertConfig) -> tuple[dict[str, ht.Transform], set[str]]:
    """{Hugging Face name below "bert.": transform} (the pooler when the config has it) and the buffers."""
    table = dict(TOP_TABLE) | (POOLER_TABLE if c.add_pooling_layer else {})
    ht.per_layer(table, c.num_hidden_layers, "encoder.layer", "layer", LAYER_TABLE)
    return table, set(BUFFERS)


def with_pooler(config: BertConfig, tensors: Mapping) -> BertConfig:
    """``config`` with ``add_pooling_layer`` set by whether pooler weights are present (names without "bert.")."""
    has = any(k.removeprefix("bert.").startswith("pooler.") for k in tensors)
    return dataclasses.replace(config, add_pooling_layer=has)


FAMILY = Family(
    name="bert", model_types=("bert",), config_cls=BertConfig, module_cls=Bert, config_from_hf=config_from_hf,
    weight_table=weight_table, hf_prefix="bert.", blocks="layer", final_norm=None, embedding="word_embeddings",
    positions="learned", norm="layernorm", pre_norm=False, norms=(("attn_ln", "ln_attn"), ("out_ln", "ln_out")),
    tokenizer_specials=True, norm_eps="layer_norm_eps", study_final_norm=False, bidirectional=True,
    tokenizer="wordpiece",
    from_weights=with_pooler,
    tiny={"model_type": "bert", "architectures": ["BertModel"], "vocab_size": 96, "hidden_size": 32,
          "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 48, "max_position_embeddings": 32})
