import json
import math

import pytest

from bench.ref.metric import (
    REQUIRED_FIELDS, ROW_FIELDS, Row, accept_mode, agreement, append_jsonl, datasheet_bandwidth_gbs,
    decode_tok_s, format_table, measure, read_jsonl, spreads, step_ms, summarize, validate_row, write_csv,
)
from bench.ref.procs import run_workers

SCHEMA = ["engine", "task", "point", "prompt_tokens", "new_tokens", "weights", "dflash", "block_size",
          "latency_ms", "prefill_ms", "decode_tok_s", "tokens_per_step", "steps", "process", "gpu",
          "gpu_bandwidth_gbs", "torch", "triton", "git_rev", "command", "weights_kind", "accept_mode",
          "timestamp"]


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def make_row(**kw):
    base = dict(engine="tileinfer", task="edit", point="1k", prompt_tokens=1024, new_tokens=128,
                weights="bf16", dflash=True, block_size=16, latency_ms=400.0, prefill_ms=86.0,
                decode_tok_s=decode_tok_s(128, 400.0, 86.0), tokens_per_step=7.1, steps=18, process=0,
                gpu="NVIDIA H200", gpu_bandwidth_gbs=4190.0, gpu_bandwidth_source="measured",
                torch="2.11", triton="3.6.0", git_rev="abc", command="python -m x",
                weights_kind="real", accept_mode="real", timestamp="2026-11-29T00:00:00")
    return Row(**(base | kw)).as_dict()


def test_decode_formula():
    # (n - 1) / (latency(n) - latency(1))
    assert decode_tok_s(128, 386.0, 86.0) == pytest.approx(127 / 0.300)
    assert decode_tok_s(2048, 0.88e3 + 2047 / 95.5 * 1e3, 0.88e3) == pytest.approx(95.5)
    assert math.isnan(decode_tok_s(1, 100.0, 90.0)) and math.isnan(decode_tok_s(10, 80.0, 90.0))
    assert step_ms(386.0, 86.0, 30) == pytest.approx(10.0)


def test_measure_takes_medians_after_warmup():
    clock = FakeClock()
    reply_costs = iter([9.0] * 100 + [0.30, 0.32, 0.29, 0.31, 5.0])  # warm-up is slow, one outlier
    calls = {"reply": 0, "prefill": 0}

    def reply():
        calls["reply"] += 1
        clock.t += next(reply_costs) if calls["reply"] > 1 else 9.0
        return "reply"

    def prefill():
        calls["prefill"] += 1
        clock.t += 0.086 if calls["prefill"] > 1 else 0.5
        return "prefill"

    t = measure(reply, prefill, trials=5, warmup_s=1.0, clock=clock)
    assert calls["prefill"] == 6 and calls["reply"] == 6  # one warm-up round reached 1 s
    assert t.prefill_ms == pytest.approx(86.0) and len(t.latency_trials_ms) == 5
    assert t.reply == "reply"
    # warm-up rounds continue until 1 s has passed
    clock2, n = FakeClock(), {"c": 0}

    def fast():
        n["c"] += 1
        clock2.t += 0.125  # exact in binary: 4 warm-up rounds reach 1 s
    measure(fast, fast, trials=5, warmup_s=1.0, clock=clock2)
    assert n["c"] == 2 * 4 + 2 * 5


def test_agreement_one_percent():
    rows = [make_row(decode_tok_s=v, process=i) for i, v in enumerate([420.0, 421.0, 423.0])]
    spread, ok = agreement(rows)
    assert spread == pytest.approx(3 / 421) and ok
    rows.append(make_row(decode_tok_s=430.0, process=3))
    spread, ok = agreement(rows)
    assert spread > 0.01 and not ok
    # prefill counts too
    spread, ok = agreement([make_row(prefill_ms=86.0), make_row(prefill_ms=90.0)])
    assert not ok and spread == pytest.approx(4 / 88)
    assert agreement([make_row(decode_tok_s=math.nan)]) == (pytest.approx(math.nan, nan_ok=True), False)


def test_summary_flags_disagreement():
    rows = [make_row(process=i, decode_tok_s=v) for i, v in enumerate([400.0, 401.0, 402.0])]
    rows += [make_row(task="explain", process=i, decode_tok_s=v) for i, v in enumerate([170.0, 180.0])]
    summary = summarize(rows)
    by_task = {s["task"]: s for s in summary}
    assert by_task["edit"]["agree"] and not by_task["explain"]["agree"]
    assert by_task["edit"]["decode_tok_s"] == 401.0 and by_task["edit"]["processes"] == 3
    assert by_task["explain"]["decode_spread"] == pytest.approx(10 / 175)
    assert by_task["explain"]["prefill_spread"] == 0.0
    table = format_table(summary)
    assert "**disagree**" in table and table.count("\n") == 2 + 2
    explain = next(line for line in table.splitlines() if "| explain |" in line)
    assert "| **5.71 %** | 0.00 % | **disagree** |" in explain


def test_spreads_name_the_metric():
    rows = [make_row(process=0, prefill_ms=20.0), make_row(process=1, prefill_ms=40.0)]
    each = spreads(rows)
    assert each["decode_tok_s"] == 0.0 and each["prefill_ms"] == pytest.approx(20 / 30)
    assert agreement(rows) == (pytest.approx(20 / 30), False)


def test_row_schema():
    row = make_row()
    assert list(ROW_FIELDS[:len(REQUIRED_FIELDS)]) == list(REQUIRED_FIELDS)
    assert set(SCHEMA) <= set(REQUIRED_FIELDS)
    assert validate_row(row) is row
    for bad in ({"steps": 1.5}, {"dflash": "yes"}, {"accept_mode": "fake"}, {"engine": "hf"},
                {"latency_ms": "1"}):
        with pytest.raises(ValueError):
            validate_row(row | bad)
    with pytest.raises(ValueError, match="lacks"):
        validate_row({k: v for k, v in row.items() if k != "gpu"})
    assert accept_mode(None) == "real" and accept_mode(7.1) == "replay:7.1"
    assert accept_mode([7, 8]) == "replay:7.5"


def test_files_keep_finished_rows(tmp_path):
    path = tmp_path / "rows.jsonl"
    append_jsonl(path, make_row(process=0))
    append_jsonl(path, make_row(process=1))
    with open(path, "a") as f:
        f.write('{"engine": "tileinfer", "ta')  # interrupted mid-write
    assert [r["process"] for r in read_jsonl(path)] == [0, 1]
    write_csv(read_jsonl(path), tmp_path / "rows.csv")
    assert (tmp_path / "rows.csv").read_text().splitlines()[0].split(",") == list(ROW_FIELDS)


def test_run_workers_appends_rows_as_they_come(tmp_path):
    import sys
    out = tmp_path / "rows.jsonl"
    row = json.dumps(make_row())
    ok = [sys.executable, "-c", f"print('log line'); print('ROW ' + {row!r})"]
    fails = [sys.executable, "-c", f"print('ROW ' + {row!r}); raise SystemExit(3)"]
    rows = run_workers([("a", ok), ("b", fails)], out)
    assert len(rows) == 2 and len(read_jsonl(out)) == 2


def test_datasheet_bandwidth():
    assert datasheet_bandwidth_gbs("NVIDIA GeForce RTX 4080 SUPER") == 736
    assert datasheet_bandwidth_gbs("NVIDIA GeForce RTX 4080") == 717
    assert datasheet_bandwidth_gbs("NVIDIA H200") == 4800
    assert math.isnan(datasheet_bandwidth_gbs("Some GPU"))


def test_peer_rows_and_rows_recorded_before_the_optional_fields():
    old = [{k: v for k, v in make_row(process=i).items() if k in REQUIRED_FIELDS} for i in range(2)]
    assert all(validate_row(r) for r in old)  # no model, version, mode: still valid
    peer = make_row(engine="transformers", version="5.17.0", mode="static-compile", model="qwen3-4b",
                    dflash=False, block_size=1, note="reply capped")
    assert validate_row(peer) is peer and validate_row(make_row(engine="dflash", mode="eager"))
    with pytest.raises(ValueError, match="engine must be one of tileinfer, vllm, transformers, dflash"):
        validate_row(peer | {"engine": "sglang"})
    summary = summarize(old + [peer])
    assert {(s["engine"], s["mode"]) for s in summary} >= {("tileinfer", ""), ("transformers", "static-compile")}
    table = format_table(summary)
    assert "| transformers static-compile | qwen3-4b | 1k |" in table and "one process: unchecked" in table
    assert "| tileinfer | - | 1k |" in table


def test_cpu_lists_read_back_and_bad_ones_are_named():
    import argparse
    import os

    from bench.ref.procs import format_cpus, parse_cpus

    mine = os.sched_getaffinity(0)
    assert parse_cpus(format_cpus(mine)) == mine
    assert format_cpus({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    for bad in ("a-b", "", "0-1,x"):
        with pytest.raises(argparse.ArgumentTypeError, match="not a CPU list"):
            parse_cpus(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="not all among this process's CPUs"):
        parse_cpus(str(max(mine) + 1))


def test_run_workers_pins_each_worker_to_the_cpus(tmp_path):
    import os
    import sys

    cpu = max(os.sched_getaffinity(0))
    probe = ("import json, os; from tests.test_bench_metric import make_row; "
             "print('ROW ' + json.dumps(make_row(note=str(sorted(os.sched_getaffinity(0))))))")
    argv = [sys.executable, "-c", probe]
    rows = run_workers([("a", argv), ("b", argv)], tmp_path / "rows.jsonl", cpus=frozenset({cpu}))
    assert [r["note"] for r in rows] == [str([cpu])] * 2
    (free,) = run_workers([("c", argv)], tmp_path / "free.jsonl")
    assert free["note"] == str(sorted(os.sched_getaffinity(0)))
