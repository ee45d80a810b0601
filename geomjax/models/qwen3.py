"""Qwen 3 (Qwen team 2025) on the rotary decoder of :mod:`geomjax.models.llama`, numerically equal to Hugging
Face's Qwen3ForCausalLM (eager attention).

Llama's block with a per-head RMSNorm of queries and keys (over the head dimension K, gains (K,)
``attn/q_norm/scale``, ``attn/k_norm/scale``) applied after the projection and before the rotation:
q̃_h = R_t(rms(x W_q[h]) ⊙ g_q). ``attention_bias`` puts biases on q, k, v and o (Qwen 3 checkpoints have
none). Sliding-window attention is rejected. The eq. (7) decomposition holds the q/k normalisers at the
model's values (``qk_decomposition(q_norm=..., k_norm=...)``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import ClassVar

from geomjax.models import hf_tables as ht
from geomjax.models.llama import RotaryConfig, USED, build_config, rotary_config_kwargs, rotary_family
from geomjax.models.qwen2 import QWEN_CHECKED, QWEN_IGNORED, full_attention_only

__all__ = ["Qwen3Config"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Qwen3Config(RotaryConfig):
    """Hyperparameters of a Qwen 3 model (:class:`~geomjax.models.llama.RotaryConfig`, q/k norms on)."""

    model_type: str = "qwen3"
    qk_norm: bool = True
    bos_token_id: int | None = None

    MODEL_TYPES: ClassVar[tuple[str, ...]] = ("qwen3",)
    DISPLAY_NAMES: ClassVar[dict[str, str]] = {"qwen3": "Qwen3"}


def config_from_hf(cfg: Mapping, ignore_config_keys: Iterable[str] = ()) -> Qwen3Config:
    """Build a :class:`Qwen3Config` from a Hugging Face Qwen 3 ``config.json`` dict.

    Raises:
      GeomjaxError: ``use_sliding_window``, an activation other than silu, a rope type other than
        default/linear, unknown keys, missing sizes.
    """
    used = tuple(k for k in USED if k != "mlp_bias") + ("layer_types",)
    ht.check_keys(cfg, used, QWEN_CHECKED, QWEN_IGNORED, "Qwen3", ignore_config_keys)
    full_attention_only(cfg, "Qwen3")
    return build_config(Qwen3Config, "Qwen3", **rotary_config_kwargs(cfg, "Qwen3"))


FAMILY = rotary_family("qwen3", ("qwen3",), Qwen3Config, config_from_hf, prepends_bos=False, tiny={
    "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "vocab_size": 96, "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 64, "head_dim": 16, "tie_word_embeddings": True})
