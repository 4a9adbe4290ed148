import math
from types import SimpleNamespace

import pytest

from bench.features import FEATURES, feature_table, to_dataframe, to_markdown


class Clock:
    t = 0.0

    def __call__(self):
        return self.t


class FakeEngine:
    """Step costs chosen per setting; the fake clock advances by what a call would cost."""

    def __init__(self, clock, linear="ours", weights="bf16"):
        self.clock, self.linear, self.weights = clock, linear, weights

    def generate(self, prompt, max_new_tokens, stop_ids=None, block_size=None, eager=False,
                 accept_profile=None, num_splits=None):
        per_step = 1 if block_size == 1 else int(accept_profile or 4)
        cost = 10.0 if block_size == 1 else 20.0                      # ms per step
        cost *= 1.5 if eager else 1.0
        cost *= 1.2 if num_splits == 1 else 1.0
        cost *= 1.1 if self.linear == "cublas" else 1.0
        cost *= 0.6 if self.weights == "int8" else 1.0
        steps = -(-(max_new_tokens - 1) // per_step)
        self.clock.t += (50.0 + steps * cost) / 1e3                   # prefill 50 ms
        stats = SimpleNamespace(new_tokens=max_new_tokens, steps=steps, mean_tokens_per_step=per_step,
                                prefill_ms=0.0)
        return SimpleNamespace(tokens=[0] * max_new_tokens, stats=stats)


def test_feature_table_ratios():
    clock, built = Clock(), []

    def make_engine(**kw):
        built.append(kw)
        return FakeEngine(clock, **kw)

    rows = feature_table(make_engine, list(range(1024)), 129, {"accept_profile": 4.0},
                         trials=3, warmup_s=0.0, clock=clock)
    assert [r["feature"] for r in rows] == [f.name for f in FEATURES]
    assert built == [{}, {"linear": "cublas"}, {"weights": "int8"}]  # each engine built once
    by = {r["feature"]: r for r in rows}
    assert by["CUDA graphs"]["ratio"] == pytest.approx(1.5)
    assert by["split-KV attention"]["ratio"] == pytest.approx(1.2)
    assert by["skinny GEMMs (vs cuBLAS)"]["ratio"] == pytest.approx(1.1)
    assert by["INT8 weights (vs BF16)"]["ratio"] == pytest.approx(1 / 0.6)
    dflash = by["DFlash (vs plain decode)"]
    assert dflash["ratio"] == pytest.approx(2.0)  # 4 tokens per 20 ms step vs 1 per 10 ms
    assert dflash["step_ms_with"] == pytest.approx(20.0) and dflash["step_ms_without"] == pytest.approx(10.0)
    assert dflash["tokens_per_step_without"] == 1
    md = to_markdown(rows)
    assert md.count("\n") == 2 + len(FEATURES) and "1.50x" in md
    df = to_dataframe(rows, {"gpu": "NVIDIA H200"})
    assert list(df["gpu"].unique()) == ["NVIDIA H200"] and len(df) == len(FEATURES)


def test_unsupported_switch_is_reported_not_fatal():
    clock = Clock()

    class OldEngine(FakeEngine):
        def generate(self, prompt, max_new_tokens, stop_ids=None, block_size=None, eager=False,
                     accept_profile=None):
            return super().generate(prompt, max_new_tokens, stop_ids, block_size, eager, accept_profile)

    def make_engine(**kw):
        if "linear" in kw:
            raise TypeError("load() got an unexpected keyword argument 'linear'")
        return OldEngine(clock, **kw)

    rows = feature_table(make_engine, [1] * 64, 33, trials=1, warmup_s=0.0, clock=clock)
    by = {r["feature"]: r for r in rows}
    assert "num_splits" in by["split-KV attention"]["error"] and math.isnan(by["split-KV attention"]["ratio"])
    assert "linear" in by["skinny GEMMs (vs cuBLAS)"]["error"]
    assert by["CUDA graphs"]["error"] == "" and by["CUDA graphs"]["ratio"] == pytest.approx(1.5)
    assert "not measured" in to_markdown(rows)


def test_recorded_command_leaves_out_where_the_tables_went():
    from bench.features import recorded_command
    command = recorded_command(["x.py", "--random-weights", "qwen3-4b", "--out-dir", "/abs/out", "--point", "1k",
                                "--out-dir=/abs/other"])
    assert "--random-weights qwen3-4b" in command and "--point 1k" in command and "/abs" not in command
