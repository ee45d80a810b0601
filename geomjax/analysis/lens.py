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

Activation names (``l`` = block index, B batch, T tokens, d width, H query heads, H_kv key/value
heads, K head width; every family has the same names, recorded by the identity modules
:class:`geomjax.models.common.HookPoint` inside the ported models, so the forward pass and its
``transformers`` parity are the ones of the model itself)::

    blocks.{l}.hook_resid_pre     (B, T, d)      residual stream entering block l = Hugging Face
                                                 hidden_states[l]
    blocks.{l}.ln1                (B, T, d)      the attention input norm_1(h) (pre-norm families)
    blocks.{l}.attn.q             (B, T, H, K)   x W_q + b_q (before the q norm and rotation of rotary families)
    blocks.{l}.attn.k, .attn.v    (B, T, H_kv, K)
    blocks.{l}.attn.q_rot, .k_rot (B, T, H|H_kv, K)  normed (Qwen 3, Gemma 3) and rotated queries / keys
                                                 (rotary families: Llama, Mistral, GPT-NeoX, Qwen, Gemma)
    blocks.{l}.attn.scores        (B, H, T, T)   scaled scores (+ ALiBi bias; Gemma 2: soft-capped) with masked
                                                 entries set to the dtype minimum: what the softmax reads
    blocks.{l}.attn.pattern       (B, H, T, T)   attention probabilities (rows sum to one)
    blocks.{l}.attn.z             (B, T, H, K)   pattern @ v per head, before W_o
    blocks.{l}.attn.out           (B, T, d)      sum_h z_h W_o[h] + b_o (Gemma 2/3: after its output norm)
    blocks.{l}.hook_resid_mid     (B, T, d)      h + attn.out (BERT: its LayerNorm of that)
    blocks.{l}.ln2                (B, T, d)      the MLP input norm_2 (pre-norm families)
    blocks.{l}.mlp.out            (B, T, d)      MLP output (Gemma 2/3: after its output norm)
    blocks.{l}.hook_resid_post    (B, T, d)      block output = hidden_states[l + 1] (residual)
    ln_final                      (B, T, d)      final norm (GPT-2 ln_f, Llama / Qwen / Gemma norm, BLOOM ln_f,
                                                 GPT-NeoX final_layer_norm)

Post-LN BERT has no ``ln1``/``ln2`` (its ``hook_resid_mid``/``hook_resid_post`` are the LayerNorm
outputs) and no ``ln_final``; GPT-NeoX with its parallel residual (every Pythia) has no ``hook_resid_mid``
(attention and MLP both read ``hook_resid_pre``); the toy models of ``geomjax train`` have the names of their layer-norm
placement (pre: as GPT-2; post: as BERT; none: no norms) and no ``mlp.out`` when attention-only. A
hook ``fn(x) -> x`` replaces the activation of that name in the forward pass (patching, ablation);
everything downstream sees the replacement.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import os
import re
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
from geomjax.models.common import HookPoint
from geomjax.models.interface import ModelInterface, model_interface
from geomjax.train.toy_run import load_toy_run
from geomjax.typing import Array, Float, Int

__all__ = ["ActivationCache", "CacheSize", "Model", "cache_size", "load"]

_BLOCK = re.compile(r"^(?:h|layer|layers|block)_(\d+)$")


def load(name: str | os.PathLike, *, dtype: str | None = None) -> Model:
    """Load a model by name with its own tokenizer (the one loader of geomjax and its CLI).

    Args:
      name: ``"minilm"`` (the bundled all-MiniLM-L6-v2), a Hugging Face checkpoint directory, cache
        entry or repo id (``"gpt2"``, ``"org/name"``: from the local cache, else downloaded unless
        offline), or ``"toy:RUN_DIR"`` (a run of ``geomjax train``).
      dtype: parameter dtype (None keeps the checkpoint's; e.g. ``"float32"``).

    Returns:
      :class:`Model` holding the module (or ToyRun), parameters and tokenizer.

    Raises:
      GeomjaxError / FileNotFoundError: as :func:`geomjax.convert.load_pretrained` and
        :func:`geomjax.train.load_toy_run` (unknown name, missing files, unsupported config);
        ValueError: the tokenizer's ids do not fit the model's vocabulary.

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
    if name.startswith("toy:"):
        run = load_toy_run(name[4:])
        return Model(run, run.params, run.tokenizer, name, Path(name[4:]))
    path = minilm_path() if name == "minilm" else resolve_checkpoint(name)
    module, params = load_pretrained(path, dtype=dtype)
    tok = model_tokenizer(path, module.config)
    check_tokenizer(tok, module.config)
    return Model(module, params, tok, name, Path(path))


@dataclasses.dataclass(frozen=True, eq=False)
class Model:
    """A loaded model: module, parameters, tokenizer (what :func:`load` returns).

    Attributes:
      model: the Flax module (GPT2, Bert, Llama, Bloom) or a ToyRun.
      params: the parameter tree (``model.apply({"params": params}, ids)``).
      tokenizer: the model's own tokenizer (TextTokenizer; a toy run's CharTokenizer).
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

    def __repr__(self) -> str:
        f = self.facts
        n = sum(int(np.size(x)) for x in jax.tree.leaves(self.params))
        dt = {str(x.dtype) for x in jax.tree.leaves(self.params)}
        return (f"Model({self.name!r}: {f.family}, L={f.n_layers}, d={f.d_model}, H={f.n_heads}"
                f"{'' if f.n_kv_heads == f.n_heads else f' (H_kv={f.n_kv_heads})'}, {n:,} params "
                f"{'/'.join(sorted(dt))}, tokenizer {getattr(self.tokenizer, 'name', type(self.tokenizer).__name__)})")

    # -- tokens ----------------------------------------------------------------------------
    def to_tokens(self, text: str, *, special_tokens: bool = True) -> Int[Array, "1 T"]:
        """Token ids (1, T) int32 of one text; ``special_tokens`` adds what the family's tokenizer adds by
        default: [CLS] ... [SEP] for BERT, BOS for Llama / Mistral, nothing for GPT-2, BLOOM and toys."""
        if not isinstance(text, str):
            raise GeomjaxError(f"to_tokens takes one string, got {type(text).__name__}; "
                               "for several texts call it per text")
        fam = self.facts.family
        if fam == "toy":
            return np.asarray(self.tokenizer.encode(text), np.int32)[None]
        specials = special_tokens and self.interface.family.tokenizer_specials
        ids = self.tokenizer.encode(text, add_special_tokens=specials)
        bos = self.facts.bos_token_id
        if special_tokens and bos is not None and (ids.size == 0 or ids[0] != bos):
            ids = np.concatenate([np.asarray([bos], np.int32), ids])
        return np.asarray(ids, np.int32)[None]

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
        """The token strings of a text or ids (T,) -> list; (B, T) -> one list per row."""
        ids = self._ids(text_or_ids)
        if self.facts.family == "toy":
            rows = [[self.tokenizer.chars[i] for i in row] for row in ids.tolist()]
        else:
            rows = [[self.tokenizer.backend.id_to_token(int(i)) for i in row] for row in ids]
        squeeze = isinstance(text_or_ids, str) or np.ndim(text_or_ids) == 1
        return rows[0] if squeeze else rows

    def to_string(self, ids) -> str:
        """Decode ids (T,) back to text (special tokens kept)."""
        ids = np.asarray(ids).reshape(-1)
        if self.facts.family == "toy":
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
          names: None keeps every activation; a name or ``fnmatch`` pattern (``"blocks.*.attn.pattern"``)
            or a list of them; or a predicate ``name -> bool``. Only what is kept leaves the
            compiled function (XLA drops the rest).
          hooks: ``{name: fn(x) -> x}`` replacing activations (as :meth:`run_with_hooks`).
          attention_mask: (B, T) 1 for real tokens, 0 for padding (left or right): every activation at a
            real token equals the unpadded sequence's (position ids count real tokens; padded keys are
            masked); activations at padded positions are meaningless.
          stop_at_layer: run blocks 0..stop_at_layer−1 only (the activations of later blocks, the final
            norm and the output are not computed; ``out`` is None).

        Returns:
          ``(out, cache)``: out is the logits (B, T, V) (BERT: the last hidden state (B, T, d)) and cache
          an :class:`ActivationCache`. Compiled once per (model, names, hooks, stop_at_layer) and input shape.

        Raises:
          GeomjaxError: a requested name or hook name matches no activation of this model; a bad mask or
            stop_at_layer; the kept activations do not fit the device's free memory (:func:`cache_size`,
            checked before the run).
        """
        ids = self._ids(text_or_ids)
        mask = self._mask(attention_mask, ids)
        stop = _check_stop(stop_at_layer, self.facts.n_layers)
        keep = _keep_key(names)
        hooks = tuple(sorted(dict(hooks or {}).items(), key=lambda kv: kv[0]))
        fn, seen = _compiled(self.interface, keep, hooks, stop)
        _check_fits(self, keep, hooks, stop, ids.shape, mask is not None)
        out, cache = fn(self.params, jnp.asarray(ids), None if mask is None else jnp.asarray(mask))
        _check_names(seen, keep, dict(hooks))
        n = self.facts.n_layers if stop is None else stop
        return out, ActivationCache(dict(sorted(cache.items(), key=lambda kv: _order(kv[0]))), n)

    def run_with_hooks(self, text_or_ids, hooks: Mapping[str, Callable], *, attention_mask=None
                       ) -> Float[Array, "B T V"]:
        """Run with activations replaced: ``hooks = {name: fn(x) -> x}`` (pure functions, traced under
        ``jit``; e.g. ``lambda z: z.at[:, :, h].set(0)`` on ``blocks.{l}.attn.z`` zero-ablates head h).
        Returns the output (logits; BERT: last hidden state). Reuse the same function objects to reuse the
        compilation. ``attention_mask``: as :meth:`run_with_cache`."""
        return self.run_with_cache(text_or_ids, names=(), hooks=hooks, attention_mask=attention_mask)[0]


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
    return _estimate(model.interface, model.params, _keep_key(names), (), stop, shape, False)


def _check_stop(stop_at_layer, n_layers: int) -> int | None:
    if stop_at_layer is None:
        return None
    if isinstance(stop_at_layer, bool) or not isinstance(stop_at_layer, (int, np.integer)) or not (
            0 <= stop_at_layer <= n_layers):
        raise GeomjaxError(f"stop_at_layer must be an int in [0, {n_layers}] (the blocks to run), got {stop_at_layer!r}")
    return int(stop_at_layer)


def _estimate(iface, params, keep, hooks: tuple, stop, shape: tuple[int, int], masked: bool) -> CacheSize:
    fn, _ = _compiled(iface, keep, hooks, stop)
    ids = jax.ShapeDtypeStruct(shape, jnp.int32)
    _, cache = jax.eval_shape(fn, params, ids, ids if masked else None)
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


def _check_fits(model: Model, keep, hooks: tuple, stop, shape, masked: bool) -> None:
    """One-line GeomjaxError before a run whose kept activations cannot fit the device's free memory."""
    free = _free_bytes()
    key = (keep, hooks, stop, tuple(shape), masked)
    if key not in model._sizes:  # one trace per run signature, as the compilation
        model._sizes[key] = _estimate(model.interface, model.params, keep, hooks, stop, shape, masked)
    size = model._sizes[key]
    if free is not None and size.total > free:
        raise GeomjaxError(f"the activation cache would take {_human(size.total)} but the device has {_human(free)} "
                           "free; keep fewer names (names=...), stop earlier (stop_at_layer=...) or run a smaller "
                           "batch (geomjax.analysis.lens.cache_size estimates it)")


def _keep_key(names):
    if names is None or callable(names):
        return names
    if isinstance(names, str):
        return (names,)
    return tuple(names)


def _wanted(keep, name: str) -> bool:
    if keep is None:
        return True
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


_FORWARD_ORDER = ("hook_resid_pre", "ln1", "attn.q", "attn.k", "attn.v", "attn.q_rot", "attn.k_rot", "attn.scores",
                  "attn.pattern", "attn.z", "attn.out", "hook_resid_mid", "ln2", "mlp.out", "hook_resid_post")


def _order(name: str):
    """Sort key putting names in forward order (block by block, then ln_final)."""
    m = re.match(r"blocks\.(\d+)\.(.*)$", name)
    if not m:
        return (1 << 30, 0, name)
    suffix = m.group(2)
    return (int(m.group(1)), _FORWARD_ORDER.index(suffix) if suffix in _FORWARD_ORDER else 99, name)


def _hook_name(module: HookPoint) -> str:
    for part in module.path:
        m = _BLOCK.match(part)
        if m:
            return f"blocks.{m.group(1)}.{module.hook_name}"
    return module.hook_name


@compiled_cache(maxsize=64)
def _compiled(iface: ModelInterface, keep, hooks: tuple, stop_at_layer: int | None = None):
    """``(jit(run), seen)``: run(params, ids, mask) -> (out, {name: activation}); ``seen`` collects every
    hook-point name met while tracing (for the unknown-name check)."""
    hook_fns = dict(hooks)
    seen: set[str] = set()

    def intercept(next_fun, args, kwargs, context):
        if not isinstance(context.module, HookPoint) or context.method_name != "__call__":
            return next_fun(*args, **kwargs)
        name = _hook_name(context.module)
        seen.add(name)
        y = next_fun(*args, **kwargs)
        if name in hook_fns:
            y = hook_fns[name](y)
        if _wanted(keep, name):
            kept[name] = y
        return y

    kept: dict[str, Array] = {}

    def run(params, ids, mask):
        kept.clear()
        with nn.intercept_methods(intercept):
            out, _ = iface.forward(params, ids, attention_mask=mask, stop_at_layer=stop_at_layer)
        return out, dict(kept)

    return jax.jit(run), seen


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
