"""Array type aliases (jaxtyping) and the shape legend used across geomjax.

Checked at test time: pyproject's pytest addopts turn on jaxtyping's import hook for the theory
modules and the ``models``, ``train`` and ``convert`` packages with :func:`typechecker` (beartype), so every call during the tests checks its arguments and
result against these annotations (tests/unit/test_shapes.py).

Shape legend: B batch, C contexts, T positions, d model width, H heads (Hkv key/value heads), K head dim,
F MLP width, V vocab, L layers, S samples, r rank, k number of components.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import SupportsInt, Union

import jax
import numpy as np
from jaxtyping import Bool, Complex, Float, Int, PRNGKeyArray, PyTree, Real, Shaped

Array = Union[jax.Array, np.ndarray]
"""What an array annotation accepts: a JAX array (or tracer) or a NumPy array, the public dtype rule
(:mod:`geomjax.base._checks`; lists are converted by ``float64_aware(arrays=...)`` before the checked body)."""
ArrayLike = Array
Numeric = Union[jax.Array, np.ndarray, np.generic, float, int]
"""An array or a number (Python or NumPy scalar): what the elementwise formulas (``gaussian.lognormal_mean`` ...)
accept (:data:`Broadcastable`, :data:`Scalar`)."""
Broadcastable = Real[Numeric, "*#B"]
"""An argument of an elementwise formula: an array or number whose shape broadcasts with the other
such arguments (the result is ``Float[Array, "*#B"]``)."""
Scalar = Real[Numeric, ""]
"""A real number: a Python or NumPy scalar or a 0-d array (a scale, a temperature, a cosine)."""
IntSeq = Union[Sequence[SupportsInt], Int[Array, " k"]]
"""Integers given as a sequence (ints, NumPy or 0-d array integers) or a 1-d integer array: frequencies,
indices."""
DType = Union[str, type, np.dtype, None]
"""A dtype argument: a name (``"float64"``), a scalar type (``jnp.float32``), a ``np.dtype``, or None
(the default float dtype)."""
Key = PRNGKeyArray
Params = PyTree[Float[Array, "..."]]
"""A model's parameter tree (``params``, not ``{"params": params}``): nested dicts of float arrays of any
shape (the families' layouts: :mod:`geomjax.models`)."""

__all__ = [
    "Array",
    "ArrayLike",
    "Bool",
    "Broadcastable",
    "Complex",
    "DType",
    "Float",
    "Int",
    "IntSeq",
    "Key",
    "Numeric",
    "PRNGKeyArray",
    "Params",
    "PyTree",
    "Real",
    "Scalar",
    "Shaped",
    "typechecker",
]


def typechecker(fn):
    """beartype with PEP 484's numeric tower (an ``int`` is accepted where ``float`` is annotated, as
    static checkers read it): the checker that jaxtyping's hook applies in the tests
    (``--jaxtyping-packages=...,geomjax.typing.typechecker``). A named function, because jaxtyping's
    pytest option cannot parse ``beartype.beartype(conf=...)`` after several packages (it splits the
    list at the first comma once it sees a parenthesis)."""
    import beartype  # lazy: beartype is a test dependency (the `test` extra), not a runtime one

    return beartype.beartype(conf=beartype.BeartypeConf(is_pep484_tower=True))(fn)
