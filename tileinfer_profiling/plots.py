"""Plotly figures of the profiling DataFrames; each returns a `go.Figure` and computes nothing itself."""

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tileinfer_profiling.aggregate import per_layer
from tileinfer_profiling.generation import TIME_PARTS


def _device_note(df):
    if "gpu" in df.columns and len(df):
        return f" — {', '.join(sorted(set(map(str, df['gpu']))))}"
    if "device" in df.columns and len(df) and (df["device"] == "cpu").all():
        return " — cpu"
    return ""


def per_layer_figure(data, by="part", steps=1, title="Kernel time per layer"):
    """Stacked bars: ms per step of each layer, one trace per `by` value ("part" or "kernel_class").

    `data`: a kernel DataFrame (from `trace_kernels`) or a `per_layer` table. Drafter layers are "D0…";
    a trace without layer ranges gives a figure that says so.
    """
    table = per_layer(data, steps) if "duration_us" in data.columns else data
    if not len(table):
        fig = go.Figure()
        fig.add_annotation(text="no layer.N.* ranges in this trace (the engine emits them at trace level 'layer')",
                           showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
        fig.update_layout(title=title, height=250)
        return fig
    table = table.assign(x=[("D" if m == "drafter" else "L") + str(int(i)) for m, i in zip(table["model"], table["layer"])])
    order = list(dict.fromkeys(table.sort_values(["model", "layer"], ascending=[False, True])["x"]))
    fig = go.Figure()
    for value, group in table.groupby(by):
        sums = group.groupby("x")["time_ms"].sum().reindex(order, fill_value=0.0)
        fig.add_bar(x=order, y=sums.values, name=str(value))
    fig.update_layout(barmode="stack", title=title, xaxis_title="layer (L: target, D: drafter)",
                      yaxis_title="kernel time per step (ms)", legend_title=by)
    return fig


def split_curves_figure(df, title="Attention time against the split count"):
    """One line per (kv_len, q_len) of our attention's time over num_splits, with SDPA as a dashed line."""
    fig = go.Figure()
    ours = df[df["impl"] == "ours"]
    splits = sorted(ours["num_splits"].unique())
    for (kv_len, q_len), group in ours.groupby(["kv_len", "q_len"]):
        group = group.sort_values("num_splits")
        fig.add_scatter(x=group["num_splits"], y=group["time_us"], mode="lines+markers",
                        name=f"ours kv {kv_len}, q {q_len}", legendgroup=f"{kv_len}-{q_len}")
        sdpa = df[(df["impl"] == "sdpa") & (df["kv_len"] == kv_len) & (df["q_len"] == q_len)]
        if len(sdpa) and splits:
            t = float(sdpa["time_us"].iloc[0])
            fig.add_scatter(x=[splits[0], splits[-1]], y=[t, t], mode="lines", line=dict(dash="dash"),
                            name=f"SDPA kv {kv_len}, q {q_len}", legendgroup=f"{kv_len}-{q_len}")
    fig.update_xaxes(type="log", tickvals=splits, title="num_splits")
    fig.update_layout(title=title + _device_note(df), yaxis_title="time (µs, median)")
    return fig


def gemm_bandwidth_figure(df, ceilings=None, title="Linear layers: achieved bandwidth"):
    """Grouped bars of GB/s per shape and M, one trace per (impl, weights), against the measured read ceiling."""
    df = df.assign(x=[f"{s} m={m}" for s, m in zip(df["shape"], df["m"])])
    order = list(dict.fromkeys(df["x"]))
    fig = go.Figure()
    for (impl, weights), group in df.groupby(["impl", "weights"]):
        g = group.set_index("x")["gbs"].reindex(order)
        fig.add_bar(x=order, y=g.values, name=f"{impl} {weights}")
    read = None
    if ceilings is not None:
        read = ceilings.get("read_gbs") if isinstance(ceilings, dict) else ceilings.read_gbs
    if read:
        fig.add_scatter(x=order, y=[read] * len(order), mode="lines", line=dict(dash="dash", color="black"),
                        name=f"measured read ceiling {read:.0f} GB/s")
    fig.update_layout(barmode="group", title=title + _device_note(df), xaxis_title="shape",
                      yaxis_title="GB/s (weight + activation bytes ÷ time)")
    return fig


def tokens_per_step_figure(tokens_per_step, title="Tokens committed per step"):
    """Histogram of the tokens each DFlash step committed (accepted drafts + 1)."""
    counts = np.bincount(np.asarray(list(tokens_per_step), dtype=int)) if len(tokens_per_step) else np.zeros(1)
    xs = list(range(1, len(counts)))
    mean = float(np.mean(tokens_per_step)) if len(tokens_per_step) else math.nan
    fig = go.Figure(go.Bar(x=xs, y=counts[1:], name="steps"))
    fig.update_layout(title=f"{title} (mean {mean:.2f})", xaxis_title="tokens committed in the step",
                      yaxis_title="steps", bargap=0.1)
    return fig


def step_breakdown_figure(table, title="Kernel time per step, by phase and class"):
    """Stacked bars from `gemm_vs_attention_ms`: one bar per phase, one trace per kernel class."""
    table = table.drop(index="step", errors="ignore")
    fig = go.Figure()
    for cls in [c for c in table.columns if c != "total"]:
        fig.add_bar(x=list(table.index), y=table[cls].values, name=cls)
    fig.update_layout(barmode="stack", title=title, xaxis_title="phase", yaxis_title="ms per step")
    return fig


def _point_order(x):
    """Sort key of "1k edit bf16"-like labels: the benchmark's points by prompt length, then the rest."""
    from tileinfer_profiling.prompts import POINTS
    point, _, rest = x.partition(" ")
    return (POINTS[point].prompt_tokens if point in POINTS else math.inf, point, rest)


def reference_figure(fractions, title="DFlash decode against each GPU's memory bandwidth", bandwidth=""):
    """Grouped bars from `reference_fractions` (or `compare.bandwidth_comparison`): one trace per engine × GPU
    (named by a `label` column where there is one), one group per point/task/weights, in point order."""
    df = fractions.assign(x=[f"{p} {t} {w}" for p, t, w in zip(fractions["point"], fractions["task"],
                                                                fractions["weights"])])
    if "label" not in df:
        df["label"] = [f"{e} · {g}" for e, g in zip(df["engine"], df["gpu"])]
    order = sorted(dict.fromkeys(df["x"]), key=_point_order)
    fig = go.Figure()
    for label, group in df.groupby("label", sort=False):
        g = group.groupby("x")["bandwidth_fraction"].mean().reindex(order)
        fig.add_bar(x=order, y=g.values, name=label)
    which = f"{bandwidth} bandwidth" if bandwidth else "memory bandwidth"
    fig.update_layout(barmode="group", title=title, xaxis_title="prompt length, task, weights",
                      yaxis_title=f"fraction of the GPU's {which}<br>(bytes per step ÷ step time ÷ bandwidth)",
                      yaxis_range=[0, 1])
    return fig


def compiled_figure(df, title="Registers per thread and resident blocks per SM, per kernel and launch site"):
    """Two bar rows from `tileinfer_profiling.compiled.compile_cases`: registers (spilling kernels marked) and blocks per SM."""
    from plotly.subplots import make_subplots
    labels = [f"{op} {shape} M={m} {kind}".strip() + f" · {kernel.strip('_')}"
              for op, shape, m, kind, kernel in zip(df["op"], df["shape"], df["m"], df["kind"], df["kernel"])]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        subplot_titles=("registers per thread (red: spills to local memory)", "resident blocks per SM"))
    colors = ["crimson" if b else "steelblue" for b in df["local_bytes"] > 0]
    fig.add_bar(x=labels, y=df["regs"], marker_color=colors, name="registers", row=1, col=1)
    fig.add_bar(x=labels, y=df["blocks_per_sm"], name="blocks per SM", marker_color="seagreen", row=2, col=1)
    target = df["target"].iloc[0] if len(df) else ""
    fig.update_layout(title=f"{title} ({target}, compiled, not run)", showlegend=False, height=760)
    return fig


def time_split_figure(table, title="Where the time went"):
    """Stacked bars of prefill / drafter / verify / accept / other ms per mode (rows of `generate_both`)."""
    fig = go.Figure()
    for part in TIME_PARTS:
        fig.add_bar(x=list(table.index), y=table[part].values, name=part.removesuffix("_ms"))
    fig.update_layout(barmode="stack", title=title, yaxis_title="ms (whole generation)", height=380)
    return fig


def acceptance_histogram_figure(runs, title="Tokens committed per step"):
    """Grouped bars of committed tokens per step, one trace per point × task (rows of `acceptance_runs`)."""
    fig = go.Figure()
    for _, r in runs.iterrows():
        counts = pd.Series(r["tokens_per_step"]).value_counts().sort_index()
        fig.add_bar(x=counts.index.tolist(), y=counts.values.tolist(),
                    name=f"{r['point']} {r['task']} (mean {r['mean_tokens_per_step']:.2f})")
    fig.update_layout(barmode="group", title=title, xaxis_title="tokens committed in the step (accepted + 1)",
                      yaxis_title="steps", height=380)
    return fig


def acceptance_comparison_figure(runs, reference_tps, weights="bf16", label="this run"):
    """Mean tokens per step per point × task: `runs` (`acceptance_runs`, may be None) beside the
    comparison's engines (`reference_tokens_per_step`) at `weights`."""
    ref = reference_tps[reference_tps["weights"] == weights]
    order = [f"{p} {t}" for p in ("1k", "8k") for t in ("edit", "explain")]
    fig = go.Figure()
    for (engine, gpu), g in ref.groupby(["engine", "gpu"], sort=False):
        y = g.assign(x=g["point"] + " " + g["task"]).set_index("x")["tokens_per_step"].reindex(order)
        fig.add_bar(x=order, y=y.values, name=f"{engine} · {gpu} (reference, {weights})")
    if runs is not None and len(runs):
        y = runs.assign(x=runs["point"] + " " + runs["task"]).set_index("x")["mean_tokens_per_step"].reindex(order)
        fig.add_bar(x=order, y=y.values, name=label)
    fig.update_layout(barmode="group", title=f"Mean tokens per DFlash step ({weights} weights)",
                      yaxis_title="tokens per step", height=400)
    return fig
