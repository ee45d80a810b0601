"""Input checks shared across geomjax: nothing is silently cast to a lower precision.

JAX with float64 disabled (its default) turns a float64 NumPy array into float32 without a word;
every public numerical function that accepts arrays routes them through these checks instead.
"""

from __future__ import annotations

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
