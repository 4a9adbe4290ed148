"""decode_attention with `step_kv`: Qwen3's Q/K RMSNorm, RoPE and the KV-cache write in the attention's
launch, against qk_norm_rope_ref (into the caches) then attention_ref; rows independent of T in exact mode."""

import pytest
import torch

from tests.conftest import assert_close
from tileinfer.errors import ConfigError
from tileinfer.ops.attention import attention_ref, exact_block_m, exact_grid_splits, exact_split_size
from tileinfer.ops import decode_attention as decode_attention_module
from tileinfer.ops.decode_attention import StepKV, decode_attention
from tileinfer.ops.rope import qk_norm_rope_ref, rope_cos_sin

TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}
EPS = 1e-6


def make_step(kv_len, t, num_q_heads, num_kv_heads, head_dim, dtype, device, seed=0):
    """A cache filled up to kv_len - t, NaN past kv_len; the step's raw qkv as one projection output."""
    g = torch.Generator().manual_seed(seed)
    max_positions = kv_len + 9
    cache = [torch.randn(max_positions, num_kv_heads, head_dim, generator=g).to(dtype) for _ in range(2)]
    for c in cache:
        c[kv_len - t:] = float("nan")
    qkv = torch.randn(t, (num_q_heads + 2 * num_kv_heads) * head_dim, generator=g).to(dtype)
    weights = [(1 + 0.1 * torch.randn(head_dim, generator=g)).to(dtype) for _ in range(2)]
    cos_sin = rope_cos_sin(head_dim, max_positions, 1_000_000.0)
    to = lambda x: x.to(device)  # noqa: E731
    return [to(c) for c in cache], to(qkv), [to(w) for w in weights], to(cos_sin)


def views(qkv, num_q_heads, num_kv_heads, head_dim):
    t = qkv.shape[0]
    q = qkv[:, : num_q_heads * head_dim].view(t, num_q_heads, head_dim)
    k = qkv[:, num_q_heads * head_dim: (num_q_heads + num_kv_heads) * head_dim].view(t, num_kv_heads, head_dim)
    v = qkv[:, (num_q_heads + num_kv_heads) * head_dim:].view(t, num_kv_heads, head_dim)
    return q, k, v


def reference(cache, qkv, weights, cos_sin, positions, kv_len, causal, heads):
    k_cache, v_cache = (c.clone() for c in cache)
    q, k, v = views(qkv, *heads)
    q_out, _ = qk_norm_rope_ref(q, k, *weights, cos_sin, positions, EPS, v=v, k_cache=k_cache, v_cache=v_cache)
    return attention_ref(q_out, k_cache, v_cache, kv_len, causal), k_cache, v_cache


def fused(cache, qkv, weights, cos_sin, positions, kv_len, causal, heads, **kw):
    k_cache, v_cache = (c.clone() for c in cache)
    q, k, v = views(qkv, *heads)
    kv_len_t = torch.tensor([kv_len], dtype=torch.int64, device=qkv.device)
    out = decode_attention(q, k_cache, v_cache, kv_len_t, causal=causal,
                           step_kv=StepKV(k, v, *weights, cos_sin, positions, EPS), **kw)
    return out, k_cache, v_cache


CASES = [
    # kv_len, T, num_q_heads, num_kv_heads, head_dim, causal, num_splits
    (1, 1, 2, 2, 16, True, 1),
    (37, 1, 4, 1, 32, True, 3),
    (37, 3, 2, 1, 16, True, 2),
    (70, 16, 4, 2, 32, False, 3),   # the drafter's block: non-causal, its positions across two splits
    (130, 16, 4, 1, 16, True, 5),
    (131, 7, 8, 2, 64, True, 8),
]


@pytest.mark.parametrize("early_kv", [False, True, "after"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kv_len,t,num_q_heads,num_kv_heads,head_dim,causal,num_splits", CASES)
def test_step_kv_matches_norm_rope_then_attention(kv_len, t, num_q_heads, num_kv_heads, head_dim, causal,
                                                   num_splits, dtype, early_kv, device, monkeypatch):
    """With early_kv (before the wait, or "after": right after it, `set_kv_first`) the step's rows, NaN in the
    cache until this launch writes them, are read again after the writes: a NaN in the output would show a
    row read before."""
    # calls' early_kv count only where it is on
    monkeypatch.setattr(decode_attention_module.EARLY_KV, "on", early_kv is True)
    monkeypatch.setattr(decode_attention_module.KV_FIRST, "on", early_kv == "after")
    heads = (num_q_heads, num_kv_heads, head_dim)
    cache, qkv, weights, cos_sin = make_step(kv_len, t, *heads, dtype, device)
    positions = torch.arange(kv_len - t, kv_len, device=device)
    want, want_k, want_v = reference(cache, qkv, weights, cos_sin, positions, kv_len, causal, heads)
    got, got_k, got_v = fused(cache, qkv, weights, cos_sin, positions, kv_len, causal, heads, num_splits=num_splits,
                              early_kv=early_kv)
    atol, rtol = TOLERANCES[dtype]
    assert_close(got_k[:kv_len], want_k[:kv_len], atol, rtol, "K cache")
    assert torch.equal(got_v[:kv_len], want_v[:kv_len]), "V is copied into the cache as it is"
    assert got_k[kv_len:].isnan().all() and got_v[kv_len:].isnan().all(), "nothing written past the step"
    assert_close(got, want, atol, rtol, "attention")


@pytest.mark.parametrize("where", [True, "after"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kv_len,num_splits", [(1, 1), (37, 3), (64, 1), (65, 2), (200, 2), (300, 5)])
def test_one_token_row_held_in_registers_has_the_read_back_bits(kv_len, num_splits, where, dtype, device,
                                                                 monkeypatch):
    """A one-token step whose row lies in its split's first block takes that row from its registers, not from
    the cache it just wrote; the output has the bits of the step that reads it back (first block read after
    the writes), whether the row sits in the first block or in a later one."""
    heads = (8, 2, 32)
    cache, qkv, weights, cos_sin = make_step(kv_len, 1, *heads, dtype, device)
    positions = torch.tensor([kv_len - 1], device=device)
    plain, plain_k, plain_v = fused(cache, qkv, weights, cos_sin, positions, kv_len, True, heads,
                                    num_splits=num_splits)
    monkeypatch.setattr(decode_attention_module.EARLY_KV, "on", where is True)
    monkeypatch.setattr(decode_attention_module.KV_FIRST, "on", where == "after")
    held, held_k, held_v = fused(cache, qkv, weights, cos_sin, positions, kv_len, True, heads, num_splits=num_splits,
                                 early_kv=True)
    assert not held.isnan().any()
    assert torch.equal(held, plain)
    assert torch.equal(held_k[:kv_len], plain_k[:kv_len]) and torch.equal(held_v[:kv_len], plain_v[:kv_len])


@pytest.mark.parametrize("early_kv", [False, True, "after"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_exact_rows_do_not_depend_on_the_step_size(dtype, early_kv, device, monkeypatch):
    """In exact mode a token's K row, and its attention row, have the same bits whether the step holds it
    alone or in a block of 16: the cache it leaves and the output both."""
    monkeypatch.setattr(decode_attention_module.EARLY_KV, "on", early_kv is True)
    monkeypatch.setattr(decode_attention_module.KV_FIRST, "on", early_kv == "after")
    num_q_heads, num_kv_heads, head_dim, max_length = 4, 2, 32, 300
    heads = (num_q_heads, num_kv_heads, head_dim)
    num_splits = 2
    assert exact_split_size(max_length, num_splits) == 128
    kw = dict(num_splits=exact_grid_splits(num_splits),
              split_size=exact_split_size(max_length, num_splits), block_m=exact_block_m(num_q_heads, num_kv_heads),
              early_kv=early_kv)
    kv_len = 264  # splits of 128 positions: the block's 248…263 straddle the boundary at 256
    cache, qkv, weights, cos_sin = make_step(kv_len, 16, *heads, dtype, device)
    positions = torch.arange(kv_len - 16, kv_len, device=device)
    block, block_k, _ = fused(cache, qkv, weights, cos_sin, positions, kv_len, True, heads, **kw)
    state = [c.clone() for c in cache]
    for i in range(16):  # the same tokens one step at a time, each seeing the cache the steps before left
        out, state[0], state[1] = fused(state, qkv[i:i + 1], weights, cos_sin, positions[i:i + 1],
                                        kv_len - 15 + i, True, heads, **kw)
        assert torch.equal(out, block[i:i + 1]), f"row {i}"
    assert torch.equal(state[0][:kv_len], block_k[:kv_len])


def test_bad_step_kv_is_named(device):
    heads = (4, 2, 16)
    cache, qkv, weights, cos_sin = make_step(20, 2, *heads, torch.float32, device)
    q, k, v = views(qkv, *heads)
    kv_len = torch.tensor([20], device=device)
    with pytest.raises(ConfigError, match="positions"):
        decode_attention(q, *cache, kv_len, step_kv=StepKV(k, v, *weights, cos_sin,
                                                           torch.arange(3, device=device), EPS))
    with pytest.raises(ConfigError, match="q_norm / k_norm"):
        decode_attention(q, *cache, kv_len, step_kv=StepKV(k, v, weights[0][:8], weights[1], cos_sin,
                                                           torch.arange(18, 20, device=device), EPS))
