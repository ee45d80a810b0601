"""The public dtype rule (geomjax.base._checks): NumPy float64 and Python lists are accepted by the theory
modules' array functions and computed in float64 (x64 switched on locally); float32 stays float32.
Expected values from NumPy."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geomjax import attention as att
from geomjax import kernel_factorization as kf
from geomjax import smoothness as sm
from geomjax.base._checks import to_device, x64_context
from geomjax.errors import GeomjaxError, GeomjaxTypeError
from tests._compiles import count_compiles
from tests.unit.test_shapes import unchecked_shapes


@pytest.fixture(autouse=True)
def _x64_off():
    with jax.enable_x64(False):
        yield


RNG = np.random.default_rng(7)
SCORES = RNG.normal(size=(2, 5, 5))
WQ, WK = RNG.normal(size=(6, 3)), RNG.normal(size=(6, 3))
Z, Z2 = RNG.normal(size=6) / 3, RNG.normal(size=6) / 3
B1, B2 = RNG.normal(size=(4, 6)) / 4, RNG.normal(size=(3, 6)) / 4


def _np_causal_softmax(s):
    T = s.shape[-1]
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _np_double_center(G):
    J = np.eye(len(G)) - 1.0 / len(G)
    return J @ G @ J


P = RNG.normal(size=(7, 3))
G = P @ P.T

CASES = [
    ("causal_softmax", lambda a: att.causal_softmax(a[0]), (SCORES,), _np_causal_softmax(SCORES)),
    ("w_matrix", lambda a: att.w_matrix(*a), (WQ, WK), WQ @ WK.T / math.sqrt(3)),
    ("attention_entropy", lambda a: att.attention_entropy(a[0], skip_first=0), (_np_causal_softmax(SCORES),),
     np.mean(-np.sum(np.where(_np_causal_softmax(SCORES) > 0,
                              _np_causal_softmax(SCORES) * np.log(np.maximum(_np_causal_softmax(SCORES), 1e-300)), 0), -1), -1)),
    ("double_center", lambda a: sm.double_center(a[0]), (G,), _np_double_center(G)),
    ("log_kernel", lambda a: kf.log_kernel(*a), (WQ @ WK.T, Z, Z2), Z @ (WQ @ WK.T) @ Z2),
    ("kernel", lambda a: kf.kernel(*a), (WQ @ WK.T, Z, Z2), np.exp(Z @ (WQ @ WK.T) @ Z2)),
    ("incoherence", lambda a: kf.incoherence(*a), (B1, B2), np.abs(B1 @ B2.T).max()),
]


def check_dtype_rule(fn, args, want, *, tol64: float, tol32: float) -> None:
    """The dtype rule on one function: float64 NumPy and Python lists computed in float64 (equal to the
    independent float64 value ``want`` within ``tol64``), float32 stays float32 (within ``tol32``)."""
    out64 = fn(args)
    outl = fn(tuple(a.tolist() for a in args))
    out32 = fn(tuple(a.astype(np.float32) for a in args))
    assert out64.dtype == jnp.float64 and outl.dtype == jnp.float64 and out32.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(out64), want, rtol=tol64, atol=tol64)
    np.testing.assert_array_equal(np.asarray(outl), np.asarray(out64))  # a list is the float64 array
    np.testing.assert_allclose(np.asarray(out32), want, rtol=tol32, atol=tol32)


@pytest.mark.parametrize("name,fn,args,want", CASES, ids=[c[0] for c in CASES])
def test_float64_numpy_and_lists_computed_in_float64(name, fn, args, want):
    check_dtype_rule(fn, args, want, tol64=1e-12, tol32=2e-5)


def test_qk_decomposition_float64_and_lists():
    x, mean, pos = RNG.normal(size=(4, 6)), RNG.normal(size=6), RNG.normal(size=(5, 6))
    total = (x @ WQ) @ (x @ WK).T / math.sqrt(3)
    for args in ((x, mean, pos, WQ, WK), tuple(a.tolist() for a in (x, mean, pos, WQ, WK))):
        parts = att.qk_decomposition(*args)
        assert parts.total.dtype == jnp.float64
        np.testing.assert_allclose(np.asarray(parts.total), total, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(parts.sum_of_parts()), total, rtol=1e-10, atol=1e-10)
    p32 = att.qk_decomposition(*(a.astype(np.float32) for a in (x, mean, pos, WQ, WK)))
    assert p32.total.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(p32.total), total, rtol=1e-4, atol=1e-5)


def test_theorem1_bound_float64_matches_float32_path():
    Gc = _np_double_center(G)
    lhs64, rhs64 = sm.theorem1_bound(Gc, 2, 1)
    lhsl, rhsl = sm.theorem1_bound(Gc.tolist(), 2, 1)
    lhs32, rhs32 = sm.theorem1_bound(Gc.astype(np.float32), 2, 1)
    assert lhs64.dtype == jnp.float64 and lhs32.dtype == jnp.float32
    assert float(lhs64) == float(lhsl) and float(rhs64) == float(rhsl)
    np.testing.assert_allclose([float(lhs32), float(rhs32)], [float(lhs64), float(rhs64)], rtol=1e-4)


def test_x64_context_is_the_one_switch():
    assert not jax.config.jax_enable_x64
    for trigger in ("float64", np.float64, np.dtype("float64"), np.zeros(2), [1.0, 2.0]):
        with x64_context(trigger):
            assert jax.config.jax_enable_x64
    for no in ("float32", np.zeros(2, np.float32), [1, 2], None):
        with x64_context(no):
            assert not jax.config.jax_enable_x64


def test_to_device_equals_asarray_without_compiling():
    """to_device gives what jnp.asarray gives (dtype, weak type, values, placement) for NumPy arrays of every
    dtype, with x64 off and on, and for lists and scalars; a NumPy array is copied, and compiles nothing."""
    import ml_dtypes

    for x64 in (False, True):
        with jax.enable_x64(x64):
            for dt in (np.float32, np.float64, np.int32, np.int64, np.bool_, np.float16, ml_dtypes.bfloat16):
                a = (np.arange(6).reshape(2, 3) % 2).astype(dt)
                for x in (a, a.T, np.asarray(a[0, 1]), [1.5, 2.0], 3):  # contiguous, strided, 0-d
                    want, got = jnp.asarray(x), to_device(x)
                    assert (got.dtype, got.weak_type, got.shape, got.sharding, got.committed) == (
                        want.dtype, want.weak_type, want.shape, want.sharding, want.committed)
                    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    for n in range(1000, 1100):  # a copy, not a view of the host array (device_put alone aliased 30-90% of these)
        src = np.ones(n, np.float32)
        got = to_device(src)
        src[:] = 5
        assert (np.asarray(got) == 1).all()  # read back on the host: no program per shape
    with count_compiles() as compiles:  # a shape no other test uses
        to_device(np.zeros((7, 11, 13), np.float32))
    assert compiles[0] == 0


@unchecked_shapes()
def test_validation_errors_are_geomjax_errors():
    with pytest.raises(GeomjaxError, match=r"rank-2 array of shape \(N, d\), got shape \(3,\)"):
        from geomjax.theory.geometry import normalized_gram

        normalized_gram(np.zeros(3, np.float32))
    with pytest.raises(GeomjaxTypeError, match="floating-point"):
        from geomjax.theory.geometry import normalized_gram

        normalized_gram(np.zeros((3, 2), np.int32))
    assert issubclass(GeomjaxTypeError, TypeError) and issubclass(GeomjaxTypeError, ValueError)


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_compiled_caches_are_registered_bounded_and_clearable():
    import ast
    from pathlib import Path

    import geomjax.tools.extraction  # noqa: F401  (importing registers the caches)
    import geomjax.analysis.lens  # noqa: F401
    import geomjax.theory.montecarlo  # noqa: F401
    import geomjax.train.grokking  # noqa: F401
    from geomjax.base._checks import COMPILED_CACHES, BoundedCache, clear_compiled_caches

    assert {"geomjax.tools.extraction._make_step", "geomjax.theory.decomposition._sharded_update",
            "geomjax.train.grokking._COMPILED", "geomjax.analysis.lens._compiled"} <= set(COMPILED_CACHES)
    for name, cache in COMPILED_CACHES.items():
        size = cache.maxsize if isinstance(cache, BoundedCache) else cache.cache_info().maxsize
        assert size is not None and size <= 64, name
    # no unregistered lru_cache anywhere (claim modules share results per run: claims.per_run)
    root = Path(__file__).resolve().parents[2] / "geomjax"
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef):
                for d in node.decorator_list:
                    assert "lru_cache" not in ast.unparse(d), f"{path}:{node.lineno} use _checks.compiled_cache"
    b = BoundedCache(2)
    b["a"], b["b"] = 1, 2
    assert b["a"] == 1
    b["c"] = 3  # evicts the least recently used, "b"
    assert list(b) == ["a", "c"]
    clear_compiled_caches()
    assert all(len(c) == 0 if isinstance(c, BoundedCache) else c.cache_info().currsize == 0
               for c in COMPILED_CACHES.values())
