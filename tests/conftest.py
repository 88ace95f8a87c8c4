import os

import pytest
import torch

# Deterministic hypothesis profile for CI: a fixed number of examples, no deadline (2-core box).
try:
    from hypothesis import settings

    settings.register_profile("ci", max_examples=60, deadline=None, derandomize=False)
    settings.register_profile("dev", max_examples=200, deadline=None)
    settings.register_profile("stress", max_examples=3000, deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
except ImportError:  # pragma: no cover
    pass


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
