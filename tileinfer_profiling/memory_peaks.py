"""Peak bytes a call allocates on its device: what the memory plan is checked against."""

import torch

# A plan covers a measured peak when measured <= plan <= max(PLAN_MARGIN × measured, measured + PLAN_SLACK):
# at tiny shapes the plan may hold a few more 512-B allocator granules than one call measured.
PLAN_MARGIN = 1.10
PLAN_SLACK = 4 * 1024


def plan_covers(planned: int, measured: int) -> bool:
    return measured <= planned <= max(PLAN_MARGIN * measured, measured + PLAN_SLACK)


def measure_peak_bytes(fn, device) -> tuple[object, int]:
    """(fn(), peak bytes allocated during the call above what was allocated before it).

    CUDA: the caching allocator's peak (torch.cuda.max_memory_allocated, blocks as allocated, rounded),
    from an emptied cache: a cached block reused whole counts its unsplit remainder (up to 1 MiB) as
    allocated, which depends on what ran before, not on the call.
    CPU: the allocation events of torch.profiler (tensors only).
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
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


def live_at_peak(fn, device, top: int = 12) -> tuple[int, list[tuple[int, str]]]:
    """(peak bytes above the start, the `top` largest blocks live at that peak as (bytes, where)) of one
    CUDA call, from the caching allocator's trace; `where` names the code that allocated the block."""
    device = torch.device(device)
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python", device=device)
    try:
        fn()
        torch.cuda.synchronize(device)
        snapshot = torch.cuda.memory._snapshot(device)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None, device=device)
    trace = snapshot["device_traces"][device.index or 0]
    live, total, peak, at_peak = {}, 0, 0, {}
    for event in trace:
        if event["action"] == "alloc":
            live[event["addr"]] = event
            total += event["size"]
        elif event["action"] in ("free_requested", "free_completed") and event["addr"] in live:
            total -= live.pop(event["addr"])["size"]
        if total > peak:
            peak, at_peak = total, dict(live)
    blocks = sorted(at_peak.values(), key=lambda e: -e["size"])[:top]
    return peak, [(e["size"], _where(e.get("frames", []))) for e in blocks]


def _where(frames) -> str:
    """The innermost frame of our code (not a library's, not this module's), as dir/file:line function."""
    for f in frames:
        name = f.get("filename", "")
        if name.endswith(".py") and "-packages" not in name and "/lib/python" not in name \
                and not name.endswith("memory_peaks.py"):
            return f"{'/'.join(name.split('/')[-2:])}:{f.get('line')} {f.get('name')}"
    return "?"
