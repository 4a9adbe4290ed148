"""Long prompts: chunked prefill equals one-shot prefill (logits, greedy tokens, DFlash), and the memory
plan against allocations measured on the device the engine runs on.

Margin of the memory plan (CPU: PyTorch backend, allocations from torch.profiler; CUDA: Triton backend,
the caching allocator's peaks): weights, buffers and KV caches exact; prefill and step activations
measured ≤ plan ≤ 1.10 × measured.
"""

import math

import pytest
import torch

import tileinfer
from tileinfer import sampling
from tests.conftest import assert_close
from tests.helpers import tiny_target
from tileinfer.config import DFlashConfig, Qwen3Config, read_json
from tileinfer.memory import MemoryModel, held_buffer_bytes, held_weight_bytes
from tileinfer.ops.backend import AttentionContext
from tileinfer.random_weights import write_dflash_drafter
from tileinfer_profiling.memory_peaks import measure_peak_bytes, plan_covers

PROMPT_LEN = 45
CHUNKS = [1, 9, 15, 16, 45, 64]  # 9 and 15 divide 45, 16 does not, 64 is one-shot


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    # Distinct target_layer_ids: tiny_pair's 4-layer target gives [1, 1], and a repeated id leaves the
    # second tap slot unwritten by Qwen3ForCausalLM.forward.
    root = tmp_path_factory.mktemp("pair")
    target = tiny_target(root)
    draft = write_dflash_drafter(root / "drafter", target, num_layers=2, block_size=16, seed=1,
                                 dtype=torch.float32, std=0.08, target_layer_ids=[1, 2])
    return target, draft


@pytest.fixture(scope="module")
def engine(pair):
    target, draft = pair
    return tileinfer.load(target, draft=draft, weights="fp32")


def prompt(n=PROMPT_LEN, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 150, (n,), generator=g).tolist()


@torch.inference_mode()
def chunked_logits(engine, ids, chunk):
    """Logits at every prompt position, computed chunk by chunk over the cached prefix."""
    target, n = engine.target, len(ids)
    engine._ensure_caches(n + 2 * engine.block_max)
    tokens = torch.tensor(ids, device=engine.device)
    out = []
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        positions = torch.arange(lo, hi, device=engine.device)
        h, residual = target.forward(tokens[lo:hi], positions, engine.cache, AttentionContext(hi, None))
        out.append(target.logits(target.final_norm(h, residual)).float())
    return torch.cat(out)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_chunked_logits_equal_one_shot(engine, chunk):
    ids = prompt()
    one_shot = engine.prompt_logits(ids)
    assert_close(chunked_logits(engine, ids, chunk), one_shot, atol=2e-5, rtol=1e-4, what=f"logits, chunk {chunk}")


@pytest.mark.parametrize("block_size", [1, 16])
def test_chunked_generation_equals_one_shot(engine, block_size):
    """Greedy tokens (plain) and DFlash output, steps included, do not depend on the prefill chunk."""
    ids = prompt(seed=1)
    first = int(engine.prompt_logits(ids)[-1].argmax())
    results = {}
    for chunk in CHUNKS:
        engine.prefill_chunk = chunk
        g = engine.generate(ids, 24, stop_ids=[], block_size=block_size)
        assert g.tokens[0] == first, chunk
        results[chunk] = (g.tokens, g.stats.tokens_per_step)
    engine.prefill_chunk = 4096
    reference = results[64]
    for chunk, result in results.items():
        assert result == reference, f"chunk {chunk}"
    if block_size > 1:
        plain = engine.generate(ids, 24, stop_ids=[], block_size=1)
        assert plain.tokens == reference[0]


def test_chunked_drafter_context_equals_one_shot(engine):
    """The drafter's context K/V built chunk by chunk during prefill equals the one-shot one."""
    ids = prompt(seed=2)
    n = len(ids)
    engine._ensure_caches(n + 2 * engine.block_max)
    caches = {}
    for chunk in (64, 16, 7):
        engine.prefill_chunk = chunk
        engine.prefill(ids)
        caches[chunk] = (engine.draft_cache.k[:, :n].clone(), engine.draft_cache.v[:, :n].clone(),
                         engine.cache.k[:, :n].clone())
    engine.prefill_chunk = 4096
    for chunk in (16, 7):
        for got, want, what in zip(caches[chunk], caches[64], ("drafter K", "drafter V", "target K")):
            assert_close(got, want, atol=2e-5, rtol=1e-4, what=f"{what}, chunk {chunk}")


# ---- the memory plan --------------------------------------------------------------------------------

def test_held_bytes_walked_again_when_the_weights_change(pair):
    """The plan's weight and buffer bytes are kept between requests, and follow quantization and the padded
    prefill's buffers."""
    target, draft = pair
    engine = tileinfer.load(target, draft=draft, weights="bf16")
    float_bytes = engine.memory_plan(30, 4).weights_bytes
    assert engine.held_bytes() == engine.held_bytes() and engine.held_bytes()[0] == float_bytes
    tileinfer.quantize_int8(engine)
    assert engine.memory_plan(30, 4).weights_bytes == held_weight_bytes(engine) < float_bytes
    buffers = engine.held_bytes()[1]
    engine.graph_prefill = not engine.graph_prefill
    engine._prompt_state()
    assert engine.memory_plan(30, 4).buffers_bytes != buffers
    assert engine.memory_plan(30, 4).buffers_bytes == held_buffer_bytes(engine)


@pytest.mark.parametrize("weights", ["fp32", "bf16", "int8"])
def test_plan_weights_buffers_and_kv_exact(pair, weights):
    target, draft = pair
    engine = tileinfer.load(target, draft=draft, weights=weights)
    from_configs = MemoryModel.from_configs(Qwen3Config.from_dict(read_json(target / "config.json")),
                                            DFlashConfig.from_dict(read_json(draft / "config.json")),
                                            weights, backend=engine.backend, cuda=engine.is_cuda)
    plan = engine.memory_plan(300, 40)
    assert plan.weights_bytes == held_weight_bytes(engine) == from_configs.weights_bytes
    state = [engine.target.cos_sin, engine.drafter.cos_sin, engine.start_t, engine.ctx_start_t, engine.block_ids,
             engine.result, engine.forced_accept, engine.arange, engine.features]
    if engine.graph_prefill:  # on CUDA: the padded prefill's static inputs and output
        state += [engine.padded_ids, engine.padded_positions, engine.padded_last, engine.padded_logits]
    assert plan.buffers_bytes == sum(t.nbytes for t in state) == from_configs.buffers_bytes
    engine.generate(prompt(300), 40, stop_ids=[])
    assert plan.kv_positions == engine.cache.capacity == engine.draft_cache.capacity
    assert plan.target_kv_bytes == engine.cache.k.nbytes + engine.cache.v.nbytes
    assert plan.drafter_kv_bytes == engine.draft_cache.k.nbytes + engine.draft_cache.v.nbytes
    assert plan.total_bytes == (plan.weights_bytes + plan.buffers_bytes + plan.target_kv_bytes
                                + plan.drafter_kv_bytes + plan.activation_bytes + plan.allocator_bytes)


def within_margin(planned, measured, what):
    """The plan covers the request's longest step (its split partials at the last position), so at tiny
    shapes it may hold a few more 512-B allocator granules than one step measured at its start."""
    assert plan_covers(planned, measured), f"{what}: plan {planned} B, measured {measured} B"


@pytest.mark.parametrize("weights", ["fp32", "bf16"])
@pytest.mark.parametrize("n,chunk", [(45, 9), (45, 16), (45, 64), (200, 64), (300, 17)])
def test_plan_prefill_activations_match_measured(pair, weights, n, chunk):
    target, draft = pair
    engine = tileinfer.load(target, draft=draft, weights=weights, prefill_chunk=chunk)
    ids = prompt(n)
    engine._ensure_caches(n + 40)
    engine.prefill(ids)  # allocator workspaces (cuBLAS) are held from the first prefill on
    _, measured = measure_peak_bytes(lambda: engine.prefill(ids), engine.device)
    within_margin(engine.memory_plan(n, 8).prefill_activation_bytes, measured, f"prefill {n}/{chunk} {weights}")


def test_prefill_activations_bounded_by_chunk(pair):
    """With the Triton backend (flash attention), chunked prefill grows past the KV caches only by the
    8-byte ids per prompt token; the PyTorch reference's attention holds fp32 K/V of the whole prefix."""
    import dataclasses
    target, draft = pair
    engine = tileinfer.load(target, draft=draft, weights="bf16", prefill_chunk=32)
    model = MemoryModel.from_engine(engine)
    model = dataclasses.replace(model, activations=dataclasses.replace(model.activations, backend="triton", cuda=False))
    a, b = (model.plan(n, 8).prefill_activation_bytes for n in (128, 480))
    assert b - a == 8 * (480 - 128)
    one_shot = model.with_prefill_chunk(4096).plan(480, 8).prefill_activation_bytes
    assert one_shot > 10 * b


@pytest.mark.parametrize("block_size", [1, 16])
def test_plan_step_activations_match_measured(pair, block_size):
    target, draft = pair
    engine = tileinfer.load(target, draft=draft if block_size > 1 else None, weights="bf16")
    ids = prompt(200)
    engine.generate(ids, 30, stop_ids=[])
    start = int(engine.start_t.item())
    peaks = []
    for _, fn in engine._phases(engine.step_shape(block_size, 230, None, False), start):
        peaks.append(measure_peak_bytes(torch.inference_mode()(fn), engine.device)[1])
    within_margin(engine.memory_plan(200, 30).step_activation_bytes, max(peaks), f"step, block {block_size}")


def test_budget_refuses_before_allocation(pair):
    target, draft = pair
    engine = tileinfer.load(target, draft=draft, weights="fp32")
    ids = prompt(300)
    plan = engine.memory_plan(300, 40)
    engine.memory_budget = plan.total_bytes - 1
    with pytest.raises(tileinfer.RequestError, match="memory budget"):
        engine.generate(ids, 40)
    assert engine.cache.capacity == 0 and engine.cache.k is None and engine.draft_cache.k is None
    engine.memory_budget = plan.total_bytes
    assert len(engine.generate(ids, 40, stop_ids=[]).tokens) == 40
    engine.memory_budget = math.inf
    engine.generate(ids, 40, stop_ids=[])

    small = tileinfer.load(target, draft=draft, weights="fp32", memory_budget=plan.total_bytes - 1)
    with pytest.raises(tileinfer.RequestError, match="longest prompt that fits"):
        small.generate(ids, 40)
    assert small.cache.k is None
    with pytest.raises(tileinfer.ConfigError):
        tileinfer.load(target, draft=draft, weights="fp32", memory_budget=-5)


def test_longest_prompt(engine):
    budget = engine.memory_plan(200, 16).total_bytes
    plan = engine.memory_plan(10, 16, budget_bytes=budget)
    longest = plan.longest_prompt()
    assert longest >= 200
    assert engine.memory_plan(longest, 16).total_bytes <= budget
    if longest + 16 < engine.config.max_position_embeddings:
        assert engine.memory_plan(longest + 1, 16).total_bytes > budget
    assert plan.fits and plan.as_dict()["longest_prompt"] == longest
    assert plan.longest_prompt(10**12, 16) == engine.config.max_position_embeddings - 16
    assert plan.longest_prompt(1000, 16) == 0
    assert "longest prompt" in str(plan)


def test_plan_matches_measured_on_fused_layers(pair, monkeypatch):
    """Our kernels with the norms' weights folded into the projections: DFlash steps (layers apart, exact
    mode) and plain one-token steps (fused layers: one stream tensor, norms and adds inside the GEMMs), on
    a CPU; the GPU suite's plan tests run them with the allocator's rounding."""
    monkeypatch.setenv("TILEINFER_FUSE_NORMS", "1")
    target, draft = pair
    engine = tileinfer.load(target, draft=draft, weights="bf16", backend="triton", prefill_chunk=9)
    assert engine.ops.folds_norm_weights
    ids = prompt(45)
    engine.generate(ids, 4, stop_ids=[])
    _, measured = measure_peak_bytes(lambda: engine.prefill(ids), engine.device)
    within_margin(engine.memory_plan(45, 4).prefill_activation_bytes, measured, "fused prefill 45/9")
    start = int(engine.start_t.item())
    peaks = [measure_peak_bytes(torch.inference_mode()(fn), engine.device)[1]
             for _, fn in engine._phases(engine.step_shape(16, 49, None, False), start)]
    within_margin(engine.memory_plan(45, 4).step_activation_bytes, max(peaks), "folded step, block 16")
    plain = tileinfer.load(target, weights="bf16", backend="triton", prefill_chunk=9, exact=False)
    assert plain.block_max == 1 and plain.ops.fused_layer(1)
    plain.generate(ids, 4, stop_ids=[])
    start = int(plain.start_t.item())
    peaks = [measure_peak_bytes(torch.inference_mode()(fn), plain.device)[1]
             for _, fn in plain._phases(plain.step_shape(1, 49, None, False), start)]
    within_margin(plain.memory_plan(45, 4).step_activation_bytes, max(peaks), "fused one-token step")


def sampling_step(engine, block, prompt_len, new_tokens, top_k, top_p):
    """(the plan's step bytes, the measured peak of one eager step's phases) of a T=1 request with top_k /
    top_p, after `generate` has run it once."""
    vocab = engine.config.vocab_size
    params = sampling.SamplingParams(1.0, top_k, top_p)
    flags = dict(sample=True, filtered=params.filtered(vocab), candidates=params.candidates(vocab))
    engine.generate(prompt(prompt_len), new_tokens, stop_ids=[], block_size=block, temperature=1.0, top_k=top_k,
                    top_p=top_p, seed=1)
    start = int(engine.start_t.item())
    shape = engine.step_shape(block, prompt_len + new_tokens, None, False, **flags)
    peaks = [measure_peak_bytes(torch.inference_mode()(fn), engine.device)[1] for _, fn in engine._phases(shape, start)]
    return engine.memory_plan(prompt_len, new_tokens, **flags).step_activation_bytes, max(peaks)


@pytest.mark.parametrize("top_k, top_p", [(None, None), (50, None), (50, 0.9), (None, 0.9)])
def test_plan_covers_a_sampling_step(tmp_path, top_k, top_p):
    """A sampling step keeps the verify's logits and its fp32 log-probabilities; top-k / top-p find one
    threshold per row, from the candidates of a top-k of at most 1,024 or else from a sort: a vocabulary
    large enough for them to set the step's peak."""
    target = tiny_target(tmp_path, vocab_size=8192)
    draft = write_dflash_drafter(tmp_path / "drafter", target, num_layers=2, block_size=16, seed=1,
                                 dtype=torch.float32, std=0.08, target_layer_ids=[1, 2])
    engine = tileinfer.load(target, draft=draft, weights="bf16")
    assert sampling.SamplingParams(1.0, top_k, top_p).candidates(8192) == (1024 if top_k else 0)
    planned, measured = sampling_step(engine, 16, 200, 30, top_k, top_p)
    within_margin(planned, measured, f"sampling step, top_k {top_k}, top_p {top_p}")
    assert planned > engine.memory_plan(200, 30).step_activation_bytes


@pytest.mark.parametrize("top_k, top_p", [(None, None), (40, 0.95), (None, 0.95)])
@pytest.mark.parametrize("exact", [False, True])
def test_plan_covers_a_one_token_sampling_step(tmp_path, top_k, top_p, exact):
    """Plain decoding's single row (a top-k sorts it: fewer rows than sampling.CANDIDATE_MIN_ROWS), with
    the drawn row's float64 temporaries that weigh more than its logits."""
    target = tiny_target(tmp_path, vocab_size=8192 + 11)
    engine = tileinfer.load(target, weights="bf16", exact=exact)
    planned, measured = sampling_step(engine, 1, 60, 12, top_k, top_p)
    within_margin(planned, measured, f"one-token sampling step, top_k {top_k}, top_p {top_p}")
