"""Peak bytes a call allocates on its device: what the memory plan is checked against."""

import torch


def measure_peak_bytes(fn, device) -> tuple[object, int]:
    """(fn(), peak bytes allocated during the call above what was allocated before it).

    CUDA: the caching allocator's peak (torch.cuda.max_memory_allocated, blocks as allocated, rounded).
    CPU: the allocation events of torch.profiler (tensors only).
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        result = fn()
        torch.cuda.synchronize(device)
        return result, torch.cuda.max_memory_allocated(device) - before
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return result, peak
