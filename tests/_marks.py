"""Test marks shared by several test files."""

from __future__ import annotations

import pytest


def slow_beyond_first(values) -> list:
    """Values for ``pytest.mark.parametrize`` whose first entry stays in the quick subset (``-m "not slow"``)
    and whose other entries are marked slow: one variant keeps the code path in the quick run, the full
    run (the README's command) checks them all."""
    values = list(values)
    return values[:1] + [pytest.param(v, marks=pytest.mark.slow) for v in values[1:]]
