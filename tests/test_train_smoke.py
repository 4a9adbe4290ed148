"""A few steps of the default pair's training pipeline on tiny shapes, and checks of the shipped pair."""

import json
import sysconfig
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("dflash", reason="pip install --no-deps dflash==0.1.0")

from dflash.model import DFlashDraftModel, dflash_generate, extract_context_feature  # noqa: E402
from transformers import Qwen3ForCausalLM  # noqa: E402

from tools.train import corpus, data, drafter as dr, explain, target as tg, tasks, tokenizer  # noqa: E402
from tools.train.rows import TrainData  # noqa: E402

ASSETS = Path(__file__).resolve().parents[1] / "tileinfer" / "assets" / "default"


def tiny_pair(vocab_size=300, mask_id=299):
    torch.manual_seed(0)
    t_cfg = tg.target_config(vocab_size, 0, max_position_embeddings=2048, **tg.TINY)
    d_cfg = dr.drafter_config(t_cfg, mask_id, num_layers=2, block_size=16)
    return t_cfg, tg.build_target(t_cfg).eval(), d_cfg, dr.build_drafter(d_cfg).eval()


def test_templates_and_rename():
    assert tasks.rename("x::Sensor; Sensors; Sensor[]", "Sensor", "Beacon") == "x::Beacon; Sensors; Beacon[]"
    summary = explain.explain_python("import os\n\nclass A:\n    def f(self):\n        pass\n\ndef g():\n    pass\n")
    assert summary.startswith("The code defines 1 class and 1 function.") and "The class A has the methods f." in summary
    assert "### Reply:\n" in tasks.BENCH_LAYOUT


def test_batched_blocks_match_reference_forward():
    """Training runs many blocks per row through one masked pass; each must equal the reference's own pass."""
    _, target, _, drafter = tiny_pair()
    S, bs = 64, 16
    x = torch.randint(0, 298, (2, S))
    anchors = torch.tensor([[5, 30, 50], [1, 20, 47]])
    emb = target.get_input_embeddings().weight
    with torch.no_grad():
        feats = extract_context_feature(target(input_ids=x, output_hidden_states=True).hidden_states,
                                        drafter.target_layer_ids)
        block_pos = anchors[..., None] + torch.arange(bs)
        block_ids = torch.full_like(block_pos, drafter.mask_token_id)
        block_ids[..., 0] = x.gather(1, anchors)
        pos = torch.cat([torch.arange(S).expand(2, S), block_pos.flatten(1)], 1)
        batched = drafter(target_hidden=feats, noise_embedding=F.embedding(block_ids.flatten(1), emb),
                          position_ids=pos, attention_mask=dr.block_mask(anchors, S, bs)).view(2, 3, bs, -1)
        for b in range(2):
            for j, a in enumerate(anchors[b].tolist()):
                ref = drafter(target_hidden=feats[b:b + 1, :a], noise_embedding=F.embedding(block_ids[b:b + 1, j], emb),
                              position_ids=torch.arange(a + bs)[None])
                torch.testing.assert_close(batched[b, j], ref[0], atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_pipeline_few_steps(tmp_path):
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    sources = {"python": corpus.collect("python", [stdlib / "json", stdlib / "email"], limit=30)}
    julia = [data.generate_module(data.TRAIN_SEED0 + i).source(8) for i in range(4)]
    tok = tokenizer.train_tokenizer([t for _, t in sources["python"]] + julia, vocab_size=600)
    assert tok.get_vocab_size() == 600 and tok.token_to_id(tokenizer.MASK) == 599
    tok_dir = tmp_path / "tokenizer"
    tokenizer.save_tokenizer(tok, tok_dir, 2048)
    mix = {"edit": 0.4, "explain": 0.3, "code": 0.3}
    buckets, counts = data.build_dataset(tok, sources, 40_000, {512: 0.5, 1536: 0.5}, mix=mix, max_misses=200)
    tokens, lengths, replies = buckets[1536]
    assert counts[1536]["edit/julia"]["examples"] > 0 and len(replies) > 0
    assert tokens.dtype.name == "uint16" and (lengths <= 1536).all()
    data.save_dataset(tmp_path / "data", buckets, {"kinds": counts})
    train = TrainData(tmp_path / "data", held_out_rows=2)
    assert train.seq_lens == [512, 1536]

    t_cfg = tg.target_config(600, 0, max_position_embeddings=2048, **tg.TINY)
    target = tg.build_target(t_cfg)
    hist = tg.train_target(target, train, 60, batch_size=2, max_steps=3, device="cpu", log=lambda m: None)
    assert len(hist) == 1 and hist[0]["loss"] > 0
    assert "reply_token_accuracy" in tg.evaluate_target(target, train, "cpu", batch_size=2)
    target.to(torch.bfloat16)
    tg.save_target(target, t_cfg, tok_dir, tmp_path / "pair" / "target")

    d_cfg = dr.drafter_config(t_cfg, 599, num_layers=2, block_size=16)
    assert d_cfg["dflash_config"]["target_layer_ids"] == [1, 3]
    drafter = dr.build_drafter(d_cfg)
    hist = dr.train_drafter(drafter, target, train, 60, batch_size=1, anchors_per_row=4, max_steps=2,
                            device="cpu", log=lambda m: None)
    assert hist[0]["loss"] > 0
    drafter.to(torch.bfloat16)
    dr.save_drafter(drafter, d_cfg, tmp_path / "pair" / "drafter")
    resumed = dr.load_drafter_weights(dr.build_drafter(d_cfg), tmp_path / "pair" / "drafter")
    for (name, a), b in zip(drafter.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a.float(), b), name

    loaded_t = Qwen3ForCausalLM.from_pretrained(tmp_path / "pair" / "target", dtype=torch.bfloat16)
    loaded_d = DFlashDraftModel.from_pretrained(tmp_path / "pair" / "drafter", dtype=torch.bfloat16)
    assert loaded_d.mask_token_id == 599 and loaded_d.block_size == 16
    prompt = {"set": "heldout", "task": "edit", "point": "1k", "seed": 0, "ids": tokens[0, :40].tolist()}
    (row,) = dr.measure_acceptance(loaded_d, loaded_t, [prompt], eos_id=0, max_new_tokens=8)
    assert row["same_as_greedy"] and row["tokens_per_step"] >= 1


@pytest.mark.skipif(not (ASSETS / "drafter" / "model.safetensors").is_file(), reason="no shipped pair")
def test_shipped_pair():
    t_cfg = json.loads((ASSETS / "target" / "config.json").read_text())
    d_cfg = json.loads((ASSETS / "drafter" / "config.json").read_text())
    assert d_cfg["architectures"] == ["DFlashDraftModel"] and d_cfg["block_size"] == 16
    assert d_cfg["dflash_config"]["mask_token_id"] == t_cfg["vocab_size"] - 1
    size = sum(p.stat().st_size for p in ASSETS.rglob("*.safetensors"))
    assert size < 32 * 2**20
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(ASSETS / "target" / "tokenizer.json"))
    assert tok.token_to_id("<|mask|>") == t_cfg["vocab_size"] - 1 and tok.token_to_id("<|endoftext|>") == 0
    target = Qwen3ForCausalLM.from_pretrained(ASSETS / "target", dtype=torch.float32)
    drafter = DFlashDraftModel.from_pretrained(ASSETS / "drafter", dtype=torch.float32)
    module = data.generate_module(7)
    edit = tasks.BENCH_LAYOUT.format(code="{code}", instruction=tasks.BENCH_INSTRUCTIONS["rename"])
    ids = tok.encode(edit.format(code=module.source(2), old=module.type_name, new="Beacon")).ids
    (row,) = dr.measure_acceptance(drafter, target, [{"task": "edit", "seed": 7, "ids": ids}], 0, max_new_tokens=16)
    assert row["same_as_greedy"]
