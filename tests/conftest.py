"""Shared fixtures. CI is deterministic: every seed a test draws is fixed unless asked otherwise.

- ``seed`` (fixture): a fixed seed per test, crc32 of the test's node id, so ``make test`` draws the same
  problems on every run and every machine. ``SM120LAB_SEED=N`` replays one seed;
  ``SM120LAB_FRESH_SEEDS=1`` draws a fresh one per test (the recorded fresh-seed command,
  ``make fresh-seeds``: notes/correctness.md, "Deterministic CI").
- The global RNGs (``random``, numpy's legacy ``np.random``, torch's CPU/CUDA generators) are seeded
  with the same value before every test, so a test drawing from them is independent of test order.
- Hypothesis runs the ``ci`` profile: ``derandomize=True`` (examples from a hash of the test
  function) and no example database (a failure stored on one machine does not change another's run).
  Under ``SM120LAB_FRESH_SEEDS=1`` the ``fresh`` profile draws random examples; ``HYPOTHESIS_PROFILE``
  picks any profile explicitly.
"""

import os
import random
import zlib

import numpy as np
import pytest
import torch

FRESH_SEEDS = os.environ.get("SM120LAB_FRESH_SEEDS", "").strip() not in ("", "0")

try:
    from hypothesis import settings

    settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True, database=None)
    settings.register_profile("fresh", max_examples=60, deadline=None, derandomize=False, database=None)
    settings.register_profile("dev", max_examples=200, deadline=None)
    settings.register_profile("stress", max_examples=3000, deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("fresh" if FRESH_SEEDS else "ci"))
except ImportError:  # pragma: no cover
    pass


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_report_header(config):
    how = ("SM120LAB_SEED=" + os.environ["SM120LAB_SEED"] if os.environ.get("SM120LAB_SEED")
           else "fresh (SM120LAB_FRESH_SEEDS=1)" if FRESH_SEEDS else "fixed (crc32 of the test id)")
    return f"sm120lab seeds: {how}"


def fixed_seed(nodeid: str) -> int:
    """The seed a test gets in CI: crc32 of its node id (stable across runs, machines and Python versions)."""
    return zlib.crc32(nodeid.encode()) & 0x7FFFFFFF


def _test_seed(node) -> int:
    cached = getattr(node, "_sm120lab_seed", None)
    if cached is not None:
        return cached
    env = os.environ.get("SM120LAB_SEED")
    if env:
        value = int(env)
    elif FRESH_SEEDS:
        value = int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
    else:
        value = fixed_seed(node.nodeid)
    node._sm120lab_seed = value
    return value


@pytest.fixture(autouse=True)
def _seed_global_rngs(request):
    """Seed ``random``, ``np.random`` and torch with the test's seed (order-independent draws)."""
    s = _test_seed(request.node)
    random.seed(s)
    np.random.seed(s % 2**32)
    torch.manual_seed(s)
    yield


@pytest.fixture
def seed(request) -> int:
    """The test's seed (fixed in CI; module docstring), printed so a failure can be replayed.

    ``SM120LAB_SEED=N pytest ...`` replays one. The seed is shown in the failure report
    (``-ra`` prints captured stdout of failing tests) and attached to the test's report sections.
    """
    value = _test_seed(request.node)
    print(f"[seed] {request.node.nodeid}: SM120LAB_SEED={value}")
    request.node.user_properties.append(("seed", value))
    return value
