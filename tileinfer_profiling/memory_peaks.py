"""Peak bytes a call allocates on its device: what the memory plan is checked against.

The plan counts tensors: each one's bytes rounded to the CUDA caching allocator's 512-B granule. On
CUDA the peak is taken from the allocator's own trace of the call, as requested. The allocator's block
statistics (`torch.cuda.max_memory_allocated`) can be higher by up to 1 MiB per large tensor: it hands
out a block whole when the rest would be 1 MiB or less, so what a tensor is charged depends on the
segments earlier calls left cached. The plan covers that separately, in its allocator share.
"""

import gc
from contextlib import contextmanager

import torch

from tileinfer.activations import CUDA_ALLOCATION_BYTES

# A plan covers a measured peak when measured <= plan <= max(PLAN_MARGIN × measured, measured + PLAN_SLACK):
# at tiny shapes the plan may hold a few more 512-B allocator granules than one call measured.
PLAN_MARGIN = 1.10
PLAN_SLACK = 4 * 1024


def plan_covers(planned: int, measured: int) -> bool:
    return measured <= planned <= max(PLAN_MARGIN * measured, measured + PLAN_SLACK)


def measure_peak_bytes(fn, device) -> tuple[object, int]:
    """(fn(), peak bytes of the tensors the call allocated above what was allocated before it).

    CUDA: from the caching allocator's trace (`traced_peak`). CPU: the allocation events of torch.profiler,
    with the Triton interpreter's garbage collected after each launch, on one thread: CPU kernels on
    several threads allocate per-thread scratch (2 threads added 1,851 B to a 52 KB prefill), which
    the plan leaves out.
    """
    device = torch.device(device)
    if device.type == "cuda":
        result, peak, _ = traced_peak(fn, device)
        return result, peak
    from torch.profiler import ProfilerActivity, profile
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with _interpreter_cycles_collected(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            result = fn()
    finally:
        torch.set_num_threads(threads)
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return result, peak


@contextmanager
def _interpreter_cycles_collected():
    """Each launch of the Triton interpreter leaves reference cycles (its nested `_to_cpu`/`_from_cpu`
    closures) that keep the launch's tensors until Python's cyclic GC runs, so a CPU peak would depend on
    when it runs (the same step read 16,580 B to 66,108 B). Collecting after every launch frees them when
    the kernel is done, as on a GPU."""
    from tileinfer.ops import INTERPRET
    gc.collect()
    if not INTERPRET:
        yield
        return
    from triton.runtime import interpreter
    call = interpreter.GridExecutor.__call__

    def collected(self, *args, **kwargs):
        try:
            return call(self, *args, **kwargs)
        finally:
            gc.collect()

    interpreter.GridExecutor.__call__ = collected
    try:
        yield
    finally:
        interpreter.GridExecutor.__call__ = call


def block_peak_bytes(fn, device) -> int:
    """Peak of the allocator's blocks during one CUDA call above what was allocated before it
    (torch.cuda.max_memory_allocated): the tensors plus the unsplit rests of whole blocks."""
    device = torch.device(device)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


def traced_peak(fn, device) -> tuple[object, int, list[dict]]:
    """(fn(), peak of the call's live tensors in 512-B granules, the allocations live at that peak) on
    CUDA, from the caching allocator's trace of the call (Python stacks recorded)."""
    device = torch.device(device)
    torch.cuda.synchronize(device)
    torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python", device=device)
    try:
        result = fn()
        torch.cuda.synchronize(device)
        snapshot = torch.cuda.memory._snapshot(device)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None, device=device)
    live, total, peak, at_peak = {}, 0, 0, []
    for event in snapshot["device_traces"][device.index if device.index is not None else torch.cuda.current_device()]:
        if event["action"] == "alloc":
            live[event["addr"]] = event
            total += _granules(event["size"])
        elif event["action"] in ("free_requested", "free_completed") and event["addr"] in live:
            total -= _granules(live.pop(event["addr"])["size"])
        if total > peak:
            peak, at_peak = total, list(live.values())
    return result, peak, at_peak


def live_at_peak(fn, device, top: int = 12) -> tuple[int, list[tuple[int, str]]]:
    """(peak bytes of one CUDA call, the `top` largest tensors live at that peak as (bytes, where));
    `where` names the code that allocated the tensor."""
    _, peak, blocks = traced_peak(fn, device)
    blocks = sorted(blocks, key=lambda e: -e["size"])[:top]
    return peak, [(e["size"], _where(e.get("frames", []))) for e in blocks]


def _granules(n: int) -> int:
    return -(-n // CUDA_ALLOCATION_BYTES) * CUDA_ALLOCATION_BYTES


def _where(frames) -> str:
    """The innermost frame of our code (not a library's, not this module's), as dir/file:line function."""
    for f in frames:
        name = f.get("filename", "")
        if name.endswith(".py") and "-packages" not in name and "/lib/python" not in name \
                and not name.endswith("memory_peaks.py"):
            return f"{'/'.join(name.split('/')[-2:])}:{f.get('line')} {f.get('name')}"
    return "?"
