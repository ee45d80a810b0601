"""geomjax.base.threads: the host BLAS pools beside XLA's (issue 46), read back with threadpoolctl."""

from __future__ import annotations

import ast
import subprocess
import sys

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from geomjax.base import threads
from geomjax.errors import GeomjaxError


def _blas_threads() -> set[int]:
    np.dot(np.ones((4, 4)), np.ones((4, 4)))  # the BLAS library is loaded
    return {d["num_threads"] for d in threadpool_info() if d["user_api"] == "blas"}


@pytest.fixture
def no_user_sizing(monkeypatch):
    for v in threads.BLAS_THREAD_VARIABLES:
        monkeypatch.delenv(v, raising=False)


@pytest.fixture
def two_threads():
    """The pools at two threads around the test (the test run itself may have sized them to one)."""
    with threadpool_limits(limits=2, user_api="blas"):
        yield _blas_threads()


def test_pools_are_one_thread_inside_and_restored_after(no_user_sizing, two_threads):
    with threads.host_blas_threads():
        assert _blas_threads() == {1}
    assert _blas_threads() == two_threads


def test_user_sizing_wins(no_user_sizing, two_threads, monkeypatch):
    before = two_threads
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    with threads.host_blas_threads():
        assert _blas_threads() == before  # the library's own variable: left to the library
    monkeypatch.delenv("OPENBLAS_NUM_THREADS")
    monkeypatch.setenv("GEOMJAX_BLAS_THREADS", "1")
    with threads.host_blas_threads(default=2):
        assert _blas_threads() == {1}


@pytest.mark.parametrize("bad", ["0", "two", "-1"])
def test_bad_sizing_is_one_line_error(no_user_sizing, monkeypatch, bad):
    monkeypatch.setenv("GEOMJAX_BLAS_THREADS", bad)
    with pytest.raises(GeomjaxError, match="GEOMJAX_BLAS_THREADS must be a positive integer"):
        threads.host_blas_threads()


def test_a_fresh_process_sizes_the_pools_it_loads_later(no_user_sizing):
    """The command's process enters the context before it imports NumPy or SciPy: the limits still reach
    both libraries' pools (threadpoolctl sizes only what is loaded when the limits are set)."""
    child = ("import threadpoolctl\nfrom geomjax.base import threads\n"
             "with threads.host_blas_threads():\n"
             "    import numpy, scipy.linalg\n"
             "    scipy.linalg.eigh(numpy.eye(64) + numpy.ones((64, 64)))\n"
             "    print(sorted({(d['filepath'], d['num_threads']) for d in threadpoolctl.threadpool_info()"
             " if d['user_api'] == 'blas'}))\n")
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout
    pools = ast.literal_eval(out.strip())
    assert pools, pools  # NumPy's and SciPy's libraries (two files with pip's wheels, one where they share it)
    assert {n for _, n in pools} == {1}, pools
