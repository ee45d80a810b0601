"""Tier ``integration``: the parts put together: model ports on committed goldens, checkpoints written and
read, training loops and their exact resume, the command line on small sizes, the docs' API examples.
Needs the offline assets the bootstrap installs (MiniLM's weights, GPT-2's BPE files, the bundled
corpora), never the network and never PyTorch."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
