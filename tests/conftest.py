"""Test configuration: several CPU devices, strict rank promotion, highest matmul precision; and the
session-wide fixtures that let expensive results be computed once per test session.

The XLA flag must be set before JAX initialises its backend, so it is set at import time here.
"""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The geomjax command turns on JAX's persistent compilation cache; tests keep every compile fresh
# (tests/test_cli.py checks the cache switch itself with a temporary directory).
os.environ.setdefault("GEOMJAX_NO_COMPILE_CACHE", "1")
# Trained runs that geomjax caches under $GEOMJAX_CACHE (the clock claims' grokking models) go to a
# fresh folder per session: a test run neither reads nor fills ~/.cache/geomjax, so it costs here
# what it costs on a clean clone (CI).
_SESSION_CACHE = tempfile.mkdtemp(prefix="geomjax-test-cache-")
os.environ["GEOMJAX_CACHE"] = _SESSION_CACHE
atexit.register(shutil.rmtree, _SESSION_CACHE, True)

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_default_matmul_precision", "highest")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def n_devices() -> int:
    return jax.device_count()


@pytest.fixture(scope="session")
def quick_claims():
    """``get(select) -> list[ClaimResult]``: quick-budget results (seed 0), each claim checked once per session.

    Valid because a claim's result depends only on its id, the seed and the budget, not on which other
    claims are selected (geomjax.claims.run's contract; tests/test_claims.py checks the key rule).
    Results are shared: a test must not mutate them.
    """
    import geomjax.claims as claims

    done = {}

    def get(select):
        ids = [c.id for c in claims.select_claims(select)]
        todo = [i for i in ids if i not in done]
        if todo:
            done.update((r.id, r) for r in claims.run(select=todo, budget="quick", seed=0))
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
