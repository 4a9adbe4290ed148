"""Short prompts prefill padded (in `generate` on a GPU, as one CUDA-graph replay): the padded sizes, and
the padded prefill against the unpadded one. The same logits, first token and cached K/V of the prompt;
the same tokens from plain and DFlash generation after it, and the same K/V behind them (what the padding
rows leave past the prompt is written again before any attention reads it). On a CPU the padded prefill
runs eagerly."""

import dataclasses

import pytest
import torch

import tileinfer
from tests.conftest import assert_close
from tests.helpers import tiny_pair
from tileinfer.memory import MemoryModel
from tileinfer.prefill_graph import MAX_TOKENS, STEP, padded_tokens, sizes


def test_padded_sizes():
    assert sizes() == [16, 32, 64, 128, 256, 512, 768, 1024, 1280, 1536, 1792, 2048]
    for n in range(1, MAX_TOKENS + 1):
        size = padded_tokens(n, 4096, 40960)
        assert size in sizes() and size >= n, n
        assert size == 16 or (size // 2 < n if size <= STEP else size - STEP < n), n  # the smallest that holds n
    assert padded_tokens(MAX_TOKENS + 1, 8192, 40960) is None and padded_tokens(0, 4096, 40960) is None
    assert padded_tokens(900, 1000, 40960) is None and padded_tokens(600, 1000, 40960) == 768  # one chunk
    assert padded_tokens(30, 4096, 31) is None  # padded past the model's positions


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("pair"))


def engine_with(pair, padded: bool):
    target, draft = pair
    engine = tileinfer.load(target, draft=draft, weights="fp32")
    engine.graph_prefill = padded
    engine._prompt_state()
    return engine


@pytest.fixture(scope="module")
def engines(pair):
    return engine_with(pair, padded=False), engine_with(pair, padded=True)


def prompt(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 150, (n,), generator=g).tolist()


@pytest.mark.parametrize("n", [5, 17, 45, 300])
def test_padded_prefill_matches_unpadded(engines, n):
    plain, padded = engines
    assert plain.padded_size(n) is None
    assert padded.padded_size(n) == padded_tokens(n, 4096, padded.config.max_position_embeddings) > n
    ids = torch.tensor(prompt(n))
    for engine in engines:
        engine._ensure_caches(n + 40)
    with torch.inference_mode():
        want = plain._prefill(ids, True, graphs=False).clone()
        got = padded._prefill(ids, True, graphs=False)
    assert_close(got, want, atol=1e-4, rtol=1e-4, what=f"logits, {n} tokens")
    assert int(got.argmax()) == int(want.argmax())
    for a, b, what in ((padded.cache.k, plain.cache.k, "target K"), (padded.draft_cache.v, plain.draft_cache.v,
                                                                       "drafter V")):
        assert_close(a[:, :n], b[:, :n], atol=1e-4, rtol=1e-4, what=f"{what}, {n} tokens")


@pytest.mark.parametrize("block_size", [1, 16])
@pytest.mark.parametrize("n", [17, 45])
def test_generation_after_a_padded_prefill(engines, n, block_size):
    plain, padded = engines
    ids = prompt(n, seed=n)
    want = plain.generate(ids, 40, stop_ids=[], block_size=block_size)
    got = padded.generate(ids, 40, stop_ids=[], block_size=block_size)
    assert got.tokens == want.tokens
    end = n + len(got.tokens) - 1  # the last token is not fed back
    assert_close(padded.cache.k[:, :end], plain.cache.k[:, :end], atol=1e-4, rtol=1e-4, what="target K")
    assert_close(padded.cache.v[:, :end], plain.cache.v[:, :end], atol=1e-4, rtol=1e-4, what="target V")
    if block_size == 16:  # exact mode (the tests' default): DFlash returns plain decoding's tokens
        assert got.tokens == padded.generate(ids, 40, stop_ids=[], block_size=1).tokens


def test_plan_counts_the_padded_prefill(engines):
    plain, _ = engines
    model = MemoryModel.from_engine(plain)
    cpu = dataclasses.replace(model, activations=dataclasses.replace(model.activations, cuda=False))
    gpu = dataclasses.replace(model, activations=dataclasses.replace(model.activations, cuda=True, backend="triton"))
    assert cpu.activations.padded_prefill(45) is None and gpu.activations.padded_prefill(45) == 64
    assert gpu.activations.padded_prefill(3000) is None  # past MAX_TOKENS: chunks, unpadded
    # padded to 64 rows, the chunk's activations are those of 64 tokens less the ids and positions it
    # reads from static buffers, plus the last row picked by copy
    padded = gpu.plan(45, 8).prefill_activation_bytes
    assert padded == gpu.plan(64, 8).prefill_activation_bytes > gpu.activations._chunk_bytes(45, 45, 0, 45)
    assert gpu.plan(65, 8).prefill_activation_bytes > padded  # 128 rows


@pytest.mark.parametrize("padded", [False, True])
def test_prefill_on_a_fresh_engine(pair, padded):
    """`prefill` as a request's first call (no cache yet) gives the first token `generate` gives."""
    ids = prompt(45, seed=3)
    want = engine_with(pair, padded).generate(ids, 1, stop_ids=[]).tokens[0]
    assert int(engine_with(pair, padded).prefill(ids)) == want
