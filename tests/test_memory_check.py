"""bench/memory_check.py's rows on the embedded pair: plan beside measured, the phase that peaks."""

import pytest
import torch

import tileinfer
from bench import memory_check
from tileinfer_profiling.memory_peaks import (PLAN_MARGIN, PLAN_SLACK, block_peak_bytes, live_at_peak,
                                              measure_peak_bytes, plan_covers)


def test_rows_name_the_peak_phase():
    rows = memory_check.check(tileinfer.load(), "embedded pair", (40,), 4)
    sampling = [f"step, block {b}, {what}" for what in ("T=1", "T=1 top-k/p", "T=1 top-p") for b in (1, 16)]
    assert [r["what"] for r in rows] == ["prefill", "step, block 1", "step, block 16", *sampling]
    steps = {r["what"]: r for r in rows[1:]}
    assert steps["step, block 1"]["peak_phase"] == "verify"
    phases = dict(p.split(":") for p in steps["step, block 16"]["phase_bytes"].split())
    assert set(phases) == {"drafter", "verify"}
    assert max(map(int, phases.values())) == steps["step, block 16"]["measured_bytes"] > 0
    assert all(r["planned_bytes"] > 0 and r["plan_over_measured"] > 0 for r in rows)
    if not torch.cuda.is_available():  # on a GPU the filter is a radix select of a few KB (ops.sample)
        assert steps["step, block 16, T=1 top-p"]["peak_phase"] == "verify", "the filter's sort peaks in the verify"
    blocks = [r for r in rows if r["what"].startswith("step, block 16")]
    assert all(r["ok"] for r in blocks), [(r["what"], r["plan_over_measured"]) for r in blocks if not r["ok"]]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the allocator trace is CUDA's")
def test_live_at_peak_names_the_blocks_and_their_code():
    def call():
        a = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
        b = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
        del a
        c = torch.empty(1 << 10, dtype=torch.uint8, device="cuda")
        return b, c

    peak, blocks = live_at_peak(call, "cuda", top=2)
    assert peak == 4 << 20
    assert [size for size, _ in blocks] == [3 << 20, 1 << 20]
    assert all(where.startswith("tests/test_memory_check.py:") and where.endswith(" call") for _, where in blocks)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the allocator trace is CUDA's")
def test_cuda_peak_counts_tensors_in_granules_not_whole_blocks():
    def call():
        a = torch.empty(19 << 20, dtype=torch.uint8, device="cuda")  # a 20 MiB segment, handed out whole
        b = torch.empty(1000, dtype=torch.uint8, device="cuda")
        return a, b

    torch.cuda.empty_cache()
    _, peak = measure_peak_bytes(call, "cuda")
    assert peak == (19 << 20) + 1024
    torch.cuda.empty_cache()
    assert block_peak_bytes(call, "cuda") >= peak


def test_plan_covers_margin_and_slack():
    assert plan_covers(110, 100) and not plan_covers(99, 100)
    assert plan_covers(1000 + PLAN_SLACK, 1000) and not plan_covers(1001 + PLAN_SLACK, 1000)
    assert not plan_covers(int(PLAN_MARGIN * 10**6) + 1, 10**6)
