"""Flax linen transformer ports (GPT-2, BERT), the toy family, and their Intermediates.

::

    model, params = gj.models.load_pretrained(path)          # GPT-2 or BERT by config.json
    out, inter = model.apply({"params": params}, input_ids)  # inter.hidden_states: L+1 (B, T, d)
    w = gj.models.attention_weights(params, model.config, layer)   # W_q (H, d, K), ...

``toy`` (the configurable toy transformer) and ``toy_run`` (``load_toy_run`` / ``toy_forward``: a
trained toy run for the geometry study) are imported lazily.
"""

from __future__ import annotations

import importlib
from typing import Any

from geomjax.models.bert import Bert, BertConfig, bert_attention_weights
from geomjax.models.common import Intermediates, layer_norm
from geomjax.models.gpt2 import GPT2, GPT2Config, gpt2_attention_weights
from geomjax.typing import Array

__all__ = [
    "Bert",
    "BertConfig",
    "GPT2",
    "GPT2Config",
    "Intermediates",
    "ToyRun",
    "attention_weights",
    "layer_norm",
    "load_pretrained",
    "load_toy_run",
    "minilm_path",
    "toy",
    "toy_forward",
    "toy_run",
]


def attention_weights(params: dict, config, layer: int) -> dict[str, Array]:
    """Collect per-head W_q, W_k, W_v (H, d, K), W_o (H, K, d), biases and LayerNorms of one layer.

    Dispatches on the config type (see :func:`geomjax.models.gpt2.gpt2_attention_weights` and
    :func:`geomjax.models.bert.bert_attention_weights` for the LayerNorm keys).

    Args:
      params: the model's parameter tree (``params``, not ``{"params": params}``).
      config: GPT2Config or BertConfig.
      layer: block index in [0, L).
    """
    n = config.num_layers
    if not 0 <= layer < n:
        raise ValueError(f"layer must lie in [0, {n}), got {layer}")
    if isinstance(config, GPT2Config):
        return gpt2_attention_weights(params, config, layer)
    if isinstance(config, BertConfig):
        return bert_attention_weights(params, config, layer)
    raise TypeError(f"attention_weights: unsupported config type {type(config).__name__}")


def load_pretrained(path, **kwargs):
    """Load a Hugging Face GPT-2 or BERT checkpoint as ``(model, params)``; see
    :func:`geomjax.convert.load_pretrained` for the arguments."""
    from geomjax.convert import load_pretrained as _load

    return _load(path, **kwargs)


def minilm_path():
    """Directory of the bundled all-MiniLM-L6-v2 checkpoint; see :func:`geomjax.convert.minilm_path`."""
    from geomjax.convert import minilm_path as _m

    return _m()


def __getattr__(name: str) -> Any:
    if name == "toy":
        return importlib.import_module("geomjax.models.toy")
    if name == "toy_run":
        return importlib.import_module("geomjax.models.toy_run")
    if name in ("ToyRun", "load_toy_run", "toy_forward"):
        return getattr(importlib.import_module("geomjax.models.toy_run"), name)
    raise AttributeError(f"module 'geomjax.models' has no attribute {name!r}")
