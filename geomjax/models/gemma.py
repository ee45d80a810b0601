"""Gemma (Gemma team 2024) on the rotary decoder of :mod:`geomjax.models.llama`, numerically equal to Hugging
Face's GemmaForCausalLM (eager attention).

Llama's block with three changes: the MLP is GeGLU, down(gelu_tanh(gate x) ⊙ up x); every RMSNorm has the
gain 1 + w (its ``scale`` holds w, zero at initialisation); the embedding is scaled,
x_0 = E[ids] · √d (the factor rounded to the activation dtype, as transformers does). Tied read-out;
the tokenizer prepends BOS (id 2). The parameter tree is Llama's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import ClassVar

from geomjax.errors import GeomjaxError
from geomjax.models import hf_tables as ht
from geomjax.models.llama import IGNORED, USED, RotaryConfig, build_config, rotary_config_kwargs, rotary_family

__all__ = ["GemmaConfig"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class GemmaConfig(RotaryConfig):
    """Hyperparameters of a Gemma model (:class:`~geomjax.models.llama.RotaryConfig` with GeGLU, 1 + w norms,
    √d-scaled embeddings, tied read-out)."""

    model_type: str = "gemma"
    hidden_act: str = "gelu_pytorch_tanh"
    norm_offset: float = 1.0
    scale_embeddings: bool = True
    tie_word_embeddings: bool = True
    bos_token_id: int | None = 2

    MODEL_TYPES: ClassVar[tuple[str, ...]] = ("gemma",)
    DISPLAY_NAMES: ClassVar[dict[str, str]] = {"gemma": "Gemma"}


GEMMA_CHECKED = {**ht.CHECKED_COMMON, "use_bidirectional_attention": None}
GEMMA_IGNORED = IGNORED


def activation(cfg: Mapping, key: str, what: str) -> str:
    """The MLP activation the family's transformers code reads (``key``); the other spelling, when a
    config.json carries it too, must agree (a checkpoint written for another transformers version)."""
    act = cfg.get(key) or "gelu_pytorch_tanh"
    other = cfg.get("hidden_activation" if key == "hidden_act" else "hidden_act")
    if other is not None and other != act:
        raise GeomjaxError(f"{what} config: hidden_act={cfg.get('hidden_act')!r} and hidden_activation="
                           f"{cfg.get('hidden_activation')!r} disagree; transformers reads {key} — fix config.json")
    if act != "gelu_pytorch_tanh":
        raise GeomjaxError(f"{what} config: {key}={act!r} is not implemented (only 'gelu_pytorch_tanh')")
    return act


def bidirectional_off(cfg: Mapping, what: str) -> None:
    """Reject ``use_bidirectional_attention`` (Gemma's encoder variants)."""
    if cfg.get("use_bidirectional_attention"):
        raise GeomjaxError(f"{what} config: use_bidirectional_attention=True is not implemented (causal only)")


def config_from_hf(cfg: Mapping, ignore_config_keys: Iterable[str] = ()) -> GemmaConfig:
    """Build a :class:`GemmaConfig` from a Hugging Face Gemma ``config.json`` dict.

    Raises:
      GeomjaxError: an activation other than gelu_pytorch_tanh, bidirectional attention, a rope type other
        than default/linear, unknown keys, missing sizes.
    """
    used = USED + ("hidden_act", "hidden_activation", "use_bidirectional_attention")
    ht.check_keys(cfg, used, ht.CHECKED_COMMON, GEMMA_IGNORED, "Gemma", ignore_config_keys)
    bidirectional_off(cfg, "Gemma")
    kw = rotary_config_kwargs(cfg, "Gemma") | {"tie_word_embeddings": bool(cfg.get("tie_word_embeddings", True))}
    return build_config(GemmaConfig, "Gemma", **kw, hidden_act=activation(cfg, "hidden_act", "Gemma"))


FAMILY = rotary_family("gemma", ("gemma",), GemmaConfig, config_from_hf, prepends_bos=True, tiny={
    "model_type": "gemma", "architectures": ["GemmaForCausalLM"], "vocab_size": 96, "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
    "max_position_embeddings": 64, "head_dim": 8})
