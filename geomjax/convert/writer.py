"""geomjax -> Hugging Face: write a checkpoint (``config.json`` + ``model.safetensors``) that transformers and
:func:`geomjax.convert.load_pretrained` read, without PyTorch.

The families' weight tables run backwards: every :class:`~geomjax.models.hf_tables.Transform` is a pure
reshape / transpose / slice of its Hugging Face tensor and states that tensor's shape, so applying it to the
index array ``arange(N).reshape(shape)`` says which Hugging Face element every parameter element came from;
scattering the parameters back through those indices is the exact inverse (each element written once,
checked). Guides and tests build tiny random checkpoints with it (:func:`random_params`), and only the
comparisons against transformers need torch::

    cfg = {"model_type": "gpt_neox", "vocab_size": 64, "hidden_size": 32, ...}    # a config.json
    params = gj.convert.random_params(gj.convert.config_from_hf(cfg), seed=0)
    gj.convert.save_checkpoint("tiny-pythia", cfg, params)
    model, params2 = gj.convert.load_pretrained("tiny-pythia")                   # params2 == params
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import jax
import numpy as np
from safetensors.numpy import save_file

from geomjax.convert.tables import config_from_hf, expected_param_shapes
from geomjax.errors import GeomjaxError
from geomjax.models.common import HFConfig
from geomjax.models.registry import family_of
from geomjax.typing import Params

__all__ = ["hf_tensors", "random_params", "save_checkpoint"]


def _flat(tree: Mapping, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], object]:
    out = {}
    for k, v in tree.items():
        out.update(_flat(v, prefix + (k,)) if isinstance(v, Mapping) else {prefix + (k,): v})
    return out


def hf_tensors(params: Params, config: HFConfig) -> dict[str, np.ndarray]:
    """The Hugging Face tensors (name -> array, with the head model's prefix) of a geomjax parameter tree: the
    inverse of :func:`geomjax.convert.convert_tensors` (a base tree without its untied ``lm_head`` gives a
    base checkpoint; a tied read-out is not written, as transformers saves it).

    Raises:
      GeomjaxError: the tree does not have the config's parameters (a missing, extra or misshapen one).
    """
    fam = family_of(config)
    want = {p: tuple(s.shape) for p, s in _flat(expected_param_shapes(config)).items()}
    got = {p: np.asarray(v) for p, v in _flat(params).items()}
    table, _ = fam.weight_table(config)
    if fam.head_tensor in table and ("lm_head", "kernel") not in got:  # a base model
        del table[fam.head_tensor]
        want = {p: s for p, s in want.items() if p[0] != "lm_head"}
    bad = sorted("/".join(p) for p in set(want) ^ set(got)) + sorted(
        f"{'/'.join(p)} {got[p].shape} (expected {s})" for p, s in want.items() if p in got and got[p].shape != s)
    if bad:
        raise GeomjaxError(f"the parameters do not match the {config.display_name} config: {', '.join(bad[:8])}")
    out, written = {}, {p: np.zeros(s, np.int32) for p, s in want.items()}
    for name, t in table.items():
        shape = tuple(int(n) for n in t.shape(config, name, lambda p: want[p]))
        flat = np.full(int(np.prod(shape)), np.nan, got[next(iter(got))].dtype)
        for path, index in t(np.arange(flat.size, dtype=np.float64).reshape(shape), config):
            flat[np.asarray(index).astype(np.int64).ravel()] = got[path].ravel()
            written[path] += 1
        key = name if name == fam.head_tensor or fam.bidirectional else fam.hf_prefix + name
        out[key] = flat.reshape(shape)
    twice = sorted("/".join(p) for p, n in written.items() if np.any(n != 1))
    if twice:
        raise GeomjaxError(f"internal table error: {twice[:8]} not written exactly once")
    return out


def save_checkpoint(directory: str | os.PathLike, config_json: Mapping, params: Params) -> Path:
    """Write ``config.json`` (``config_json`` as given, after reading it as geomjax would) and ``model.safetensors``
    (:func:`hf_tensors`) into ``directory`` (created); returns its path. transformers' ``from_pretrained`` and
    :func:`geomjax.convert.load_pretrained` read it.

    Raises:
      GeomjaxError: a config geomjax does not port, parameters that do not match it (before any file is written).
    """
    config = config_from_hf(config_json)
    tensors = hf_tensors(params, config)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(dict(config_json), indent=2, sort_keys=True) + "\n")
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(d / "model.safetensors"),
              metadata={"format": "pt"})
    return d


def random_params(config: HFConfig, seed: int = 0, *, std: float = 0.2, head: bool = True) -> Params:
    """Random parameters for ``config`` (float32 NumPy): every norm gain offset + 1 ± ``std`` (Gemma's stored w
    around 0, its gain 1 + w around 1), everything else N(0, std²); ``head=False`` drops an untied ``lm_head``
    (a base checkpoint). A random model's numbers mean nothing; tests and guides use it to exercise the code."""
    offset = family_of(config).parts(config).norm_offset
    rng = np.random.default_rng(seed)

    def draw(path, s):
        noise = rng.standard_normal(s.shape).astype(np.float32) * std
        return noise + (1.0 - offset if path[-1].key == "scale" else 0.0)

    params = jax.tree_util.tree_map_with_path(draw, expected_param_shapes(config))
    return params if head else {k: v for k, v in params.items() if k != "lm_head"}
