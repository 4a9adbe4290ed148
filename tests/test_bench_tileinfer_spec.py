import math
from types import SimpleNamespace

import pytest

from bench.ref import tileinfer_spec as spec
from bench.ref.metric import validate_row
from tileinfer import load
from tileinfer.random_weights import write_dflash_drafter, write_qwen3


class FakeStats(SimpleNamespace):
    @property
    def mean_tokens_per_step(self):
        return sum(self.tokens_per_step) / len(self.tokens_per_step) if self.tokens_per_step else 0.0


class FakeEngine:
    """generate() returns at once and advances a clock of its own by 1 ms a token; enough of the API
    for the worker."""

    def __init__(self, vocab_size=151936, tokenizer=None):
        self.config = SimpleNamespace(vocab_size=vocab_size)
        self.tokenizer = tokenizer
        self.calls = []
        self.now = 0.0

    def clock(self):
        return self.now

    def generate(self, prompt, max_new_tokens, stop_ids=None, block_size=None, eager=False,
                 accept_profile=None, num_splits=None):
        self.calls.append(dict(n=max_new_tokens, stop_ids=stop_ids, block_size=block_size,
                               accept_profile=accept_profile, prompt=list(prompt)))
        self.now += 1e-3 * max_new_tokens
        per_step = int(accept_profile or 1)
        steps = max(1, -(-(max_new_tokens - 1) // per_step))
        stats = FakeStats(prompt_tokens=len(prompt), new_tokens=max_new_tokens, steps=steps,
                          tokens_per_step=[per_step] * steps, block_size=block_size or 16,
                          prefill_ms=0.5 + len(self.calls) * 1e-3)  # the call's own 1 ms, less its overhead
        return SimpleNamespace(tokens=[0] * max_new_tokens, text=None, stats=stats)


def test_parse_and_jobs():
    args = spec.parse_args(["--model", "m", "--draft", "d", "--accept-profile", "edit=7.1,explain=2.9"])
    assert args.accept_profile == {"edit": 7.1, "explain": 2.9}
    jobs = spec.jobs(args)
    # 2 weights x 2 DFlash settings x (3 processes at 1k + 2 at 8k)
    assert len(jobs) == 4 * 5
    label, argv = jobs[0]
    assert "--worker" in argv and argv[argv.index("--points") + 1] == "1k"
    worker_args = spec.parse_args(argv[3:])
    assert worker_args.worker and worker_args.accept_profile == args.accept_profile
    assert [p.name for p in worker_args.points] == ["1k"]
    assert len(spec.jobs(spec.parse_args(["--model", "m", "--processes", "1", "--dflash", "off"]))) == 4
    custom = spec.parse_points("256/16")[0]
    assert (custom.prompt_tokens, custom.new_tokens) == (256, 16)
    with pytest.raises(SystemExit):
        spec.parse_args(["--model", "m", "--weights", "int4"])
    with pytest.raises(SystemExit):
        spec.parse_args([])


def test_workers_of_random_weights_record_no_checkpoint_paths():
    args = spec.parse_args(["--random-weights", "tiny", "--random-dir", "rw", "--points", "1k", "--processes", "1",
                            "--dflash", "off", "--weights", "bf16"])
    args.model, args.draft, args.prepared = "/abs/target", "/abs/drafter", True  # as main() prepares them
    ((_, argv),) = spec.jobs(args)
    assert "--model" not in argv and "/abs/target" not in argv
    assert argv[argv.index("--random-weights") + 1] == "tiny" and argv[argv.index("--random-dir") + 1] == "rw"


def test_pinned_workers_carry_their_cpus_and_check_them():
    import os

    from bench.ref.procs import check_pinned

    cpu = max(os.sched_getaffinity(0))
    args = spec.parse_args(["--model", "m", "--points", "1k", "--processes", "1", "--dflash", "off",
                            "--weights", "bf16", "--cpus", str(cpu)])
    ((_, argv),) = spec.jobs(args)
    assert spec.parse_args(argv[3:]).cpus == {cpu}
    if len(os.sched_getaffinity(0)) > 1:  # an unpinned process on a machine of several CPUs
        with pytest.raises(SystemExit, match=f"pinned to CPUs {cpu}, running on"):
            check_pinned(frozenset({cpu}))
    check_pinned(None)


@pytest.mark.parametrize("dflash", ["on", "off"])
def test_worker_rows_with_a_fake_engine(dflash):
    engine, loads, emitted = FakeEngine(vocab_size=200), [], []

    def load(model, draft=None, weights="bf16", device=None):
        loads.append((model, draft, weights))
        return engine

    args = spec.parse_args(["--worker", "--model", "/ckpt/random-4b", "--draft", "/ckpt/drafter",
                            "--random-weights", "qwen3-4b", "--points", "1k", "--weights", "int8",
                            "--dflash", dflash, "--accept-profile", "edit=7.1,explain=2.9",
                            "--trials", "3", "--warmup-s", "0", "--process", "2"])
    rows = spec.run_worker(args, load=load, emit=emitted.append, clock=engine.clock)
    assert rows == emitted and [r["task"] for r in rows] == ["edit", "explain"]
    assert loads == [("/ckpt/random-4b", "/ckpt/drafter" if dflash == "on" else None, "int8")]
    for row in rows:
        validate_row(row)
        assert row["prompt_tokens"] == 1024 and row["new_tokens"] == 128 and row["process"] == 2
        assert row["weights_kind"] == "random" and row["weights"] == "int8"
        assert row["decode_tok_s"] > 0 and not math.isnan(row["decode_tok_s"])
        assert len(row["latency_trials_ms"]) == 3
        # the engine's own prefill times of the measured trials (not the warm-up's), each within its call
        assert len(row["engine_prefill_trials_ms"]) == 3
        assert all(inner < wall for inner, wall in zip(row["engine_prefill_trials_ms"], row["prefill_trials_ms"]))
    assert len({t for r in rows for t in r["engine_prefill_trials_ms"]}) == 6  # each trial its own call
    edit = rows[0]
    if dflash == "on":
        assert edit["accept_mode"] == "replay:7.1" and edit["tokens_per_step"] == 7.0
        assert rows[1]["accept_mode"] == "replay:2.9"
    else:
        assert edit["accept_mode"] == "real" and edit["block_size"] == 1
    # random weights: no stop at EOS, ids folded into the vocabulary; 1-token prefill requests
    assert all(c["stop_ids"] == [] and max(c["prompt"]) < 200 for c in engine.calls)
    assert {c["n"] for c in engine.calls} == {1, 128}


@pytest.mark.slow
def test_worker_on_a_tiny_random_checkpoint(tmp_path):
    target = write_qwen3(tmp_path / "target", "tiny", max_position_embeddings=1024)
    drafter = write_dflash_drafter(tmp_path / "drafter", target, num_layers=1, block_size=4)
    args = spec.parse_args(["--worker", "--model", str(target), "--draft", str(drafter),
                            "--random-weights", "tiny", "--points", "320/8", "--weights", "bf16",
                            "--dflash", "on", "--trials", "1", "--warmup-s", "0",
                            "--accept-profile", "edit=2,explain=1.5"])
    rows = spec.run_worker(args, load=load, emit=lambda row: None)
    assert [r["prompt_tokens"] for r in rows] == [320, 320]
    assert all(0 < r["engine_prefill_trials_ms"][0] <= r["prefill_trials_ms"][0] for r in rows)
    assert all(r["new_tokens"] == 8 and r["accept_mode"].startswith("replay:") for r in rows)


def test_replayed_tokens_per_step_per_point():
    profile = spec.parse_accept_profile("1k:edit=7.1,8k:edit=1.87,explain=2.9")
    assert spec.profile_for(profile, "8k", "edit") == 1.87 and spec.profile_for(profile, "1k", "edit") == 7.1
    assert spec.profile_for(profile, "8k", "explain") == 2.9 and spec.profile_for(profile, "32k", "edit") is None
    engine, emitted = FakeEngine(vocab_size=200), []
    args = spec.parse_args(["--worker", "--model", "/ckpt/t", "--draft", "/ckpt/d", "--random-weights", "qwen3-4b",
                            "--points", "8k", "--weights", "bf16", "--dflash", "on", "--trials", "1",
                            "--warmup-s", "0", "--accept-profile", "1k:edit=7.1,8k:edit=1.87,1k:explain=2.9,"
                            "8k:explain=2.5", "--tasks", "edit"])
    (row,) = spec.run_worker(args, load=lambda *a, **k: engine, emit=emitted.append, clock=engine.clock)
    assert row["accept_mode"] == "replay:1.87" and {c["accept_profile"] for c in engine.calls} == {1.87}
    assert (row["model"], row["mode"], row["version"]) == ("qwen3-4b", "cuda-graphs", "0.1.0")
