import json
import math

import pandas as pd
import pytest
import torch

from tileinfer_profiling.aggregate import gemm_vs_attention_ms, per_class, per_layer
from tileinfer_profiling.busy import busy_by_phase, busy_fraction, busy_time, idle_gaps
from tileinfer_profiling.trace import kernel_class, kernels_from_events, load_trace, trace_kernels
from tileinfer import tracing

CPU, DEV = 4242, 0


def _x(cat, name, ts, dur, pid, tid, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def _gpu_trace_with_launches():
    """A verify step with two layers' worth of kernels, then a drafter layer, launched from scopes."""
    ev = [
        _x("user_annotation", "verify", 0, 100, CPU, CPU),
        _x("user_annotation", "layer.0.attention", 10, 20, CPU, CPU),
        _x("user_annotation", "layer.0.mlp", 30, 30, CPU, CPU),
        _x("user_annotation", "drafter", 100, 50, CPU, CPU),
        _x("user_annotation", "drafter.layer.1.attention", 110, 20, CPU, CPU),
    ]
    kernels = [  # (name, launch ts, gpu ts, dur)
        ("_qk_norm_rope_kernel", 12, 1000, 3),
        ("_split_kv_attention_kernel", 15, 1003, 40),
        ("_merge_splits_kernel", 20, 1043, 5),
        ("_skinny_gemm_kernel", 35, 1050, 30),
        ("_silu_mul_kernel", 40, 1080, 2),
        ("sm90_xmma_gemm_bf16bf16_bf16f32", 80, 1090, 100),  # verify, outside layers: the LM head
        ("_prefill_attention_kernel", 115, 1200, 20),
        ("void at::native::vectorized_elementwise_kernel", 140, 1220, 4),
    ]
    for corr, (name, launch, ts, dur) in enumerate(kernels, start=1):
        ev.append(_x("cuda_runtime" if corr % 2 else "cuda_driver", "cuLaunchKernel", launch, 1, CPU, CPU,
                     correlation=corr))
        ev.append(_x("kernel", name, ts, dur, DEV, 7, correlation=corr, grid=[8, 4, 1], block=[128, 1, 1],
                     stream=7, device=0))
    # replayed from a graph: launched by cudaGraphLaunch outside every scope
    ev.append(_x("kernel", "_skinny_gemm_kernel", 2000, 10, DEV, 7, correlation=99, grid=[1, 1, 1],
                 block=[64, 1, 1], stream=7, device=0))
    ev.append({"ph": "f", "cat": "ac2g", "id": 1, "ts": 1000, "pid": DEV, "tid": 7})
    return {"traceEvents": ev}


def test_gpu_trace_attributed_through_launches(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(_gpu_trace_with_launches()))
    df = kernels_from_events(load_trace(path))
    assert len(df) == 9 and (df["device"] == "cuda:0").all()
    assert df["start_us"].iloc[0] == 0 and df["grid"].iloc[0] == (8, 4, 1) and df["block"].iloc[0] == (128, 1, 1)
    by = df.set_index("name")
    att = by.loc["_split_kv_attention_kernel"]
    assert (att.phase, att.model, att.layer, att.part, att.kernel_class) == ("verify", "target", 0, "attention", "attention")
    assert att.duration_us == 40 and att.scopes == "verify/layer.0.attention"
    assert by.loc["_silu_mul_kernel"].part == "mlp" and by.loc["_silu_mul_kernel"].kernel_class == "other"
    head = by.loc["sm90_xmma_gemm_bf16bf16_bf16f32"]
    assert head.phase == "verify" and math.isnan(head.layer) and head.kernel_class == "gemm"
    drafter = by.loc["_prefill_attention_kernel"]
    assert (drafter.phase, drafter.model, drafter.layer) == ("drafter", "drafter", 1)
    replayed = df.iloc[-1]
    assert pd.isna(replayed["phase"]) and pd.isna(replayed["scope"]) and math.isnan(replayed["layer"])


def test_gpu_trace_attributed_through_gpu_annotations():
    ev = [
        _x("gpu_user_annotation", "decode", 500, 100, DEV, 7),
        _x("gpu_user_annotation", "layer.3.mlp", 520, 30, DEV, 7),
        _x("kernel", "_w8a16_gemm_kernel", 525, 20, DEV, 7, grid=[64, 1, 1], block=[128, 1, 1], stream=7),
        _x("kernel", "flash_fwd_splitkv_kernel", 560, 10, DEV, 7, grid=[1, 1, 32], block=[128, 1, 1], stream=7),
        _x("kernel", "_rms_norm_kernel", 700, 2, DEV, 7, stream=7),
        # launched outside any CPU scope (no CPU ranges recorded), inside the GPU-side "decode" range
        _x("cuda_runtime", "cudaLaunchKernel", 10, 1, CPU, CPU, correlation=5),
        _x("kernel", "_silu_mul_kernel", 590, 3, DEV, 7, correlation=5, stream=7),
    ]
    df = kernels_from_events(ev)
    assert list(df["kernel_class"]) == ["gemm", "attention", "other", "norm_rope"]
    assert list(df["phase"].fillna("-")) == ["decode", "decode", "decode", "-"]
    assert df["layer"].iloc[0] == 3 and df["part"].iloc[0] == "mlp" and math.isnan(df["layer"].iloc[1])
    assert df["grid"].iloc[3] is None


def test_recorded_cpu_trace_attributes_ops_to_layers(tmp_path):
    x = torch.randn(16, 32)
    w = torch.randn(32, 32)

    def step():
        with tracing.annotate("decode", kv_len=7):
            for i in range(2):
                with tracing.annotate(f"layer.{i}.attention", level="layer", num_splits=1, kv_len=7):
                    torch.softmax(x @ w, dim=-1)
                with tracing.annotate(f"layer.{i}.mlp", level="layer", m=16):
                    torch.nn.functional.linear(x, w).relu()

    with tracing.record_scopes(), tracing.set_level("layer"):
        df = trace_kernels(step, warmup=1, label="tiny")
    assert (df["device"] == "cpu").all() and (df["label"] == "tiny").all()
    inside = df[df["layer"].notna()]
    assert set(inside["layer"]) == {0, 1} and set(inside["part"]) == {"attention", "mlp"}
    assert set(inside["phase"]) == {"decode"}
    assert "gemm" in set(inside["kernel_class"])
    # aten::linear -> aten::addmm: only the outer op is kept, nothing is counted twice
    assert (df["name"] == "aten::linear").sum() == 2 and not (df["name"] == "aten::addmm").any()
    table = per_layer(df)
    assert set(table["layer"]) == {0, 1} and (table["model"] == "target").all()
    # own times: an op's timestamps can reach a hair into the next one's, which is then charged the rest
    assert table["time_ms"].sum() == pytest.approx(inside["own_us"].sum() / 1e3)
    assert (inside["own_us"] <= inside["duration_us"]).all()


def test_kernel_class_names():
    assert kernel_class("_split_kv_attention_kernel") == "attention"
    assert kernel_class("cutlass::device_kernel<flash::FlashAttnFwdSm90>") == "attention"
    assert kernel_class("fmha_cutlassF_bf16_aligned_64x64_rf_sm80") == "attention"
    assert kernel_class("_w8a16_gemm_kernel") == "gemm"
    assert kernel_class("nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_TNT") == "gemm"  # cuBLAS on Hopper
    assert kernel_class("_widen_kernel") == kernel_class("_scale_columns_kernel") == "gemm"
    assert kernel_class("void at::native::unrolled_elementwise_kernel<direct_copy_kernel_cuda>") == "other"
    assert kernel_class("ampere_bf16_s16816gemm_bf16_128x64") == "gemm"
    assert kernel_class("gemv2T_kernel_val") == "gemm"
    assert kernel_class("_qk_norm_rope_kernel") == "norm_rope"
    assert kernel_class("_silu_mul_kernel") == "other"


def test_busy_fraction_on_overlapping_intervals():
    intervals = [(0, 10), (5, 15), (20, 30), (25, 26), (40, 50)]
    assert busy_time(intervals) == 35
    assert busy_fraction(intervals) == pytest.approx(35 / 50)
    assert busy_fraction(intervals, window=(10, 30)) == pytest.approx(15 / 20)
    assert busy_fraction(intervals, window=(60, 70)) == 0
    assert busy_fraction([(0, 5), (5, 10)]) == 1
    assert math.isnan(busy_fraction([]))


def test_idle_gaps_name_the_kernels_around_them():
    """A gap is charged to the kernel that ended last before it (not the last to start: PDL overlaps them)
    and the one that ended it; per step, most idle first; overlaps and back-to-back kernels are no gap."""
    df = pd.DataFrame({"name": ["a", "b", "c", "d", "a", "b", "c", "d"],
                       "start_us": [0, 5, 6, 20, 100, 105, 106, 130],
                       "end_us": [10, 8, 14, 30, 110, 108, 114, 140]})  # b and c start inside a; c ends last
    gaps = idle_gaps(df, steps=2)
    assert gaps.to_dict("records") == [
        {"before": "d", "after": "a", "us_per_step": 35.0, "per_step": 0.5, "mean_us": 70.0},
        {"before": "c", "after": "d", "us_per_step": 11.0, "per_step": 1.0, "mean_us": 11.0}]
    assert idle_gaps(df.iloc[:1]).empty and list(idle_gaps(df.iloc[:3])["before"]) == []


def test_aggregations_on_gpu_fixture():
    df = kernels_from_events(_gpu_trace_with_launches())
    busy = busy_fraction(df)
    assert 0 < busy < 1
    phases = busy_by_phase(df).set_index("phase")
    assert phases.loc["verify", "kernel_ms"] == pytest.approx(0.180)
    classes = per_class(df, steps=2)
    assert classes["share"].sum() == pytest.approx(1)
    table = gemm_vs_attention_ms(df, steps=2)
    assert table.loc["verify", "attention"] == pytest.approx(0.045 / 2)
    assert table.loc["verify", "gemm"] == pytest.approx(0.130 / 2)
    assert table.loc["drafter", "attention"] == pytest.approx(0.020 / 2)
    assert table.loc["step", "total"] == pytest.approx(df["duration_us"].sum() / 1e3 / 2)
    layers = per_layer(df)
    assert set(zip(layers["model"], layers["layer"])) == {("target", 0), ("drafter", 1)}


def test_overlapping_launches_are_charged_their_own_time():
    """PDL: each kernel starts while the one before it runs and waits for it. Durations then add up to more
    than the wall time; own times add up to the busy time, a kernel charged from the previous end."""
    ev = []
    for corr, (name, ts, dur) in enumerate([("_rms_norm_kernel", 0, 10), ("_skinny_gemm_kernel", 2, 28),
                                           ("_split_kv_attention_kernel", 5, 40), ("_merge_splits_kernel", 20, 10),
                                           ("_skinny_gemm_kernel", 70, 10)], start=1):
        ev.append(_x("kernel", name, 1000 + ts, dur, DEV, 7, correlation=corr, stream=7, device=0))
    df = kernels_from_events({"traceEvents": ev}).set_index("start_us")
    assert list(df["own_us"]) == [10, 20, 15, 0, 10]  # the merge ends inside the attention: nothing of its own
    assert df["own_us"].sum() == busy_time(df.reset_index()) < df["duration_us"].sum()
    table = gemm_vs_attention_ms(df.reset_index().assign(phase="verify"), steps=1)
    assert table.loc["step", "total"] == pytest.approx(0.055)
    assert table.loc["step", "gemm"] == pytest.approx(0.030) and table.loc["step", "attention"] == pytest.approx(0.015)
