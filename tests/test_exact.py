"""Exact mode: each kernel of a decode / verify step gives a row the bits it gets when computed alone,
whatever the number of rows (1…16) and the block's KV length; so greedy DFlash returns exactly the
tokens of greedy decoding. Bitwise comparisons throughout (torch.equal), on the GPU where there is one."""

import pytest
import torch

import tileinfer
from tests.helpers import tiny_pair
from tileinfer.memory import MemoryModel
from tileinfer.ops.attention import attention_ref, exact_block_m, exact_grid_splits, exact_split_size
from tileinfer.ops.backend import AttentionContext, Ops
from tileinfer.ops.decode_attention import decode_attention
from tileinfer.ops.linear import Linear, linear, linear_rows_ref, quantize_linear
from tileinfer.ops.rmsnorm import rms_norm, rms_norm_ref
from tileinfer.ops.swiglu import silu_mul, silu_mul_ref


GEMM_SHAPES = [(48, 96), (100, 130), (40, 320)]  # the last splits K


def rows_alone(fn, x):
    return torch.cat([fn(x[i:i + 1]) for i in range(x.shape[0])])


def assert_rows_equal(batched, alone, what):
    bad = [i for i in range(batched.shape[0]) if not torch.equal(batched[i], alone[i])]
    assert not bad, f"{what}: rows {bad} differ from the same rows computed alone"


@pytest.mark.parametrize("weights", ["bf16", "int8", "fp32"])
@pytest.mark.parametrize("n,k", GEMM_SHAPES)
def test_linear_rows_do_not_depend_on_m(device, weights, n, k):
    g = torch.Generator().manual_seed(n + k)
    dtype = torch.float32 if weights == "fp32" else torch.bfloat16
    lin = Linear(weight=torch.randn(n, k, generator=g).to(device, dtype))
    if weights == "int8":
        lin = quantize_linear(lin)
    x = torch.randn(16, k, generator=g).to(device, dtype)
    alone = rows_alone(lambda r: linear(r, lin, exact=True), x)
    for m in (2, 5, 16):
        assert_rows_equal(linear(x[:m], lin, exact=True), alone[:m], f"triton {weights} {n}x{k} M={m}")
        assert_rows_equal(linear_rows_ref(x[:m], lin), rows_alone(lambda r: linear_rows_ref(r, lin), x[:m]),
                          f"reference {weights} {n}x{k} M={m}")


def test_row_wise_ops_do_not_depend_on_m(device):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(16, 96, generator=g).to(device, torch.bfloat16)
    res = torch.randn(16, 96, generator=g).to(device, torch.bfloat16)
    w = torch.randn(96, generator=g).to(device, torch.bfloat16)
    for norm in (rms_norm, rms_norm_ref):
        out, h = norm(x, w, 1e-6, res)
        alone = [norm(x[i:i + 1], w, 1e-6, res[i:i + 1]) for i in range(16)]
        assert_rows_equal(out, torch.cat([a[0] for a in alone]), f"{norm.__name__} out")
        assert_rows_equal(h, torch.cat([a[1] for a in alone]), f"{norm.__name__} h")
    gate_up = torch.randn(16, 2 * 48, generator=g).to(device, torch.bfloat16)
    for act in (silu_mul, silu_mul_ref):
        assert_rows_equal(act(gate_up), rows_alone(act, gate_up), act.__name__)


def verify_vs_decode_rows(device, dtype, kv_len, num_q_heads, num_kv_heads, head_dim, max_length, num_splits, t=16):
    """Attention of a block of t queries ending at kv_len against each query alone at its own KV length."""
    g = torch.Generator().manual_seed(kv_len)
    q = torch.randn(t, num_q_heads, head_dim, generator=g).to(device, dtype)
    k = torch.randn(max_length + 16, num_kv_heads, head_dim, generator=g).to(device, dtype)
    v = torch.randn(max_length + 16, num_kv_heads, head_dim, generator=g).to(device, dtype)
    split_size = exact_split_size(max_length, num_splits)
    grid = exact_grid_splits(num_splits)
    block_m = exact_block_m(num_q_heads, num_kv_heads)

    def run(qs, length):
        kv = torch.tensor([length], dtype=torch.int32, device=device)
        return decode_attention(qs, k, v, kv, causal=True, num_splits=grid, split_size=split_size, block_m=block_m)

    block = run(q, kv_len)
    alone = torch.cat([run(q[i:i + 1], kv_len - t + i + 1) for i in range(t)])
    return block, alone


@pytest.mark.parametrize("kv_len,max_length,num_splits", [
    (16, 40, 4),      # the block is the whole cache
    (70, 90, 1),      # the block crosses a split boundary (split size 64)
    (200, 500, 2),    # several splits of 128, a boundary inside the block
    (260, 300, 8),    # more splits than the keys of early rows reach
])
def test_decode_attention_rows_do_not_depend_on_the_block(device, kv_len, max_length, num_splits):
    block, alone = verify_vs_decode_rows(device, torch.bfloat16, kv_len, 4, 2, 32, max_length, num_splits)
    assert_rows_equal(block, alone, f"kv {kv_len} / splits of {exact_split_size(max_length, num_splits)}")
    # and the exact kernel still computes attention
    g = torch.Generator().manual_seed(kv_len)
    q = torch.randn(16, 4, 32, generator=g).to(device, torch.bfloat16)
    k = torch.randn(max_length + 16, 2, 32, generator=g).to(device, torch.bfloat16)
    v = torch.randn(max_length + 16, 2, 32, generator=g).to(device, torch.bfloat16)
    expected = attention_ref(q, k, v, kv_len, True).float()
    assert (block.float() - expected).abs().max() < 3e-2


@pytest.mark.gpu
@pytest.mark.parametrize("kv_len", [1024, 4096 + 7, 8192 + 5])
def test_decode_attention_rows_qwen3_shape(kv_len):
    """The Qwen3-4B head layout (32 query heads over 8 KV heads, d 128) at the KV length classes the
    benchmark uses; the tile (64 rows) and the split size stay fixed while T and kv_len change."""
    block, alone = verify_vs_decode_rows("cuda", torch.bfloat16, kv_len, 32, 8, 128, kv_len + 128, 16)
    assert_rows_equal(block, alone, f"qwen3-4b heads, kv {kv_len}")


def test_torch_backend_attention_rows(device):
    ops = Ops("torch", exact=True)
    g = torch.Generator().manual_seed(5)
    q = torch.randn(16, 4, 32, generator=g).to(device)
    k = torch.randn(80, 2, 32, generator=g).to(device)
    v = torch.randn(80, 2, 32, generator=g).to(device)
    kv_t = torch.tensor([60], device=device)
    block = ops.attention(q, k, v, AttentionContext(60, kv_t))
    alone = torch.cat([ops.attention(q[i:i + 1], k, v, AttentionContext(60 - 15 + i, kv_t)) for i in range(16)])
    assert_rows_equal(block, alone, "torch backend attention")


# ---- the property end to end: greedy DFlash = greedy decoding, token for token ---------------------------

def fuzz_cases(seed, count, vocab, max_prompt, max_new, block_max):
    g = torch.Generator().manual_seed(seed)
    for _ in range(count):
        kind = int(torch.randint(0, 3, (1,), generator=g))
        n = int(torch.randint(1, max_prompt, (1,), generator=g))
        if kind == 0:
            ids = torch.randint(0, vocab, (n,), generator=g).tolist()
        elif kind == 1:  # repetitive prompts make long acceptance and near ties
            motif = torch.randint(0, vocab, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g).tolist()
            ids = (motif * n)[:n]
        else:
            ids = [int(torch.randint(0, vocab, (1,), generator=g))] * n
        new = int(torch.randint(1, max_new, (1,), generator=g))
        block = int(torch.randint(2, block_max + 1, (1,), generator=g))
        yield ids, new, block


def assert_dflash_equals_greedy(engine, cases, what):
    differ = []
    for ids, new, block in cases:
        plain = engine.generate(ids, new, stop_ids=[], block_size=1).tokens
        spec = engine.generate(ids, new, stop_ids=[], block_size=block).tokens
        if spec != plain:
            first = next(i for i, (a, b) in enumerate(zip(spec, plain)) if a != b)
            differ.append((len(ids), new, block, first))
    assert not differ, f"{what}: DFlash differs from greedy in {len(differ)} cases (prompt, new, block, first): {differ}"


@pytest.mark.slow
@pytest.mark.parametrize("weights", ["bf16", "int8"])
def test_embedded_pair_dflash_equals_greedy(weights):
    engine = tileinfer.load(weights=weights)
    vocab = engine.config.vocab_size
    cases = list(fuzz_cases(11 if weights == "bf16" else 12, 5 if weights == "bf16" else 3, vocab, 300, 48, 16))
    text = engine.tokenizer.encode("def fib(n):\n    if n < 2:\n        return n\n").ids
    cases.append((text, 128 if weights == "bf16" else 64, 16))
    assert_dflash_equals_greedy(engine, cases, f"embedded pair {weights} on {engine.device}")


@pytest.mark.parametrize("weights,stream_k", [("bf16", 0), ("int8", 0), ("bf16", 2)])
def test_triton_kernels_dflash_equals_greedy(tmp_path, weights, stream_k, monkeypatch):
    """The Triton kernels (interpreted on a CPU) on a tiny pair in BF16 and INT8, and with the 16-row GEMMs as
    stream-K on 3 SMs, in tiles small enough that programs share them."""
    import dataclasses

    from tileinfer.ops import skinny_gemm

    if stream_k:
        config = skinny_gemm.get_config
        monkeypatch.setattr(skinny_gemm, "_num_sms", lambda device: 3)
        monkeypatch.setattr(skinny_gemm, "get_config", lambda *a, **kw: dataclasses.replace(
            config(*a, **kw), block_n=16, block_k=32, split_k=1, stream_k=stream_k))
    target, draft = tiny_pair(tmp_path, dtype=torch.bfloat16, num_layers=1, num_hidden_layers=2)
    engine = tileinfer.load(target, draft=draft, weights=weights, backend="triton")
    cases = list(fuzz_cases(21, 2 if engine.device.type == "cpu" else 40, 150, 24, 14, 16))
    assert_dflash_equals_greedy(engine, cases, f"triton {weights}")


def test_row_blocks_reach_the_steps_attention(tmp_path, monkeypatch):
    """With the GPU section's row blocks (forced here on any device), a DFlash step's attention takes a
    few tokens a program outside exact mode and all of them in exact mode; the tokens are those it decodes
    without them."""
    from tileinfer.ops import attention

    target, draft = tiny_pair(tmp_path, dtype=torch.float32, num_layers=1, num_hidden_layers=2)
    engine = tileinfer.load(target, draft=draft, backend="triton", exact=False)
    plain = [engine.generate(ids, new, stop_ids=[], block_size=block).tokens
             for ids, new, block in fuzz_cases(23, 2, 150, 24, 14, 16)]
    monkeypatch.setattr(attention, "section", lambda device, name: {"row_blocks_below": 4096, "tokens_per_program": 3})
    assert engine.step_shape(16, 1000, None, False).tokens_per_program == 3
    assert engine.step_shape(16, 5000, None, False).tokens_per_program == 16
    assert engine.step_shape(1, 1000, None, False).tokens_per_program == 1
    monkeypatch.setattr(attention, "section", lambda device, name: {
        "row_blocks_below": 4096, "tokens_per_program": 3, "row_block_max_splits": 2})
    assert [engine.step_shape(16, n, None, False).num_splits for n in (1000, 3000, 5000)] == [2, 2, 8]
    assert engine.step_shape(1, 3000, None, False).num_splits == 16
    assert engine.step_shape(16, 3000, 5, False).num_splits == 5  # a split count asked for stands
    activations = MemoryModel.from_engine(engine).activations
    assert [activations.splits.num_splits(n, t) for n, t in ((1000, 16), (5000, 16), (3000, 1))] == [2, 8, 16]
    engine.exact = True
    assert engine.step_shape(16, 1000, None, False).tokens_per_program == 0
    engine.exact = False
    blocked = [engine.generate(ids, new, stop_ids=[], block_size=block).tokens
               for ids, new, block in fuzz_cases(23, 2, 150, 24, 14, 16)]
    assert blocked == plain


@pytest.mark.gpu
@pytest.mark.parametrize("stream_k", [0, 1])
@pytest.mark.parametrize("weights", ["bf16", "int8"])
@pytest.mark.parametrize("n,k", [(6144, 2560), (2560, 4096), (19456, 2560), (2560, 9728), (151936, 2560)])
def test_linear_rows_qwen3_shapes(weights, n, k, stream_k, monkeypatch):
    """Qwen3-4B's fused linears and LM head with their tuned configs (split-K on the narrow ones), and with
    stream-K shares for one program an SM."""
    from tileinfer.ops import gemm_configs

    monkeypatch.setitem(gemm_configs._given, "stream_k", stream_k)
    g = torch.Generator(device="cuda").manual_seed(n + k)
    lin = Linear(weight=(torch.randn(n, k, generator=g, device="cuda") * 0.02).bfloat16())
    if weights == "int8":
        lin = quantize_linear(lin)
    x = torch.randn(16, k, generator=g, device="cuda").bfloat16()
    alone = rows_alone(lambda r: linear(r, lin, exact=True), x)
    for m in (2, 7, 16):
        assert_rows_equal(linear(x[:m], lin, exact=True), alone[:m], f"{weights} {n}x{k} M={m}")
