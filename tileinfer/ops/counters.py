"""Per-device scratch that kernels leave as they found it, so no launch clears it: arrival counters for
kernels whose last program finishes the work of the others (split-K GEMMs, split-KV attention; one int32
per output tile, zero between launches), and the argmax slots of the LM head's epilogue (int64, at
`argmax_keys.EMPTY` between launches)."""

import torch

from tileinfer.ops.argmax_keys import EMPTY

_KEPT: dict = {}
_RETIRED: list = []  # outgrown buffers stay allocated: CUDA graphs captured on them still replay
_MIN_COUNTERS = 1 << 16  # more than any model's output tiles, so the buffer is never outgrown in practice


def _kept(kind: str, device: torch.device, n: int, dtype: torch.dtype, fill: int) -> torch.Tensor:
    """At least `n` elements of `kind` on `device`, at `fill`, kept for the process."""
    device = torch.device(device)
    buf = _KEPT.get((kind, device))
    if buf is None or buf.numel() < n:
        if buf is not None:
            _RETIRED.append(buf)
        buf = _KEPT[(kind, device)] = torch.full((n,), fill, dtype=dtype, device=device)
    return buf


def arrival_counters(device: torch.device, n: int, apart: str | None = None) -> torch.Tensor:
    """At least `n` zeroed counters on `device`: each kernel that takes them counts its programs' arrivals
    and leaves them at 0 again. `apart`: a set of their own, named by the flow pair whose consumer takes
    them (`tileinfer.ops.flow`): it runs beside the kernel before it, which may still be counting on its own."""
    return _kept(f"counters {apart}" if apart else "counters", device, max(n, _MIN_COUNTERS), torch.int32, 0)


def argmax_slots(device: torch.device, n: int) -> torch.Tensor:
    """At least `n` int64 argmax slots at EMPTY on `device` (the LM head's epilogue leaves them so)."""
    return _kept("argmax", device, n, torch.int64, EMPTY)
