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


def gemm_operands(n, k, m, quantized, seed, device):
    """A skinny GEMM's operands: a Linear [n, k] (INT8 when `quantized`), its weight arguments, x [m, k], a
    norm weight [k] and a residual [m, n], all BF16 from one seed."""
    from tileinfer.ops.linear import Linear, quantize_linear

    gen = torch.Generator().manual_seed(seed)
    lin = Linear(weight=(torch.randn(n, k, generator=gen) * k ** -0.5).to(device, torch.bfloat16))
    lin = quantize_linear(lin) if quantized else lin
    weights = (lin.qweight, lin.scale) if quantized else (lin.weight,)
    x = torch.randn(m, k, generator=gen).to(device, torch.bfloat16)
    g = (1 + 0.1 * torch.randn(k, generator=gen)).to(device, torch.bfloat16)
    res = torch.randn(m, n, generator=gen).to(device, torch.bfloat16)
    return lin, weights, x, g, res


def assert_settings_decode_alike(tmp_path, monkeypatch, settings, seed, new_tokens=12):
    """Under each setting (a callable applied first) a tiny BF16 pair with fused layers, loaded then (Triton
    backend, exact mode), gives greedy DFlash the tokens of plain greedy decoding, and every setting the
    same tokens."""
    import tileinfer

    monkeypatch.setenv("TILEINFER_FUSE_NORMS", "1")
    target, draft = tiny_pair(tmp_path, dtype=torch.bfloat16, num_layers=1, num_hidden_layers=2)
    ids = torch.randint(0, 150, (17 + seed,), generator=torch.Generator().manual_seed(seed)).tolist()
    runs = []
    for apply in settings:
        apply()
        engine = tileinfer.load(target, draft=draft, weights="bf16", backend="triton", exact=True)
        runs.append([engine.generate(ids, new_tokens, stop_ids=[], block_size=block).tokens for block in (16, 1)])
    assert all(run == runs[0] for run in runs) and runs[0][0] == runs[0][1]
