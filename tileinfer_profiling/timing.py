"""Timing one call: inside a CUDA graph on a GPU, wall clock on a CPU; inputs rotated to defeat L2."""

import itertools
import math
import statistics
import time

import torch

L2_BYTES_GUESS = 60 * 2**20  # H200
MAX_COPIES = 32


def bench_us(fn, device, *, rep_ms=100, cpu_reps=3):
    """(median µs of fn(), timer label).

    GPU: `triton.testing.do_bench_cudagraph` — small kernels timed eagerly measure their launch
    (on an H200, one Qwen3-4B layer's cuBLAS linears took 92.7 µs eager against 67.3 µs in a graph). CPU: perf_counter over
    `cpu_reps` calls after one warm-up, labelled so.
    """
    device = torch.device(device)
    if device.type == "cuda":
        import triton.testing

        ms = triton.testing.do_bench_cudagraph(fn, rep=rep_ms, return_mode="median")
        return ms * 1e3, "cuda-graph median"
    fn()
    times = []
    for _ in range(cpu_reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6, "cpu wall-clock median"


def l2_bytes(device):
    device = torch.device(device)
    if device.type != "cuda":
        return 0
    props = torch.cuda.get_device_properties(device)
    return getattr(props, "L2_cache_size", 0) or L2_BYTES_GUESS


def copies_for(bytes_per_copy, device):
    """How many input copies to rotate so that consecutive calls never find their data in L2 (3 × L2)."""
    l2 = l2_bytes(device)
    if l2 == 0 or bytes_per_copy <= 0:
        return 1
    return max(2, min(MAX_COPIES, math.ceil(3 * l2 / bytes_per_copy)))


def rotating(pool):
    """A callable returning the next object of `pool`, round-robin.

    Under `do_bench_cudagraph` each unrolled call inside the graph captures a different copy.
    """
    cycle = itertools.cycle(pool)
    return lambda: next(cycle)
