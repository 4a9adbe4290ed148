"""vllm_spec without vLLM: argument building and row parsing with fakes."""

import sys
import time
from types import SimpleNamespace

import pytest

from tileinfer_profiling.prompts import ByteTokenizer
from bench.ref import vllm_spec
from bench.ref.metric import Timing, validate_row

ENV = dict(gpu="NVIDIA H200", gpu_bandwidth_gbs=4190.0, gpu_bandwidth_source="measured",
           torch="2.11", triton="3.6.0", git_rev="abc")


def args_for(*extra):
    return vllm_spec.parse_args(["--model", "/m/Qwen3-4B", "--draft", "/m/drafter", "--points", "8k",
                                 "--weights", "bf16", *extra])


def test_llm_kwargs_as_the_comparison_ran():
    kw = vllm_spec.build_llm_kwargs(args_for())
    assert kw["speculative_config"] == {"method": "dflash", "model": "/m/drafter",
                                        "num_speculative_tokens": 15}
    assert kw["max_num_seqs"] == 1 and kw["enable_prefix_caching"] is False
    assert kw["enforce_eager"] is False and kw["compilation_config"] == {"mode": 3}
    assert kw["model"] == kw["tokenizer"] == "/m/Qwen3-4B"
    assert kw["max_model_len"] >= 8192 + 2048 and "attention_backend" not in kw
    assert "speculative_config" not in vllm_spec.build_llm_kwargs(args_for("--dflash", "off"))
    int8 = vllm_spec.build_llm_kwargs(vllm_spec.parse_args(
        ["--model", "/m/Qwen3-4B", "--draft", "/m/d", "--points", "1k", "--weights", "int8",
         "--int8-model", "/m/w8a16", "--attention-backend", "TRITON_ATTN"]))
    assert int8["model"] == "/m/w8a16" and int8["tokenizer"] == "/m/Qwen3-4B"
    assert int8["attention_backend"] == "TRITON_ATTN" and int8["max_model_len"] < 8192
    with pytest.raises(ValueError, match="int8"):
        vllm_spec.build_llm_kwargs(args_for("--weights", "int8"))


def test_sampling_params_greedy_with_eos():
    sp = vllm_spec.build_sampling_params(128, sampling_params_cls=SimpleNamespace)
    assert (sp.temperature, sp.max_tokens, sp.ignore_eos) == (0.0, 128, False)


def fake_output(prompt_len, new):
    return SimpleNamespace(prompt_token_ids=list(range(prompt_len)),
                           outputs=[SimpleNamespace(token_ids=list(range(new)))])


def test_row_from_output():
    timing = Timing(latency_ms=300.0, prefill_ms=100.0, latency_trials_ms=[300.0] * 5,
                    prefill_trials_ms=[100.0] * 5, reply=None)
    row = vllm_spec.row_from_output(
        fake_output(1021, 128), task="edit", point="1k", weights="bf16", dflash=True, timing=timing,
        spec_delta={"num_drafts": 26, "num_accepted_tokens": 101}, process=1, env=ENV, command="x")
    validate_row(row)
    assert row["engine"] == "vllm" and row["prompt_tokens"] == 1021 and row["new_tokens"] == 128
    assert row["steps"] == 26 and row["tokens_per_step"] == pytest.approx(1 + 101 / 26)
    assert row["decode_tok_s"] == pytest.approx(127 / 0.2) and row["block_size"] == 16
    plain = vllm_spec.row_from_output(
        fake_output(1021, 128), task="edit", point="1k", weights="bf16", dflash=False, timing=timing,
        spec_delta={}, process=0, env=ENV, command="x")
    assert plain["steps"] == 127 and plain["tokens_per_step"] == 1.0 and plain["block_size"] == 1


def test_spec_counts():
    metrics = [SimpleNamespace(name="vllm:spec_decode_num_drafts", value=10),
               SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens", value=42),
               SimpleNamespace(name="vllm:num_requests_running", value=1)]
    assert vllm_spec.spec_counts(metrics) == {"num_drafts": 10, "num_accepted_tokens": 42}


def test_worker_with_a_fake_llm(monkeypatch):
    counters = {"drafts": 0, "accepted": 0}
    made = {}

    class FakeLLM:
        def __init__(self, **kw):
            made.update(kw)

        def generate(self, requests, params, use_tqdm=True):
            n = params.max_tokens
            time.sleep(2e-5 * n)
            counters["drafts"] += (n - 1) // 4
            counters["accepted"] += 3 * ((n - 1) // 4)
            return [fake_output(len(requests[0]["prompt_token_ids"]), n)]

        def get_metrics(self):
            return [SimpleNamespace(name="vllm:spec_decode_num_drafts", value=counters["drafts"]),
                    SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens", value=counters["accepted"])]

    monkeypatch.setattr(vllm_spec, "tokenizer_from_path", lambda path: ByteTokenizer())
    monkeypatch.setattr(vllm_spec, "local_checkpoint", lambda model: model)
    monkeypatch.setattr(vllm_spec, "environment", lambda measure_bandwidth: ENV)
    args = vllm_spec.parse_args(["--worker", "--model", "/m/Qwen3-4B", "--draft", "/m/d", "--points",
                                 "1k", "--weights", "bf16", "--trials", "3", "--warmup-s", "0"])
    rows = []
    vllm_spec.run_worker(args, llm_cls=FakeLLM, sampling_params_cls=SimpleNamespace, emit=rows.append)
    assert made["speculative_config"]["method"] == "dflash"
    assert [r["task"] for r in rows] == ["edit", "explain"]
    assert all(r["prompt_tokens"] == 1024 and r["tokens_per_step"] == 4.0 for r in rows)


def test_main_skips_without_vllm(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(SystemExit, match="not installed"):
        vllm_spec.main(["--model", "/m", "--draft", "/d"])
