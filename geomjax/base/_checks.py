"""The numerics policy of geomjax: input validation, the float64 context, matmul precision, and the
registry of compiled-program caches. Every theory module takes these from here, nowhere else.

**Dtype rule (the public API).** Public numerical functions accept JAX arrays, NumPy arrays of any
float dtype and (nested) Python lists, and compute in the input's dtype: a float64 NumPy array or a
Python list of floats (NumPy's float64) is computed in float64, with JAX's float64 switched on
locally (:func:`x64_context` around the call, applied by the :func:`float64_aware` decorator) even
when it is globally off, so nothing is silently cast to float32 and results come back float64. Pass
``np.float32`` arrays for float32 speed. Where the computation dtype is not the input's, it is an
explicit argument (``decompose_stream(..., accum_dtype=)``, ``montecarlo.estimate(dtype=)``), and
the same context switches float64 on for it. Inside a function that is not float64-aware, a float64
array while x64 is off raises (:func:`check_no_silent_float64`) rather than being downcast.

**Validation.** Wrong rank, shape or dtype raises :class:`~geomjax.errors.GeomjaxError` (a
``ValueError``; dtype problems raise :class:`~geomjax.errors.GeomjaxTypeError`, also a
``TypeError``) naming the argument, the expected shape and what was given. Value checks (NaN/Inf,
zero rows) need concrete values: under ``jit``/``vmap``/``grad`` they are skipped.

**Matmul precision.** Statistics (Gram matrices, second moments, sums written as GEMVs) use
:data:`HIGHEST` (full float32 on accelerators that would otherwise use TF32/bf16 passes); model
forwards use JAX's default precision, as the reference implementations do.

**Compiled-program caches.** Every module-level cache of jitted programs is created with
:func:`compiled_cache` (a bounded ``functools.lru_cache`` keyed by hashable configs) and so listed
in :data:`COMPILED_CACHES`; :func:`clear_compiled_caches` empties them all. Claim results are not
cached globally.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.errors import GeomjaxError, GeomjaxTypeError

HIGHEST = jax.lax.Precision.HIGHEST
"""Matmul precision of every statistic (Gram matrices, second moments, GEMV sums)."""

ACCUM_DTYPES = ("float32", "float64")

_F = TypeVar("_F", bound=Callable[..., Any])


# ----------------------------------------------------------------------------------------------
# Float64 context
# ----------------------------------------------------------------------------------------------


def is_concrete(x) -> bool:
    """True unless ``x`` is a tracer (inside jit/vmap, where values cannot be inspected)."""
    return not isinstance(x, jax.core.Tracer)


def has_float64(a: Any, _in_list: bool = False) -> bool:
    """True if ``a`` is float64: the dtype name ``"float64"``, ``np.float64``, a float64 array, or a
    (nested) list/tuple holding one or a Python float."""
    if isinstance(a, str):
        return a == "float64"
    if isinstance(a, np.dtype) or a is np.float64:
        return np.dtype(a) == np.float64
    if isinstance(a, (list, tuple)):
        return any(has_float64(b, True) for b in a)
    if _in_list and isinstance(a, float):
        return True
    dt = getattr(a, "dtype", None)
    if dt is None or jax.dtypes.issubdtype(dt, jax.dtypes.extended):  # e.g. PRNG key arrays
        return False
    return np.dtype(dt) == np.float64


def x64_context(*inputs) -> contextlib.AbstractContextManager:
    """The one float64 switch: ``jax.enable_x64(True)`` when x64 is off and one of ``inputs`` is
    float64 (a float64 array, a list of Python floats, ``"float64"`` or ``np.float64``:
    :func:`has_float64`), else a no-op context."""
    if not jax.config.jax_enable_x64 and any(has_float64(a) for a in inputs):
        return jax.enable_x64(True)
    return contextlib.nullcontext()


def float64_aware(fn: _F | None = None, *, arrays: tuple[str, ...] = ()) -> Any:
    """Decorator applying the dtype rule: ``fn`` runs under :func:`x64_context` of its arguments, so
    a NumPy float64 array or a Python list of floats is computed in float64.

    ``arrays`` names the parameters that are arrays: a (nested) Python list or tuple passed there
    becomes a NumPy array first (``np.asarray``: Python floats give float64), so that jitted
    functions, which would read a list as a pytree of scalars, accept lists too. Use as
    ``@float64_aware`` or ``@float64_aware(arrays=("x", "W"))`` (outside any ``jax.jit``).
    """
    if fn is None:
        return functools.partial(float64_aware, arrays=arrays)
    sig = inspect.signature(fn) if arrays else None

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if sig is not None:
            bound = sig.bind(*args, **kwargs)
            for name in arrays:
                if isinstance(bound.arguments.get(name), (list, tuple)):
                    bound.arguments[name] = np.asarray(bound.arguments[name])
            args, kwargs = bound.args, bound.kwargs
        with x64_context(*args, *kwargs.values()):
            return fn(*args, **kwargs)

    return wrapper


def check_accum_dtype(accum_dtype: str, where: str = "accum_dtype") -> str:
    """``accum_dtype`` if it is one of :data:`ACCUM_DTYPES`, else GeomjaxError."""
    if accum_dtype not in ACCUM_DTYPES:
        raise GeomjaxError(f"{where}: accum_dtype must be one of {ACCUM_DTYPES}, got {accum_dtype!r}")
    return accum_dtype


# ----------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------


def check_int(value, name: str, where: str, minimum: int = 1) -> int:
    """``value`` as an ``int`` if it is an integer (Python or NumPy, not a bool) >= ``minimum``, else
    GeomjaxError ``"{where}: {name} must be an integer >= {minimum}, got {value!r}"``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < minimum:
        raise GeomjaxError(f"{where}: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_no_silent_float64(dtype, where: str, what: str = "array") -> None:
    """Raise GeomjaxTypeError if a float64 ``what`` would be cast to float32 because JAX x64 is off."""
    if np.dtype(dtype) == np.float64 and not jax.config.jax_enable_x64:
        raise GeomjaxTypeError(
            f"{where}: {what} is float64 but JAX float64 is disabled, so it would be silently "
            "cast to float32; pass float32, or run under `with jax.enable_x64(True):` "
            "(or jax.config.update('jax_enable_x64', True))"
        )


def check_prng_key(key, where: str) -> None:
    """Raise unless ``key`` is ONE PRNG key: a typed key (``jax.random.key``) of shape () or a
    legacy raw key (``jax.random.PRNGKey``), uint32 of shape (2,). A key array of another shape
    raises GeomjaxError, anything else GeomjaxTypeError."""
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise GeomjaxError(f"{where}: expected a single PRNG key, got a key array of shape {key.shape}")
        return
    if np.shape(key) == (2,) and np.dtype(getattr(key, "dtype", None)) == np.uint32:
        return
    raise GeomjaxTypeError(
        f"{where}: `key` must be a PRNG key (jax.random.key(seed) or jax.random.PRNGKey(seed)), "
        f"got {type(key).__name__} with shape {np.shape(key)}"
    )


def to_device(x) -> jax.Array:
    """``jnp.asarray(x)`` (same dtype, weak type, values and placement), but a NumPy array is copied and put on the
    default device with ``jax.device_put`` instead: ``jnp.asarray`` of a NumPy array outside ``jit`` compiles an
    identity program for each new shape and dtype (JAX's ``lax.stage``), tens of milliseconds apiece for a
    checkpoint's every tensor. The host copy comes first because ``device_put`` may alias the array on a CPU
    device (even with ``may_alias=False``: 30% to 90% of the tries here, JAX 0.10): the caller's array stays the
    caller's to change, as after ``jnp.asarray`` (tests/unit/test_numerics.py checks both)."""
    if isinstance(x, np.ndarray) and not isinstance(x, np.ma.MaskedArray):
        return jax.device_put(np.array(x, copy=True))
    return jnp.asarray(x)


def _dtype_of(x) -> np.dtype:
    return np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype


def as_real_array(x, where: str, what: str = "array") -> jax.Array:
    """A real (floating or integer) array as a JAX floating array; integers become the default
    float dtype, float64 requires x64 (:func:`check_no_silent_float64`)."""
    dt = _dtype_of(x)
    if not (np.issubdtype(dt, np.floating) or np.issubdtype(dt, np.integer)):
        raise GeomjaxTypeError(f"{where}: {what} must be a real array, got dtype {dt}")
    check_no_silent_float64(dt, where, what)
    x = to_device(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    return x


def as_float32_or_64(x, where: str, what: str = "array") -> jax.Array:
    """A real array in the computation dtype of the float32 routines: float64 stays float64 (needs
    x64, switched on by :func:`float64_aware`), every other real dtype (float32, half, integer)
    becomes float32 — the dtype rule for functions that used to cast their input to float32, whose
    float32 results stay bit-identical."""
    dt = _dtype_of(x)
    if dt == np.float64:
        check_no_silent_float64(dt, where, what)
        return to_device(x)
    return jnp.asarray(x, jnp.float32)


def as_float_array(x, name: str, ndim: int, shape_doc: str, finite: bool = False) -> jax.Array:
    """Checks rank, floating dtype (and optionally finiteness); returns a JAX array, same dtype."""
    if not hasattr(x, "dtype"):
        x = np.asarray(x)
    if x.ndim != ndim:
        raise GeomjaxError(
            f"{name} must be a rank-{ndim} array of shape {shape_doc}, got shape {tuple(x.shape)}"
        )
    dt = np.dtype(x.dtype)
    if not (np.issubdtype(dt, np.floating) or dt.name == "bfloat16"):
        raise GeomjaxTypeError(f"{name} must be a floating-point array, got dtype {dt}")
    check_no_silent_float64(dt, "geomjax", name)  # float64_aware prevents it for public fns
    if finite:
        check_finite(x, name)
    return to_device(x)


@jax.jit
def _count_nonfinite(x: jax.Array) -> jax.Array:
    return jnp.sum(~jnp.isfinite(x))


@jax.jit
def _zero_rows(x: jax.Array) -> jax.Array:
    return jnp.sum(x * x, axis=-1) == 0


def check_finite(x, name: str, where: str | None = None) -> None:
    """Raises GeomjaxError if a concrete ``x`` holds NaN or Inf (no-op under tracing); ``where`` (the
    public function) prefixes the message."""
    if is_concrete(x):
        if isinstance(x, np.ndarray):
            bad = int(np.count_nonzero(~np.isfinite(x)))
        else:
            bad = int(_count_nonfinite(x))
        if bad:
            prefix = f"{where}: " if where else ""
            raise GeomjaxError(f"{prefix}{name} contains {bad} NaN/Inf value(s); remove or impute them first")


def check_square(x, name: str, where: str | None = None, shape_doc: str = "(d, d)", *, batch: bool = False) -> None:
    """Raises GeomjaxError unless ``x`` is a square matrix: 2-D, or with ``batch`` (..., d, d);
    ``where`` (the public function) prefixes the message."""
    s = tuple(np.shape(x))
    if not ((len(s) >= 2 if batch else len(s) == 2) and s[-1] == s[-2]):
        prefix = f"{where}: " if where else ""
        raise GeomjaxError(f"{prefix}{name} must be a square {shape_doc} matrix, got shape {s}")


def check_min_rows(x: jax.Array, name: str, minimum: int, what: str) -> None:
    """Raises GeomjaxError if ``x`` has fewer than ``minimum`` rows."""
    if x.shape[0] < minimum:
        raise GeomjaxError(
            f"{name} needs at least {minimum} {what} (rows), got shape {tuple(x.shape)}"
        )


def check_nonzero_rows(x: jax.Array, name: str) -> None:
    """Raises GeomjaxError if a concrete ``x`` has a row of zero norm (its cosine is undefined)."""
    if is_concrete(x):
        if isinstance(x, np.ndarray):
            zero = np.flatnonzero(np.einsum("...d,...d->...", x, x) == 0)
        else:
            zero = np.flatnonzero(np.asarray(_zero_rows(x)))
        if zero.size:
            raise GeomjaxError(
                f"{name} has {zero.size} row(s) of zero norm (first: row {int(zero[0])}); "
                "their cosine similarity is undefined"
            )


def as_matrix(x, name: str, shape_doc: str, min_rows: int, what: str) -> jax.Array:
    """A finite floating (N, d) matrix with N >= ``min_rows`` and d >= 1 (:func:`as_float_array`)."""
    x = as_float_array(x, name, 2, shape_doc, finite=True)
    check_min_rows(x, name, min_rows, what)
    if x.shape[1] < 1:
        raise GeomjaxError(f"{name} must have width d >= 1, got shape {tuple(x.shape)}")
    return x


# ----------------------------------------------------------------------------------------------
# Compiled-program caches
# ----------------------------------------------------------------------------------------------

COMPILED_CACHES: dict[str, Any] = {}
"""Every module-level cache of compiled programs, by qualified name (module.function)."""


def compiled_cache(maxsize: int = 32) -> Callable[[_F], _F]:
    """``functools.lru_cache(maxsize)`` for a builder of jitted programs keyed by hashable configs,
    registered in :data:`COMPILED_CACHES` (so that :func:`clear_compiled_caches` reaches it)."""

    def decorate(fn: _F) -> _F:
        cached = functools.lru_cache(maxsize=maxsize)(fn)
        COMPILED_CACHES[f"{fn.__module__}.{fn.__qualname__}"] = cached
        return cached  # type: ignore[return-value]

    return decorate


class BoundedCache(collections.OrderedDict):
    """A dict of compiled programs keyed by hashable configs, holding at most ``maxsize`` entries
    (least recently used evicted), for programs built where ``compiled_cache`` cannot key them
    (e.g. ``.lower(args).compile()`` on concrete arguments). Create it with :func:`bounded_cache`."""

    def __init__(self, maxsize: int):
        super().__init__()
        self.maxsize = int(maxsize)

    def __getitem__(self, key):
        value = super().__getitem__(key)
        self.move_to_end(key)
        return value

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.maxsize:
            self.popitem(last=False)

    def cache_clear(self) -> None:
        """Empty the cache (the ``functools.lru_cache`` spelling, for :func:`clear_compiled_caches`)."""
        self.clear()


def bounded_cache(name: str, maxsize: int = 8) -> BoundedCache:
    """A :class:`BoundedCache` registered in :data:`COMPILED_CACHES` under ``name``."""
    cache = COMPILED_CACHES[name] = BoundedCache(maxsize)
    return cache


def clear_compiled_caches() -> None:
    """Empty every registered cache of compiled programs (and JAX's own jit caches)."""
    for cached in COMPILED_CACHES.values():
        cached.cache_clear()
    jax.clear_caches()
