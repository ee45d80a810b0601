"""Gemma 3 text models (Gemma team 2025) on the rotary decoder of :mod:`geomjax.models.llama`, numerically equal
to Hugging Face's Gemma3ForCausalLM (``model_type`` ``gemma3_text``; eager attention).

Gemma 2's block (sandwich norms, 1 + w RMSNorms, GeGLU, √d-scaled embeddings, query_pre_attn_scalar,
local / global ``layer_types``: default five sliding layers per full one) with per-head RMSNorms (1 + w)
of queries and keys before the rotation, and two rotary bases: the full-attention layers rotate with
``rope_parameters["full_attention"]`` (θ = 10⁶, possibly linear scaling), the sliding layers with
``rope_parameters["sliding_attention"]`` (θ = 10⁴; older configs: ``rope_local_base_freq``). Soft-capping
is off unless the config sets it. The eq. (7) decomposition holds the q/k normalisers at the model's values
(``qk_decomposition(q_norm=..., k_norm=...)``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import ClassVar

from geomjax.errors import GeomjaxError
from geomjax.models import hf_tables as ht
from geomjax.models.gemma import GEMMA_IGNORED, bidirectional_off
from geomjax.models.gemma2 import GEMMA2_USED, sandwich_kwargs
from geomjax.models.llama import RotaryConfig, build_config, rotary_config_kwargs, rotary_family

__all__ = ["Gemma3Config"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gemma3Config(RotaryConfig):
    """Hyperparameters of a Gemma 3 text model (:class:`~geomjax.models.llama.RotaryConfig`; module doc)."""

    model_type: str = "gemma3_text"
    hidden_act: str = "gelu_pytorch_tanh"
    norm_offset: float = 1.0
    scale_embeddings: bool = True
    sandwich_norms: bool = True
    qk_norm: bool = True
    tie_word_embeddings: bool = True
    local_rope_theta: float | None = 10000.0
    bos_token_id: int | None = 2

    MODEL_TYPES: ClassVar[tuple[str, ...]] = ("gemma3_text",)
    DISPLAY_NAMES: ClassVar[dict[str, str]] = {"gemma3_text": "Gemma3"}


_IGNORED = GEMMA_IGNORED | {"_sliding_window_pattern", "sliding_window_pattern"}  # layer_types says it


def _rope(cfg: Mapping, what: str) -> dict:
    """Global rope (theta, type, factor) and the local base, from per-layer-type ``rope_parameters`` or the
    older ``rope_theta`` / ``rope_scaling`` / ``rope_local_base_freq``."""
    params = cfg.get("rope_parameters") or {}
    if "full_attention" in params or "sliding_attention" in params:
        extra = sorted(set(params) - {"full_attention", "sliding_attention"})
        if extra:
            raise GeomjaxError(f"{what} config: rope_parameters {extra} are not implemented")
        rope = ht.rope_from_hf(params.get("full_attention"), None, 1e6, what)
        local = ht.rope_from_hf(params.get("sliding_attention"), None, 1e4, what)
    else:
        rope = ht.rope_from_hf(params, cfg.get("rope_scaling"), cfg.get("rope_theta", 1e6), what)
        local = {"rope_theta": float(cfg.get("rope_local_base_freq", 1e4)), "rope_type": "default"}
    if local["rope_type"] != "default":
        raise GeomjaxError(f"{what} config: a scaled rope on the sliding layers is not implemented")
    return rope | {"local_rope_theta": local["rope_theta"]}


def config_from_hf(cfg: Mapping, ignore_config_keys: Iterable[str] = ()) -> Gemma3Config:
    """Build a :class:`Gemma3Config` from a Hugging Face Gemma 3 text ``config.json`` dict (``gemma3_text``; a
    multimodal ``gemma3`` config is not a text model and is rejected by its model_type).

    Raises:
      GeomjaxError: an activation other than gelu_pytorch_tanh, bidirectional attention, a rope type other
        than default/linear, unknown keys, missing sizes.
    """
    used = GEMMA2_USED + ("rope_local_base_freq",)
    ht.check_keys(cfg, used, ht.CHECKED_COMMON, _IGNORED, "Gemma3", ignore_config_keys)
    bidirectional_off(cfg, "Gemma3")
    pattern = int(cfg.get("sliding_window_pattern", cfg.get("_sliding_window_pattern", 6)))
    rope = _rope(cfg, "Gemma3")
    kw = rotary_config_kwargs(cfg, "Gemma3", rope=rope) | sandwich_kwargs(cfg, "Gemma3", pattern)
    return build_config(Gemma3Config, "Gemma3", **kw)


FAMILY = rotary_family("gemma3", ("gemma3_text",), Gemma3Config, config_from_hf, prepends_bos=True, tiny={
    "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "vocab_size": 96, "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 64, "head_dim": 8, "sliding_window": 4, "query_pre_attn_scalar": 12,
    "layer_types": ["sliding_attention", "full_attention"]})
