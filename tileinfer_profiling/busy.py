"""How busy the GPU was: the union of kernel intervals over a window of time."""

import numpy as np
import pandas as pd


def _pairs(intervals):
    if isinstance(intervals, pd.DataFrame):
        return intervals[["start_us", "end_us"]].to_numpy(dtype=float)
    arr = np.asarray(list(intervals), dtype=float)
    return arr.reshape(-1, 2)


def busy_time(intervals, window=None):
    """Length of the union of (start, end) intervals, clipped to window (start, end)."""
    arr = _pairs(intervals)
    if window is not None:
        lo, hi = window
        arr = np.clip(arr, lo, hi)
    arr = arr[arr[:, 1] > arr[:, 0]]
    if len(arr) == 0:
        return 0.0
    arr = arr[np.argsort(arr[:, 0], kind="stable")]
    total, cur_start, cur_end = 0.0, arr[0, 0], arr[0, 1]
    for start, end in arr[1:]:
        if start > cur_end:
            total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    return float(total + cur_end - cur_start)


def busy_fraction(intervals, window=None):
    """Union of the kernel intervals ÷ the window's length (0…1).

    `intervals`: (start, end) pairs or a kernel DataFrame (start_us, end_us). `window`: (start, end);
    by default from the first start to the last end. Overlapping kernels (several streams) count once.
    """
    arr = _pairs(intervals)
    if window is None:
        if len(arr) == 0:
            return float("nan")
        window = (arr[:, 0].min(), arr[:, 1].max())
    length = window[1] - window[0]
    if length <= 0:
        return float("nan")
    return busy_time(arr, window) / length


def busy_by_phase(df, phases=None):
    """Busy fraction of each phase's own span (first kernel start to last kernel end of that phase)."""
    rows = []
    for phase, group in df.groupby(df["phase"].fillna("unattributed")):
        if phases is not None and phase not in phases:
            continue
        window = (group["start_us"].min(), group["end_us"].max())
        rows.append({"phase": phase, "busy_fraction": busy_fraction(group, window),
                     "span_ms": (window[1] - window[0]) / 1e3, "kernel_ms": group["own_us"].sum() / 1e3})
    return pd.DataFrame(rows, columns=["phase", "busy_fraction", "span_ms", "kernel_ms"])


def idle_gaps(df, steps=1):
    """Where the GPU idled between kernels, per pair of kernels around each gap: `before` (the kernel that
    ended last before the gap), `after` (the one that ended it), the gaps' µs per step, how many per step
    and their mean; most idle first. `df`: a kernel DataFrame (name, start_us, end_us) on one device, e.g.
    a step's graph replays, where the idle is graph launches, copies to the host and waits on it."""
    columns = ["before", "after", "us_per_step", "per_step", "mean_us"]
    k = df.sort_values("start_us", kind="stable")
    if len(k) < 2:
        return pd.DataFrame(columns=columns)
    starts, ends = k["start_us"].to_numpy(dtype=float), k["end_us"].to_numpy(dtype=float)
    names = k["name"].to_numpy()
    last = np.maximum.accumulate(ends)
    # index of the kernel whose end is the running maximum: the latest one to reach it
    reached = np.where(ends >= last, np.arange(len(k)), 0)
    ended_by = names[np.maximum.accumulate(reached)]
    gap = starts[1:] - last[:-1]
    idle = gap > 0
    gaps = pd.DataFrame({"before": ended_by[:-1][idle], "after": names[1:][idle], "us": gap[idle]})
    if gaps.empty:
        return pd.DataFrame(columns=columns)
    out = gaps.groupby(["before", "after"], sort=False)["us"].agg(["sum", "count", "mean"]).reset_index()
    out = out.rename(columns={"sum": "us_per_step", "count": "per_step", "mean": "mean_us"})
    out[["us_per_step", "per_step"]] /= steps
    return out.sort_values("us_per_step", ascending=False, kind="stable").reset_index(drop=True)[columns]
