"""Tier ``acceptance``: end-to-end runs as a user meets them (the CLI's errors and run directories, the
guides as written, the study's golden metrics, the recorded verdicts and the erratum, the committed
experiment reports) and the outside references: Hugging Face ``transformers`` (PyTorch) on tiny random
checkpoints written in the test, the authors' numbers. Tests that need PyTorch carry the ``torch`` mark
and skip where it is not installed (tests/conftest.py says why)."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/acceptance/" in str(item.fspath):
            item.add_marker(pytest.mark.acceptance)
