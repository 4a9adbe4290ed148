"""Arrival counters for kernels whose last program finishes the work of the others (split-K GEMMs,
split-KV attention): one int32 per output tile, zero between launches, so no launch clears them."""

import torch

_COUNTERS: dict = {}


def arrival_counters(device: torch.device, n: int) -> torch.Tensor:
    """At least `n` zeroed counters on `device`, kept for the process: each kernel that takes them counts
    its programs' arrivals and leaves them at 0 again."""
    counters = _COUNTERS.get(device)
    if counters is None or counters.numel() < n:
        counters = _COUNTERS[device] = torch.zeros(max(n, 1024), dtype=torch.int32, device=device)
    return counters
