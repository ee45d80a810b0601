"""Counting XLA compilations in a test (shared by the tests that check a program compiles once, or never)."""

from __future__ import annotations

import contextlib

import jax

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


@contextlib.contextmanager
def count_compiles():
    """Counts XLA backend compilations (jax.monitoring's compile event) inside the block: ``counter[0]``."""
    counter = [0]

    def listener(event, duration, **_):
        if event == COMPILE_EVENT:
            counter[0] += 1

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield counter
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
