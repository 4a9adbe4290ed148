"""Sums over a kernel DataFrame (from `trace_kernels`): per layer, per kernel class, GEMM vs attention; times
are own times (`trace.own_times`), which add up to the GPU's busy time where launches overlap."""

from tileinfer_profiling.trace import KERNEL_CLASSES


def per_layer(df, steps=1):
    """Kernel time per (model, layer, part, kernel_class), in ms per step; rows outside layers dropped."""
    inside = df[df["layer"].notna()]
    out = (inside.groupby(["model", "layer", "part", "kernel_class"], dropna=False)
           .agg(time_ms=("own_us", "sum"), kernels=("own_us", "size")).reset_index())
    out["time_ms"] = out["time_ms"] / 1e3 / steps
    out["kernels"] = out["kernels"] / steps
    out["layer"] = out["layer"].astype(int)
    return out.sort_values(["model", "layer", "part", "kernel_class"], ascending=[False, True, True, True],
                           ignore_index=True)


def per_class(df, steps=1):
    """Kernel time per (phase, kernel_class) in ms per step, with each row's share of the total."""
    phase = df["phase"].fillna("unattributed")
    out = (df.assign(phase=phase).groupby(["phase", "kernel_class"])
           .agg(time_ms=("own_us", "sum"), kernels=("own_us", "size")).reset_index())
    total = out["time_ms"].sum()
    out["share"] = out["time_ms"] / total if total else float("nan")
    out["time_ms"] = out["time_ms"] / 1e3 / steps
    out["kernels"] = out["kernels"] / steps
    return out


def gemm_vs_attention_ms(df, steps, exclude=("prefill",)):
    """ms per step of each kernel class (columns) in each phase (rows), plus a "step" row summing them.

    Prefill runs once per generation, so it is left out by default.
    """
    kept = df[~df["phase"].isin(exclude)] if exclude else df
    table = per_class(kept, steps).pivot_table(index="phase", columns="kernel_class", values="time_ms",
                                              aggfunc="sum", fill_value=0.0)
    table = table.reindex(columns=list(KERNEL_CLASSES), fill_value=0.0)
    table.loc["step"] = table.sum()
    table["total"] = table[list(KERNEL_CLASSES)].sum(axis=1)
    table.columns.name = None
    return table


def kernel_table(kernels, steps, top=None):
    """The kernels of a decoding step (prefill left out), largest first, `top` of them (None: all): calls and
    ms per step, mean µs, share. Own times (`trace.own_times`): with PDL a kernel's duration includes its
    wait for the one before it."""
    k = kernels[kernels["phase"] != "prefill"].assign(phase=lambda d: d["phase"].fillna("unattributed"))
    t = (k.groupby(["phase", "name", "kernel_class"])
         .agg(calls=("own_us", "size"), total_us=("own_us", "sum")).reset_index())
    t["calls_per_step"] = t["calls"] / steps
    t["ms_per_step"] = t["total_us"] / 1e3 / steps
    t["mean_us"] = t["total_us"] / t["calls"]
    t["share"] = t["total_us"] / t["total_us"].sum()
    t = t.sort_values("ms_per_step", ascending=False)
    t = t if top is None else t.head(top)
    return t[["phase", "name", "kernel_class", "calls_per_step", "ms_per_step", "mean_us", "share"]].round(4)
