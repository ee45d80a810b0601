"""Mixed precision (extraction.mixed_precision): a low-precision forward, float32 states out."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geomjax.tools.extraction import decompose_model_stream, mixed_precision
from tests.unit.test_extraction import make_forward, windows


def test_bfloat16_forward_runs_in_bfloat16_and_returns_float32():
    forward, params, V, T = make_forward()
    ids = jnp.asarray(windows(V, T, 4))
    low = mixed_precision(forward, "bfloat16")
    jaxpr = jax.make_jaxpr(low)(params, ids)
    dots = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "dot_general"]
    assert dots and all(e.outvars[0].aval.dtype == jnp.bfloat16 for e in dots)
    out = low(params, ids)
    assert all(h.dtype == jnp.float32 for h in out)
    # Equal to casting by hand (an independent route through NumPy's bfloat16 rounding).
    p16 = jax.tree.map(lambda a: jnp.asarray(np.asarray(a).astype(jnp.bfloat16)), params)
    ref = forward(p16, ids)
    for a, b in zip(out, ref):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b, np.float32))
    assert mixed_precision(forward, "float32") is forward


def test_mixed_precision_statistics_close_to_float32():
    forward, params, V, T = make_forward()
    ids = windows(V, T, 16)
    batches = lambda: (ids[i:i + 8] for i in range(0, 16, 8))  # noqa: E731
    f32 = decompose_model_stream(forward, params, batches())
    b16 = decompose_model_stream(mixed_precision(forward, "bfloat16"), params, batches())
    for a, b in zip(f32, b16):
        # bfloat16 keeps 8 bits of mantissa: relative errors of order 2^-8, not more.
        err = np.linalg.norm(np.asarray(b.ctx) - np.asarray(a.ctx)) / np.linalg.norm(np.asarray(a.ctx))
        assert 0 < err < 5e-2


def test_bad_compute_dtype():
    forward, *_ = make_forward()
    with pytest.raises(ValueError, match="compute_dtype must be one of"):
        mixed_precision(forward, "int8")
