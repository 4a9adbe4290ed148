"""Forced acceptance: committed tokens per step taken from a profile instead of the drafter's luck.

Random-weight checkpoints accept nothing, so benchmarks force a measured profile (e.g. the comparison's
7.1 tokens per step on the edit task) to time steps at a realistic acceptance; the tokens are then
meaningless and only the costs are real.
"""

import itertools
import math

from tileinfer.errors import RequestError


def accept_schedule(profile):
    """An endless iterator of tokens committed per step (≥ 1) whose running mean tracks `profile`."""
    if isinstance(profile, (int, float)):
        mean = float(profile)
        if not mean >= 1:
            raise RequestError(f"an accept profile's mean tokens per step must be ≥ 1, got {profile}")
        return _evenly(mean)
    counts = [int(c) for c in profile]
    if not counts or min(counts) < 1:
        raise RequestError("an accept profile must be a non-empty list of counts ≥ 1")
    return itertools.cycle(counts)


def _evenly(mean: float):
    total = 0.0
    for step in itertools.count(1):
        count = math.floor(mean * step + 1e-9) - math.floor(total + 1e-9)
        total += count
        yield max(1, count)
