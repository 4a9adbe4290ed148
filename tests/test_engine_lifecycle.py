"""The engine across calls: interrupted calls, cache growth and graph recapture, CUDA graphs against
eager runs, the launch-ahead loop, every float dtype on the device."""

import pytest
import torch

import tileinfer
from tests.helpers import hf_qwen3, tiny_pair, tiny_target


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("pair"), dtype=torch.bfloat16)


def ids_of(n, seed=0, vocab=150):
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("block_size", [1, 16])
def test_interrupted_generate_leaves_the_engine_usable(pair, block_size, monkeypatch):
    target, draft = pair
    engine = tileinfer.load(target, draft=draft)
    ids = ids_of(40)
    fresh = tileinfer.load(target, draft=draft).generate(ids, 30, stop_ids=[], block_size=block_size).tokens
    reads = {"n": 0}
    original = engine._read

    def read_then_interrupt(*args):
        reads["n"] += 1
        if reads["n"] == 3:
            raise KeyboardInterrupt
        return original(*args)

    monkeypatch.setattr(engine, "_read", read_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        engine.generate(ids_of(25, seed=1), 40, stop_ids=[], block_size=block_size)
    monkeypatch.undo()
    assert engine.generate(ids, 30, stop_ids=[], block_size=block_size).tokens == fresh


def test_cache_growth_recaptures_and_keeps_outputs(tmp_path):
    """A longer request grows the KV caches (new buffers): the step graphs are captured again, and
    outputs equal a fresh engine's."""
    target, draft = tiny_pair(tmp_path, dtype=torch.bfloat16, max_position_embeddings=4096)
    engine = tileinfer.load(target, draft=draft)
    short, long = ids_of(20, seed=2), ids_of(1100, seed=3)
    engine.generate(short, 10, stop_ids=[])
    capacity = engine.cache.capacity
    grown = engine.generate(long, 60, stop_ids=[])
    assert engine.cache.capacity > capacity
    assert grown.tokens == tileinfer.load(target, draft=draft).generate(long, 60, stop_ids=[]).tokens
    assert engine.generate(short, 10, stop_ids=[]).tokens == \
        tileinfer.load(target, draft=draft).generate(short, 10, stop_ids=[]).tokens


@pytest.mark.gpu
@pytest.mark.parametrize("block_size", [1, 5, 16])
def test_cuda_graphs_equal_eager(pair, block_size):
    target, draft = pair
    engine = tileinfer.load(target, draft=draft)
    ids = ids_of(33, seed=4)
    graphs = engine.generate(ids, 60, stop_ids=[], block_size=block_size)
    assert engine._graphs, "no step graph was captured"
    eager = engine.generate(ids, 60, stop_ids=[], block_size=block_size, eager=True)
    assert graphs.tokens == eager.tokens
    assert graphs.stats.tokens_per_step == eager.stats.tokens_per_step


@pytest.mark.gpu
@pytest.mark.slow
def test_launch_ahead_with_stops_and_limits(pair):
    """Steps launched before the previous one is read are discarded when a stop id or the length limit
    ends the request inside the previous one; the tokens are those of the eager, unpipelined run."""
    target, draft = pair
    engine = tileinfer.load(target, draft=draft)
    ids = ids_of(17, seed=5)
    plain = engine.generate(ids, 80, stop_ids=[], block_size=1).tokens
    for stop_at in (3, 17, 40):
        stop = [plain[stop_at]]
        expect = plain[:plain.index(stop[0]) + 1]
        for block in (1, 4, 16):
            out = engine.generate(ids, 80, stop_ids=stop, block_size=block)
            assert out.tokens == expect and out.stats.stop_reason == "stop", (stop_at, block)
    for new in (1, 2, 15, 16, 17, 33):
        assert engine.generate(ids, new, stop_ids=[], block_size=16).tokens == plain[:new]


@pytest.mark.parametrize("weights", ["fp32", "fp16", "bf16"])
def test_every_float_dtype_runs_on_the_device(tmp_path, weights):
    """fp32 tiles need more shared memory than bf16's: every kernel still finds a config that fits."""
    on_gpu = torch.cuda.is_available()
    path = tiny_target(tmp_path, seed=7, **({} if on_gpu else {"num_hidden_layers": 1}))
    engine = tileinfer.load(path, weights=weights, backend="triton")
    n = 300 if on_gpu else 20  # the interpreter runs one program at a time
    ids = ids_of(n, seed=8, vocab=engine.config.vocab_size)
    ours = engine.prompt_logits(ids).cpu()
    with torch.no_grad():
        theirs = hf_qwen3(path)(torch.tensor([ids])).logits[0]
    tol = {"fp32": 1e-3, "fp16": 3e-2, "bf16": 8e-2}[weights]
    assert (ours - theirs).abs().max() <= tol * theirs.abs().max(), weights
    out = engine.generate(ids, 6, stop_ids=[])
    assert len(out.tokens) == 6
