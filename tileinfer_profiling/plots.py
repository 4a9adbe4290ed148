"""Plotly figures of the profiling DataFrames; each returns a `go.Figure` and computes nothing itself."""

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tileinfer_profiling.aggregate import per_layer
from tileinfer_profiling.generation import TIME_PARTS


CPU_NOTE = " — CPU timings (Triton interpreter): they show the code runs, not its speed"


ENGINE_COLORS = {"this project": "#d62728", "tileinfer": "#1f77b4", "vllm": "#7f7f7f"}
ENGINE_NAMES = {"vllm": "vLLM", "tileinfer": "TileInfer (original)"}


def _device_note(df):
    """" — <GPU>" for the GPU(s) the rows were timed on; on a CPU, that its timings are not a speed."""
    if "gpu" in df.columns and len(df):
        gpus = sorted(set(map(str, df["gpu"])))
        return CPU_NOTE if gpus == ["cpu"] else f" — {', '.join(gpus)}"
    if "device" in df.columns and len(df) and (df["device"] == "cpu").all():
        return CPU_NOTE
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


def _log_if_wide(values, decades=1.0):
    """"log" when positive `values` span more than `decades` decades, else "linear"."""
    v = pd.to_numeric(pd.Series(list(values)), errors="coerce")
    v = v[v > 0]
    return "log" if len(v) and v.max() / v.min() > 10 ** decades else "linear"


def ordinal_colors(values, scale="Viridis"):
    """{value: colour} along `scale`, in sorted order: one colour per cache length, light to dark."""
    from plotly.colors import sample_colorscale
    values = sorted(set(values))
    if len(values) == 1:
        return {values[0]: sample_colorscale(scale, [0.35])[0]}
    return dict(zip(values, sample_colorscale(scale, list(np.linspace(0.85, 0.1, len(values))))))


def split_curves_figure(df, title="Attention time against the split count"):
    """Our attention's time over num_splits, one panel per query count (1: decode, 16: verify), one colour
    per cache length; SDPA at the same length is the dashed line of the same colour. Time on a log axis
    when it spans more than a decade."""
    from plotly.subplots import make_subplots

    ours = df[df["impl"] == "ours"]
    q_lens = sorted(ours["q_len"].unique()) or [1]
    splits = sorted(ours["num_splits"].unique())
    colors = ordinal_colors(ours["kv_len"].unique()) if len(ours) else {}
    fig = make_subplots(rows=1, cols=len(q_lens), shared_yaxes=True, horizontal_spacing=0.06,
                        subplot_titles=[f"{int(q)} {'query' if q == 1 else 'queries'} per head" for q in q_lens])
    for (kv_len, q_len), group in ours.groupby(["kv_len", "q_len"]):
        col = q_lens.index(q_len) + 1
        group = group.sort_values("num_splits")
        color = colors[kv_len]
        fig.add_scatter(x=group["num_splits"], y=group["time_us"], mode="lines+markers", line=dict(color=color),
                        name=f"ours kv {kv_len}, q {q_len}", legendgroup=f"kv{kv_len}", showlegend=False,
                        row=1, col=col)
        sdpa = df[(df["impl"] == "sdpa") & (df["kv_len"] == kv_len) & (df["q_len"] == q_len)]
        if len(sdpa) and splits:
            t = float(sdpa["time_us"].iloc[0])
            fig.add_scatter(x=[splits[0], splits[-1]], y=[t, t], mode="lines", line=dict(dash="dash", color=color),
                            name=f"SDPA kv {kv_len}, q {q_len}", legendgroup=f"kv{kv_len}", showlegend=False,
                            row=1, col=col)
    # The legend: one entry per cache length (its colour), then what solid and dashed mean.
    for kv_len, color in colors.items():
        fig.add_scatter(x=[None], y=[None], mode="lines", line=dict(color=color, width=4), name=f"KV {kv_len:,}",
                        legendgroup=f"kv{kv_len}")
    for name, dash in (("ours", "solid"), ("SDPA", "dash")):
        fig.add_scatter(x=[None], y=[None], mode="lines", line=dict(color="#444", dash=dash), name=name)
    fig.update_xaxes(type="log", tickvals=splits, title="num_splits")
    fig.update_yaxes(type=_log_if_wide(df["time_us"]), tickformat="~g")
    fig.update_yaxes(title="time (µs, median)", col=1)
    fig.update_layout(title=title + _device_note(df), height=430)
    return fig


def _impl_label(impl, weights, cpu):
    if cpu:  # the kernels ran under the Triton interpreter; the other bars are CPU torch, not cuBLAS
        impl = {"ours": "ours (Triton interpreter)", "cublas": "torch F.linear (CPU)",
                "dequantize+cublas": "dequantize + torch (CPU)"}.get(impl, impl)
    return f"{impl} {weights}"


def gemm_bandwidth_figure(df, ceilings=None, title="Linear layers: achieved bandwidth", peak_gbs=None):
    """Grouped bars of GB/s per shape and M, one trace per (impl, weights), against the measured read
    ceiling and, when given, the datasheet peak. A bar above the measured ceiling is explained on the
    chart (the ceiling is torch's sum over one large tensor, not the memory's limit). On a CPU the axis
    is logarithmic and the bars are labelled for what ran: the Triton interpreter and CPU torch."""
    cpu = "gpu" in df.columns and len(df) and (df["gpu"].astype(str) == "cpu").all()
    df = df.assign(x=[f"{s} m={m}" for s, m in zip(df["shape"], df["m"])])
    order = list(dict.fromkeys(df["x"]))
    fig = go.Figure()
    for (impl, weights), group in df.groupby(["impl", "weights"]):
        g = group.set_index("x")["gbs"].reindex(order)
        fig.add_bar(x=order, y=g.values, name=_impl_label(impl, weights, cpu))
    read = None
    if ceilings is not None:
        read = ceilings.get("read_gbs") if isinstance(ceilings, dict) else ceilings.read_gbs
    if read:
        fig.add_scatter(x=order, y=[read] * len(order), mode="lines", line=dict(dash="dash", color="black"),
                        name=f"measured read ceiling {read:,.0f} GB/s")
    if peak_gbs:
        fig.add_scatter(x=order, y=[peak_gbs] * len(order), mode="lines", line=dict(dash="dot", color="grey"),
                        name=f"datasheet peak {peak_gbs:,.0f} GB/s")
    above = sorted(set(df.loc[df["gbs"] > read, "shape"])) if read else []
    if above:
        fig.add_annotation(
            text=(f"{', '.join(above)} above the measured ceiling: that ceiling is torch's sum over one 2 GiB tensor; "
                  "a GEMM streaming its weight reads faster. The datasheet peak bounds every bar."),
            xref="paper", yref="paper", x=0, y=1.02, xanchor="left", yanchor="bottom", showarrow=False,
            font=dict(size=11))
    note = " — CPU: Triton interpreter and CPU torch, not a speed" if cpu else _device_note(df)
    fig.update_layout(barmode="group", title=title + note, xaxis_title="shape",
                      yaxis_title="GB/s (weight + activation bytes ÷ time)", yaxis_type="log" if cpu else "linear",
                      yaxis_tickformat="~g",
                      margin=dict(t=90))
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


def time_split_figure(table, title="Where the time went", note=None):
    """Stacked bars of prefill / drafter / verify / accept / other ms per mode (rows of `generate_both`);
    `note` goes under the title."""
    fig = go.Figure()
    for part in TIME_PARTS:
        fig.add_bar(x=list(table.index), y=table[part].values, name=part.removesuffix("_ms"))
    subtitle = f"<br><sup>{note}</sup>" if note else ""
    fig.update_layout(barmode="stack", title=title + subtitle, yaxis_title="ms (whole generation)", height=400)
    return fig


def acceptance_histogram_figure(runs, title="Tokens committed per step"):
    """Grouped bars of committed tokens per step, one trace per point × task (rows of `acceptance_runs`),
    each named with its mean and step count."""
    fig = go.Figure()
    for _, r in runs.iterrows():
        counts = pd.Series(r["tokens_per_step"]).value_counts().sort_index()
        steps = len(r["tokens_per_step"])
        fig.add_bar(x=counts.index.tolist(), y=counts.values.tolist(),
                    name=f"{r['point']} {r['task']} (mean {r['mean_tokens_per_step']:.2f}, {steps} steps)")
    fig.update_layout(barmode="group", title=title, xaxis_title="tokens committed in the step (accepted + 1)",
                      yaxis_title="steps", height=380)
    return fig


def acceptance_curves_figure(curves, title="Acceptance per draft position by temperature"):
    """How often draft i was accepted (drafts 1 … i all kept), one line per task × temperature (rows of
    `acceptance.acceptance_curves`), each named with its mean tokens per step."""
    fig = go.Figure()
    for (task, temperature), g in curves.groupby(["task", "temperature"], sort=False):
        fig.add_scatter(x=g["position"], y=g["acceptance"], mode="lines+markers",
                        name=f"{task}, T = {temperature:g} ({g['mean_tokens_per_step'].iloc[0]:.2f} tokens/step)")
    fig.update_layout(title=title, xaxis_title="draft position i", yaxis_title="share of steps accepting draft i",
                      yaxis_range=[0, 1.05], height=380)
    return fig


def acceptance_comparison_figure(runs, reference_tps, weights="bf16", label="this run", title=None):
    """Mean tokens per step per point × task: `runs` (`acceptance_runs`, may be None) beside the
    comparison's engines (`reference_tokens_per_step`) at `weights`."""
    ref = reference_tps[reference_tps["weights"] == weights]
    order = [f"{p} {t}" for p in ("1k", "8k") for t in ("edit", "explain")]
    fig = go.Figure()
    for (engine, gpu), g in ref.groupby(["engine", "gpu"], sort=False):
        y = g.assign(x=g["point"] + " " + g["task"]).set_index("x")["tokens_per_step"].reindex(order)
        fig.add_bar(x=order, y=y.values, name=f"{ENGINE_NAMES.get(engine, engine)} · {gpu} (reference, {weights})",
                    marker_color=ENGINE_COLORS.get(engine))
    if runs is not None and len(runs):
        y = runs.assign(x=runs["point"] + " " + runs["task"]).set_index("x")["mean_tokens_per_step"].reindex(order)
        fig.add_bar(x=order, y=y.values, name=label)
    fig.update_layout(barmode="group", title=title or f"Mean tokens per DFlash step ({weights} weights)",
                      yaxis_title="tokens per step", height=400)
    return fig




def bandwidth_share_figure(shares, title="DFlash decode as a fraction of each GPU's memory bandwidth", note=None):
    """Grouped bars from `bandwidth_share.shares`: one trace per engine × GPU (this project first, in its
    own colour), one group per point, task and weights; each bar labelled with its percentage. `note`
    goes under the title (what our rows are: random weights, replayed tokens per step)."""
    order = list(dict.fromkeys(f"{p} {t} {w.upper()}" for w in ("bf16", "int8") for p in ("1k", "8k")
                               for t in ("edit", "explain")))
    order = [g for g in order if g in set(shares["group"])]
    fig = go.Figure()
    for (engine, lab), group in shares.groupby(["engine", "label"], sort=False):
        y = group.groupby("group")["bandwidth_fraction"].mean().reindex(order)
        fig.add_bar(x=order, y=y.values, name=lab, marker_color=ENGINE_COLORS.get(engine),
                    text=[f"{v:.0%}" if v == v else "" for v in y.values], textposition="outside")
    subtitle = "".join(f"<br><sup>{line}</sup>" for line in (note or "").split("\n") if line)
    fig.update_layout(barmode="group", title=title + subtitle, xaxis_title="prompt length, task, weights",
                      yaxis_title="bytes per step ÷ step time ÷ bandwidth", yaxis_tickformat=".0%",
                      yaxis_range=[0, 1.05], height=460, margin=dict(t=100), legend_title="engine · GPU")
    return fig
