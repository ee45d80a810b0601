"""Gemma 2 (Gemma team 2024) on the rotary decoder of :mod:`geomjax.models.llama`, numerically equal to Hugging
Face's Gemma2ForCausalLM (eager attention).

Gemma's block (GeGLU, 1 + w RMSNorms, √d-scaled embeddings) with

* "sandwich" norms: h = x + n_a(attn(rms_1 x)); h + n_m(mlp(rms_2 h)) (``attn_out_norm``, ``mlp_out_norm``;
  transformers' ``post_attention_layernorm`` is n_a and ``pre_feedforward_layernorm`` is rms_2);
* scores scaled by ``query_pre_attn_scalar``^(−1/2) and soft-capped, s -> c · tanh(s / c)
  (``attn_logit_softcapping``), logits likewise (``final_logit_softcapping``);
* alternating local / global attention: ``layer_types`` (default: even layers sliding) — a sliding layer's
  query t attends keys t − W < s ≤ t (``sliding_window`` W), a full layer every s ≤ t.

The eq. (7) decomposition splits the scores before the cap (``qk_decomposition(softcap=...)``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import ClassVar

from geomjax.models import hf_tables as ht
from geomjax.models.gemma import GEMMA_IGNORED, activation, bidirectional_off
from geomjax.models.llama import USED, RotaryConfig, build_config, rotary_config_kwargs, rotary_family

__all__ = ["Gemma2Config"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gemma2Config(RotaryConfig):
    """Hyperparameters of a Gemma 2 model (:class:`~geomjax.models.llama.RotaryConfig`; see the module doc)."""

    model_type: str = "gemma2"
    hidden_act: str = "gelu_pytorch_tanh"
    norm_offset: float = 1.0
    scale_embeddings: bool = True
    sandwich_norms: bool = True
    tie_word_embeddings: bool = True
    bos_token_id: int | None = 2

    MODEL_TYPES: ClassVar[tuple[str, ...]] = ("gemma2",)
    DISPLAY_NAMES: ClassVar[dict[str, str]] = {"gemma2": "Gemma2"}


GEMMA2_USED = USED + ("hidden_activation", "hidden_act", "use_bidirectional_attention", "query_pre_attn_scalar",
                      "sliding_window", "layer_types", "attn_logit_softcapping", "final_logit_softcapping")


def layer_types(cfg: Mapping, pattern: int) -> tuple[str, ...]:
    """``layer_types`` of the config.json, else transformers' default: layer i slides unless (i + 1) is a
    multiple of ``pattern`` (Gemma 2: 2, every other layer; Gemma 3: 6, five local per global)."""
    lt = cfg.get("layer_types")
    if lt is not None:
        return tuple(lt)
    return tuple("sliding_attention" if (i + 1) % pattern else "full_attention"
                 for i in range(int(cfg["num_hidden_layers"])))


def sandwich_kwargs(cfg: Mapping, what: str, pattern: int) -> dict:
    """The Gemma 2/3 fields beyond Gemma's: score scale, soft-caps, window and layer types."""
    q = cfg.get("query_pre_attn_scalar")
    return dict(query_pre_attn_scalar=None if q is None else float(q),
                attn_logit_softcapping=cfg.get("attn_logit_softcapping"),
                final_logit_softcapping=cfg.get("final_logit_softcapping"),
                sliding_window=cfg.get("sliding_window"), layer_types=layer_types(cfg, pattern),
                tie_word_embeddings=bool(cfg.get("tie_word_embeddings", True)),
                hidden_act=activation(cfg, "hidden_activation", what))


def config_from_hf(cfg: Mapping, ignore_config_keys: Iterable[str] = ()) -> Gemma2Config:
    """Build a :class:`Gemma2Config` from a Hugging Face Gemma 2 ``config.json`` dict.

    Raises:
      GeomjaxError: an activation other than gelu_pytorch_tanh, bidirectional attention, a rope type other
        than default/linear, unknown keys, missing sizes.
    """
    ht.check_keys(cfg, GEMMA2_USED, ht.CHECKED_COMMON, GEMMA_IGNORED, "Gemma2", ignore_config_keys)
    bidirectional_off(cfg, "Gemma2")
    kw = rotary_config_kwargs(cfg, "Gemma2") | sandwich_kwargs(cfg, "Gemma2", pattern=2)
    return build_config(Gemma2Config, "Gemma2", **kw)


FAMILY = rotary_family("gemma2", ("gemma2",), Gemma2Config, config_from_hf, prepends_bos=True, tiny={
    "model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "vocab_size": 96, "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 64, "head_dim": 8, "sliding_window": 4, "query_pre_attn_scalar": 12,
    "attn_logit_softcapping": 5.0, "final_logit_softcapping": 3.0})
