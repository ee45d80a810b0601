"""Input checks shared across geomjax, and the one dtype rule of the public API.

**Dtype rule.** Public numerical functions accept JAX arrays, NumPy arrays of any float dtype and
(nested) Python lists, and compute in the input's dtype: a float64 NumPy array or a Python list of
floats (NumPy's float64) is computed in float64, with JAX's float64 switched on locally
(``jax.enable_x64(True)`` around the call, :func:`float64_aware`) even when it is globally off, so
nothing is silently cast to float32 and results come back float64. Pass ``np.float32`` arrays for
float32 speed. Streaming accumulators take their dtype explicitly (``decompose_stream(...,
accum_dtype=)``). Inside a function that is not float64-aware, a float64 array while x64 is off raises
(:func:`check_no_silent_float64`) rather than being downcast.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np


def is_concrete(x) -> bool:
    """True unless ``x`` is a tracer (inside jit/vmap, where values cannot be inspected)."""
    return not isinstance(x, jax.core.Tracer)


def check_no_silent_float64(dtype, where: str, what: str = "array") -> None:
    """Raise TypeError if a float64 ``what`` would be cast to float32 because JAX x64 is off."""
    if np.dtype(dtype) == np.float64 and not jax.config.jax_enable_x64:
        raise TypeError(
            f"{where}: {what} is float64 but JAX float64 is disabled, so it would be silently "
            "cast to float32; pass float32, or run under `with jax.enable_x64(True):` "
            "(or jax.config.update('jax_enable_x64', True))"
        )


def as_real_array(x, where: str, what: str = "array") -> jax.Array:
    """A real (floating or integer) array as a JAX floating array; integers become the default
    float dtype, float64 requires x64 (:func:`check_no_silent_float64`)."""
    dt = np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype
    if not (np.issubdtype(dt, np.floating) or np.issubdtype(dt, np.integer)):
        raise TypeError(f"{where}: {what} must be a real array, got dtype {dt}")
    check_no_silent_float64(dt, where, what)
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    return x


_F = TypeVar("_F", bound=Callable[..., Any])


def has_float64(a: Any, _in_list: bool = False) -> bool:
    """True if ``a`` is a float64 array, or a (nested) list/tuple holding one or a Python float."""
    if isinstance(a, (list, tuple)):
        return any(has_float64(b, True) for b in a)
    if _in_list and isinstance(a, float):
        return True
    dt = getattr(a, "dtype", None)
    return dt is not None and np.dtype(dt) == np.float64


def x64_if_float64(*arrays) -> contextlib.AbstractContextManager:
    """``jax.enable_x64(True)`` when x64 is off and one of ``arrays`` is float64 (:func:`has_float64`),
    else a no-op context: the module's dtype rule for functions whose inputs arrive lazily."""
    if not jax.config.jax_enable_x64 and any(has_float64(a) for a in arrays):
        return jax.enable_x64(True)
    return contextlib.nullcontext()


def float64_aware(fn: _F) -> _F:
    """Decorator applying the dtype rule: ``fn`` runs under ``jax.enable_x64(True)`` when an argument
    is float64 (a NumPy float64 array or a Python list of floats), so it is computed in float64."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with x64_if_float64(*args, *kwargs.values()):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
