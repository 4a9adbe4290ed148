import math
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import pytest

from tests.test_profiling_trace import _gpu_trace_with_launches
from tileinfer_profiling import plots
from tileinfer_profiling.aggregate import gemm_vs_attention_ms
from tileinfer_profiling.ceilings import H200
from tileinfer_profiling.compare import (
    bandwidth_comparison, bandwidth_comparison_figure, load_reference, read_rows, reference_fractions, tokens_per_step,
)
from tileinfer.errors import ConfigError
from tileinfer_profiling.trace import kernels_from_events

REFERENCE_CSV = Path(__file__).resolve().parents[1] / "bench" / "ref" / "reference.csv"


def _names(fig):
    return [t.name for t in fig.data]


def test_per_layer_figure_stacks_parts():
    df = kernels_from_events(_gpu_trace_with_launches())
    fig = plots.per_layer_figure(df)
    assert isinstance(fig, go.Figure) and fig.layout.barmode == "stack"
    assert sorted(_names(fig)) == ["attention", "mlp"]
    assert list(fig.data[0].x) == ["L0", "D1"]
    by_class = plots.per_layer_figure(df, by="kernel_class")
    assert set(_names(by_class)) == {"attention", "gemm", "norm_rope", "other"}
    assert isinstance(plots.step_breakdown_figure(gemm_vs_attention_ms(df, 1)), go.Figure)


def _attention_rows():
    rows = []
    for kv in (1024, 8192):
        for s in (1, 2, 4, 8):
            rows.append(dict(impl="ours", kv_len=kv, q_len=16, num_splits=s, time_us=100 / s + kv / 1000, gpu="cpu"))
        rows.append(dict(impl="sdpa", kv_len=kv, q_len=16, num_splits=float("nan"), time_us=40.0, gpu="cpu"))
    return pd.DataFrame(rows)


def test_split_curves_have_an_sdpa_line_per_kv_len():
    fig = plots.split_curves_figure(_attention_rows())
    assert _names(fig)[:4] == ["ours kv 1024, q 16", "SDPA kv 1024, q 16", "ours kv 8192, q 16", "SDPA kv 8192, q 16"]
    assert _names(fig)[4:] == ["KV 1,024", "KV 8,192", "ours", "SDPA"]  # the legend: colour per KV length, dash per impl
    assert list(fig.data[1].y) == [40.0, 40.0] and fig.layout.xaxis.type == "log"
    assert "CPU timings" in fig.layout.title.text


def test_gemm_bandwidth_bars_against_the_ceiling():
    df = pd.DataFrame([dict(shape=s, m=m, impl=i, weights=w, gbs=1000.0, gpu="NVIDIA H200")
                       for s in ("qkv", "o") for m in (1, 16) for i in ("ours", "cublas") for w in ("bf16", "int8")])
    fig = plots.gemm_bandwidth_figure(df, ceilings=H200)
    assert len(fig.data) == 5 and "read ceiling" in fig.data[-1].name
    assert list(fig.data[0].x) == ["qkv m=1", "qkv m=16", "o m=1", "o m=16"]


def test_tokens_per_step_histogram():
    fig = plots.tokens_per_step_figure([1, 3, 3, 16])
    assert list(fig.data[0].x) == list(range(1, 17))
    assert fig.data[0].y[2] == 2 and fig.data[0].y[15] == 1
    assert "5.75" in fig.layout.title.text
    assert isinstance(plots.tokens_per_step_figure([]), go.Figure)


def test_reference_comparison_as_bandwidth_fractions():
    reference = pd.DataFrame([
        dict(engine="vllm", gpu="RTX 4080 SUPER", gpu_bandwidth_gbs=736, point="8k", task="edit", weights="bf16",
             metric="decode_tok_s", value=69.5),
        dict(engine="vllm", gpu="RTX 4080 SUPER", gpu_bandwidth_gbs=736, point="8k", task="edit", weights="bf16",
             metric="tokens_per_step", value=1.87),
        dict(engine="vllm", gpu="RTX 4080 SUPER", gpu_bandwidth_gbs=736, point="8k", task="edit", weights="",
             metric="prompt_tokens", value=8181),
    ])
    # each process measured the bandwidth again: still one row, at the processes' median
    ours = pd.DataFrame([dict(engine="tileinfer", gpu="NVIDIA H200", gpu_bandwidth_gbs=gbs, point="8k", task="edit",
                              weights="bf16", decode_tok_s=tok_s, tokens_per_step=1.87, prompt_tokens=8181,
                              new_tokens=2048, process=p) for p, gbs, tok_s in ((0, 4100, 299.0), (1, 4280, 301.0))])
    fr = reference_fractions(reference, ours).set_index("engine")
    assert fr.loc["tileinfer", "gpu_bandwidth_gbs"] == 4190 and fr.loc["tileinfer", "decode_tok_s"] == 300.0
    assert fr.loc["vllm", "step_ms"] == pytest.approx(26.906, abs=1e-3)  # the comparison's 26.9 ms
    assert fr.loc["vllm", "kv_len"] == 8181 and fr.loc["tileinfer", "kv_len"] == 8181 + 1024
    expected = fr.loc["vllm", "bytes_per_step"] / 26.906e-3 / 736e9
    assert fr.loc["vllm", "bandwidth_fraction"] == pytest.approx(expected, rel=1e-3)
    fig = plots.reference_figure(fr.reset_index())
    assert _names(fig) == ["vllm · RTX 4080 SUPER", "tileinfer · NVIDIA H200"]
    assert set(fr["source"]) == {"reference", "ours"}
    assert "fraction of the GPU's memory bandwidth" in fig.layout.yaxis.title.text


def test_the_reference_table_as_fractions():
    reference = load_reference(REFERENCE_CSV)
    fr = reference_fractions(reference)
    assert len(fr) and fr["bandwidth_fraction"].between(0, 1).all()
    assert tokens_per_step(reference, "1k", "edit") == 7.1 and tokens_per_step(reference, "8k", "edit") == 1.87
    assert tokens_per_step(reference, "1k", "explain", weights="int8", engine="vllm") == 3.0
    with pytest.raises(ConfigError, match="0 tokens-per-step figures for tileinfer 32k edit"):
        tokens_per_step(reference, "32k", "edit")


def test_generation_and_acceptance_figures():
    table = pd.DataFrame({"prefill_ms": [5.0, 5.0], "drafter_ms": [0.0, 2.0], "verify_ms": [9.0, 4.0],
                          "accept_ms": [0.0, 1.0], "other_ms": [1.0, 1.0]}, index=["plain decode", "DFlash"])
    assert _names(plots.time_split_figure(table)) == ["prefill", "drafter", "verify", "accept", "other"]
    runs = pd.DataFrame([{"point": "1k", "task": "edit", "mean_tokens_per_step": 2.5, "tokens_per_step": [1, 4, 2]}])
    assert _names(plots.acceptance_histogram_figure(runs)) == ["1k edit (mean 2.50, 3 steps)"]
    reference_tps = pd.DataFrame([{"engine": "vllm", "gpu": "RTX 4080 SUPER", "point": "1k", "task": "edit",
                                   "weights": "bf16", "tokens_per_step": 4.9}])
    fig = plots.acceptance_comparison_figure(runs, reference_tps, label="this run")
    assert _names(fig) == ["vLLM · RTX 4080 SUPER (reference, bf16)", "this run"]
    assert _names(plots.acceptance_comparison_figure(None, reference_tps)) == ["vLLM · RTX 4080 SUPER (reference, bf16)"]


def test_acceptance_curves_figure_one_line_per_task_and_temperature():
    from tileinfer_profiling.acceptance import acceptance_curves
    runs = pd.DataFrame([{"point": "1k", "task": task, "temperature": t, "mean_tokens_per_step": 1 + 3 * rate,
                          "acceptance_per_position": [rate, rate * rate, 0.0]}
                         for task in ("edit", "explain") for t, rate in ((0.0, 1.0), (0.6, 0.5))])
    fig = plots.acceptance_curves_figure(acceptance_curves(runs))
    assert _names(fig) == ["edit, T = 0 (4.00 tokens/step)", "edit, T = 0.6 (2.50 tokens/step)",
                           "explain, T = 0 (4.00 tokens/step)", "explain, T = 0.6 (2.50 tokens/step)"]
    assert list(fig.data[1].x) == [1, 2, 3] and list(fig.data[1].y) == [0.5, 0.25, 0.0]


def test_a_trace_without_layer_ranges_says_so():
    empty = pd.DataFrame(columns=["model", "layer", "part", "time_ms"])
    fig = plots.per_layer_figure(empty)
    assert not fig.data and "no layer.N.* ranges" in fig.layout.annotations[0].text


def _rows_file(path, rows):
    import json
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_comparison_chart_puts_our_bars_beside_the_reference(tmp_path):
    base = dict(engine="tileinfer", gpu="NVIDIA H200", gpu_bandwidth_gbs=4000.0, point="1k", task="edit", weights="bf16",
                prompt_tokens=1024, new_tokens=128, tokens_per_step=7.1, dflash=True)
    ours = [base | dict(decode_tok_s=1800.0 + p, process=p, model="qwen3-4b") for p in range(3)]
    ours += [base | dict(decode_tok_s=300.0, tokens_per_step=1.0, dflash=False, model="qwen3-4b"),  # plain: no bar
             base | dict(decode_tok_s=900.0, model="qwen3-8b"),  # another model: not the comparison's
             base | dict(point="8k", prompt_tokens=8192, new_tokens=2048, decode_tok_s=436.0, tokens_per_step=1.87)]
    files = [_rows_file(tmp_path / "a.jsonl", ours[:4]), _rows_file(tmp_path / "b.jsonl", ours[4:])]
    rows = read_rows(files)
    assert (rows.loc[5, "model"], rows.loc[5, "mode"]) == ("", "")  # an older row: no model named
    reference = load_reference(REFERENCE_CSV)
    fr = bandwidth_comparison(reference, rows)
    mine = fr[fr["source"] == "ours"].set_index("point")
    assert list(mine.index) == ["1k", "8k"] and mine.loc["1k", "decode_tok_s"] == 1801.0
    assert (mine["gpu_bandwidth_gbs"] == 4800).all() and (mine["label"] == "TileInfer (this project) · NVIDIA H200").all()
    recorded = bandwidth_comparison(reference, rows, bandwidth="recorded").set_index(["source", "point", "task", "weights"])
    assert recorded.loc[[("ours", "1k", "edit", "bf16")], "bandwidth_fraction"].item() == pytest.approx(
        mine.loc["1k", "bandwidth_fraction"] * 4800 / 4000)
    assert set(fr["label"]) == {"vLLM · RTX 4080 SUPER", "TileInfer (original) · RTX 4080 SUPER",
                                "TileInfer (this project) · NVIDIA H200"}
    with pytest.raises(ConfigError, match="bandwidth"):
        bandwidth_comparison(reference, rows, bandwidth="peak")
    fig = bandwidth_comparison_figure(REFERENCE_CSV, files)
    assert _names(fig) == ["vLLM · RTX 4080 SUPER", "TileInfer (original) · RTX 4080 SUPER",
                           "TileInfer (this project) · NVIDIA H200"]
    assert list(fig.data[0].x)[:2] == ["1k edit bf16", "1k edit int8"] and list(fig.data[0].x)[-1] == "8k explain int8"
    ours_bars = dict(zip(fig.data[2].x, fig.data[2].y))
    assert ours_bars["1k edit bf16"] > 0 and math.isnan(ours_bars["1k explain bf16"])
    assert "datasheet bandwidth" in fig.layout.yaxis.title.text


def test_the_recorded_comparison_rows_chart():
    results = REFERENCE_CSV.parents[1] / "results"
    fig = bandwidth_comparison_figure(REFERENCE_CSV, sorted(results.glob("comparison_*_h200.jsonl")))
    assert "TileInfer (this project) · NVIDIA H200" in _names(fig)
