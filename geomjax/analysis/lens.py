"""Load a model by name with its tokenizer; run it with a named activation cache and with hooks.

::

    model = gj.load("minilm")                      # or "gpt2", "org/name", a directory, "toy:RUN_DIR"
    ids = model.to_tokens("The cat sat.")          # (1, T) int32, special tokens as the family adds them
    model.to_str_tokens(ids)                       # ['[CLS]', 'the', 'cat', 'sat', '.', '[SEP]']
    out, cache = model.run_with_cache(ids, names="blocks.*.attn.pattern")
    out, cache = model.run_with_cache(ids, attention_mask=mask)  # padded batch: real tokens as unpadded
    print(gj.lens.cache_size(model, (8, 512), "blocks.*.hook_resid_post"))   # bytes, before running
    cache["blocks.0.attn.pattern"]                 # (B, H, T, T)
    hs = model.run_with_cache(ids)[1].hidden_states()   # L+1 (B, T, d), Hugging Face convention
    out = model.run_with_hooks(ids, {"blocks.1.attn.z": lambda z: z.at[:, :, 3].set(0.0)})  # ablate head 3
    grid = gj.lens.patching_sweep(model, clean_ids, corrupt_ids, metric)   # (L, T), one compiled program

Activation names (``l`` = block index, B batch, T tokens, d width, H query heads, H_kv key/value
heads, K head width, F MLP width; every family has the same names, recorded by the identity modules
:class:`geomjax.models.common.HookPoint` inside the ported models, so the forward pass and its
``transformers`` parity are the ones of the model itself; TransformerLens's name in brackets)::

    hook_embed                    (B, T, d)      token embedding E[ids] [hook_embed]
    hook_pos_embed                (B, T, d)      learned position embedding (GPT-2, BERT) [hook_pos_embed]
    hook_token_type_embed         (B, T, d)      BERT's segment embedding
    blocks.{l}.hook_resid_pre     (B, T, d)      residual stream entering block l = Hugging Face
                                                 hidden_states[l]
    blocks.{l}.ln1                (B, T, d)      the attention input norm_1(h) (pre-norm families) [ln1.hook_normalized]
    blocks.{l}.ln1.scale          (B, T, 1)      its divisor: sqrt(var(h) + eps) (LayerNorm), sqrt(mean(h²) + eps)
                                                 (RMSNorm) [ln1.hook_scale]; read-only
    blocks.{l}.attn.q             (B, T, H, K)   x W_q + b_q (before the q norm and rotation of rotary families)
    blocks.{l}.attn.k, .attn.v    (B, T, H_kv, K)
    blocks.{l}.attn.q_rot, .k_rot (B, T, H|H_kv, K)  normed (Qwen 3, Gemma 3) and rotated queries / keys
                                                 (rotary families: Llama, Mistral, GPT-NeoX, Qwen, Gemma)
    blocks.{l}.attn.scores        (B, H, T, T)   scaled scores (+ ALiBi bias; Gemma 2: soft-capped) with masked
                                                 entries set to the dtype minimum: what the softmax reads
    blocks.{l}.attn.pattern       (B, H, T, T)   attention probabilities (rows sum to one)
    blocks.{l}.attn.z             (B, T, H, K)   pattern @ v per head, before W_o
    blocks.{l}.attn.result        (B, T, H, d)   each head's output written to the residual stream,
                                                 z_h W_o[h] without b_o [attn.hook_result]; read-only,
                                                 kept only when asked for by name (d× the size of z;
                                                 Gemma 2/3: before the output norm, so no sum decomposition)
    blocks.{l}.attn.out           (B, T, d)      sum_h z_h W_o[h] + b_o (Gemma 2/3: after its output norm)
    blocks.{l}.hook_resid_mid     (B, T, d)      h + attn.out (BERT: its LayerNorm of that)
    blocks.{l}.ln2, .ln2.scale    (B, T, d), (B, T, 1)  the MLP input norm_2 and its divisor (pre-norm)
    blocks.{l}.mlp.pre            (B, T, F)      neurons before the nonlinearity: fc(x) (gated MLPs of Llama /
                                                 Mistral / Qwen / Gemma: the gate, gate(x)) [mlp.hook_pre]
    blocks.{l}.mlp.pre_linear     (B, T, F)      gated MLPs only: up(x) [mlp.hook_pre_linear]
    blocks.{l}.mlp.post           (B, T, F)      after it: act(fc x) (gated: act(gate x) ⊙ up x, act = SiLU, Gemma's
                                                 GELU-tanh), what the output matrix reads [mlp.hook_post]
    blocks.{l}.mlp.out            (B, T, d)      MLP output (Gemma 2/3: after its output norm)
    blocks.{l}.hook_resid_post    (B, T, d)      block output = hidden_states[l + 1] (residual)
    ln_final                      (B, T, d)      final norm (GPT-2 ln_f, Llama / Qwen / Gemma norm, BLOOM ln_f,
                                                 GPT-NeoX final_layer_norm)
    ln_final.scale                (B, T, 1)      its divisor [ln_final.hook_scale]; read-only

Post-LN BERT has no ``ln1``/``ln2`` (its ``hook_resid_mid``/``hook_resid_post`` are the LayerNorm
outputs) and no ``ln_final``; GPT-NeoX with its parallel residual (every Pythia) has no ``hook_resid_mid``
(attention and MLP both read ``hook_resid_pre``); BLOOM's ``hook_embed`` is E[ids] before its embedding
LayerNorm and Gemma's before its √d scaling (``blocks.0.hook_resid_pre`` is after either). The toy models
of ``geomjax train`` have the names of their layer-norm placement (pre: as GPT-2; post: as BERT; none: no
norms), no embedding, scale, result or neuron names, and no ``mlp.out`` when attention-only.

Where TransformerLens differs: its ``hook_scale`` of LayerNorm is the same sqrt(var + eps), but
TransformerLens folds the norm gains into the next weights by default (``fold_ln``, and centres the
writing weights), so its ``hook_resid_*`` / ``attn.hook_q`` ... of a ``from_pretrained`` model differ
from Hugging Face's by those reparametrisations while geomjax's equal Hugging Face's; its
``hook_pos_embed`` exists only for learned positions (as here); its ``mlp.hook_pre`` of a gated MLP is
the gate pre-activation (as here).

A hook ``fn(x) -> x`` replaces the activation of that name in the forward pass (patching, ablation);
everything downstream sees the replacement (read-only names refuse hooks). Hooks are data: a hook
function's code and its non-numeric captured values are the compiled program, its captured arrays
and numbers (the patch tensor, the position, the head) are arguments, so a fresh closure of the same
code reuses the compilation (a number used as a static size falls back to the value in the key).
A padded batch runs with ``attention_mask`` (its real tokens get the unpadded activations) and
``stop_at_layer`` skips the later blocks; :func:`cache_size` gives the bytes of a cache before running.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import os
import re
import types
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from geomjax.base._checks import compiled_cache
from geomjax.base._repr import summarize
from geomjax.convert import load_pretrained, minilm_path, resolve_checkpoint
from geomjax.convert.tokenizers import check_tokenizer, model_tokenizer
from geomjax.errors import GeomjaxError
from geomjax.models.common import READ_ONLY_HOOKS, HookPoint, missing_head_message
from geomjax.models.interface import ModelInterface, model_interface
from geomjax.train.toy_run import load_toy_run
from geomjax.typing import Array, Float, Int

__all__ = ["ActivationCache", "CacheSize", "Model", "PatchingSweep", "cache_size", "load", "logit_diff_metric",
           "model_source", "patching_sweep"]

def load(name: str | os.PathLike, *, dtype: str | None = None) -> Model:
    """Load a model by name with its own tokenizer (the one loader of geomjax and its CLI).

    Args:
      name: ``"minilm"`` (the bundled all-MiniLM-L6-v2), a Hugging Face checkpoint directory, cache
        entry or repo id (``"gpt2"``, ``"org/name"``: from the local cache, else downloaded unless
        offline), or ``"toy:RUN_DIR"`` (a run of ``geomjax train``). A base checkpoint without its
        language-model head (``LlamaModel``, ``MistralModel``, ``BloomModel``, ... saved with
        ``save_pretrained``) loads: it runs and caches every activation; asking it for logits raises.
      dtype: parameter dtype (None keeps the checkpoint's; e.g. ``"float32"``).

    Returns:
      :class:`Model` holding the module (or ToyRun), parameters and tokenizer. A directory without a
      usable tokenizer (no ``tokenizer.json`` / ``vocab.txt``, or one whose ids do not fit the model)
      still loads: the model runs on token ids and :meth:`Model.to_tokens` raises, saying why.

    Raises:
      GeomjaxError / FileNotFoundError: as :func:`geomjax.convert.load_pretrained` and
        :func:`geomjax.train.load_toy_run` (unknown name, missing files, unsupported config).

    Example (the bundled MiniLM, hidden states of every layer through the cache):
      >>> import geomjax as gj
      >>> model = gj.load("minilm")
      >>> model.to_str_tokens("The cat sat.")
      ['[CLS]', 'the', 'cat', 'sat', '.', '[SEP]']
      >>> out, cache = model.run_with_cache("The cat sat.")
      >>> out.shape, len(cache.hidden_states())
      ((1, 6, 384), 7)
    """
    name = os.fspath(name)
    kind, path = model_source(name)
    if kind == "toy":
        run = load_toy_run(path)
        return Model(run, run.params, run.tokenizer, name, path)
    module, params = load_pretrained(path, dtype=dtype)
    try:
        tok = model_tokenizer(path, module.config)
        check_tokenizer(tok, module.config)
    except (GeomjaxError, FileNotFoundError, ValueError) as e:  # ids still work; to_tokens says why not
        tok = _NoTokenizer(str(e).splitlines()[0])
    return Model(module, params, tok, name, Path(path))


def model_source(name: str | os.PathLike) -> tuple[str, Path]:
    """What a model name names (the one reading of :func:`load`'s names, for every loader): ``("toy", run
    directory)`` for ``"toy:RUN_DIR"`` (not checked here), else ``("hf", checkpoint directory)``: ``"minilm"``
    the bundled MiniLM, a directory, cache entry or repo id (:func:`~geomjax.convert.resolve_checkpoint`: from
    the cache, else downloaded unless offline).

    Raises:
      FileNotFoundError / GeomjaxError: as :func:`~geomjax.convert.resolve_checkpoint`."""
    name = os.fspath(name)
    if name.startswith("toy:"):
        return "toy", Path(name[4:]).expanduser()
    return "hf", minilm_path() if name == "minilm" else resolve_checkpoint(name)


@dataclasses.dataclass(frozen=True)
class _NoTokenizer:
    """Stands in for the tokenizer of a checkpoint that has none: any use (encode, decode, its vocabulary)
    raises the one-line GeomjaxError saying why there is none."""

    reason: str
    name: str = "none"

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise GeomjaxError(f"this model was loaded without a tokenizer ({self.reason}); pass token ids instead "
                           "of text")


@dataclasses.dataclass(frozen=True, eq=False)
class Model:
    """A loaded model: module, parameters, tokenizer (what :func:`load` returns).

    Attributes:
      model: the Flax module (GPT2, Bert, Llama, Bloom) or a ToyRun.
      params: the parameter tree (``model.apply({"params": params}, ids)``).
      tokenizer: the model's own tokenizer (TextTokenizer; a toy run's CharTokenizer), or a stand-in
        that raises on text when the checkpoint ships none.
      name: what it was loaded as; path: its directory.
    """

    model: Any
    params: Any
    tokenizer: Any
    name: str
    path: Path | None = None
    _sizes: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @functools.cached_property
    def interface(self) -> ModelInterface:
        """The :class:`~geomjax.models.interface.ModelInterface` (facts, forward, weights by role)."""
        return model_interface(self.model)

    @property
    def config(self):
        return self.interface.config

    @property
    def facts(self):
        return self.interface.facts

    @functools.cached_property
    def has_logits(self) -> bool:
        """False for BERT (its output is the last hidden state) and for base checkpoints saved without
        their untied ``lm_head``; then :meth:`run_with_cache`'s output is the last hidden state (B, T, d)."""
        return self.interface.has_lm_head(self.params)

    def __repr__(self) -> str:
        f = self.facts
        n = sum(int(np.size(x)) for x in jax.tree.leaves(self.params))
        dt = {str(x.dtype) for x in jax.tree.leaves(self.params)}
        fam = self.interface.family
        head = "" if self.has_logits or (fam is not None and fam.bidirectional) else ", no lm_head"
        return (f"Model({self.name!r}: {f.family}, L={f.n_layers}, d={f.d_model}, H={f.n_heads}"
                f"{'' if f.n_kv_heads == f.n_heads else f' (H_kv={f.n_kv_heads})'}, {n:,} params "
                f"{'/'.join(sorted(dt))}{head}, tokenizer "
                f"{getattr(self.tokenizer, 'name', type(self.tokenizer).__name__)})")

    # -- tokens ----------------------------------------------------------------------------
    def to_tokens(self, text: str, *, special_tokens: bool = True, prepend_bos: bool | None = None
                  ) -> Int[Array, "1 T"]:
        """Token ids (1, T) int32 of one text; ``special_tokens`` adds what the family's tokenizer adds by
        default (its family record: ``tokenizer_specials``, the BOS id of ``facts``): [CLS] ... [SEP] for BERT,
        BOS for Llama / Mistral / Gemma, nothing for GPT-2, BLOOM, GPT-NeoX, Qwen and toys.

        ``prepend_bos``: None follows that default; True prepends the BOS token (GPT-2: ``<|endoftext|>``,
        as TransformerLens does by default) unless the text already starts with it; False never
        prepends one. GPT-2's default is False because ``transformers``' GPT-2 tokenizer adds none
        and the Song & Zhong windows had none: geomjax's activations equal Hugging Face's for the
        same text; pass True to reproduce TransformerLens's tokens.
        """
        if not isinstance(text, str):
            raise GeomjaxError(f"to_tokens takes one string, got {type(text).__name__}; "
                               "for several texts call it per text")
        fam = self.interface.family
        if fam is None:  # a toy run's character tokenizer
            return np.asarray(self.tokenizer.encode(text), np.int32)[None]
        ids = self.tokenizer.encode(text, add_special_tokens=special_tokens and fam.tokenizer_specials)
        if prepend_bos is None:
            prepend_bos = special_tokens and self.facts.bos_token_id is not None
        if prepend_bos:
            bos = self.bos_token_id
            if ids.size == 0 or ids[0] != bos:
                ids = np.concatenate([np.asarray([bos], np.int32), ids])
        return np.asarray(ids, np.int32)[None]

    @property
    def bos_token_id(self) -> int:
        """The BOS id: the family's (Llama / Mistral / BLOOM config), else the tokenizer's ``<|endoftext|>``
        (GPT-2) or ``<s>``. Raises GeomjaxError when the model has none."""
        bos = self.facts.bos_token_id
        bos = getattr(self.config, "bos_token_id", None) if bos is None else bos
        if bos is None and not isinstance(self.tokenizer, _NoTokenizer) and hasattr(self.tokenizer, "token_to_id"):
            bos = next((i for t in ("<|endoftext|>", "<s>", "[CLS]") if (i := self.tokenizer.token_to_id(t))
                        is not None), None)
        if bos is None:
            raise GeomjaxError(f"{self.facts.family} model {self.name!r} has no BOS token (neither its config nor its "
                               "tokenizer names one); prepend_bos needs one")
        return int(bos)

    def _ids(self, text_or_ids) -> np.ndarray:
        """(B, T) int32 from a string, a 1-D id list/array or a 2-D array."""
        if isinstance(text_or_ids, str):
            return self.to_tokens(text_or_ids)
        ids = np.asarray(text_or_ids)
        if ids.ndim == 1:
            ids = ids[None]
        if ids.ndim != 2 or not (np.issubdtype(ids.dtype, np.integer) or ids.size == 0):
            raise GeomjaxError(f"expected a text or token ids (T,) / (B, T) of integers, got shape {ids.shape} "
                               f"dtype {ids.dtype}")
        f = self.facts  # checked here: inside the compiled run a bad id would only give NaN outputs
        if ids.size == 0:
            raise GeomjaxError("no tokens to run (the text tokenized to nothing)")
        if ids.min() < 0 or ids.max() >= f.vocab_size:
            raise GeomjaxError(f"token ids must lie in [0, {f.vocab_size}) (the model's vocabulary), got min "
                               f"{ids.min()}, max {ids.max()}")
        if f.max_positions is not None and ids.shape[1] > f.max_positions:
            raise GeomjaxError(f"{ids.shape[1]} tokens exceed the model's {f.max_positions} positions; split "
                               "the text into windows")
        return ids.astype(np.int32)

    def to_str_tokens(self, text_or_ids) -> list[str] | list[list[str]]:
        """The token strings of a text or ids (T,) -> list; (B, T) -> one list per row. Each token is shown
        as the text it decodes to (GPT-2 ``' fox'``, not the byte-level symbol ``'Ġfox'``); BERT's
        WordPiece tokens keep their vocabulary form (``'##ing'``, ``'[CLS]'``)."""
        ids = self._ids(text_or_ids)
        fam = self.interface.family
        if fam is None:  # a toy run's character tokenizer
            rows = [[self.tokenizer.chars[i] for i in row] for row in ids.tolist()]
        elif fam.tokenizer == "wordpiece":
            rows = [[self.tokenizer.backend.id_to_token(int(i)) for i in row] for row in ids]
        else:
            rows = [[self.tokenizer.decode([int(i)]) for i in row] for row in ids]
        squeeze = isinstance(text_or_ids, str) or np.ndim(text_or_ids) == 1
        return rows[0] if squeeze else rows

    def to_string(self, ids) -> str:
        """Decode ids (T,) back to text (special tokens kept)."""
        ids = np.asarray(ids).reshape(-1)
        if self.interface.family is None:
            return "".join(self.tokenizer.chars[int(i)] for i in ids)
        return self.tokenizer.decode(ids)

    # -- running ---------------------------------------------------------------------------
    def _mask(self, attention_mask, ids: np.ndarray) -> np.ndarray | None:
        """The (B, T) 0/1 int32 padding mask of ``ids`` (None: no padding), checked."""
        if attention_mask is None:
            return None
        m = np.asarray(attention_mask)
        if m.ndim == 1:
            m = m[None]
        if m.shape != ids.shape or not (np.issubdtype(m.dtype, np.integer) or m.dtype == np.bool_):
            raise GeomjaxError(f"attention_mask must be 0/1 integers or booleans of the ids' shape {ids.shape}, got "
                               f"shape {m.shape} dtype {m.dtype}")
        if not np.isin(m, (0, 1)).all() or (m.sum(axis=1) == 0).any():
            raise GeomjaxError("attention_mask must hold 0 (padding) and 1 (real token), with a real token in "
                               "every row")
        if self.interface.family is None:
            raise GeomjaxError("the toy models take no attention_mask; run them on unpadded ids")
        return m.astype(np.int32)

    def run_with_cache(self, text_or_ids, names: str | list | tuple | Callable | None = None,
                       *, hooks: Mapping[str, Callable] | None = None, attention_mask=None,
                       stop_at_layer: int | None = None):
        """Run the model and keep the named activations (module docstring: names and shapes).

        Args:
          text_or_ids: a string (:meth:`to_tokens`), ids (T,) or (B, T).
          names: None keeps every activation but the per-head ``attn.result`` (d times the size of
            ``attn.z``: ask for it by name); a name or ``fnmatch`` pattern (``"blocks.*.attn.pattern"``)
            or a list of them; or a predicate ``name -> bool``. Only what is kept leaves the
            compiled function (XLA drops the rest).
          hooks: ``{name: fn(x) -> x}`` replacing activations (as :meth:`run_with_hooks`).
          attention_mask: (B, T) 1 for real tokens, 0 for padding (left or right): every activation at a
            real token equals the unpadded sequence's (position ids count real tokens; padded keys are
            masked); activations at padded positions are meaningless.
          stop_at_layer: run blocks 0..stop_at_layer−1 only (the activations of later blocks, the final
            norm and the output are not computed; ``out`` is None).

        Returns:
          ``(out, cache)``: out is the logits (B, T, V) (BERT and base checkpoints without an LM head:
          the last hidden state (B, T, d); None with ``stop_at_layer``) and cache an
          :class:`ActivationCache`. Compiled once per (model, names, the hooks' code, stop_at_layer,
          masked or not) and input shape: the hooks' captured arrays and numbers are arguments of the
          compiled program.

        Raises:
          GeomjaxError: a requested name or hook name matches no activation of this model, or a hook
            targets a read-only name; a bad mask or stop_at_layer; the kept activations do not fit the
            device's free memory (:func:`cache_size`, checked before the run).
        """
        ids = self._ids(text_or_ids)
        mask = self._mask(attention_mask, ids)
        stop = _check_stop(stop_at_layer, self.facts.n_layers)
        keep = _keep_key(names)
        out, cache = _run(self, keep, dict(hooks or {}), ids, mask, stop)
        n = self.facts.n_layers if stop is None else stop
        return out, ActivationCache(dict(sorted(cache.items(), key=lambda kv: _order(kv[0]))), n)

    def run_with_hooks(self, text_or_ids, hooks: Mapping[str, Callable], *, attention_mask=None
                       ) -> Float[Array, "B T V"]:
        """Run with activations replaced: ``hooks = {name: fn(x) -> x}`` (pure functions, traced under
        ``jit``; e.g. ``lambda z: z.at[:, :, h].set(0)`` on ``blocks.{l}.attn.z`` zero-ablates head h).
        Returns the output (logits; BERT and head-less checkpoints: last hidden state). A new closure of
        the same code reuses the compilation; its captured arrays and numbers are arguments.
        ``attention_mask``: as :meth:`run_with_cache`."""
        return self.run_with_cache(text_or_ids, names=(), hooks=hooks, attention_mask=attention_mask)[0]

    def _require_logits(self, what: str) -> None:
        fam = self.interface.family
        if fam is not None and fam.bidirectional:
            raise GeomjaxError(f"{what} needs a language-model head; geomjax's {self.config.display_name} is the "
                               "encoder only (its output is the last hidden state)")
        if not self.has_logits:
            raise GeomjaxError(missing_head_message(self.config))

    def logits(self, text_or_ids, hooks: Mapping[str, Callable] | None = None, *, attention_mask=None
               ) -> Float[Array, "B T V"]:
        """Logits (B, T, V); raises GeomjaxError naming the missing head for BERT and head-less checkpoints.
        ``attention_mask``: as :meth:`run_with_cache` (real tokens get the unpadded row's logits)."""
        self._require_logits("logits")
        return self.run_with_hooks(text_or_ids, hooks or {}, attention_mask=attention_mask)

    def loss(self, text_or_ids, hooks: Mapping[str, Callable] | None = None, *, attention_mask=None
             ) -> Float[Array, "B _"]:
        """Per-token language-model loss (B, T - 1): −log p(x_{t+1} | x_{≤t}) from the logits at t (the
        cross-entropy each next token pays; its mean is the usual LM loss, TransformerLens
        ``loss_per_token=True``). With a padding ``attention_mask`` (B, T) a prediction whose token t or
        t + 1 is padding is excluded: its entry is 0 (as TransformerLens masks it); the mean loss is then
        ``loss.sum() / (mask[:, 1:] * mask[:, :-1]).sum()``."""
        ids = self._ids(text_or_ids)
        if ids.shape[1] < 2:
            raise GeomjaxError("the loss needs at least two tokens (it predicts token t + 1 from t)")
        mask = self._mask(attention_mask, ids)
        logp = jax.nn.log_softmax(jnp.asarray(self.logits(ids, hooks, attention_mask=mask), jnp.float32), axis=-1)
        nll = -jnp.take_along_axis(logp[:, :-1], jnp.asarray(ids[:, 1:, None]), axis=-1)[..., 0]
        return nll if mask is None else jnp.where(jnp.asarray(mask[:, 1:] * mask[:, :-1]) != 0, nll, 0.0)

    def generate(self, text_or_ids, max_new_tokens: int, *, temperature: float = 0.0, top_k: int | None = None,
                 seed: int = 0, attention_mask=None) -> Int[Array, "B _"]:
        """Continue the ids (B, T) by ``max_new_tokens`` tokens: greedy (argmax) when ``temperature`` is 0,
        else sampled from softmax(logits / temperature) (over the ``top_k`` largest when given) with
        ``jax.random.key(seed)`` (the same seed gives the same tokens). One compiled program per
        (T, max_new_tokens, sampling kind): each step runs the causal model on the whole padded
        sequence (no key/value cache; later positions cannot affect earlier ones). Returns (B, T + n).

        ``attention_mask`` (B, T): prompts of different lengths, left-padded (each row's padding before its
        first real token); every row continues exactly as its unpadded prompt does (the new tokens are real).
        """
        self._require_logits("generate")
        if not self.facts.causal:
            raise GeomjaxError("generate needs a causal model")
        ids = self._ids(text_or_ids)
        mask = self._mask(attention_mask, ids)
        if mask is not None and (np.diff(mask, axis=1) < 0).any():
            raise GeomjaxError("generate needs left padding (every row's 0s before its 1s): a right-padded row "
                               "would continue after its padding")
        n = int(max_new_tokens)
        if n < 1:
            raise GeomjaxError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature < 0 or (top_k is not None and not 1 <= top_k <= self.facts.vocab_size):
            raise GeomjaxError(f"temperature must be >= 0 and top_k in [1, {self.facts.vocab_size}], got "
                               f"{temperature}, {top_k}")
        mp = self.facts.max_positions
        if mp is not None and ids.shape[1] + n > mp:
            raise GeomjaxError(f"{ids.shape[1]} + {n} tokens exceed the model's {mp} positions")
        fn = _generator(self.interface, ids.shape[1], n, temperature > 0, top_k)
        return fn(self.params, ids, mask, np.float32(max(temperature, 1e-6)), jax.random.key(int(seed)))


@dataclasses.dataclass(frozen=True)
class CacheSize:
    """The bytes an :class:`ActivationCache` will hold (what :func:`cache_size` returns; ``int()`` gives the total).

    Attributes:
      total: bytes of every kept activation together.
      per_name: ``{name: bytes}`` in forward order.
    """

    total: int
    per_name: dict[str, int]

    def __int__(self) -> int:
        return self.total

    def __str__(self) -> str:
        return f"{len(self.per_name)} activations, {_human(self.total)} ({self.total:,} bytes)"


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n} B"


def cache_size(model: Model, batch: tuple[int, int] | Any, names: str | list | tuple | Callable | None = None, *,
               stop_at_layer: int | None = None) -> CacheSize:
    """Bytes of the activations :meth:`Model.run_with_cache` would keep, computed without running the model
    (shapes from ``jax.eval_shape``: nothing is allocated).

    Args:
      model: a loaded :class:`Model`.
      batch: (B, T), or ids of that shape (a text, (T,) or (B, T)).
      names, stop_at_layer: as :meth:`Model.run_with_cache`.

    Returns:
      :class:`CacheSize` (``print`` it, or ``int()`` for the bytes).
    """
    if isinstance(batch, tuple) and len(batch) == 2 and all(isinstance(b, (int, np.integer)) for b in batch):
        shape = (int(batch[0]), int(batch[1]))
        if min(shape) < 1:
            raise GeomjaxError(f"cache_size: batch must be (B, T) with B, T >= 1, got {batch}")
    else:
        shape = model._ids(batch).shape
    stop = _check_stop(stop_at_layer, model.facts.n_layers)
    return _estimate(model, _keep_key(names), (), (), stop, shape, False)


def _check_stop(stop_at_layer, n_layers: int) -> int | None:
    if stop_at_layer is None:
        return None
    if isinstance(stop_at_layer, bool) or not isinstance(stop_at_layer, (int, np.integer)) or not (
            0 <= stop_at_layer <= n_layers):
        raise GeomjaxError(f"stop_at_layer must be an int in [0, {n_layers}] (the blocks to run), got {stop_at_layer!r}")
    return int(stop_at_layer)


def _estimate(model: Model, keep, hooks: tuple, values: tuple, stop, shape: tuple[int, int], masked: bool
              ) -> CacheSize:
    """The bytes of the cache of one run signature from ``jax.eval_shape`` of its compiled program (``hooks``:
    ``(name, _HookKey)`` pairs, ``values`` their captured arrays and numbers)."""
    fn, _ = _compiled(model.interface, model.has_logits, keep, hooks, stop)
    ids = jax.ShapeDtypeStruct(shape, jnp.int32)
    _, cache = jax.eval_shape(fn, model.params, ids, ids if masked else None, values)
    sizes = {n: int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for n, a in cache.items()}
    return CacheSize(sum(sizes.values()), dict(sorted(sizes.items(), key=lambda kv: _order(kv[0]))))


def _free_bytes() -> int | None:
    """Free memory of the default device: its allocator's limit minus what is in use (GPU/TPU), else the host's
    available physical memory (CPU); None when unknown."""
    stats = jax.devices()[0].memory_stats() if hasattr(jax.devices()[0], "memory_stats") else None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _check_fits(model: Model, keep, hooks: tuple, values: tuple, stop, shape, masked: bool) -> None:
    """One-line GeomjaxError before a run whose kept activations cannot fit the device's free memory."""
    free = _free_bytes()
    key = (keep, hooks, stop, tuple(shape), masked)
    if key not in model._sizes:  # one trace per run signature (the hooks' structure), as the compilation
        model._sizes[key] = _estimate(model, keep, hooks, values, stop, shape, masked)
    size = model._sizes[key]
    if free is not None and size.total > free:
        raise GeomjaxError(f"the activation cache would take {_human(size.total)} but the device has {_human(free)} "
                           "free; keep fewer names (names=...), stop earlier (stop_at_layer=...) or run a smaller "
                           "batch (geomjax.analysis.lens.cache_size estimates it)")


@compiled_cache(maxsize=16)
def _generator(iface: ModelInterface, T: int, n: int, sample: bool, top_k: int | None):
    def step(i, carry):
        buf, mask, key, params, temp = carry
        out, _ = _forward(iface, True, params, buf, {}, (), mask=mask)
        logits = jax.lax.dynamic_index_in_dim(out, T - 1 + i, axis=1, keepdims=False).astype(jnp.float32)
        if sample:
            if top_k is not None:
                kth = jax.lax.top_k(logits, top_k)[0][:, -1:]
                logits = jnp.where(logits < kth, -jnp.inf, logits)
            nxt = jax.random.categorical(jax.random.fold_in(key, i), logits / temp, axis=-1)
        else:
            nxt = jnp.argmax(logits, axis=-1)
        buf = jax.lax.dynamic_update_index_in_dim(buf, nxt.astype(buf.dtype)[:, None], T + i, axis=1)
        return buf, mask, key, params, temp

    def generate(params, ids, mask, temp, key):
        """``mask``: None, or the prompts' left padding (B, T), extended by the new (real) tokens."""
        buf = jnp.concatenate([ids, jnp.zeros((ids.shape[0], n), ids.dtype)], axis=1)
        if mask is not None:
            mask = jnp.concatenate([mask, jnp.ones((ids.shape[0], n), mask.dtype)], axis=1)
        return jax.lax.fori_loop(0, n, step, (buf, mask, key, params, temp))[0]

    return jax.jit(generate)


# -- hooks as data ---------------------------------------------------------------------------------
_DYNAMIC = object()  # marks a captured value passed to the compiled program as an argument
_EMPTY = object()  # an empty closure cell
_STATIC_SCALARS: set = set()  # hook code whose captured numbers must be static (used as sizes or flags)
_TRACER_ERRORS = (jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError,
                  jax.errors.TracerBoolConversionError, jax.errors.TracerArrayConversionError, IndexError, TypeError)


@dataclasses.dataclass(frozen=True, eq=False)
class _ById:
    """A captured value keyed by identity (unhashable objects); holds it so its id is not reused."""

    obj: Any

    def __eq__(self, other):
        return isinstance(other, _ById) and other.obj is self.obj

    def __hash__(self):
        return id(self.obj)


@dataclasses.dataclass(frozen=True)
class _HookKey:
    """The structure of a hook: its code and its non-numeric captured values (the compiled program's key);
    ``template`` is one function of that structure (not part of the key)."""

    code: Any
    n_cells: int
    static: tuple
    template: Any = dataclasses.field(compare=False, hash=False)


def _captured(fn: Callable) -> list:
    if isinstance(fn, functools.partial):
        return list(fn.args) + list(fn.keywords.values())
    cells = []
    for c in fn.__closure__ or ():
        try:
            cells.append(c.cell_contents)
        except ValueError:
            cells.append(_EMPTY)
    return cells + list(fn.__defaults__ or ())


def _is_dynamic(v, static_scalars: bool) -> bool:
    if isinstance(v, (jax.Array, np.ndarray, np.generic)):
        return np.issubdtype(v.dtype, np.number) or v.dtype == np.bool_
    return type(v) in (int, float) and not static_scalars


def _static_key(v):
    if v is _EMPTY:
        return v
    try:
        hash(v)
        return (type(v), v)
    except TypeError:
        return _ById(v)


def _split_hook(fn: Callable) -> tuple[_HookKey, tuple]:
    """``(structure, values)`` of a hook: a plain function's code and static captures, and its captured
    arrays and numbers (closure cells and defaults) as the values; a ``functools.partial``'s function and
    static arguments, and its array / number arguments as the values; any other callable is its own key."""
    if isinstance(fn, functools.partial):
        code, n, captured = ("partial", fn.func, tuple(fn.keywords)), len(fn.args), _captured(fn)
    elif isinstance(fn, types.FunctionType):
        code, n, captured = fn.__code__, len(fn.__closure__ or ()), _captured(fn)
    else:
        return _HookKey(fn, 0, (), fn), ()
    static_scalars = code in _STATIC_SCALARS
    static, values = [], []
    for v in captured:
        if _is_dynamic(v, static_scalars):
            static.append(_DYNAMIC)
            values.append(v)
        else:
            static.append(_static_key(v))
    return _HookKey(code, n, tuple(static), fn), tuple(values)


def _rebuild(key: _HookKey, values: tuple) -> Callable:
    """The hook of structure ``key`` with its captured arrays/numbers replaced by ``values`` (tracers)."""
    fn = key.template
    it = iter(values)
    if isinstance(fn, functools.partial):
        new = [next(it) if s is _DYNAMIC else v for s, v in zip(key.static, _captured(fn))]
        return functools.partial(fn.func, *new[:key.n_cells], **dict(zip(fn.keywords, new[key.n_cells:])))
    if not isinstance(fn, types.FunctionType):
        return fn
    new = [next(it) if s is _DYNAMIC else v for s, v in zip(key.static, _captured(fn))]
    cells = tuple(types.CellType() if v is _EMPTY else types.CellType(v) for v in new[:key.n_cells])
    out = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, tuple(new[key.n_cells:]) or None,
                             cells or None)
    out.__kwdefaults__ = fn.__kwdefaults__
    return out


def _run(model: Model, keep, hooks: dict, ids: np.ndarray, mask: np.ndarray | None, stop: int | None):
    """Run the compiled program of (model, names, hook structures, stop, masked) with the hooks' values as
    arguments, after checking that the kept activations fit (:func:`_check_fits`); a hook whose captured
    numbers cannot be traced (a size, a flag) is retried with them static."""
    ro = [h for h in hooks if h.split(".", 2)[-1] in READ_ONLY_HOOKS or h in READ_ONLY_HOOKS]
    if ro:
        raise GeomjaxError(f"{ro} are read-only (computed beside the forward pass, which never reads them): hook "
                           "attn.z per head or ln1 / ln2 / ln_final instead")
    iface, args = model.interface, (jnp.asarray(ids), None if mask is None else jnp.asarray(mask))
    while True:
        split = {name: _split_hook(fn) for name, fn in sorted(hooks.items())}
        keys, values = tuple((n, k) for n, (k, _) in split.items()), tuple(v for _, v in split.values())
        fn, seen = _compiled(iface, model.has_logits, keep, keys, stop)
        try:
            _check_fits(model, keep, keys, values, stop, ids.shape, mask is not None)
            out, cache = fn(model.params, *args, values)
            break
        except _TRACER_ERRORS:
            retry = {k.code for k, _ in split.values() if k.code not in _STATIC_SCALARS
                     and any(type(v) in (int, float) for v in _captured(k.template))}
            if not retry:
                raise
            _STATIC_SCALARS.update(retry)
    _check_names(seen, keep, hooks)
    return out, cache


def _keep_key(names):
    if names is None or callable(names):
        return names
    if isinstance(names, str):
        return (names,)
    return tuple(names)


def _wanted(keep, name: str) -> bool:
    if keep is None:
        return not name.endswith("attn.result")
    if callable(keep):
        return bool(keep(name))
    return any(fnmatch.fnmatchcase(name, p) for p in keep)


def _check_names(seen: set, keep, hooks: Mapping) -> None:
    bad = [h for h in hooks if h not in seen]
    if isinstance(keep, tuple):
        bad += [p for p in keep if not any(fnmatch.fnmatchcase(n, p) for n in seen)]
    if bad:
        some = ", ".join(sorted(seen, key=_order)[:14])
        raise GeomjaxError(f"no activation named {bad} in this model; names look like {some}, ... "
                           "(geomjax.analysis.lens documents them)")


_FORWARD_ORDER = ("hook_resid_pre", "ln1.scale", "ln1", "attn.q", "attn.k", "attn.v", "attn.q_rot", "attn.k_rot",
                  "attn.scores", "attn.pattern", "attn.z", "attn.result", "attn.out", "hook_resid_mid", "ln2.scale",
                  "ln2", "mlp.pre", "mlp.pre_linear", "mlp.post", "mlp.out", "hook_resid_post")
_TOP_ORDER = ("hook_embed", "hook_token_type_embed", "hook_pos_embed")


def _order(name: str):
    """Sort key putting names in forward order (embeddings, block by block, then ln_final)."""
    m = re.match(r"blocks\.(\d+)\.(.*)$", name)
    if not m:
        return (-1, _TOP_ORDER.index(name), name) if name in _TOP_ORDER else (1 << 30, 0, name)
    suffix = m.group(2)
    return (int(m.group(1)), _FORWARD_ORDER.index(suffix) if suffix in _FORWARD_ORDER else 99, name)


def _hook_name(module: HookPoint, block: re.Pattern) -> str:
    """``blocks.{l}.<hook_name>`` inside block l (``block`` matches the block's module name), else the name."""
    for part in module.path:
        m = block.match(part)
        if m:
            return f"blocks.{m.group(1)}.{module.hook_name}"
    return module.hook_name


def _forward(iface: ModelInterface, logits: bool, params, ids, hooks: Mapping[str, Callable], keep,
             seen: set | None = None, mask=None, stop: int | None = None) -> tuple[Array | None, dict[str, Array]]:
    """One traced forward with ``hooks`` applied and the ``keep`` activations returned (``seen`` collects
    the hook-point names met); out is the logits, or the last hidden state when ``logits`` is False, or None
    with ``stop`` (blocks 0..stop−1 only). ``mask`` (B, T): the padding mask (None: no padding)."""
    kept: dict[str, Array] = {}
    block = re.compile(rf"^{re.escape(iface.block_prefix)}_(\d+)$")

    def intercept(next_fun, args, kwargs, context):
        if not isinstance(context.module, HookPoint) or context.method_name != "__call__":
            return next_fun(*args, **kwargs)
        name = _hook_name(context.module, block)
        if seen is not None:
            seen.add(name)
        y = next_fun(*args, **kwargs)
        if name in hooks:
            y = hooks[name](y)
        if _wanted(keep, name):
            kept[name] = y
        return y

    with nn.intercept_methods(intercept):
        out, inter = iface.forward(params, ids, compute_logits=logits, attention_mask=mask, stop_at_layer=stop)
    if stop is not None:
        return None, kept
    return (inter.hidden_states[-1] if out is None else out), kept


@compiled_cache(maxsize=64)
def _compiled(iface: ModelInterface, logits: bool, keep, hooks: tuple, stop: int | None = None):
    """``(jit(run), seen)``: run(params, ids, mask, hook values) -> (out, {name: activation}); ``hooks`` are
    ``(name, _HookKey)`` pairs rebuilt with their traced values; ``stop`` as :func:`_forward`; ``seen``
    collects every hook-point name met while tracing (for the unknown-name check)."""
    seen: set[str] = set()

    def run(params, ids, mask, values):
        fns = {name: _rebuild(k, v) for (name, k), v in zip(hooks, values)}
        return _forward(iface, logits, params, ids, fns, keep, seen, mask, stop)

    return jax.jit(run), seen


# -- activation patching ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PatchingSweep:
    """What :func:`patching_sweep` returns.

    Attributes:
      values: (L, T) the metric of the corrupted run with ``blocks.{l}.<name>`` at position t replaced by
        the clean run's ((L, T, H) per head).
      clean, corrupted: the metric of the unpatched clean and corrupted runs (scalars).
    """

    values: Array
    clean: float
    corrupted: float

    def normalized(self) -> Array:
        """(values − corrupted) / (clean − corrupted): 1 where a patch restores the clean metric."""
        return (np.asarray(self.values) - self.corrupted) / (self.clean - self.corrupted)


def logit_diff_metric(answer: Int[Array, " B"] | int | list, wrong: Int[Array, " B"] | int | list, pos: int = -1
                      ) -> Callable:
    """``metric(logits (B, T, V)) -> scalar``: mean over the batch of logits[b, pos, answer_b] −
    logits[b, pos, wrong_b] (the indirect-object logit difference of Wang et al. 2022, §3)."""
    a, w = np.atleast_1d(np.asarray(answer, np.int32)), np.atleast_1d(np.asarray(wrong, np.int32))
    return functools.partial(_logit_diff, answer=a, wrong=w, pos=np.int32(pos))  # arrays: data of the program


def _logit_diff(logits, answer, wrong, pos):
    last = jnp.take(logits, pos, axis=1)  # (B, V)
    rows = jnp.arange(last.shape[0])
    return jnp.mean(last[rows, answer] - last[rows, wrong])


_NO_POSITION_AXIS = ("attn.scores", "attn.pattern", "ln1.scale", "ln2.scale", "attn.result")


def patching_sweep(model: Model, clean, corrupted, metric: Callable, *, name: str = "hook_resid_pre",
                   per_head: bool = False, batch_size: int | None = 16, attention_mask=None) -> PatchingSweep:
    """Activation patching over every (layer, position) of a prompt pair, as one compiled program.

    For each cell (l, t) (and head h with ``per_head``) the corrupted ids run with ``blocks.{l}.<name>``
    at position t (head h) replaced by the clean run's activation, and ``metric(out)`` is recorded
    (Meng et al. 2022, causal tracing; Wang et al. 2022, path/activation patching). The clean run, the
    L·T(·H) patched runs (``jax.lax.map`` over the cells, ``batch_size`` of them vmapped at a time)
    and the metric are one jitted program: a layer and position are arguments, so the whole sweep
    compiles once, and a new metric closure of the same code reuses it.

    Args:
      model: a :class:`Model`.
      clean, corrupted: ids (B, T) of the same shape (or texts tokenizing to the same length).
      metric: ``metric(out (B, T, V)) -> scalar`` (:func:`logit_diff_metric`).
      name: the block activation to patch: one with a position axis after the batch
        (``hook_resid_pre``, ``hook_resid_mid``, ``hook_resid_post``, ``attn.out``, ``mlp.out``, ``attn.z``,
        ``attn.q`` ..., ``mlp.post``).
      per_head: patch one head at a time (names with a head axis: ``attn.q/k/v/z``).
      batch_size: cells run together (memory ∝ batch_size forward passes); None runs them one by one.
      attention_mask: padding masks (B, T) of the prompts: one for both, or a pair (clean's, corrupted's);
        both runs see their real tokens as unpadded (a patch copies position t of the clean run to position t).

    Returns:
      :class:`PatchingSweep` with ``values`` (L, T) or (L, T, H).

    Raises:
      GeomjaxError: shapes differ, the name has no position axis or no such activation.
    """
    a, b = model._ids(clean), model._ids(corrupted)
    if a.shape != b.shape:
        raise GeomjaxError(f"clean and corrupted ids must have the same shape, got {a.shape} and {b.shape}")
    if name in _NO_POSITION_AXIS:
        raise GeomjaxError(f"{name} has no position axis after the batch; patch one of hook_resid_pre, attn.z, ...")
    pair = attention_mask if isinstance(attention_mask, tuple) else (attention_mask, attention_mask)
    masks = tuple(model._mask(m, a) for m in pair)
    if (masks[0] is None) != (masks[1] is None):
        raise GeomjaxError("attention_mask: give both prompts' masks (or one mask for both), not one and None")
    f = model.facts
    n_heads = f.n_kv_heads if name in ("attn.k", "attn.v") else f.n_heads
    grid = np.indices((f.n_layers, a.shape[1], n_heads if per_head else 1)).reshape(3, -1).T.astype(np.int32)
    n_cells = len(grid)
    if batch_size is not None:  # whole batches only (lax.map would compile the remainder a second time)
        batch_size = max(1, min(int(batch_size), n_cells))
        grid = np.concatenate([grid, np.repeat(grid[-1:], -n_cells % batch_size, axis=0)])
    mkey, mvals = _split_hook(metric)
    names = tuple(f"blocks.{l}.{name}" for l in range(f.n_layers))
    fn = _sweep_program(model.interface, model.has_logits, names, bool(per_head), mkey, batch_size)
    vals, c, k = fn(model.params, a, b, grid, mvals, masks)
    shape = (f.n_layers, a.shape[1]) + ((n_heads,) if per_head else ())
    return PatchingSweep(np.asarray(vals)[:n_cells].reshape(shape), float(c), float(k))


def _patch_at(x, src, on, pos, head):
    new = x.at[:, pos].set(src[:, pos]) if head is None else x.at[:, pos, head].set(src[:, pos, head])
    return jnp.where(on, new, x)


@compiled_cache(maxsize=32)
def _sweep_program(iface: ModelInterface, logits: bool, names: tuple, per_head: bool, mkey: _HookKey,
                   batch_size: int | None):
    def sweep(params, clean, corrupted, cells, mvals, masks):
        metric = _rebuild(mkey, mvals)
        clean_out, acts = _forward(iface, logits, params, clean, {}, names, mask=masks[0])
        missing = [n for n in names if n not in acts]
        if missing:
            raise GeomjaxError(f"no activation named {missing[0]} in this model (geomjax.analysis.lens names them)")
        if per_head and acts[names[0]].ndim != 4:
            raise GeomjaxError(f"per_head needs a (B, T, H, K) activation; {names[0]} is {acts[names[0]].shape}")
        corrupted_out, _ = _forward(iface, logits, params, corrupted, {}, (), mask=masks[1])

        def one(cell):
            head = cell[2] if per_head else None
            hooks = {n: functools.partial(_patch_at, src=acts[n], on=cell[0] == l, pos=cell[1], head=head)
                     for l, n in enumerate(names)}
            return metric(_forward(iface, logits, params, corrupted, hooks, (), mask=masks[1])[0])

        return jax.lax.map(one, cells, batch_size=batch_size), metric(clean_out), metric(corrupted_out)

    return jax.jit(sweep)


@dataclasses.dataclass(frozen=True, eq=False)
class ActivationCache(Mapping):
    """Activations of one run by name (a read-only mapping; names in the :mod:`geomjax.analysis.lens` docstring).

    Attributes:
      activations: ``{name: array}`` in forward order.
      n_layers: L.
    """

    activations: dict[str, Array]
    n_layers: int

    def __getitem__(self, name: str) -> Array:
        try:
            return self.activations[name]
        except KeyError:
            raise KeyError(f"{name!r} is not in this cache ({len(self)} activations kept; pass it in "
                           "run_with_cache(names=...))") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.activations)

    def __len__(self) -> int:
        return len(self.activations)

    def stack(self, suffix: str) -> Array:
        """``blocks.{l}.<suffix>`` for l = 0..L-1 stacked on a new leading axis: (L, ...)."""
        return jnp.stack([self[f"blocks.{l}.{suffix}"] for l in range(self.n_layers)])

    def hidden_states(self, final_norm: bool = True) -> tuple[Float[Array, "B T d"], ...]:
        """L+1 states (B, T, d): Hugging Face ``output_hidden_states`` (the last after the final norm when
        the family has one and ``final_norm``), else the residual stream before it."""
        hs = [self[f"blocks.{l}.hook_resid_pre"] for l in range(self.n_layers)]
        last = "ln_final" if final_norm and "ln_final" in self.activations else f"blocks.{self.n_layers - 1}.hook_resid_post"
        return tuple(hs) + (self[last],)

    def __repr__(self) -> str:
        names = list(self.activations)
        lines = [f"ActivationCache({len(names)} activations, {self.n_layers} layers"]
        shown = names if len(names) <= 12 else names[:10] + ["..."] + names[-1:]
        for n in shown:
            lines.append("  ..." if n == "..." else f"  {n}: {summarize(self.activations[n])}")
        return "\n".join(lines + [")"])
