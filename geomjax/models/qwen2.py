"""Qwen 2 / Qwen 2.5 (Qwen team 2024) on the rotary decoder of :mod:`geomjax.models.llama`, numerically equal
to Hugging Face's Qwen2ForCausalLM (eager attention).

Llama's block (pre-RMSNorm, rotary, SwiGLU, grouped-query attention) with biases on the q, k and v
projections (none on o): q_h = rms_1(x) W_q[h] + b_q[h], likewise k, v. Sliding-window attention
(``use_sliding_window``) is not implemented and is rejected. The parameter tree is Llama's plus
``layers_<l>/attn/{q,k,v}/bias`` (H or H_kv, K).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import ClassVar

from geomjax.errors import GeomjaxError
from geomjax.models import hf_tables as ht
from geomjax.models.llama import CHECKED, IGNORED, USED, RotaryConfig, build_config, rotary_config_kwargs, rotary_family

__all__ = ["Qwen2Config"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Qwen2Config(RotaryConfig):
    """Hyperparameters of a Qwen 2 model (:class:`~geomjax.models.llama.RotaryConfig`, q/k/v biases on)."""

    model_type: str = "qwen2"
    qkv_bias: bool | None = True
    bos_token_id: int | None = None

    MODEL_TYPES: ClassVar[tuple[str, ...]] = ("qwen2",)
    DISPLAY_NAMES: ClassVar[dict[str, str]] = {"qwen2": "Qwen2"}


# Qwen's sliding window is off unless use_sliding_window; its size and layer count are then unused.
QWEN_IGNORED = IGNORED | {"sliding_window", "max_window_layers"}
QWEN_CHECKED = {**CHECKED, "use_sliding_window": False}


def full_attention_only(cfg: Mapping, what: str) -> None:
    """Reject ``layer_types`` with sliding layers (Qwen without use_sliding_window has none)."""
    lt = cfg.get("layer_types")
    if lt is not None and set(lt) != {"full_attention"}:
        raise GeomjaxError(f"{what} config: layer_types={lt} has sliding layers; only full attention is implemented")


def config_from_hf(cfg: Mapping, ignore_config_keys: Iterable[str] = ()) -> Qwen2Config:
    """Build a :class:`Qwen2Config` from a Hugging Face Qwen 2 ``config.json`` dict.

    Raises:
      GeomjaxError: ``use_sliding_window``, an activation other than silu, a rope type other than
        default/linear, unknown keys, missing sizes.
    """
    used = tuple(k for k in USED if k not in ("attention_bias", "mlp_bias")) + ("layer_types",)
    ht.check_keys(cfg, used, QWEN_CHECKED, QWEN_IGNORED, "Qwen2", ignore_config_keys)
    full_attention_only(cfg, "Qwen2")
    kw = rotary_config_kwargs(cfg, "Qwen2")
    return build_config(Qwen2Config, "Qwen2", **kw)


FAMILY = rotary_family("qwen2", ("qwen2",), Qwen2Config, config_from_hf, prepends_bos=False, tiny={
    "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 96, "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 64, "tie_word_embeddings": False})
