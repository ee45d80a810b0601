"""The test run's MLIR-context reuse (tests/_mlir_context.py, JAX >= 0.11.1's policy on an older JAX)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.interpreters import mlir
from jax._src.lib.mlir import ir


def test_a_context_serves_at_most_eleven_lowerings():
    """Upstream's bound (a new context, then 10 reuses), whichever installed it."""
    ctxs = [mlir.make_ir_context() for _ in range(40)]
    runs = [len(list(g)) for _, g in itertools.groupby(ctxs, key=id)]
    assert max(runs) == 11 and len(runs) >= 4


def test_no_reuse_while_a_lowering_is_open():
    """Ours gives a fresh context while an insertion point is open (upstream clones detached instead)."""
    if not getattr(mlir.make_ir_context, "_geomjax_reuse", False):
        pytest.skip("JAX's own context policy (jax >= 0.11.1), or GEOMJAX_TEST_CTX=0")
    prev = mlir.make_ir_context()
    while (ctx := mlir.make_ir_context()) is prev:  # ctx: a context's first lowering, so it has reuses left
        pass
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            assert mlir.make_ir_context() is not ctx
    assert mlir.make_ir_context() is ctx


def test_a_program_compiled_inside_a_lowering_with_the_compilation_cache():
    """The case that broke a plain backport: ``ensure_compile_time_eval`` compiles random-bit programs while
    uniform's lowering is open; with the in-run compilation cache on, the cache key's clone of the inner module
    landed in the outer one (MLIR verifier error). Expected values: NumPy's float64 affine map of the same bits."""
    key = jax.random.key(20261129)
    with jax.enable_x64(True), jax.ensure_compile_time_eval():
        u = np.asarray(jax.random.uniform(key, (7, 13), jnp.float64, -2.5, 2.5))
        bits = np.asarray(jax.random.bits(key, (7, 13), jnp.uint64))
    ref = ((bits >> np.uint64(12)) | np.uint64(0x3FF0000000000000)).view(np.float64) - 1.0
    np.testing.assert_allclose(u, np.maximum(-2.5, ref * 5.0 - 2.5), rtol=0, atol=1e-15)
