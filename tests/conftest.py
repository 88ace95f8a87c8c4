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


@pytest.fixture
def seed(request) -> int:
    """A fresh random seed per test, printed so a failure can be replayed.

    ``SM120LAB_SEED=N pytest ...`` replays one. The seed is shown in the failure report
    (``-ra`` prints captured stdout of failing tests) and attached to the test's report sections.
    """
    env = os.environ.get("SM120LAB_SEED")
    value = int(env) if env else int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
    print(f"[seed] {request.node.nodeid}: SM120LAB_SEED={value}")
    request.node.user_properties.append(("seed", value))
    return value
