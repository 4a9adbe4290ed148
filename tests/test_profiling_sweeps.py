"""Every sweep runs on tiny shapes on the CPU (Triton kernels under the interpreter) and labels its rows."""

import pytest
import torch

from profiling import sweeps
from profiling.ceilings import H200

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
    int8 = df[(df["weights"] == "int8") & (df["m"] == 1)]["bytes"].iloc[0]
    bf16 = df[(df["weights"] == "bf16") & (df["m"] == 1)]["bytes"].iloc[0]
    assert int8 < bf16


def test_fallback_when_ops_missing(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_engine_ops(name, *args, **kwargs):
        if name.startswith("tileinfer.ops"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_engine_ops)
    source, _ = sweeps._ours_attention()
    assert "local reference" in source
    df = sweeps.gemm_sweep([("tiny", 16, 32)], ms=(2,), weights=("int8",), impls=("ours",))
    assert df["impl_source"].str.contains("local reference").all()


def test_local_reference_matches_engine_reference():
    attention = pytest.importorskip("tileinfer.ops.attention")
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, 16, generator=g)
    k = torch.randn(10, 2, 16, generator=g)
    v = torch.randn(10, 2, 16, generator=g)
    for causal in (True, False):
        torch.testing.assert_close(sweeps._local_attention_ref(q, k, v, 8, causal),
                                   attention.attention_ref(q, k, v, 8, causal))


def test_a_failing_point_becomes_a_row_with_its_error():
    pytest.importorskip("tileinfer.ops.decode_attention")
    # 40 query tokens × 4 heads per KV head = 160 rows: more than decode_attention takes
    df = sweeps.attention_sweep(kv_lens=(64,), q_lens=(40,), num_splits_list=(1,), sdpa=False,
                                num_q_heads=8, num_kv_heads=2, head_dim=16)
    assert len(df) == 1 and df["time_us"].isna().all() and df["timer"].iloc[0] == "failed"
    assert "ConfigError" in df["error"].iloc[0]
