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

__all__ = ["Family", "Parts"]


@dataclasses.dataclass(frozen=True)
class Parts:
    """What a model of a family is made of, for one config (:meth:`Family.parts`): what the lens, the
    circuits, the study and the converters read instead of testing a family's name.

    Attributes:
      embedding: the token embedding's module (its ``embedding`` is W_E, the tied read-out).
      embed_scale: x_0 = E[ids] · embed_scale (Gemma: √d), or None.
      embed_norm: a norm on the embedding (BLOOM's ``word_embeddings_ln``), or None.
      positions: ``learned`` (added to the embedding), ``rotary`` or ``alibi``.
      norm: ``layernorm`` or ``rmsnorm``; norm_offset: the gain is offset + scale (Gemma: 1); norm_eps.
      pre_norm: every branch reads norm(h) (else post-norm: BERT).
      parallel: attention and MLP both read the block input (GPT-NeoX's parallel residual).
      out_norms: the norms on the attention and MLP outputs ("sandwich", Gemma 2/3), or None.
      blocks: the blocks' module name (block l's parameters are ``{blocks}_{l}``).
      final_norm: the final norm's module, or None (BERT).
      tied: the read-out is W_Eᵀ (else ``lm_head``, absent from a base checkpoint).
      head_tensor: the Hugging Face name of the untied read-out (``lm_head.weight``, GPT-NeoX ``embed_out.weight``).
      final_softcap, attn_softcap: c of c · tanh(· / c) on the logits / scores (Gemma 2), or None.
    """

    embedding: str
    embed_scale: float | None
    embed_norm: str | None
    positions: str
    norm: str
    norm_offset: float
    norm_eps: float
    pre_norm: bool
    parallel: bool
    out_norms: tuple[str, str] | None
    blocks: str
    final_norm: str | None
    tied: bool
    head_tensor: str
    final_softcap: float | None
    attn_softcap: float | None


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
      blocks: the blocks' module name (a list: block l's parameters are ``{blocks}_{l}``,
        :attr:`~geomjax.models.family.Family.layer_key`).
      final_norm: the final norm's module name (None: none, BERT).
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
      norm_eps: the config field holding the norms' eps.
      embed_norm: the embedding's norm module (BLOOM), or None.
      out_norms: the branch-output norms' modules, present when the config's ``sandwich_norms`` is True.
      head_tensor: the untied read-out's Hugging Face name (at the top level, not below ``hf_prefix``).
      tiny: a tiny ``config.json`` (2 layers, d ≤ 64, vocab ≤ 128; ``architectures`` names the
        transformers class) on which the family-parametrized tests run every tool.

    The config's switches (``scale_embeddings``, ``norm_offset``, ``use_parallel_residual``, ``sandwich_norms``,
    ``tie_word_embeddings``, ``final_logit_softcapping``, ``attn_logit_softcapping``) complete the record
    per model: :meth:`~geomjax.models.family.Family.parts`. Registering a record also sets ``config_cls.FAMILY``
    to it, which is how the family's module finds its parts.
    """

    name: str
    model_types: tuple[str, ...]
    config_cls: type
    module_cls: type
    config_from_hf: Callable[[Mapping, Iterable[str]], Any]
    weight_table: Callable[[Any], tuple[dict, set]]
    hf_prefix: str
    blocks: str
    final_norm: str | None
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
    norm_eps: str = "layer_norm_epsilon"
    embed_norm: str | None = None
    out_norms: tuple[str, str] | None = None
    head_tensor: str = "lm_head.weight"
    tiny: Mapping | None = None

    def __post_init__(self):
        self.config_cls.FAMILY = self  # the module's way to its record (models import no registry)

    @property
    def layer_key(self) -> str:
        """Block l's name in the parameter tree, a format string (``"layers_{}"``)."""
        return self.blocks + "_{}"

    def parts(self, config: Any) -> Parts:
        """The :class:`Parts` of a model of this family with ``config``."""
        c = config
        return Parts(
            embedding=self.embedding, embed_scale=float(c.d_model) ** 0.5 if getattr(c, "scale_embeddings", False)
            else None, embed_norm=self.embed_norm, positions=self.positions, norm=self.norm,
            norm_offset=float(getattr(c, "norm_offset", 0.0)), norm_eps=float(getattr(c, self.norm_eps)),
            pre_norm=self.pre_norm, parallel=bool(getattr(c, "use_parallel_residual", False)),
            out_norms=self.out_norms if getattr(c, "sandwich_norms", False) else None, blocks=self.blocks,
            final_norm=self.final_norm, tied=bool(getattr(c, "tie_word_embeddings", True)),
            head_tensor=self.head_tensor, final_softcap=getattr(c, "final_logit_softcapping", None),
            attn_softcap=getattr(c, "attn_logit_softcapping", None))

    def __repr__(self) -> str:
        return f"Family({self.name!r}: {self.config_cls.__name__}, {self.module_cls.__name__})"
