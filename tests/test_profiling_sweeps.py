"""Every sweep runs on tiny shapes on the CPU (Triton kernels under the interpreter) and labels its rows."""

import torch

from tileinfer_profiling import sweeps
from tileinfer_profiling.ceilings import H200

TINY_HEADS = dict(num_q_heads=4, num_kv_heads=2, head_dim=16)
INFO = {"gpu", "device", "torch", "triton", "git_rev", "timer"}


def _check_labels(df):
    assert INFO <= set(df.columns)
    if not torch.cuda.is_available():
        assert (df["gpu"] == "cpu").all() and df["timer"].str.contains("cpu").all()
    assert (df["error"] == "").all(), df["error"].tolist()
    assert (df["time_us"] > 0).all() and (df["bytes"] > 0).all()


def test_attention_sweep_tiny():
    df = sweeps.attention_sweep(kv_lens=(64,), q_lens=(1, 4), num_splits_list=(1, 2), ceilings=H200, **TINY_HEADS)
    _check_labels(df)
    assert len(df) == 2 * (2 + 1)
    ours = df[df["impl"] == "ours"]
    assert sorted(ours["num_splits"].unique()) == [1, 2]
    assert (df[df["impl"] == "sdpa"]["num_splits"].isna()).all()
    # more splits write more fp32 partials
    b = ours[ours["q_len"] == 4].set_index("num_splits")["bytes"]
    assert b[2] > b[1]
    assert {"gbs", "tflops", "frac_read_bw", "floor_us"} <= set(df.columns)


def test_drafter_attention_sweep_tiny():
    df = sweeps.drafter_attention_sweep(kv_lens=(48,), num_splits_list=(2,), block_size=4, **TINY_HEADS)
    _check_labels(df)
    assert (df["sweep"] == "drafter-attention").all() and not df["causal"].any()
    assert (df["kv_len"] == 52).all() and (df["context_len"] == 48).all() and (df["q_len"] == 4).all()


def test_gemm_sweep_tiny():
    df = sweeps.gemm_sweep({"tiny": (32, 64)}, ms=(1, 3), weights=("bf16", "int8"), impls=("ours", "cublas"))
    _check_labels(df)
    assert len(df) == 1 * 2 * 2 * 2
    assert set(df["impl_source"]) == {"triton linear", "linear_ref"}
    int8 = df[(df["weights"] == "int8") & (df["m"] == 1)]["bytes"].iloc[0]
    bf16 = df[(df["weights"] == "bf16") & (df["m"] == 1)]["bytes"].iloc[0]
    assert int8 < bf16


def test_a_failing_point_becomes_a_row_with_its_error():
    # 40 query tokens × 4 heads per KV head = 160 rows: more than decode_attention takes
    df = sweeps.attention_sweep(kv_lens=(64,), q_lens=(40,), num_splits_list=(1,), sdpa=False,
                                num_q_heads=8, num_kv_heads=2, head_dim=16)
    assert len(df) == 1 and df["time_us"].isna().all() and df["timer"].iloc[0] == "failed"
    assert "ConfigError" in df["error"].iloc[0]


def test_best_splits_and_the_gemm_floor_table():
    sweep = sweeps.attention_sweep(kv_lens=(64,), q_lens=(1,), num_splits_list=(1, 2), **TINY_HEADS)
    best = sweeps.best_splits(sweep).iloc[0]
    assert best["best_num_splits"] in (1, 2) and best["vs_sdpa"] > 0 and best["one_split_us"] >= best["best_us"]
    gemm = sweeps.gemm_sweep({"tiny": (32, 64)}, ms=(1,), weights=("int8",), ceilings=H200)
    table = sweeps.gemm_floor_table(gemm)
    assert list(table.columns) == ["ours", "cublas", "floor_us"] and table["floor_us"].notna().all()
