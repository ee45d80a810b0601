"""Test configuration: several CPU devices, strict rank promotion, highest matmul precision.

The XLA flag must be set before JAX initialises its backend, so it is set at import time here.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The geomjax command turns on JAX's persistent compilation cache; tests keep every compile fresh
# (tests/test_cli.py checks the cache switch itself with a temporary directory).
os.environ.setdefault("GEOMJAX_NO_COMPILE_CACHE", "1")

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_default_matmul_precision", "highest")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def n_devices() -> int:
    return jax.device_count()
