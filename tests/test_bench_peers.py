"""The peers' runners: argument building, the fallbacks of the compiled recipe, and rows from real runs
of transformers and the public DFlash reference on a tiny random checkpoint (CPU)."""

import math
import sys

import pytest
import torch

from bench.peers import hf, spec, speedup
from bench.ref.metric import decode_tok_s, validate_row
from tests.test_bench_metric import make_row
from tileinfer_profiling.run_info import gpu_name
from tileinfer.random_weights import write_dflash_drafter, write_qwen3


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("peers")
    target = write_qwen3(root / "target", "tiny", std=0.08, max_position_embeddings=1024)
    drafter = write_dflash_drafter(root / "drafter", target, num_layers=1, block_size=4, std=0.08)
    return str(target), str(drafter)


def test_engines_and_reply_caps():
    assert spec.parse_new_tokens("256,dflash-ref=32") == {"": 256, "dflash-ref": 32}
    assert spec.parse_new_tokens("") == {}
    for bad in ("vllm=3", "a,b"):
        with pytest.raises(Exception, match="new-tokens"):
            spec.parse_new_tokens(bad)
    with pytest.raises(Exception, match="unknown engine"):
        spec.parse_engines("hf-eager,sglang")
    (k1,), (k8,) = spec.parse_points("1k"), spec.parse_points("8k")
    caps = {"": 128, "dflash-ref": 16}
    assert spec.new_tokens_for(caps, "hf-eager", k1) == (128, "")
    assert spec.new_tokens_for(caps, "dflash-ref", k1) == (16, "reply capped at 16 of the point's 128 new tokens")
    assert spec.new_tokens_for(caps, "hf-compile", k8) == (128, "reply capped at 128 of the point's 2048 new tokens")
    assert spec.new_tokens_for({}, "hf-compile", k8) == (2048, "")


def test_jobs_and_worker_arguments():
    args = spec.parse_args(["--random-weights", "qwen3-4b", "--points", "1k,8k", "--engines", "hf-eager,dflash-ref",
                            "--new-tokens", "128,dflash-ref=16", "--processes", "2", "--timeout-s", "60"])
    args.model, args.draft, args.prepared = "/abs/target", "/abs/drafter", True  # as main() prepares them
    jobs = spec.jobs(args)
    assert [label for label, _ in jobs][:3] == ["1k hf-eager #0", "1k hf-eager #1", "1k dflash-ref #0"]
    assert len(jobs) == 2 * 2 * 2
    label, argv = jobs[-1]
    assert argv[:3] == [sys.executable, "-m", "bench.peers.spec"] and "/abs/target" not in argv
    worker = spec.parse_args(argv[3:])
    assert worker.worker and worker.process == 1 and worker.engines == ["dflash-ref"]
    assert [p.name for p in worker.points] == ["8k"] and worker.new_tokens == {"": 128, "dflash-ref": 16}
    assert worker.random_weights == "qwen3-4b" and "--timeout-s" not in argv
    with pytest.raises(SystemExit):
        spec.parse_args(["--engines", "hf-eager"])


def test_generate_arguments_of_each_mode():
    eager = hf.generate_kwargs("eager", 128)
    assert eager == dict(max_new_tokens=128, do_sample=False, num_beams=1)
    static = hf.generate_kwargs("static", 128)
    assert static["cache_implementation"] == "static" and static["compile_config"].mode == "reduce-overhead"
    plain = hf.generate_kwargs("static", 1, compile=False)
    assert plain["disable_compile"] is True and "compile_config" not in plain
    with pytest.raises(ValueError, match="mode"):
        hf.generate_kwargs("compiled", 4)
    with pytest.raises(ValueError, match="transformers mode"):
        hf.HFRunner(None, "fast")


def test_recipes_give_the_same_greedy_tokens(tiny):
    model = hf.load_model(tiny[0], "cpu", dtype=torch.float32)
    hf.set_stop_ids(model, [])
    assert model.generation_config.eos_token_id is None
    ids = list(range(3, 60))
    eager = hf.Generate(model, "eager")(ids, 12)
    assert len(eager.tokens) == 12 and eager.steps == 11
    loop = hf.CompiledLoop(model)
    assert not loop.compiled  # CUDA graphs need a GPU: the loop runs uncompiled here
    assert loop(ids, 12).tokens == eager.tokens == hf.Generate(model, "static", compile=False)(ids, 12).tokens
    assert loop(ids[:9], 5).tokens == hf.Generate(model, "eager")(ids[:9], 5).tokens  # the cache is reused
    hf.set_stop_ids(model, [eager.tokens[4]])  # stops at the first EOS, as generate does
    assert hf.CompiledLoop(model)(ids, 12).tokens == hf.Generate(model, "eager")(ids, 12).tokens


def test_compiled_recipe_falls_back_with_a_note(tiny):
    model = hf.load_model(tiny[0], "cpu", dtype=torch.float32)
    hf.set_stop_ids(model, [])

    class Broken:
        compiled = True

        def __init__(self):
            self.calls = 0

        def __call__(self, ids, n):
            self.calls += 1
            if self.calls == 2:  # fails only once warm, as a CUDA graph replay can
                raise RuntimeError("accessing tensor output of CUDAGraphs that has been overwritten\nmore")
            return hf.Reply([0] * n, n - 1)

    runner = hf.HFRunner(model, "static-compile", recipes=[("static-compile", Broken()),
                                                             ("static-compile-loop", hf.CompiledLoop(model))])
    runner.prepare(list(range(3, 40)), 6)
    assert runner.mode == "static"  # the loop ran, uncompiled on the CPU: the row says so
    assert runner.note.startswith("static-compile failed (RuntimeError: accessing tensor output of CUDAGraphs")
    assert "not compiled on cpu" in runner.note and "more" not in runner.note
    assert len(runner.reply(list(range(3, 40)), 6).tokens) == 6

    def always_broken(ids, n):
        raise RuntimeError("no")

    last = hf.HFRunner(model, "static-compile", recipes=[("a", Broken()), ("b", always_broken)])
    with pytest.raises(RuntimeError, match="no"):
        last.prepare([1, 2, 3], 4)


@pytest.mark.parametrize("engine", spec.ENGINES)
def test_worker_rows_on_a_tiny_checkpoint(tiny, engine):
    pytest.importorskip("dflash.model") if engine == "dflash-ref" else None
    target, drafter = tiny
    args = spec.parse_args(["--worker", "--model", target, "--draft", drafter, "--random-weights", "tiny",
                            "--points", "320/24", "--engines", engine, "--trials", "3", "--warmup-s", "0",
                            "--new-tokens", "dflash-ref=12", "--process", "1"])
    emitted = []
    rows = spec.run_worker(args, emit=emitted.append)
    assert rows == emitted and [r["task"] for r in rows] == ["edit", "explain"]
    for row in rows:
        validate_row(row)
        assert row["prompt_tokens"] == 320 and row["process"] == 1 and row["model"] == "tiny"
        assert row["weights"] == "bf16" and row["weights_kind"] == "random" and row["accept_mode"] == "real"
        assert row["version"] and row["gpu"] == gpu_name(None) and len(row["latency_trials_ms"]) == 3
        # the metric of the row's own medians: a loaded CI machine may time the prefill slower than the reply
        assert row["decode_tok_s"] == pytest.approx(
            decode_tok_s(row["new_tokens"], row["latency_ms"], row["prefill_ms"]), nan_ok=True)
    row = rows[0]
    if engine == "dflash-ref":
        assert (row["engine"], row["mode"], row["dflash"], row["block_size"]) == ("dflash", "eager", True, 4)
        assert row["new_tokens"] == 12 and "capped at 12 of the point's 24" in row["note"]
        assert "random weights" in row["note"] and "on transformers" in row["note"]
        assert 1 <= row["tokens_per_step"] <= 4
        assert row["steps"] >= 1 and row["drafter_ms_per_step"] > 0 and row["verify_ms_per_step"] > 0
    else:
        assert row["engine"] == "transformers" and not row["dflash"] and row["block_size"] == 1
        assert row["new_tokens"] == 24 and row["steps"] == 23 and row["drafter_ms_per_step"] is None
        on_gpu = torch.cuda.is_available()  # transformers compiles the decode step on GPUs only
        compiled = {"static-compile", "static-compile-loop"} if on_gpu else {"static"}
        assert row["mode"] in ({"eager"} if engine == "hf-eager" else compiled)
        assert ("not compiled on cpu" in row["note"]) == (engine == "hf-compile" and not on_gpu)


def test_speedups_pair_configurations_of_the_same_point():
    ours = [make_row(engine="tileinfer", model="qwen3-4b", dflash=d, block_size=16 if d else 1, weights=w,
                     decode_tok_s=t, latency_ms=ms, prefill_ms=0.0, steps=s, process=p)
            for d, w, t, ms, s in ((True, "bf16", 1000.0, 127.0, 18), (False, "bf16", 300.0, 423.0, 127))
            for p in (0, 1)]
    peers = [make_row(engine="transformers", mode="eager", version="5.17", model="qwen3-4b", dflash=False,
                      block_size=1, decode_tok_s=30.0, latency_ms=4230.0, prefill_ms=0.0, steps=127,
                      tokens_per_step=1.0, note="a note"),
             make_row(engine="dflash", mode="eager", version="0.1.0", model="qwen3-4b", dflash=True,
                      decode_tok_s=6.0, latency_ms=2500.0, prefill_ms=0.0, steps=15, tokens_per_step=1.0),
             make_row(engine="transformers", mode="eager", model="qwen3-8b", decode_tok_s=1.0)]  # no pair
    table = {(t["dflash"], t["peer"]): t for t in speedup.speedups(ours + peers)}
    assert len(table) == 4
    plain = table[(False, "transformers eager")]
    assert plain["speedup"] == pytest.approx(10.0) and plain["step_speedup"] == pytest.approx(10.0)
    assert plain["peer_version"] == "5.17" and plain["peer_note"] == "a note"
    assert table[(True, "transformers eager")]["speedup"] == pytest.approx(1000 / 30)
    assert math.isnan(table[(True, "transformers eager")]["step_speedup"])  # DFlash against plain: no step ratio
    ref = table[(True, "dflash eager")]
    assert ref["step_speedup"] == pytest.approx((2500 / 15) / (127 / 18))
    md = speedup.to_markdown(list(table.values()), {"abc"})
    assert md.startswith("git abc") and "33.33x" in md and "- transformers eager: a note" in md
