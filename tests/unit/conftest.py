"""Tier ``unit``: pure functions against independent computations (NumPy/SciPy, closed forms, planted
cases), static checks of the source (layering, hygiene, shapes). Needs nothing beyond the package: no model
weights, no checkpoint, no PyTorch, no command-line run. Each file runs in seconds; ``pytest tests/unit``
is the tier to run while changing the mathematics."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/unit/" in str(item.fspath):
            item.add_marker(pytest.mark.unit)
