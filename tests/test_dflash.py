"""DFlash: lossless against plain greedy decoding, and step for step like the public reference."""

import time

import pytest
import torch

import tileinfer
from tests.helpers import tiny_pair


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("pair"))


def test_dflash_equals_plain_greedy(pair):
    target, draft = pair
    engine = tileinfer.load(target, draft=draft, weights="fp32")
    g = torch.Generator().manual_seed(0)
    for trial in range(4):
        ids = torch.randint(0, 150, (int(torch.randint(1, 40, (1,), generator=g)),), generator=g).tolist()
        new = int(torch.randint(1, 50, (1,), generator=g))
        plain = engine.generate(ids, new, stop_ids=[], block_size=1)
        for block in (2, 5, 16):
            spec = engine.generate(ids, new, stop_ids=[], block_size=block)
            assert spec.tokens == plain.tokens, (trial, block)
            assert sum(spec.stats.tokens_per_step) + 1 == len(spec.tokens)


def test_dflash_matches_reference_implementation(pair, monkeypatch):
    model_mod = pytest.importorskip("dflash.model")
    if not torch.cuda.is_available():  # its timer synchronizes CUDA
        monkeypatch.setattr(model_mod, "_cuda_time", time.perf_counter)
    from transformers import AutoConfig, Qwen3ForCausalLM
    target_path, draft_path = pair
    target = Qwen3ForCausalLM.from_pretrained(str(target_path), torch_dtype=torch.float32).eval()
    drafter = model_mod.DFlashDraftModel.from_pretrained(str(draft_path), torch_dtype=torch.float32).eval()
    engine = tileinfer.load(target_path, draft=draft_path, weights="fp32")
    g = torch.Generator().manual_seed(1)
    for trial in range(3):
        ids = torch.randint(0, 150, (int(torch.randint(2, 30, (1,), generator=g)),), generator=g)
        new = int(torch.randint(5, 50, (1,), generator=g))
        ref = model_mod.dflash_generate(drafter, target, ids[None], max_new_tokens=new, stop_token_ids=None,
                                        return_stats=True)
        ours = engine.generate(ids.tolist(), new, stop_ids=[])
        assert ours.tokens == ref.output_ids[0, len(ids):].tolist()
        assert ours.stats.tokens_per_step == list(ref.acceptance_lengths)


class OracleDrafts:
    """Drafts that replay the target's own greedy continuation, wrong from a chosen index on: this drives
    the long-acceptance path, partial acceptance with KV rollback, and whole-block acceptance."""

    def __init__(self, engine, sequence, wrong_at):
        self.engine, self.sequence, self.wrong_at = engine, sequence, wrong_at
        self.original = engine._draft

    def __call__(self, shape, host_start):
        self.original(shape, host_start)  # still run the drafter: its context cache stays exercised
        size = shape.size
        start = int(self.engine.start_t.item())
        wrong = next(self.wrong_at)
        drafts = list(self.sequence[start + 1:start + size])
        drafts += [0] * (size - 1 - len(drafts))
        if wrong < len(drafts):
            drafts[wrong] = (drafts[wrong] + 1) % 150
        self.engine.block_ids[1:size].copy_(torch.tensor(drafts))


@pytest.mark.parametrize("block", [2, 7, 16])
def test_long_acceptance_is_lossless(pair, block, monkeypatch):
    target, draft = pair
    engine = tileinfer.load(target, draft=draft, weights="fp32")
    g = torch.Generator().manual_seed(block)
    counts = []
    for trial in range(4):
        ids = torch.randint(0, 150, (int(torch.randint(3, 30, (1,), generator=g)),), generator=g).tolist()
        new = int(torch.randint(10, 70, (1,), generator=g))
        plain = engine.generate(ids, new, stop_ids=[], block_size=1)
        sequence = ids + plain.tokens
        stop = [sequence[len(ids) + int(torch.randint(1, new, (1,), generator=g))]] if trial % 2 else []
        expect = engine.generate(ids, new, stop_ids=stop, block_size=1).tokens
        wrong = iter(torch.randint(0, block + 3, (1000,), generator=g).tolist())
        monkeypatch.setattr(engine, "_draft", OracleDrafts(engine, sequence, wrong))
        # eager: the oracle reads the anchor's position on the host, which a graph replay cannot do
        spec = engine.generate(ids, new, stop_ids=stop, block_size=block, eager=True)
        monkeypatch.undo()
        assert spec.tokens == expect, (trial, stop)
        assert all(1 <= t <= block for t in spec.stats.tokens_per_step)
        counts += spec.stats.tokens_per_step
        if stop:
            assert spec.tokens[-1] in stop and spec.stats.stop_reason == "stop"
        assert sum(spec.stats.tokens_per_step) + 1 == len(spec.tokens)
    assert block in counts, f"no step accepted the whole block: {counts}"
    if block > 2:
        assert any(1 < c < block for c in counts), f"no step accepted part of the block: {counts}"


def test_launch_ahead_until_the_worst_case_would_pass_the_end(tmp_path, monkeypatch):
    """A step is launched before the one in flight is read whenever, were that one to commit its whole
    block, the next would still fit before the length limit: the bound follows what the steps read so
    far committed, not what every launch could have (two tokens a step of four here: most of the request
    runs launched ahead, the tail one step at a time)."""
    target, draft = tiny_pair(tmp_path, num_layers=1, num_hidden_layers=2)
    engine = tileinfer.load(target, draft=draft, weights="fp32", backend="triton")
    ids = torch.randint(0, 150, (7,), generator=torch.Generator().manual_seed(6)).tolist()
    events, unread = [], []
    launch, read = engine._launch, engine._read

    def launching(shape, host_start, graphs):
        step = launch(shape, host_start, graphs)
        events.append(("launch", len(unread)))
        unread.append(step)
        return step

    def reading(step, start, max_length, stop):
        unread.remove(step)
        events.append(("read", start, step.size, max_length))
        return read(step, start, max_length, stop)

    monkeypatch.setattr(engine, "_launch", launching)
    monkeypatch.setattr(engine, "_read", reading)
    new, block = 24, 4
    out = engine.generate(ids, new, stop_ids=[], block_size=block, accept_profile=2)
    assert out.stats.tokens_per_step[:-1] == [2] * (len(out.stats.tokens_per_step) - 1)
    ahead = [e for e in events if e[0] == "launch" and e[1] > 0]
    assert len(ahead) >= len(out.stats.tokens_per_step) - 3, events
    for before, after in zip(events, events[1:]):
        if before[0] == "read" and after == ("launch", 0):  # launched only once the step before was read
            _, start, size, max_length = before
            assert max_length - (start + size) < block or start + size + 1 >= max_length, events


def test_triton_backend_launch_ahead_is_lossless(tmp_path):
    """The Triton backend launches the next step before reading this one (the KV length lives on the
    device); under the interpreter that path runs here too."""
    target, draft = tiny_pair(tmp_path, num_layers=1, num_hidden_layers=2)
    engine = tileinfer.load(target, draft=draft, weights="fp32", backend="triton")
    ids = torch.randint(0, 150, (7,), generator=torch.Generator().manual_seed(6)).tolist()
    plain = engine.generate(ids, 14, stop_ids=[], block_size=1)
    spec = engine.generate(ids, 14, stop_ids=[], block_size=4)
    assert spec.tokens == plain.tokens
    assert spec.stats.steps == len(spec.stats.tokens_per_step) and spec.stats.drafter_ms > 0
