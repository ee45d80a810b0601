"""Hugging Face -> geomjax conversion through the families' explicit tables.

Each family module states its ``config.json`` reader (a whitelist: every key used, checked against the
one value implemented, or ignored as not changing the inference forward pass; any other key is rejected
by name) and its weight table (every Hugging Face tensor name -> the geomjax parameter(s) it fills and the
layout change), in its :class:`~geomjax.models.family.Family` record; the pieces are in
:mod:`geomjax.models.hf_tables`. Here they run: :func:`config_from_hf` dispatches on ``model_type``
(:mod:`geomjax.models.registry`) and :func:`convert_tensors` fills the parameter tree and checks that
every parameter of the Flax model was filled exactly once with the right shape and dtype and that no
tensor was left unused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.base._checks import compiled_cache
from geomjax.errors import GeomjaxError
from geomjax.models import bert, bloom, gpt2, llama
from geomjax.models.common import HFConfig
from geomjax.models.interface import model_from_config
from geomjax.models.registry import MODEL_TYPES, family_of, family_of_model_type
from geomjax.typing import Params, PyTree, Shaped, Array

__all__ = [
    "MODEL_TYPES",
    "bert_config_from_hf",
    "bloom_config_from_hf",
    "config_from_hf",
    "convert_tensors",
    "expected_param_shapes",
    "gpt2_config_from_hf",
    "llama_config_from_hf",
    "model_from_config",
    "with_pooler",
]

# the first families' readers under their former names
gpt2_config_from_hf = gpt2.config_from_hf
bert_config_from_hf = bert.config_from_hf
llama_config_from_hf = llama.config_from_hf
bloom_config_from_hf = bloom.config_from_hf
with_pooler = bert.with_pooler


def config_from_hf(cfg: Mapping, ignore_config_keys: Iterable[str] = ()) -> HFConfig:
    """Build the config of a ``config.json`` dict with its family's reader (by ``model_type``, one of
    :data:`MODEL_TYPES`), which rejects attributes the port does not implement by name."""
    return family_of_model_type(cfg).config_from_hf(cfg, ignore_config_keys)


def _strip_prefix(tensors: Mapping[str, np.ndarray], prefix: str) -> dict[str, str]:
    """{name without the head model's prefix: the checkpoint's name} (names only: nothing is read)."""
    out: dict[str, str] = {}
    for k in tensors:
        base = k[len(prefix):] if k.startswith(prefix) else k
        if base in out:
            raise GeomjaxError(
                f"tensor {base!r} appears both with and without the {prefix!r} prefix; the "
                "checkpoint mixes two models: re-save it"
            )
        out[base] = k
    return out


def expected_param_shapes(config: HFConfig) -> PyTree[jax.ShapeDtypeStruct]:
    """Return the parameter tree of the Flax model as ``jax.ShapeDtypeStruct`` leaves (no compute).

    The tree is traced once per config (and x64 setting): loading, writing or drawing the parameters of a
    checkpoint asks for it each time, and a trace of ``init`` takes as long as a small forward's. A fresh
    copy of the nested dicts is returned, so a caller may edit it."""
    return jax.tree_util.tree_map(lambda s: s, _param_shapes(config, bool(jax.config.jax_enable_x64)))


@compiled_cache(maxsize=32)
def _param_shapes(config: HFConfig, x64: bool) -> PyTree[jax.ShapeDtypeStruct]:
    del x64  # part of the key: the dtypes eval_shape gives
    model = model_from_config(config)
    ids = np.zeros((1, 1), np.int32)
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), ids))
    return shapes["params"]


def _set(tree: dict, path: tuple[str, ...], value) -> bool:
    for p in path[:-1]:
        tree = tree.setdefault(p, {})
    if path[-1] in tree:
        return False
    tree[path[-1]] = value
    return True


def _flatten(tree: Mapping, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], object]:
    out = {}
    for k, v in tree.items():
        if isinstance(v, Mapping):
            out.update(_flatten(v, prefix + (k,)))
        else:
            out[prefix + (k,)] = v
    return out


def convert_tensors(
    tensors: Mapping[str, Shaped[Array, "..."]],
    config: HFConfig,
    *,
    dtype: str | np.dtype | None = None,
    ignore: Iterable[str] = (),
    place: Callable[[np.ndarray], Array] | None = None,
) -> Params:
    """Convert Hugging Face tensors into a geomjax parameter tree through the explicit tables.

    Accepts the prefixes Hugging Face writes for head models ("transformer." for GPT2LMHeadModel and
    BloomForCausalLM, "bert." for BertFor*, "model." for LlamaForCausalLM / MistralForCausalLM).
    A tied model's ``lm_head.weight``, when saved, must equal the token embedding; an untied one's
    fills ``lm_head/kernel``. A checkpoint of an untied family saved without its head (the base
    ``LlamaModel`` / ``GPTNeoXModel`` / ``BloomModel`` classes, as embedding models ship) converts
    to a tree without ``lm_head``: the model gives every hidden state, and asking it for logits
    raises :class:`~geomjax.errors.GeomjaxError` naming the missing head.

    Args:
      tensors: Hugging Face name -> array.
      config: the model config (GPT2Config, BertConfig, LlamaConfig or BloomConfig).
      dtype: None keeps the checkpoint's floating dtype (bfloat16 / float16 stay so; it must be
        the same for every tensor); otherwise every parameter is converted to this dtype.
      ignore: name prefixes of tensors to drop on purpose (e.g. ``("cls.",)`` for BERT's MLM/NSP
        heads, which geomjax does not implement).
      place: applied to every parameter as soon as it is converted (e.g. ``jnp.asarray``: onto the
        device). With a lazy ``tensors`` mapping (:class:`~geomjax.convert.safetensors_io.ShardedTensors`,
        which reads a tensor when it is looked up and names its dtypes in ``.dtypes``), the checkpoint
        is read, converted and placed tensor by tensor, never whole in host memory.

    Returns:
      Nested dict of NumPy arrays matching the Flax model's ``params``.

    Raises:
      GeomjaxError: missing parameters, unused tensors, wrong shapes, mixed or non-float dtypes,
        an lm_head different from the embedding of a tied model. The message lists the names.
    """
    ignore = tuple(ignore)
    fam = family_of(config)
    what = config.display_name
    names = _strip_prefix(tensors, fam.hf_prefix)
    table, buffers = fam.weight_table(config)
    parts, head = fam.parts(config), fam.head_tensor
    lm_head = names.pop(head, None) if (parts.tied and not fam.bidirectional) else None
    headless = head in table and head not in names
    if headless:  # a base checkpoint (LlamaModel, GPTNeoXModel, BloomModel): every hidden state, no logits
        del table[head]
    kept = sorted(n for n in names if n not in buffers and not n.startswith(ignore))
    dtypes = getattr(tensors, "dtypes", None)
    target = _target_dtype({n: np.dtype(dtypes[names[n]] if dtypes is not None else tensors[names[n]].dtype)
                            for n in kept if n in table}, dtype, what)
    place = place or (lambda v: v)

    params: dict = {}
    unused, dupes = [n for n in kept if n not in table], []
    for name in kept:
        if name in table:
            for path, value in table[name](tensors[names[name]], config):
                if not _set(params, path, place(np.asarray(value, dtype=target))):
                    dupes.append("/".join(path))
    _check_filled(params, table, names, unused, dupes, config, what, headless)

    if lm_head is not None:
        lm_head = tensors[lm_head]
        emb = np.asarray(params[fam.embedding]["embedding"])
        if lm_head.shape != emb.shape or not np.array_equal(lm_head.astype(target), emb):
            raise GeomjaxError(
                f"{what} checkpoint has an {head} different from its token embedding (an untied unembedding) but "
                "config.json says the embeddings are tied (tie_word_embeddings); fix config.json or the weights"
            )
    return params


def _check_filled(params, table, tensors, unused, dupes, config, what, headless: bool = False) -> dict:
    """Every parameter filled once with its shape, every table name present (``headless``: but the
    untied ``lm_head``); returns the flat tree."""
    expected = _flatten(expected_param_shapes(config))
    if headless:
        expected = {p: v for p, v in expected.items() if p[0] != "lm_head"}
    got = _flatten(params)
    missing = sorted("/".join(p) for p in expected if p not in got)
    surplus = sorted("/".join(p) for p in got if p not in expected)
    hf_missing = sorted(n for n in table if n not in tensors)
    problems = []
    if hf_missing:
        problems.append(f"missing tensors: {_clip(hf_missing)}")
    if missing:
        problems.append(f"unfilled parameters: {_clip(missing)}")
    if unused:
        hint = " (BERT task heads: pass ignore=('cls.',) to drop them)" if any(
            n.startswith("cls.") for n in unused) else ""
        problems.append(f"unused tensors: {_clip(unused)}{hint}")
    if surplus or dupes:
        problems.append(f"internal table error, extra/duplicate parameters {_clip(surplus + dupes)}")
    if problems:
        raise GeomjaxError(
            f"{what} checkpoint does not match its config.json: " + "; ".join(problems)
            + ". Use the weights saved together with this config.json"
        )
    shape_err = [
        f"{'/'.join(p)}: expected {tuple(expected[p].shape)}, got {tuple(np.shape(v))}"
        for p, v in got.items() if tuple(np.shape(v)) != tuple(expected[p].shape)
    ]
    if shape_err:
        raise GeomjaxError(f"{what} weights have wrong shapes for config.json: {_clip(shape_err)}; "
                           "the weights do not belong to this config")
    return got


def _is_float(dt) -> bool:
    return np.issubdtype(dt, np.floating) or dt == np.dtype(jnp.bfloat16)


def _target_dtype(got: Mapping[str, np.dtype], dtype, what: str) -> np.dtype:
    """The checkpoint's one floating dtype (bfloat16 included) over its used tensors ``{name: dtype}``, or the
    explicitly requested one."""
    dtypes = set(got.values())
    nonfloat = sorted(p for p, v in got.items() if not _is_float(v))
    if nonfloat:
        raise GeomjaxError(f"{what} weights must be floating point; non-float tensors: {_clip(nonfloat)}")
    if dtype is None:
        if len(dtypes) != 1:
            raise GeomjaxError(
                f"{what} weights have mixed dtypes {sorted(map(str, dtypes))}; pass dtype='float32' "
                "(--param-dtype float32) to convert them explicitly"
            )
        return dtypes.pop()
    target = np.dtype(jnp.bfloat16) if str(dtype) == "bfloat16" else np.dtype(dtype)
    if not _is_float(target):
        raise GeomjaxError(f"dtype must be a floating dtype, got {target}")
    return target


def _clip(names: list[str], n: int = 12) -> str:
    return ", ".join(names[:n]) + (f" ... ({len(names)} in all)" if len(names) > n else "")


