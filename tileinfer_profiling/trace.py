"""Kernel traces as DataFrames: which kernels ran, when, for how long, and in which step and layer.

`trace_kernels(fn)` runs `fn()` under torch.profiler and returns one row per GPU kernel; the
conversion itself, `kernels_from_events(events)`, is a pure function of the chrome trace that
`prof.export_chrome_trace` writes, so it can be tested on a recorded file.

Attribution: a kernel belongs to the `record_function` scopes (`tileinfer.tracing.annotate` with
`record_scopes()` on) that were open when it was launched: the launch (cuda_runtime / cuda_driver
event with the kernel's correlation id) is looked up inside the CPU-side user_annotation ranges of
its thread. Without launch events, the GPU-side gpu_user_annotation ranges that contain the
kernel's start are used. Kernels replayed from a CUDA graph carry no scopes of their own: attribute
from an eager run, use graph replays for totals and busy %.

On a machine without a GPU the trace has no kernels; the top-level CPU ops stand in for them, with
`device` "cpu".
"""

import json
import os
import re
import tempfile

import numpy as np
import pandas as pd

from tileinfer.tracing import PHASES
from tileinfer_profiling import quiet

KERNEL_CLASSES = ("attention", "gemm", "norm_rope", "other")
COLUMNS = ["name", "kernel_class", "start_us", "duration_us", "own_us", "end_us", "grid", "block", "stream",
           "device", "phase", "model", "layer", "part", "scope", "scopes"]

_LAYER_SCOPE = re.compile(r"^(?:(drafter)\.)?layer\.(\d+)\.(\w+)$")
# Order matters: flash-attention kernels built on CUTLASS contain both "flash" and "cutlass".
_CLASS_PATTERNS = (
    ("attention", re.compile(r"_decode_attention|_prefill_attention|_split_kv_attention|_merge_splits"
                             r"|flash|fmha|attention|attn|softmax", re.I)),
    # nvjet: cuBLAS's Hopper GEMMs; _widen/_scale_columns: an INT8 linear's passes around cuBLAS
    ("gemm", re.compile(r"_skinny_gemm|_splitk_reduce|_w8a16|gemm|gemv|cutlass|xmma|nvjet|_widen_kernel"
                        r"|_scale_columns|aten::(mm|addmm|bmm|matmul|linear|_int_mm)$|matmul", re.I)),
    ("norm_rope", re.compile(r"_rms_norm|_qk_norm_rope|rms_?norm|rope|rotary|layer_?norm", re.I)),
)
_LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")


def kernel_class(name):
    """attention, gemm, norm_rope or other, from a kernel (or CPU op) name."""
    for cls, pattern in _CLASS_PATTERNS:
        if pattern.search(name):
            return cls
    return "other"


def load_trace(path):
    """The event list of a chrome-trace JSON file (as `prof.export_chrome_trace` writes it)."""
    with open(path) as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def _complete(events, categories):
    cats = set(categories)
    return [e for e in events if e.get("ph") == "X" and str(e.get("cat", "")).lower() in cats]


def _enclosing(points, intervals):
    """For each time in `points`, the names of `intervals` (start, end, name) containing it, outer first."""
    order = np.argsort(points, kind="stable")
    intervals = sorted(intervals, key=lambda iv: (iv[0], -iv[1]))
    out = [()] * len(points)
    stack, i = [], 0
    for p in order:
        t = points[p]
        while i < len(intervals) and intervals[i][0] <= t:
            stack.append(intervals[i])
            i += 1
        stack = [iv for iv in stack if iv[1] > t]
        out[p] = tuple(iv[2] for iv in stack)
    return out


def _scope_intervals(annotations, key):
    groups = {}
    for e in annotations:
        groups.setdefault(key(e), []).append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), e["name"]))
    return groups


def _attribute(scopes):
    """phase, model, layer, part from the scope names around a kernel (outer first)."""
    phase = model = part = None
    layer = np.nan
    for name in reversed(scopes):
        m = _LAYER_SCOPE.match(name)
        if m and model is None:
            model = "drafter" if m.group(1) else "target"
            layer, part = int(m.group(2)), m.group(3)
            if m.group(1) and phase is None:
                phase = "drafter"
        elif name in PHASES and phase is None:
            phase = name
    if model is None and phase is not None:
        model = "drafter" if phase == "drafter" else "target"
    return phase, model, layer, part


def _top_level_cpu_ops(ops):
    """CPU ops not inside another op of their thread (aten::linear, not the aten::mm it calls)."""
    top = []
    by_thread = {}
    for e in ops:
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for thread_ops in by_thread.values():
        thread_ops.sort(key=lambda e: (float(e["ts"]), -float(e.get("dur", 0))))
        open_until = float("-inf")
        for e in thread_ops:
            if float(e["ts"]) >= open_until:
                top.append(e)
                open_until = float(e["ts"]) + float(e.get("dur", 0))
    return top


def _dims(value):
    if isinstance(value, (list, tuple)) and value:
        return tuple(int(v) for v in value)
    return None


def kernels_from_events(events, cpu_ops=None):
    """One row per GPU kernel in a chrome trace, with its phase/layer attribution (see module doc).

    `cpu_ops`: use top-level CPU ops instead of kernels (device "cpu"); by default only when the trace has
    no kernels. Times are µs from the first kernel's start.
    """
    if isinstance(events, dict):
        events = events["traceEvents"]
    kernels = _complete(events, ("kernel",))
    on_cpu = (not kernels) if cpu_ops is None else cpu_ops
    if on_cpu:
        kernels = _top_level_cpu_ops(_complete(events, ("cpu_op",)))
    if not kernels:
        return pd.DataFrame(columns=COLUMNS)

    cpu_scopes = _scope_intervals(_complete(events, ("user_annotation",)), lambda e: (e.get("pid"), e.get("tid")))
    gpu_scopes = _scope_intervals(_complete(events, ("gpu_user_annotation",)), lambda e: e.get("pid"))

    # Where each kernel was launched from: (thread, time) of its runtime/driver call.
    launches = {}
    for e in _complete(events, _LAUNCH_CATEGORIES):
        corr = (e.get("args") or {}).get("correlation")
        if corr is not None:
            launches[corr] = ((e.get("pid"), e.get("tid")), float(e["ts"]))

    scopes = [()] * len(kernels)
    by_thread = {}
    for idx, k in enumerate(kernels):
        corr = (k.get("args") or {}).get("correlation")
        if on_cpu:
            by_thread.setdefault((k.get("pid"), k.get("tid")), []).append((idx, float(k["ts"])))
        elif corr in launches:
            thread, t = launches[corr]
            by_thread.setdefault(thread, []).append((idx, t))
    for thread, items in by_thread.items():
        for (idx, _), names in zip(items, _enclosing([t for _, t in items], cpu_scopes.get(thread, []))):
            scopes[idx] = names
    # No launch event, or launched outside every CPU scope: the GPU-side ranges containing its start.
    if not on_cpu and gpu_scopes:
        by_device = {}
        for idx, k in enumerate(kernels):
            if not scopes[idx]:
                by_device.setdefault(k.get("pid"), []).append(idx)
        for pid, items in by_device.items():
            found = _enclosing([float(kernels[i]["ts"]) for i in items], gpu_scopes.get(pid, []))
            for idx, names in zip(items, found):
                scopes[idx] = names

    rows = []
    for k, names in zip(kernels, scopes):
        args = k.get("args") or {}
        phase, model, layer, part = _attribute(names)
        start, dur = float(k["ts"]), float(k.get("dur", 0))
        rows.append({
            "name": k["name"], "kernel_class": kernel_class(k["name"]),
            "start_us": start, "duration_us": dur, "end_us": start + dur,
            "grid": _dims(args.get("grid")), "block": _dims(args.get("block")),
            "stream": args.get("stream", k.get("tid")),
            "device": "cpu" if on_cpu else f"cuda:{args.get('device', k.get('pid'))}",
            "phase": phase, "model": model, "layer": layer, "part": part,
            "scope": names[-1] if names else None, "scopes": "/".join(names),
        })
    df = pd.DataFrame(rows, columns=COLUMNS).sort_values("start_us", kind="stable").reset_index(drop=True)
    t0 = df["start_us"].min()
    df["start_us"] -= t0
    df["end_us"] -= t0
    df["own_us"] = own_times(df)
    df["layer"] = df["layer"].astype("float64")
    return df


def own_times(df):
    """Each kernel's time beyond the kernels that started before it on its device: its duration less its
    overlap with them (0 when it ends inside them). With Programmatic Dependent Launch a kernel starts
    while the one before it runs and waits for it, so durations overlap and their sum exceeds the wall
    time; own times partition the device's busy time, each interval charged to the kernel that ends it."""
    own = df["duration_us"].to_numpy(dtype=float).copy()
    starts, ends = df["start_us"].to_numpy(dtype=float), df["end_us"].to_numpy(dtype=float)
    for idx in df.groupby("device", sort=False).indices.values():
        idx = idx[np.argsort(starts[idx], kind="stable")]
        before = np.maximum.accumulate(np.concatenate([[-np.inf], ends[idx][:-1]]))
        # from the duration, not end − start: a kernel that overlaps nothing keeps it exactly (epoch
        # timestamps in µs carry only ~0.25 µs in a float64)
        own[idx] -= np.clip(before - starts[idx], 0.0, own[idx])
    return own


def _trace(fn, warmup=1):
    """(kernel DataFrame, fn's result) of one profiled call of fn after `warmup` plain ones."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    # torch's profiler announces its start and stop on fd 2 ("USDT: ..."): dropped, other lines kept
    with quiet.dropping_lines(), profile(activities=activities) as prof:
        result = fn()
        if cuda:
            torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        events = load_trace(path)
    finally:
        os.unlink(path)
    return kernels_from_events(events), result


def trace_kernels(fn, *, warmup=1, label=None):
    """Run `fn()` `warmup` times, then once under torch.profiler; every kernel it ran as a DataFrame.

    Columns: name, kernel_class, start_us, duration_us, own_us (`own_times`), end_us, grid, block, stream,
    device, phase, model ("target"/"drafter"), layer (float, NaN outside layers), part ("attention"/"mlp"),
    scope (innermost), scopes (all, "/"-joined), label. Without a GPU: top-level CPU ops, device "cpu".
    """
    df, _ = _trace(fn, warmup)
    df["label"] = label
    return df

