"""Formatting shared by the claims modules: the one JSON rule, short numbers, Markdown escaping, summaries."""

from __future__ import annotations

import jax
import numpy as np

from geomjax.base.io import to_jsonable


def _jsonable(x):
    """claims.json values under the one JSON rule (:func:`geomjax.base.io.to_jsonable`); other objects as their repr."""
    return to_jsonable(x, unknown=repr)


def _fmt(x) -> str:
    if x is None:
        return "—"
    if isinstance(x, np.ndarray):
        x = x.reshape(-1).tolist() if x.size != 1 else float(x.reshape(()))
    if isinstance(x, (list, tuple)):
        if len(x) > 4:
            return "[" + ", ".join(_fmt(v) for v in x[:3]) + f", … ({len(x)} values)]"
        return "[" + ", ".join(_fmt(v) for v in x) + "]"
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def _md_escape(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _summary(x):
    """A float if size 1, else a float64 array (:meth:`~geomjax.claims.claim.ClaimResult.to_dict` makes lists of it)."""
    a = np.array(x, dtype=float)
    return float(a.reshape(())) if a.size == 1 else a


def _flat_tree(t) -> np.ndarray:
    return np.concatenate([np.asarray(l, dtype=float).reshape(-1) for l in jax.tree_util.tree_leaves(t)])
