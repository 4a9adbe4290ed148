import os

import pytest
import torch

import tileinfer.ops  # noqa: F401  decides TRITON_INTERPRET before any test module imports triton

# Exact mode by default in the tests (the engine's default is on only for the embedded pair): greedy
# DFlash must return greedy decoding's tokens exactly.
os.environ.setdefault("TILEINFER_EXACT", "1")

HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU; skipped without one")
    config.addinivalue_line("markers", "slow: takes more than a few seconds on a CPU")


def pytest_collection_modifyitems(config, items):
    # Slow tests first: pytest-xdist hands tests out in this order, so the longest start at once
    # instead of setting the wall time at the end of a run.
    items.sort(key=lambda item: "slow" not in item.keywords)
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device():
    return DEVICE


def assert_close(actual, expected, atol, rtol, what=""):
    """allclose that says where it failed."""
    actual, expected = actual.float(), expected.float()
    ok = torch.isclose(actual, expected, atol=atol, rtol=rtol)
    if bool(ok.all()):
        return
    bad = (~ok).nonzero()
    first = tuple(bad[0].tolist())
    raise AssertionError(
        f"{what} mismatch at {bad.shape[0]} of {ok.numel()} elements; first at {first}: "
        f"{actual[first].item()} vs {expected[first].item()}; "
        f"max abs diff {(actual - expected).abs().max().item():.3e}"
    )
