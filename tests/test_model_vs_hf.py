"""The whole model against Hugging Face transformers' Qwen3ForCausalLM on tiny random checkpoints."""

import pytest
import torch

import tileinfer
from tests.conftest import assert_close
from tests.helpers import hf_qwen3, tiny_target


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_prompt_logits_match_transformers(tmp_path, backend, tied):
    path = tiny_target(tmp_path, tie_word_embeddings=tied)
    engine = tileinfer.load(path, weights="fp32", backend=backend)
    ids = torch.randint(0, engine.config.vocab_size, (23,), generator=torch.Generator().manual_seed(1)).tolist()
    ours = engine.prompt_logits(ids)
    with torch.no_grad():
        theirs = hf_qwen3(path)(torch.tensor([ids])).logits[0]
    assert_close(ours.cpu(), theirs, atol=1e-4, rtol=1e-4, what=f"logits ({backend})")


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_greedy_tokens_match_transformers(tmp_path, backend):
    # two layers under the interpreter, which runs every kernel program by program
    path = tiny_target(tmp_path, seed=3, **({"num_hidden_layers": 2} if backend == "triton" else {}))
    engine = tileinfer.load(path, weights="fp32", backend=backend)
    ids = torch.randint(0, engine.config.vocab_size, (9,), generator=torch.Generator().manual_seed(2)).tolist()
    new = 40 if backend == "torch" else 33
    out = engine.generate(ids, max_new_tokens=new, stop_ids=[])
    with torch.no_grad():
        ref = hf_qwen3(path).generate(torch.tensor([ids]), max_new_tokens=new, do_sample=False,
                                      eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist()
    assert out.tokens == ref
    assert out.stats.new_tokens == new and out.stats.steps == new - 1


def test_chunked_prefill_matches_one_shot(tmp_path):
    path = tiny_target(tmp_path, seed=5)
    ids = torch.randint(0, 160, (37,), generator=torch.Generator().manual_seed(3)).tolist()
    one = tileinfer.load(path, weights="fp32", prefill_chunk=4096).generate(ids, 12, stop_ids=[])
    for chunk in (5, 16, 37):
        chunked = tileinfer.load(path, weights="fp32", prefill_chunk=chunk).generate(ids, 12, stop_ids=[])
        assert chunked.tokens == one.tokens
