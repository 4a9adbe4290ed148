"""Tiny checkpoints written by the tests themselves."""

import torch

from tileinfer.random_weights import write_dflash_drafter, write_qwen3


def tiny_target(tmp_path, name="target", dtype=torch.float32, seed=0, **overrides):
    return write_qwen3(tmp_path / name, "tiny", seed=seed, dtype=dtype, std=0.08, **overrides)


def tiny_pair(tmp_path, dtype=torch.float32, num_layers=2, block_size=16, seed=0, **overrides):
    target = tiny_target(tmp_path, dtype=dtype, seed=seed, **overrides)
    draft = write_dflash_drafter(tmp_path / "drafter", target, num_layers=num_layers, block_size=block_size,
                                 seed=seed + 1, dtype=dtype, std=0.08)
    return target, draft


def hf_qwen3(path):
    from transformers import Qwen3ForCausalLM
    model = Qwen3ForCausalLM.from_pretrained(str(path), torch_dtype=torch.float32, attn_implementation="eager")
    return model.eval()
