"""One record per model family: everything the interface, conversion, study and lens know about it.

A family module (``models/<family>.py``) holds its config class, its Flax module, its ``config.json``
reader, its weight table, and ends with one :class:`Family` record naming them together with the
family's layout (positions, norm) and the names of its parts in the parameter tree.
:mod:`geomjax.models.registry` lists the family modules; nothing else in geomjax looks a family up by its
name (docs/models.md, "Adding a family").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["Family"]


@dataclasses.dataclass(frozen=True, eq=False)
class Family:
    """A Hugging Face model family as geomjax ports it.

    Attributes:
      name: the family's name (``ModelFacts.family``, run records), e.g. ``"gpt_neox"``.
      model_types: the ``config.json`` ``model_type`` values it reads (Llama's reader takes ``"llama"``
        and ``"mistral"``).
      config_cls: its frozen config class (an :class:`~geomjax.models.common.HFConfig`).
      module_cls: its Flax module (built as ``module_cls(config)``).
      config_from_hf: ``(config.json dict, ignore_config_keys) -> config``: the whitelisting reader.
      weight_table: ``config -> ({Hugging Face tensor name: Transform}, {ignorable buffer names})``, names
        below ``hf_prefix``; every parameter of the module must be filled exactly once.
      hf_prefix: the prefix transformers' head model writes (``"model."``, ``"transformer."``, ...).
      layer_key: the block's name in the parameter tree, a format string (``"layers_{}"``).
      embedding: the token embedding's module name (its ``embedding`` is W_E; the tied read-out).
      positions: ``learned``, ``rotary`` or ``alibi``; norm: ``layernorm`` or ``rmsnorm``.
      pre_norm: the attention input is norm_1(h) (then the model also has a final norm).
      norms: the block's norm modules by role, ``((module, role), ...)``, the attention-input norm first
        for pre-norm families (what :meth:`geomjax.models.interface.ModelInterface.norm_weights` returns,
        as ``{role}_{param}``).
      attention_norm: ``(config, block params, h) -> norm_1(h)``, the attention input of pre-norm families.
      prepends_bos: the family's tokenizer prepends the BOS id to every text.
      tokenizer_specials: the tokenizer's own special tokens are added by ``encode`` (BERT's [CLS] ... [SEP]).
      study_final_norm: the geometry study's default for the last state (True: after the final norm, as
        Hugging Face's ``output_hidden_states``; False: the residual stream, as the Song & Zhong code ran GPT-2).
      bidirectional: the module takes ``causal=`` (BERT); causal decoders are always causal.
      tokenizer: where its tokenizer comes from: ``"tokenizer.json"`` (the checkpoint's), ``"wordpiece"``
        (BERT's vocab.txt) or ``"gpt2_bpe"`` (the tokenizer.json, else GPT-2's bundled byte-level BPE).
      from_weights: ``(config, tensors) -> config`` settling what only the weights say (BERT's pooler), or None.
    """

    name: str
    model_types: tuple[str, ...]
    config_cls: type
    module_cls: type
    config_from_hf: Callable[[Mapping, Iterable[str]], Any]
    weight_table: Callable[[Any], tuple[dict, set]]
    hf_prefix: str
    layer_key: str
    embedding: str
    positions: str
    norm: str
    pre_norm: bool
    norms: tuple[tuple[str, str], ...]
    attention_norm: Callable[[Any, Mapping, Any], Any] | None = None
    prepends_bos: bool = False
    tokenizer_specials: bool = False
    study_final_norm: bool = True
    bidirectional: bool = False
    tokenizer: str = "tokenizer.json"
    from_weights: Callable[[Any, Mapping], Any] | None = None

    def __repr__(self) -> str:
        return f"Family({self.name!r}: {self.config_cls.__name__}, {self.module_cls.__name__})"
