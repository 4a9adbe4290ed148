"""Live split-KV explorer: sliders for num_splits, kv_len and q_len re-time `decode_attention` and
redraw a plotly figure, beside the recorded (or swept) split curves.

    explorer = SplitExplorer()
    explorer.widget            # sliders + live figure + sweep curves
    explorer.split_slider.value = 16   # re-times and redraws, as dragging the slider does

The split count is a runtime argument of the kernel, so moving it recompiles nothing.
"""

import torch

from tileinfer.shapes import QWEN3_4B
from tileinfer_profiling.run_info import resolve_device, run_info
from tileinfer_profiling.timing import bench_us, copies_for, rotating

# Qwen3-4B's heads on a GPU; a toy shape on a CPU, where the interpreter runs one program at a time.
GPU_SHAPE = dict(num_q_heads=QWEN3_4B.q_heads, num_kv_heads=QWEN3_4B.kv_heads, head_dim=QWEN3_4B.head_dim,
                 kv_len=8192, max_kv_len=32768, max_splits=64)
CPU_SHAPE = dict(num_q_heads=4, num_kv_heads=2, head_dim=16, kv_len=256, max_kv_len=1024, max_splits=16)


def show(output, fig):
    """Make `output` (an ipywidgets Output) show `fig` through plotly's mimetype renderer, in one state change.

    Not a FigureWidget: its anywidget front end gives up after 2 s of loading plotly's 5 MB bundle and then
    drops every update, which a busy machine's browser reaches.
    """
    import plotly.io as pio

    bundle = pio.renderers["plotly_mimetype"].to_mimebundle(fig.to_dict())
    output.outputs = ({"output_type": "display_data", "data": bundle, "metadata": {}},)


def _sdpa(q, k_cache, v_cache, kv_len):
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right

    q_len = q.shape[0]
    mask = causal_lower_right(q_len, kv_len) if q_len > 1 else None
    return F.scaled_dot_product_attention(q.transpose(0, 1)[None], k_cache[:kv_len].transpose(0, 1)[None],
                                          v_cache[:kv_len].transpose(0, 1)[None], attn_mask=mask, enable_gqa=True)


class SplitExplorer:
    """Sliders → `on_change` → one timing of `decode_attention` → the live figure's traces, redrawn.

    `figure` holds the live figure and `live_view` shows it. Its traces: 0 — this (kv_len, q_len) over the
    split counts timed so far; 1 — the current point; 2 — SDPA at this (kv_len, q_len). `sweep` (a DataFrame
    in `attention_sweep` form, e.g. `recorded.attention(path)`) is drawn beside it with
    `split_curves_figure`.
    """

    def __init__(self, kv_len=None, q_len=1, num_splits=None, *, sweep=None, device=None, num_q_heads=None,
                 num_kv_heads=None, head_dim=None, max_kv_len=None, max_splits=None, rep_ms=50, measure_now=True):
        import ipywidgets as w
        import plotly.graph_objects as go

        from tileinfer.ops.attention import default_num_splits

        self.device = resolve_device(device)
        shape = GPU_SHAPE if self.device.type == "cuda" else CPU_SHAPE
        self.num_q_heads = num_q_heads or shape["num_q_heads"]
        self.num_kv_heads = num_kv_heads or shape["num_kv_heads"]
        self.head_dim = head_dim or shape["head_dim"]
        self.rep_ms = rep_ms
        self.dtype = torch.bfloat16
        max_kv_len = max_kv_len or shape["max_kv_len"]
        kv_len = kv_len or shape["kv_len"]
        num_splits = num_splits or default_num_splits(kv_len, q_len)
        self.timer = None
        self.measured = {}   # (kv_len, q_len) → {num_splits: µs}
        self.sdpa_us = {}    # (kv_len, q_len) → µs
        self._inputs_key, self._inputs = None, None

        style = dict(continuous_update=False, style={"description_width": "90px"},
                     layout=w.Layout(width="320px"))
        self.split_slider = w.IntSlider(value=num_splits, min=1, max=max_splits or shape["max_splits"],
                                        description="num_splits", **style)
        self.kv_slider = w.IntSlider(value=kv_len, min=64, max=max_kv_len, step=64, description="kv_len", **style)
        self.q_slider = w.IntSlider(value=q_len, min=1, max=16, description="q_len", **style)
        self.status = w.HTML()
        where = run_info(self.device)["gpu"]
        self.figure = go.Figure(
            data=[go.Scatter(x=[], y=[], mode="lines+markers", name="decode_attention (timed here)"),
                  go.Scatter(x=[], y=[], mode="markers", marker=dict(size=14, symbol="circle-open", line_width=3),
                             name="current"),
                  go.Scatter(x=[], y=[], mode="lines", line=dict(dash="dash"), name="SDPA")],
            layout=dict(title=f"Live: split-KV decode attention — {where}", xaxis=dict(title="num_splits", type="log"),
                        yaxis=dict(title="time (µs, median)", rangemode="tozero"), width=470, height=400,
                        legend=dict(orientation="h", y=-0.2), margin=dict(t=50, l=60, r=20, b=40)))
        self.live_view = w.Output()
        children = [self.live_view]
        self.sweep_figure = None
        if sweep is not None and len(sweep):
            from tileinfer_profiling.plots import split_curves_figure
            self.sweep_figure = split_curves_figure(sweep, title="Split curves")
            self.sweep_figure.update_layout(width=470, height=400, margin=dict(t=50, l=60, r=20, b=40),
                                            legend=dict(font_size=9))
            children.append(w.Output())
            show(children[-1], self.sweep_figure)
        for slider in (self.split_slider, self.kv_slider, self.q_slider):
            slider.observe(self.on_change, names="value")
        self.widget = w.VBox([w.HBox([self.split_slider, self.kv_slider, self.q_slider]), self.status,
                              w.HBox(children)])
        if measure_now:
            self.on_change()
        else:
            show(self.live_view, self.figure)

    def _pool(self, kv_len, q_len):
        key = (kv_len, q_len)
        if self._inputs_key != key:
            self._inputs = None  # free the previous copies first
            nbytes = 2 * kv_len * self.num_kv_heads * self.head_dim * self.dtype.itemsize
            g = torch.Generator(device="cpu").manual_seed(kv_len * 131 + q_len)

            def make():
                k = torch.randn(kv_len, self.num_kv_heads, self.head_dim, generator=g).to(self.device, self.dtype)
                v = torch.randn(kv_len, self.num_kv_heads, self.head_dim, generator=g).to(self.device, self.dtype)
                q = torch.randn(q_len, self.num_q_heads, self.head_dim, generator=g).to(self.device, self.dtype)
                return q, k, v

            self._inputs = [make() for _ in range(copies_for(nbytes, self.device))]
            self._kv_len_t = torch.tensor([kv_len], dtype=torch.int32, device=self.device)
            self._inputs_key = key
        return rotating(self._inputs)

    def _time(self, fn):
        t_us, self.timer = bench_us(fn, self.device, rep_ms=self.rep_ms, cpu_reps=1)
        return t_us

    def measure(self, kv_len, q_len, num_splits):
        """µs of one `decode_attention` call (median; CUDA graph on a GPU, wall clock on a CPU)."""
        from tileinfer.ops.decode_attention import decode_attention

        nxt = self._pool(kv_len, q_len)

        def call():
            q, k, v = nxt()
            return decode_attention(q, k, v, self._kv_len_t, causal=True, num_splits=num_splits)

        t_us = self._time(call)
        self.measured.setdefault((kv_len, q_len), {})[num_splits] = t_us
        if (kv_len, q_len) not in self.sdpa_us:
            self.sdpa_us[(kv_len, q_len)] = self._time(lambda: _sdpa(*nxt(), kv_len))
        return t_us

    def on_change(self, change=None):
        """Time the sliders' point and redraw; the slider callback (and what a test calls)."""
        kv_len, q_len, splits = self.kv_slider.value, self.q_slider.value, self.split_slider.value
        self.status.value = f"<i>timing kv_len {kv_len}, q_len {q_len}, num_splits {splits} …</i>"
        t_us = self.measure(kv_len, q_len, splits)
        curve = dict(sorted(self.measured[(kv_len, q_len)].items()))
        sdpa = self.sdpa_us[(kv_len, q_len)]
        xs = list(curve)
        lo, hi = min(xs + [1]), max(xs + [self.split_slider.max])
        self.figure.data[0].update(x=xs, y=list(curve.values()), name=f"decode_attention kv {kv_len}, q {q_len}")
        self.figure.data[1].update(x=[splits], y=[t_us], name=f"current: {splits} splits")
        self.figure.data[2].update(x=[lo, hi], y=[sdpa, sdpa], name=f"SDPA kv {kv_len}, q {q_len}")
        self.figure.layout.title.text = (f"Live ({run_info(self.device)['gpu']}): {splits} splits → "
                                         f"{t_us:,.1f} µs, SDPA {sdpa:,.1f} µs")
        show(self.live_view, self.figure)
        self.status.value = (f"kv_len {kv_len}, q_len {q_len}, num_splits {splits}: <b>{t_us:,.1f} µs</b> "
                             f"({self.timer}); SDPA {sdpa:,.1f} µs")
        return t_us
