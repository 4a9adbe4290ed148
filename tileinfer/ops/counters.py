"""Arrival counters for kernels whose last program finishes the work of the others (split-K GEMMs,
split-KV attention): one int32 per output tile, zero between launches, so no launch clears them."""

import torch

_COUNTERS: dict = {}
_RETIRED: list = []  # outgrown buffers stay allocated: CUDA graphs captured on them still replay
_MIN_COUNTERS = 1 << 16  # more than any model's output tiles, so the buffer is never outgrown in practice


def arrival_counters(device: torch.device, n: int) -> torch.Tensor:
    """At least `n` zeroed counters on `device`, kept for the process: each kernel that takes them counts
    its programs' arrivals and leaves them at 0 again."""
    counters = _COUNTERS.get(device)
    if counters is None or counters.numel() < n:
        if counters is not None:
            _RETIRED.append(counters)
        counters = _COUNTERS[device] = torch.zeros(max(n, _MIN_COUNTERS), dtype=torch.int32, device=device)
    return counters
