"""Test configuration: several CPU devices, strict rank promotion, highest matmul precision; and the
session-wide fixtures that let expensive results be computed once per test session.

The XLA flag must be set before JAX initialises its backend, so it is set at import time here.
"""

import atexit
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile


def _test_xla_flags() -> str:
    """The suite's XLA flags: 8 host devices, and XLA:CPU settings that cut its compile time.

    The suite compiles hundreds of small programs and runs each a few times, so XLA's compile time dominates
    it. LLVM optimisation level 0 for the code XLA emits (its default is 3), the loop emitter for fusions
    instead of the MLIR fusion emitters (xla_cpu_use_fusion_emitters=false), and each program's LLVM module
    split in 2 for parallel codegen instead of XLA's default 32 (xla_cpu_parallel_codegen_split_count; the
    two xdist workers already use both cores, and a small program split 32 ways pays the split's overhead):
    the README command 867 s (XLA's defaults but level 1) -> 608 s (level 1, loop emitter) -> 462 s (level 0,
    loop emitter), the same tests passing; the split in 2 took test_every_family.py from 42-43 to 35-36 CPU s
    (benchmarks/RESULTS.md). Level 0 runs the emitted code 3-4x slower (the Monte Carlo claims), which the
    suite's compile time more than pays for; every test passes with its own bound (the goldens included;
    song_zhong.incoherence_baseline.cos2's quick first look is now the sample that can decide, where its
    third look within the CPU-second budget decided before), and fast-math stays off. The `geomjax` command
    keeps XLA's defaults. An XLA flag a jaxlib does not know aborts the process (jaxlib 0.12 dropped the
    fusion-emitter flag), so a child process tries the optional ones first (once per run: the xdist workers
    inherit the variable).
    """
    flags = "--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0"
    optional = ["--xla_cpu_use_fusion_emitters=false", "--xla_cpu_parallel_codegen_split_count=2"]

    def accepted(extra: list[str]) -> bool:
        probe = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"], capture_output=True,
                               env={**os.environ, "XLA_FLAGS": " ".join(extra), "JAX_PLATFORMS": "cpu"})
        return probe.returncode == 0

    extra = optional if accepted(optional) else [f for f in optional if accepted([f])]
    return " ".join([flags, *extra])


# A caller's own XLA_FLAGS win.
if "XLA_FLAGS" not in os.environ:
    os.environ["XLA_FLAGS"] = _test_xla_flags()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The geomjax command turns on JAX's persistent compilation cache; tests keep every compile fresh
# (tests/integration/test_cli.py checks the cache switch itself with a temporary directory).
os.environ.setdefault("GEOMJAX_NO_COMPILE_CACHE", "1")
# Trained runs that geomjax caches under $GEOMJAX_CACHE (the clock claims' grokking models) go to a
# fresh folder per session: a test run neither reads nor fills ~/.cache/geomjax, so it costs here
# what it costs on a clean clone (CI).
_SESSION_CACHE = tempfile.mkdtemp(prefix="geomjax-test-cache-")
os.environ["GEOMJAX_CACHE"] = _SESSION_CACHE
atexit.register(shutil.rmtree, _SESSION_CACHE, True)
# One folder for the whole test run, shared by the pytest-xdist workers: the process that starts first (the
# controller, or the only process without xdist) makes it and removes it at exit; the workers it spawns
# inherit the variable. It holds the compilation cache and the quick claim results (quick_claims below), so
# a program or a claim that two workers need is built once.
if "GEOMJAX_TEST_RUN_DIR" not in os.environ:
    os.environ["GEOMJAX_TEST_RUN_DIR"] = tempfile.mkdtemp(prefix="geomjax-test-run-")
    atexit.register(shutil.rmtree, os.environ["GEOMJAX_TEST_RUN_DIR"], True)
_RUN_DIR = os.environ["GEOMJAX_TEST_RUN_DIR"]

# Bytecode: a run leaves Python's bytecode settings as the caller has them. Where writing is off
# (PYTHONDONTWRITEBYTECODE, set on this project's machines, or -B), an earlier version wrote the run's bytecode under
# the run folder (PYTHONPYCACHEPREFIX). That hid the bytecode pip installed beside the libraries, so the run compiled
# what its processes imported of jax, torch, transformers, scipy, ... from source again (both workers at once, each
# lazily imported module again in the process that first needed it): on a subset of the suite
# (test_models_new_families, test_multihost, test_docs, test_claims, test_cli; -n 2, alternating) 119-121 s and
# 211-214 CPU s with the prefix, 99-108 s and 183-199 CPU s without (benchmarks/RESULTS.md). geomjax's own modules
# compile in a fraction of a second.

import jax  # noqa: E402

from geomjax.base import threads  # noqa: E402
from tests import _mlir_context  # noqa: E402

# JAX >= 0.11.1 reuses each thread's MLIR context for 10 lowerings; on an older JAX (the README's Python 3.11 has
# jax 0.10.2) the run installs the same policy (tests/_mlir_context.py). The README command, alternating on the same
# machine: 281.6 and 297.7 s (502 and 532 user CPU s) with it, 324.9 and 331.9 s (579 and 593) without
# (benchmarks/RESULTS.md); GEOMJAX_TEST_CTX=0 turns it off. The quick claims' child (below) is compute-bound: 28 s
# either way.
if os.environ.get("GEOMJAX_TEST_CTX", "1") == "1":
    _mlir_context.install()

# The host BLAS pools (NumPy's and SciPy's OpenBLAS) at one thread, as the geomjax command sizes them: each
# worker's idle OpenBLAS threads would spin beside the other worker's compilation. threadpoolctl's limits
# apply when made and stay for the process; child processes (the CLI, the claims' child) inherit the variable.
os.environ.setdefault("GEOMJAX_BLAS_THREADS", "1")
threads.host_blas_threads()

# Python's cyclic garbage collector: a worker holds millions of objects (JAX, Flax, torch, transformers and the
# tests' models), so each full collection scans them all; with the default thresholds (700, 10, 10) the full
# collections took 4.3 of test_models_new_families.py's 60 s. A larger young generation triggers far fewer of
# them, and the objects alive after collection (the imported libraries) are frozen out of every later scan
# (pytest_collection_finish). The README command: 392-402 s -> 377 s (benchmarks/RESULTS.md).
gc.set_threshold(20_000, 10, 10)

# The suite's JAX settings (the quick claims' child process takes the same: _check_claims_in_a_child).
_JAX_SETTINGS = {"jax_numpy_rank_promotion": "raise", "jax_default_matmul_precision": "highest"}
for _name, _value in _JAX_SETTINGS.items():
    jax.config.update(_name, _value)
if os.environ.get("GEOMJAX_TEST_XCACHE", "1") == "1":
    # An in-run compilation cache (empty at the start of every run, shared by the workers): tests that build
    # the same program through a fresh closure (a new model load, another CLI run) load it instead of recompiling.
    jax.config.update("jax_compilation_cache_dir", os.path.join(_RUN_DIR, "jax"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(os.environ.get("GEOMJAX_TEST_XMIN", "0.2")))

import pytest  # noqa: E402


def _torch_note() -> str | None:
    """Why the PyTorch-reference tests skip, when they do: torch==2.13.0 is installed (the CPU build)
    only on Python 3.11 (pyproject.toml, the test extra)."""
    import importlib.util
    import sys

    if importlib.util.find_spec("torch") is not None:
        return None
    return (f"torch: not installed on Python {sys.version.split()[0]} (the CPU build of torch==2.13.0 is a "
            "Python 3.11 wheel; pyproject.toml installs it there only): the PyTorch-reference tests skip")


def pytest_collection_finish(session):
    """Freeze what is alive once the tests are collected (the imported libraries) out of later collections."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """An xdist worker ends here, once its results are sent and pytest's own end-of-run checks (the unraisable
    exceptions among them) have run: it removes its model cache and leaves without Python's interpreter
    teardown. That teardown (freeing each worker's thousands of compiled programs, models and arrays object
    by object, then the libraries' exit handlers) kept the controller waiting 9 s after the last test of a full
    run. Not under coverage, whose data is written at exit."""
    if "PYTEST_XDIST_WORKER" not in os.environ or "coverage" in sys.modules:
        return
    shutil.rmtree(_SESSION_CACHE, ignore_errors=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def pytest_report_header(config):
    return _torch_note()


def pytest_terminal_summary(terminalreporter):
    """The same note at the end, where ``-q`` runs (the README's command) show it."""
    note = _torch_note()
    if note:
        terminalreporter.write_line(note)


@pytest.fixture(scope="session")
def n_devices() -> int:
    return jax.device_count()


_CLAIMS_CHILD = """
import json, os, pickle, sys
import jax
for name, value in json.loads(sys.argv[1]).items():
    jax.config.update(name, value)
import geomjax.claims as claims
from geomjax.base.threads import host_blas_threads
store, ids = sys.argv[2], sys.argv[3:]
with host_blas_threads():
    for r in claims.run(select=ids, budget="quick", seed=0):
        with open(os.path.join(store, r.id + ".pkl"), "wb") as f:
            pickle.dump(r, f)
"""


def _check_claims_in_a_child(ids: list[str], store: str) -> None:
    """Check ``ids`` at quick (seed 0) in a child process with XLA's default optimisation, pickling each result
    into ``store``. The quick claims are compute-bound (Monte Carlo draws, Theorem 2's d = 2^24 vectors), which
    the suite's LLVM level 0 runs 2-4x slower (song_zhong's: 51 s at level 0, 24 s at level 1, one process); the
    child runs them as `geomjax verify` does (its host BLAS sizing included), with the suite's 8 host devices and
    JAX settings."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    done = subprocess.run([sys.executable, "-c", _CLAIMS_CHILD, json.dumps(_JAX_SETTINGS), store, *ids], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"checking {len(ids)} quick claims in a child process failed:\n{done.stderr[-4000:]}")


@pytest.fixture(scope="session")
def quick_claims():
    """``get(select) -> list[ClaimResult]``: quick-budget results (seed 0), each claim checked once per test run.

    Valid because a claim's result depends only on its id, the seed and the budget, not on which other
    claims are selected (geomjax.claims.run's contract; tests/acceptance/test_claims.py checks the key rule).
    The xdist workers share the results through the run folder: a worker checks the claims of one source
    (``song_zhong``, ``clock``, ...) under that source's file lock, in a child process at XLA's default
    optimisation (:func:`_check_claims_in_a_child`: registered source claims only), which pickles each result; a
    worker that needs them later (or waits on the lock) loads them. Results are shared: a test must not mutate them.
    """
    import pickle

    from filelock import FileLock

    import geomjax.claims as claims

    store = os.path.join(_RUN_DIR, "quick_claims")
    os.makedirs(store, exist_ok=True)
    done = {}

    def path(cid):
        return os.path.join(store, cid + ".pkl")

    def get(select):
        ids = [c.id for c in claims.select_claims(select)]
        for source in sorted({i.split(".", 1)[0] for i in ids if i not in done}):
            mine = [i for i in ids if i not in done and i.split(".", 1)[0] == source]
            with FileLock(os.path.join(store, source + ".lock")):
                todo = [i for i in mine if not os.path.exists(path(i))]
                if todo:
                    _check_claims_in_a_child(todo, store)
                for i in mine:
                    with open(path(i), "rb") as f:
                        done[i] = pickle.load(f)
        return [done[i] for i in sorted(ids)]

    return get


@pytest.fixture(scope="session")
def shakespeare_smoke():
    """The ``shakespeare``/``smoke`` training config (train.get_config)."""
    from geomjax import train

    return train.get_config("shakespeare", "smoke")


@pytest.fixture(scope="session")
def shakespeare_smoke_run(shakespeare_smoke, tmp_path_factory):
    """One uninterrupted smoke training run (60 steps, checkpoints at 30 and 60), trained once per session.

    Returns the :class:`geomjax.train.FitResult`; its ``run_dir`` is shared: tests only read it (a test
    that writes must copy it first).
    """
    from geomjax import train

    return train.fit(shakespeare_smoke, run_dir=tmp_path_factory.mktemp("shakespeare_smoke"), progress=False)
