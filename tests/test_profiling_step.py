import math
from types import SimpleNamespace

import pytest
import torch

from tileinfer_profiling.step import profile_step
from tileinfer import tracing
from tests.helpers import tiny_pair
from tileinfer import load
from tileinfer.errors import ConfigError


class FakeEngine:
    """Runs the engine's ranges around a few CPU ops: prefill, then DFlash steps of drafter/verify/accept."""

    device = torch.device("cpu")

    def __init__(self, num_layers=2, steps=3):
        self.num_layers, self.steps = num_layers, steps
        self.w = torch.randn(32, 32)
        self.calls = []

    def _layers(self, x, prefix=""):
        for i in range(self.num_layers):
            with tracing.annotate(f"{prefix}layer.{i}.attention", level="layer", num_splits=2, kv_len=20):
                x = torch.softmax(x @ self.w, dim=-1)
            with tracing.annotate(f"{prefix}layer.{i}.mlp", level="layer", m=x.shape[0]):
                x = torch.nn.functional.linear(x, self.w)
        return x

    def generate(self, prompt, max_new_tokens, block_size=None, eager=False, accept_profile=None):
        self.calls.append(dict(eager=eager, block_size=block_size))
        with tracing.annotate("prefill", tokens=len(prompt)):
            self._layers(torch.randn(len(prompt), 32))
        for step in range(self.steps):
            with tracing.annotate("drafter", kv_len=20 + step, m=block_size):
                self._layers(torch.randn(block_size, 32), "drafter.")
            with tracing.annotate("verify", kv_len=20 + step, m=block_size, num_splits=2):
                self._layers(torch.randn(block_size, 32))
            with tracing.annotate("accept"):
                torch.argmax(torch.randn(block_size, 32), dim=-1)
        stats = dict(prompt_tokens=len(prompt), new_tokens=2 * self.steps, steps=self.steps, decode_ms=3.0,
                     tokens_per_step=[2] * self.steps, mean_tokens_per_step=2.0, decode_tok_s=1000.0)
        return SimpleNamespace(tokens=[0] * 6, stats=SimpleNamespace(as_dict=lambda: stats))


def test_profile_step_attributes_phases_and_layers():
    engine = FakeEngine()
    prof = profile_step(engine, list(range(12)), block_size=4, max_new_tokens=6, warmup=1)
    assert [c["eager"] for c in engine.calls] == [True, True] and engine.calls[0]["block_size"] == 4
    df = prof.kernels
    assert set(df["phase"].dropna()) == {"prefill", "drafter", "verify", "accept"}
    assert (df["device"] == "cpu").all()
    layers = prof.per_layer()
    assert set(zip(layers["model"], layers["layer"])) == {("target", 0), ("target", 1), ("drafter", 0), ("drafter", 1)}
    assert set(layers["part"]) == {"attention", "mlp"}
    row = prof.summary.iloc[0]
    assert row["variant"] == "eager" and row["device"] == "cpu" and row["steps"] == 3
    assert row["drafter_ms"] > 0 and row["verify_ms"] > 0 and math.isnan(row["decode_ms"])
    assert row["gemm_ms"] > 0 and row["attention_ms"] > 0
    assert 0 < row["busy_pct"] <= 100
    assert row["wall_step_ms"] == pytest.approx(1.0)
    parts = ["drafter_ms", "verify_ms", "accept_ms"]
    assert sum(row[p] for p in parts) == pytest.approx(row["kernel_ms_per_step"], rel=1e-6)
    assert prof.tokens_per_step == [2, 2, 2]
    assert prof.graph_kernels is None and len(prof.summary) == 1
    # tracing settings are restored
    assert tracing.get_level() == "step" and tracing.annotate("decode") is tracing.annotate("verify")


def test_profile_step_graphs_need_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("has a GPU")
    with pytest.raises(ConfigError, match="CUDA"):
        profile_step(FakeEngine(), [1, 2, 3], graphs=True)


@pytest.mark.slow
def test_profile_step_on_a_tiny_random_engine(tmp_path):
    target, draft = tiny_pair(tmp_path, num_layers=1, block_size=4)
    engine = load(target, draft=draft, device="cpu")
    prof = profile_step(engine, list(range(5, 17)), block_size=4, max_new_tokens=3, warmup=0)
    assert {"prefill", "verify"} <= set(prof.kernels["phase"].dropna())
    assert prof.summary.iloc[0]["steps"] >= 1


def test_recorded_step_profile_carries_every_kernel_and_its_provenance(tmp_path):
    from bench.engine_bench import write_profile

    prof = profile_step(FakeEngine(), list(range(12)), block_size=4, max_new_tokens=6, warmup=0)
    table = prof.kernel_table(top=None)
    decoding = prof.kernels[prof.kernels["phase"] != "prefill"]
    assert len(table) == decoding.groupby(["phase", "name", "kernel_class"]).ngroups > len(prof.kernel_table(top=2))
    # each row is rounded to 0.1 µs: the sum is off by at most half of that per row, whatever the CPU's speed
    assert table["ms_per_step"].sum() == pytest.approx(decoding["own_us"].sum() / 1e3 / 3, abs=0.5e-4 * len(table))
    assert table["ms_per_step"].is_monotonic_decreasing
    base = dict(gpu="NVIDIA H200", torch="2.11", triton="3.6", git_rev="abc1234", command="python bench/engine_bench.py",
                weights_kind="random")
    write_profile(prof, tmp_path, "bf16", "8k", base)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"dflash_{part}_bf16_8k_h200.csv" for part in ("kernels", "layers", "profile")]
    import pandas as pd
    for name in names:
        rows = pd.read_csv(tmp_path / name)
        assert not any(c.startswith("Unnamed") for c in rows.columns)
        assert (rows["git_rev"] == "abc1234").all() and (rows["weights_kind"] == "random").all()
        assert (rows["gpu"] == "NVIDIA H200").all() and (rows["point"] == "8k").all()
