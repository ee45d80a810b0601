"""Checkpoints as ``.npz``: every leaf of the TrainState under its path, plus config and step.

Format (``geomjax-npz-1``): one array per leaf, keyed by its pytree path (``params/block_0/attn/
q/kernel``, ``opt_state/1/0/mu/...``, ``step``, ``rng``); PRNG keys are stored as their raw
``key_data``; the entry ``__meta__`` holds JSON with the format, step and the run's config.
Writing is atomic (temporary file, then ``os.replace``). Restoring needs a template state of the
same structure (built from the config) and checks every leaf's presence, shape and dtype, so a
checkpoint of another model shape raises an error naming the mismatched parameter. Values are
restored bit-for-bit.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.base._checks import to_device
from geomjax.base.io import to_jsonable
from geomjax.typing import Array, PyTree, Shaped

__all__ = ["checkpoint_path", "config_jsonable", "latest_checkpoint", "list_checkpoints", "load_checkpoint", "save_checkpoint"]

FORMAT = "geomjax-npz-1"
_NAME = re.compile(r"^ckpt_(\d{8})\.npz$")


def _key_str(k) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def _path(path) -> str:
    return "/".join(_key_str(k) for k in path)


def _is_key(x) -> bool:
    return hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def config_jsonable(config: Any) -> Any:
    """A config as stored in checkpoint and run metadata: :func:`geomjax.base.io.to_jsonable` with the
    outermost dataclass tagged ``"__class__"`` (the loaders rebuild it from the tag)."""
    return to_jsonable(config, class_tag=True)


def checkpoint_path(ckpt_dir: str | os.PathLike, step: int) -> Path:
    """``ckpt_dir/ckpt_{step:08d}.npz``."""
    return Path(ckpt_dir) / f"ckpt_{int(step):08d}.npz"


def list_checkpoints(ckpt_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """Checkpoints in a folder as sorted ``(step, path)`` pairs (empty if the folder is missing)."""
    d = Path(ckpt_dir)
    if not d.is_dir():
        return []
    out = [(int(m.group(1)), p) for p in d.iterdir() if (m := _NAME.match(p.name))]
    return sorted(out)


def latest_checkpoint(ckpt_dir: str | os.PathLike) -> Path | None:
    """Path of the highest-step checkpoint, or None."""
    cks = list_checkpoints(ckpt_dir)
    return cks[-1][1] if cks else None


def save_checkpoint(ckpt_dir: str | os.PathLike, state: PyTree[Shaped[Array, "..."]], config: Any = None, *,
                    keep: int | None = None) -> Path:
    """Write ``state`` (any pytree with a scalar ``step`` leaf/attribute) to ``ckpt_{step}.npz``.

    Args:
      ckpt_dir: folder (created if needed).
      state: a :class:`~geomjax.train.state.TrainState` (or any pytree of arrays).
      config: a (nested) dataclass / dict stored as JSON metadata.
      keep: keep only the newest ``keep`` checkpoints (None: keep all).

    Returns:
      The written path.
    """
    step = int(jax.device_get(state.step))
    d = Path(ckpt_dir)
    d.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        name = _path(path)
        if name == "__meta__":
            raise ValueError("a state leaf may not be named '__meta__'")
        arrays[name] = np.asarray(jax.device_get(jax.random.key_data(leaf) if _is_key(leaf) else leaf))
    meta = {"format": FORMAT, "step": step, "config": config_jsonable(config)}
    arrays["__meta__"] = np.asarray(json.dumps(meta))
    out = checkpoint_path(d, step)
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
    os.replace(tmp, out)
    if keep is not None:
        for _, p in list_checkpoints(d)[:-keep]:
            p.unlink(missing_ok=True)
    return out


def load_checkpoint(path: str | os.PathLike, template: PyTree[Shaped[Array, "..."]]
                    ) -> tuple[PyTree[Shaped[Array, "..."]], dict]:
    """Restore a checkpoint into the structure of ``template`` (checks names, shapes and dtypes).

    Args:
      path: a ``.npz`` written by :func:`save_checkpoint`.
      template: a state of the target structure (e.g. a freshly initialised TrainState).

    Returns:
      (restored state with NumPy-backed JAX arrays, metadata dict with ``step`` and ``config``).

    Raises:
      FileNotFoundError: missing file. ValueError: corrupted file, missing/extra entries, or a
        parameter whose shape or dtype differs (named, with both shapes and the fix).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"checkpoint {str(p)!r} does not exist")
    try:
        # the file is opened here, so it is closed even when np.load fails on a corrupted file
        # (numpy 2.0 leaves its own handle open then: a ResourceWarning, an error in the tests)
        with open(p, "rb") as f, np.load(f, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except Exception as e:  # zipfile.BadZipFile, EOFError, ValueError ...
        raise ValueError(f"checkpoint {str(p)!r} is corrupted or not a geomjax .npz ({type(e).__name__}: {e}); "
                         "delete it and resume from an earlier one") from None
    try:
        meta = json.loads(str(data.pop("__meta__")))
    except KeyError:
        raise ValueError(f"checkpoint {str(p)!r} has no __meta__ entry; it was not written by geomjax") from None
    if meta.get("format") != FORMAT:
        raise ValueError(f"checkpoint {str(p)!r} has format {meta.get('format')!r}, expected {FORMAT!r}")
    leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    names = [_path(pth) for pth, _ in leaves]
    missing = [n for n in names if n not in data]
    extra = sorted(set(data) - set(names))
    hint = (f"the checkpoint was written by another model/optimizer configuration (its config: "
            f"{json.dumps(meta.get('config'))[:400]}); restore it with that configuration or start a "
            "fresh run directory")
    if missing or extra:
        raise ValueError(f"checkpoint {str(p)!r} does not match the model: missing entries {missing[:8]}, "
                         f"unexpected entries {extra[:8]}; {hint}")
    out = []
    for (pth, leaf), name in zip(leaves, names):
        arr = data[name]
        if _is_key(leaf):
            want_shape = jax.random.key_data(leaf).shape
            if arr.shape != want_shape:
                raise ValueError(f"checkpoint entry {name!r} (PRNG key data) has shape {arr.shape}, expected {want_shape}")
            out.append(jax.random.wrap_key_data(jnp.asarray(arr), impl=jax.random.key_impl(leaf)))
            continue
        want_shape, want_dtype = tuple(np.shape(leaf)), np.dtype(leaf.dtype)
        if arr.shape != want_shape:
            raise ValueError(f"checkpoint parameter {name!r} has shape {arr.shape} but the model expects "
                             f"{want_shape}; {hint}")
        if arr.dtype != want_dtype:
            raise ValueError(f"checkpoint parameter {name!r} has dtype {arr.dtype} but the model expects "
                             f"{want_dtype}; {hint}")
        out.append(to_device(arr))
    return jax.tree_util.tree_unflatten(treedef, out), meta
