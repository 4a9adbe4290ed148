import itertools
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


def _worksteal_workers(config) -> int:
    """The workers of a `-n N --dist worksteal` run this worker belongs to; 0 otherwise. (A worker's own
    options say `--dist no`; its controller's command line says how tests are handed out.)"""
    argv = " ".join(getattr(config, "workerinput", {}).get("mainargv", []))
    if "worksteal" not in argv:
        return 0
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))


def slow_first(items: list, workers: int = 0) -> list:
    """Items ordered so the slow tests start at once instead of setting the wall time at the end of a run.
    pytest-xdist's load scheduler hands tests out round-robin in collection order: slow tests go first.
    Its worksteal scheduler gives each of `workers` workers one contiguous share and steals from the
    shares' ends: each share starts with its part of the slow tests."""
    slow = [item for item in items if "slow" in item.keywords]
    rest = iter(item for item in items if "slow" not in item.keywords)
    if workers < 2:
        return slow + list(rest)
    ordered, left = [], len(items)
    for k in range(workers):  # the sizes the scheduler cuts: what is left, split evenly among the rest
        size = left // (workers - k)
        mine = slow[k::workers]
        ordered += mine + list(itertools.islice(rest, max(0, size - len(mine))))
        left -= size
    return ordered + list(rest)


def pytest_collection_modifyitems(config, items):
    items[:] = slow_first(items, _worksteal_workers(config))
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
