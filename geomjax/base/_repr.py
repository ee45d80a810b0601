"""Compact, readable reprs for geomjax's result types (one line per field, shapes not values).

``print(dec)`` of a demo-sized decomposition would otherwise dump every array element. The repr
here shows the class, then one line per field: arrays as ``f32[13,127,384]`` (a few numbers when
they have at most :data:`MAX_SHOWN` elements), tuples of arrays as ``13 × f32[2,128,384]``, other
values with their own short repr. Tracers (inside ``jit``/``vmap``) show their shape and dtype only.
Containers stay ordinary dataclasses/pytrees, so treescope and ``dataclasses.fields`` work as before.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import jax
import numpy as np

__all__ = ["compact_repr", "summarize", "with_compact_repr", "MAX_SHOWN"]

MAX_SHOWN = 6
"""Arrays with at most this many elements are printed with their values."""

_T = TypeVar("_T")


def _array_like(x: Any) -> bool:
    return isinstance(x, (np.ndarray, np.generic, jax.Array)) or isinstance(x, jax.core.Tracer)


def _short_dtype(dt) -> str:
    dt = np.dtype(dt)
    return {"f": "f", "i": "i", "u": "u", "b": "bool", "c": "c"}.get(dt.kind, dt.kind) + (
        "" if dt.kind == "b" else str(dt.itemsize * 8))


def summarize(x: Any) -> str:
    """One short line describing ``x``: ``f32[3,4]``, ``f64[2] [0.5, 1.5]``, ``3 × f32[8,8]``, ...

    Shapes: any array (NumPy, JAX, tracer), tuple/list of arrays, dict, scalar or other object.
    """
    if _array_like(x):
        shape = ",".join(str(s) for s in np.shape(x))
        head = f"{_short_dtype(x.dtype)}[{shape}]"
        if isinstance(x, jax.core.Tracer) or np.size(x) > MAX_SHOWN:
            return head
        vals = np.asarray(x).ravel()
        shown = ", ".join(f"{v:.4g}" if np.issubdtype(vals.dtype, np.floating) else str(v) for v in vals)
        return f"{head} [{shown}]" if np.ndim(x) else f"{head} {shown}"
    if isinstance(x, (tuple, list)) and x:
        parts = [summarize(v) for v in x]
        if len(set(parts)) == 1:
            return f"{len(x)} × {parts[0]}"
        text = ", ".join(parts)
        return f"({text})" if len(text) <= 100 else f"{type(x).__name__} of {len(x)}: {parts[0]}, ..."
    if isinstance(x, dict):
        keys = list(x)
        shown = ", ".join(map(str, keys[:6])) + (", ..." if len(keys) > 6 else "")
        return f"dict of {len(keys)} ({shown})"
    text = repr(x)
    return text if len(text) <= 100 else text[:97] + "..."


def compact_repr(obj: Any) -> str:
    """``ClassName(`` then ``  field: summary`` per dataclass field, then ``)``."""
    lines = [f"{type(obj).__name__}("]
    for f in dataclasses.fields(obj):
        if f.repr:
            lines.append(f"  {f.name}: {summarize(getattr(obj, f.name))}")
    lines.append(")")
    return "\n".join(lines)


def with_compact_repr(cls: type[_T]) -> type[_T]:
    """Class decorator (apply after ``@dataclass``/``@struct.dataclass``): use :func:`compact_repr`."""
    cls.__repr__ = compact_repr  # type: ignore[method-assign]
    return cls
