"""JAX >= 0.11.1's MLIR-context reuse, for the test run on an older JAX (JAX commit 044efe820d).

Every program JAX lowers gets an MLIR context; making one and loading every dialect into it is a third of the cost
of an operation run eagerly under the suite's XLA flags. JAX 0.11.1 reuses each thread's context for up to 10
lowerings (`jax._src.interpreters.mlir.make_ir_context`). JAX 0.11 needs Python >= 3.12, so the README's Python 3.11
command runs jax 0.10.2, where every lowering makes a new context.

:func:`install` puts the same policy in place on a JAX without it, with one difference. Upstream's commit also made
JAX's cache-key canonicalisation clone a module detached (``clone(ip=False)``): entering a reused context inherits
the insertion point of a lowering still open in it (MLIR's Python bindings carry the insertion point over when the
context is the same), so a program compiled while another one is being lowered (``jax.random.uniform`` under x64 in
``ensure_compile_time_eval``: its random-bit programs compile inside uniform's lowering) had its canonical clone
inserted into the other module (an MLIR verifier error in tests/unit/test_localization_exact.py).
Rather than patch the cache key too, a context is not reused while an insertion point is open: the nested program
gets a fresh context, as it did before.
"""

from __future__ import annotations

import threading

_REUSES = 10  # upstream's bound: interned types and attributes grow with each reuse


def install() -> bool:
    """Reuse each thread's MLIR context for up to 10 lowerings; True when installed (False: JAX already does)."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    if hasattr(mlir, "_thread_local_context") or getattr(mlir.make_ir_context, "_geomjax_reuse", False):
        return False
    fresh = mlir.make_ir_context
    local = threading.local()

    def make_ir_context() -> ir.Context:
        try:
            ir.InsertionPoint.current
        except ValueError:  # no lowering open on this thread: reuse
            ctx, count = getattr(local, "value", (None, _REUSES))
            if count < _REUSES:
                local.value = (ctx, count + 1)
                return ctx
            ctx = fresh()
            local.value = (ctx, 0)
            return ctx
        return fresh()

    make_ir_context._geomjax_reuse = True
    mlir.make_ir_context = make_ir_context
    return True
