"""The one JSON rule of geomjax: how results, configs and metrics become JSON and come back.

:func:`to_jsonable` turns dataclasses, mappings, sequences, paths, NumPy/JAX arrays and scalars into
plain JSON values. Non-finite floats become the strings ``"NaN"``, ``"Infinity"`` and
``"-Infinity"`` (JavaScript's spelling), so every file geomjax writes is strict JSON
(``json.dumps(..., allow_nan=False)`` succeeds); :func:`from_json_number` reads them back, and also
the spellings older files used (``"nan"``, ``"inf"``, ``"-inf"``: claims.json before this rule; a
bare ``NaN`` literal: checkpoint metadata before it, which Python's ``json`` reads as a float).
Used by ``report`` (metrics.json, report.json), ``claims.registry`` (claims.json) and
``train.checkpoint`` (checkpoint and run metadata).

:func:`cache_root` is where geomjax keeps what it writes outside a run directory.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["NONFINITE", "SCHEDULE_KEY", "cache_root", "dumps", "from_json_number", "to_jsonable"]

NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
"""The strings non-finite floats are written as, and their values."""

SCHEDULE_KEY = "effective_schedule"
"""The ``config.json`` entry (of :func:`geomjax.train.fit` and of a report run directory) holding the
effective learning-rate schedule of what was trained (issue 37)."""

_LEGACY = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _float(f: float) -> float | str:
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    return f


def to_jsonable(x: Any, *, class_tag: bool = False, unknown: Callable[[Any], Any] | None = None) -> Any:
    """``x`` as plain JSON values under the one NaN rule (module docstring).

    Args:
      x: dataclass, mapping, list/tuple, Path, array (NumPy, JAX or anything with ``__array__``),
        NumPy/Python scalar, str, bool or None (nested freely).
      class_tag: the outermost dataclass gets a ``"__class__": type name`` entry first (checkpoint
        and run metadata, where the loader rebuilds the config from it); nested ones do not.
      unknown: applied to any other object (e.g. ``repr``); default: returned unchanged (so
        ``json.dumps`` then rejects it).
    """
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        body = {f.name: to_jsonable(getattr(x, f.name), unknown=unknown) for f in dataclasses.fields(x)}
        return ({"__class__": type(x).__name__} | body) if class_tag else body
    if isinstance(x, Mapping):
        return {str(k): to_jsonable(v, unknown=unknown) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v, unknown=unknown) for v in x]
    if x is None or isinstance(x, (str, bool)):
        return x
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, (int, np.integer)) and not isinstance(x, np.bool_):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return _float(float(x))
    if isinstance(x, np.bool_):
        return bool(x)
    if hasattr(x, "__array__") and not isinstance(x, bytes):
        a = np.asarray(x)
        return to_jsonable(a.item() if a.ndim == 0 else a.tolist(), unknown=unknown)
    return x if unknown is None else unknown(x)


def dumps(x: Any, **kwargs) -> str:
    """``json.dumps(to_jsonable(x), allow_nan=False, **kwargs)``: strict JSON under the one rule."""
    return json.dumps(to_jsonable(x), allow_nan=False, **kwargs)


def from_json_number(v: Any) -> Any:
    """A number as stored by :func:`to_jsonable` (or an older file) back as a float: ``"NaN"``,
    ``"Infinity"``, ``"-Infinity"`` and the legacy ``"nan"``, ``"inf"``, ``"-inf"`` become floats;
    lists are converted element-wise; anything else is returned unchanged."""
    if isinstance(v, str):
        return NONFINITE.get(v, _LEGACY.get(v, v))
    if isinstance(v, list):
        return [from_json_number(e) for e in v]
    return v


def cache_root() -> Path:
    """Root of geomjax's user caches: ``$GEOMJAX_CACHE``, else ``~/.cache/geomjax`` (compiled programs
    in ``jax/``, tokenized corpora in ``tokens/``, the clock claims' trained runs in ``grokking/``)."""
    return Path(os.environ.get("GEOMJAX_CACHE") or Path.home() / ".cache" / "geomjax")
