"""Host thread pools beside XLA's: the BLAS pools NumPy/SciPy use are sized here (issue 46).

geomjax's heavy arithmetic runs in XLA, whose own thread pool takes every core; the host-side NumPy/SciPy
work beside it (eigendecompositions of d x d Grams, ScreeNOT, SVDs of the mid layer, the figures) is small.
OpenBLAS's worker threads spin while they wait for work, so a pool of one thread per core competes with
XLA's threads for the cores, and on a shared machine with the other processes' threads too: a warm
``geomjax demo`` beside two busy processes on 2 cores took 66.5 s against 15.2 s quiet, and 25.9 s with a
one-thread pool. With :func:`host_blas_threads` applied (it loads NumPy's and SciPy's libraries first, since
threadpoolctl sizes only loaded ones), it takes 1.79x its quiet time against 2.85x with two-thread pools
(``benchmarks/bench_load.py`` measures it side by side; ``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import contextlib
import importlib
import os

from threadpoolctl import threadpool_limits

from geomjax.errors import GeomjaxError

__all__ = ["BLAS_THREAD_VARIABLES", "host_blas_threads"]

# The variables by which a user sizes the host BLAS pools: GEOMJAX_BLAS_THREADS (geomjax's own), then the BLAS
# libraries' own variables, which geomjax leaves to the library when one of them is set.
BLAS_THREAD_VARIABLES = ("GEOMJAX_BLAS_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

# The modules whose import loads the host BLAS libraries: NumPy's OpenBLAS and SciPy's (which jaxlib's LAPACK
# kernels call too). threadpoolctl sizes only the libraries already loaded when the limits are set, and the
# command imports both lazily, so the context loads them first.
BLAS_MODULES = ("numpy", "scipy.linalg")


def host_blas_threads(default: int = 1) -> contextlib.AbstractContextManager:
    """A context in which the host's BLAS pools (NumPy/SciPy's OpenBLAS or MKL) use ``default`` threads.

    The ``geomjax`` command runs inside it. ``GEOMJAX_BLAS_THREADS=N`` (a positive integer) sizes the pools to
    N instead; with ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` set, the user has sized
    them through the library and the context changes nothing.

    Args:
      default: the threads per BLAS pool when the user sized nothing (1: the host work is small beside XLA's).

    Returns:
      A context manager (threadpoolctl's ``threadpool_limits`` or a no-op).

    Raises:
      GeomjaxError: ``GEOMJAX_BLAS_THREADS`` is not a positive integer.
    """
    own = os.environ.get(BLAS_THREAD_VARIABLES[0], "").strip()
    if own and (not own.isdigit() or int(own) < 1):
        raise GeomjaxError(f"GEOMJAX_BLAS_THREADS must be a positive integer, got {own!r}")
    if not own and any(os.environ.get(v, "").strip() for v in BLAS_THREAD_VARIABLES[1:]):
        return contextlib.nullcontext()
    for name in BLAS_MODULES:
        importlib.import_module(name)
    return threadpool_limits(limits=int(own) if own else default, user_api="blas")
