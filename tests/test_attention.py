import pytest
import torch
import torch.nn.functional as F

from tests.conftest import assert_close
from tileinfer.errors import ConfigError
from tileinfer.ops.attention import attention_ref, default_num_splits
from tileinfer.ops import decode_attention as decode_attention_module
from tileinfer.ops.decode_attention import _ahead_bytes, decode_attention
from tileinfer.ops.prefill_attention import prefill_attention, tma_loads_fit

# The interpreter truncates fp32 → bf16, so bf16 results get bf16 tolerances.
TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}
DTYPES = [torch.float32, torch.bfloat16]


def make_inputs(kv_len, num_q_tokens, num_q_heads, num_kv_heads, head_dim, dtype, device, seed=0):
    """Random q and a cache whose positions past kv_len hold NaN, so reading them would show."""
    g = torch.Generator().manual_seed(seed)
    max_positions = kv_len + 11
    q = torch.randn(num_q_tokens, num_q_heads, head_dim, generator=g).to(dtype)
    k = torch.randn(max_positions, num_kv_heads, head_dim, generator=g).to(dtype)
    v = torch.randn(max_positions, num_kv_heads, head_dim, generator=g).to(dtype)
    k[kv_len:] = float("nan")
    v[kv_len:] = float("nan")
    return q.to(device), k.to(device), v.to(device)


def test_reference_matches_sdpa():
    kv_len, num_q_tokens, num_q_heads, num_kv_heads, head_dim = 23, 5, 4, 2, 16
    q, k, v = make_inputs(kv_len, num_q_tokens, num_q_heads, num_kv_heads, head_dim, torch.float32, "cpu")
    group = num_q_heads // num_kv_heads
    q_pos = torch.arange(kv_len - num_q_tokens, kv_len)
    for causal in (True, False):
        visible = torch.arange(kv_len)[None, :] <= q_pos[:, None] if causal else None
        expected = F.scaled_dot_product_attention(
            q.transpose(0, 1),
            k[:kv_len].repeat_interleave(group, dim=1).transpose(0, 1),
            v[:kv_len].repeat_interleave(group, dim=1).transpose(0, 1),
            attn_mask=visible,
        ).transpose(0, 1)
        assert_close(attention_ref(q, k, v, kv_len, causal), expected, 1e-5, 1e-5, f"ref causal={causal}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("num_splits", [1, 2, 3, 5, 8])
def test_decode_every_split_count(dtype, num_splits, device):
    # 130 positions = 3 blocks of 64: 5 and 8 splits leave some splits empty.
    q, k, v = make_inputs(130, 16, 4, 1, 32, dtype, device)
    kv_len = torch.tensor([130], dtype=torch.int32, device=device)
    out = decode_attention(q, k, v, kv_len, causal=True, num_splits=num_splits)
    atol, rtol = TOLERANCES[dtype]
    assert_close(out, attention_ref(q, k, v, 130, True), atol, rtol, f"splits={num_splits}")


@pytest.mark.parametrize("prefetch_rows", [-1, 0, 64, 100])
def test_decode_any_prefetch_bound(prefetch_rows, device):
    """Asking L2 for part of a split, all of it or none leaves the output as it is (the interpreter has no
    L2: there every bound compiles to no prefetch)."""
    q, k, v = make_inputs(300, 16, 4, 1, 32, torch.bfloat16, device)
    kv_len = torch.tensor([300], dtype=torch.int32, device=device)
    out = decode_attention(q, k, v, kv_len, causal=True, num_splits=2, prefetch_rows=prefetch_rows)
    assert torch.equal(out, decode_attention(q, k, v, kv_len, causal=True, num_splits=2, prefetch_rows=0))
    assert_close(out, attention_ref(q, k, v, 300, True), *TOLERANCES[torch.bfloat16], f"prefetch {prefetch_rows}")


@pytest.mark.parametrize("kv_len,num_q_tokens,causal,num_splits,split_size", [
    (130, 1, True, 3, 0), (300, 16, True, 2, 0), (64, 16, True, 1, 0), (37, 3, False, 3, 0),
    (200, 16, True, 5, 64),  # exact mode: the block's rows straddle a split boundary
])
@pytest.mark.parametrize("where", ["before", "after"])
def test_decode_early_kv_has_the_same_bits(kv_len, num_q_tokens, causal, num_splits, split_size, where, device,
                                           monkeypatch):
    """Reading each share's first block before the grid-dependency wait (the step's own rows again after
    it), or right after the wait (`set_kv_first`), changes nothing in the output."""
    # calls' early_kv count only where it is on
    monkeypatch.setattr(decode_attention_module.EARLY_KV, "on", where == "before")
    monkeypatch.setattr(decode_attention_module.KV_FIRST, "on", where == "after")
    q, k, v = make_inputs(kv_len, num_q_tokens, 8, 2, 32, torch.bfloat16, device)
    kv_len_t = torch.tensor([kv_len], dtype=torch.int32, device=device)
    kw = dict(causal=causal, num_splits=num_splits, split_size=split_size, block_m=64 if split_size else None)
    out = decode_attention(q, k, v, kv_len_t, early_kv=True, **kw)
    assert torch.equal(out, decode_attention(q, k, v, kv_len_t, **kw))
    assert_close(out, attention_ref(q, k, v, kv_len, causal), *TOLERANCES[torch.bfloat16], "early K/V")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kv_len,num_q_tokens,causal,num_splits", [(300, 16, True, 2), (37, 3, False, 3), (130, 1, True, 5),
                                                                  (64, 16, True, 1)])
def test_decode_with_tma_descriptors(kv_len, num_q_tokens, causal, num_splits, dtype, device):
    """K/V blocks through tensor descriptors: the positions past the KV length (NaN here) come back as zeros."""
    q, k, v = make_inputs(kv_len, num_q_tokens, 4, 1, 32, dtype, device)
    kv_len_t = torch.tensor([kv_len], dtype=torch.int32, device=device)
    out = decode_attention(q, k, v, kv_len_t, causal=causal, num_splits=num_splits, tma=True)
    assert_close(out, attention_ref(q, k, v, kv_len, causal), *TOLERANCES[dtype], "tma")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kv_len,num_q_tokens,causal,num_splits,tokens_per_program", [
    (300, 16, True, 3, 4), (300, 16, True, 5, 3), (130, 16, False, 2, 4), (37, 5, True, 3, 2), (200, 16, True, 4, 1),
    (64, 16, True, 1, 16), (70, 7, True, 2, 100),
])
def test_decode_in_row_blocks(kv_len, num_q_tokens, causal, num_splits, tokens_per_program, dtype, device,
                              monkeypatch):
    """Tokens spread over programs (a counter and a merge per KV head and row block; causal blocks stop at
    their last token's keys) give the reference's output; the last row block may be short."""
    monkeypatch.setattr(decode_attention_module.EARLY_KV, "on", True)
    q, k, v = make_inputs(kv_len, num_q_tokens, 8, 2, 32, dtype, device)
    kv_len_t = torch.tensor([kv_len], dtype=torch.int32, device=device)
    for tma in (False, True):
        out = decode_attention(q, k, v, kv_len_t, causal=causal, num_splits=num_splits,
                               tokens_per_program=tokens_per_program, tma=tma)
        assert_close(out, attention_ref(q, k, v, kv_len, causal), *TOLERANCES[dtype],
                     f"{tokens_per_program} tokens a program, tma {tma}")
    early = decode_attention(q, k, v, kv_len_t, causal=causal, num_splits=num_splits,
                             tokens_per_program=tokens_per_program, early_kv=True)
    monkeypatch.setattr(decode_attention_module.EARLY_KV, "on", False)
    plain = decode_attention(q, k, v, kv_len_t, causal=causal, num_splits=num_splits,
                             tokens_per_program=tokens_per_program)
    monkeypatch.setattr(decode_attention_module.KV_FIRST, "on", True)
    first = decode_attention(q, k, v, kv_len_t, causal=causal, num_splits=num_splits,
                             tokens_per_program=tokens_per_program)
    assert torch.equal(early, plain) and torch.equal(first, plain)


@pytest.mark.parametrize("num_q_tokens,num_splits,tokens_per_program,split_size", [
    (1, 3, None, 0), (16, 2, None, 0), (16, 5, 4, 0), (16, 8, None, 64),  # exact mode: splits past the length
])
def test_decode_l2_ahead_has_the_same_bits(num_q_tokens, num_splits, tokens_per_program, split_size, device,
                                           monkeypatch):
    """Asking L2 for the next weight right after the wait, shared by the live programs (on an sm_90 GPU;
    elsewhere nothing is asked), changes nothing in the output: a weight that starts off a 16-byte boundary
    and ends inside one, and one larger than a bulk request, with the KV length under a bound and past it."""
    monkeypatch.setattr(decode_attention_module.L2_AHEAD, "on", True)
    q, k, v = make_inputs(300, num_q_tokens, 8, 2, 32, torch.bfloat16, device)
    kv_len_t = torch.tensor([300], dtype=torch.int32, device=device)
    kw = dict(causal=True, num_splits=num_splits, tokens_per_program=tokens_per_program, split_size=split_size,
              block_m=64 if split_size else None)
    plain = decode_attention(q, k, v, kv_len_t, **kw)
    odd = torch.randn(1009, device=device).to(torch.bfloat16)[7:]
    large = torch.randn(3 * decode_attention_module.AHEAD_PIECE // 2 + 40, device=device).to(torch.bfloat16)
    for weight, bound in ((odd, 0), (large, 0), (large, 300), (large, 299)):  # 299: below the length, none asked
        assert torch.equal(decode_attention(q, k, v, kv_len_t, l2_ahead=weight, l2_ahead_max_kv=bound, **kw), plain)
    assert_close(plain, attention_ref(q, k, v, 300, True), *TOLERANCES[torch.bfloat16], "L2 ahead")


@pytest.mark.parametrize("num_q_tokens,num_splits,tokens_per_program", [(1, 12, None), (1, 20, None), (16, 5, 4)])
def test_late_trigger_and_wide_merge_have_the_same_bits(num_q_tokens, num_splits, tokens_per_program, device,
                                                        monkeypatch):
    """A GPU section that triggers PDL's dependents after the K/V loop and merges up to 16 partials at once
    (fewer splits than that, and more) changes no bit of the output."""
    q, k, v = make_inputs(1100, num_q_tokens, 8, 2, 32, torch.bfloat16, device)
    kv_len_t = torch.tensor([1100], dtype=torch.int32, device=device)
    kw = dict(causal=True, num_splits=num_splits, tokens_per_program=tokens_per_program)
    plain = decode_attention(q, k, v, kv_len_t, **kw)
    tuned = {"trigger": "loop", "merge_unroll": 16}
    monkeypatch.setattr(decode_attention_module, "section", lambda device, name: tuned)
    assert torch.equal(decode_attention(q, k, v, kv_len_t, **kw), plain)
    assert_close(plain, attention_ref(q, k, v, 1100, True), *TOLERANCES[torch.bfloat16], "late trigger")


@pytest.mark.parametrize("tuned", [{"trigger": "later"}, {"merge_unroll": 0}, {"merge_unroll": "8"}])
def test_bad_trigger_or_merge_unroll_is_named(tuned, device, monkeypatch):
    q, k, v = make_inputs(40, 1, 4, 1, 16, torch.float32, device)
    kv_len = torch.tensor([40], dtype=torch.int32, device=device)
    monkeypatch.setattr(decode_attention_module, "section", lambda device, name: tuned)
    with pytest.raises(ConfigError, match="trigger 'wait' or 'loop' and merge_unroll"):
        decode_attention(q, k, v, kv_len)


def test_l2_ahead_asks_for_whole_granules_from_a_boundary(monkeypatch):
    """What the kernel is given: the offset to the weight's first 16-byte boundary and the whole 16-byte
    granules after it; nothing where the switch or the GPU says no."""
    q = torch.zeros(1, 4, 16)
    weight = torch.zeros(1000, dtype=torch.bfloat16)[3:]  # 1994 bytes, 6 past a boundary (allocations are aligned)
    assert _ahead_bytes(weight, q)[1:] == (0, 0)  # off here: no GPU
    monkeypatch.setattr(decode_attention_module, "l2_ahead_for", lambda device: True)
    tensor, offset, nbytes = _ahead_bytes(weight, q)
    assert tensor is weight and (weight.data_ptr() + offset) % 16 == 0 and nbytes % 16 == 0
    assert offset == (-weight.data_ptr()) % 16 and offset + nbytes <= 1994 < offset + nbytes + 16
    assert _ahead_bytes(None, q)[1:] == (0, 0)


def test_bad_l2_ahead_is_named(device):
    q, k, v = make_inputs(40, 1, 4, 1, 16, torch.float32, device)
    kv_len = torch.tensor([40], dtype=torch.int32, device=device)
    with pytest.raises(ConfigError, match="non-contiguous"):
        decode_attention(q, k, v, kv_len, l2_ahead=torch.zeros(8, 8, device=device).T)
    with pytest.raises(ConfigError, match="contiguous tensor on q's device"):
        decode_attention(q, k, v, kv_len, l2_ahead=[1, 2])


def test_decode_row_blocks_leave_exact_mode_alone(device):
    """Exact mode's fixed tile keeps every token in one program: the bits do not depend on tokens_per_program."""
    q, k, v = make_inputs(200, 16, 8, 2, 32, torch.bfloat16, device)
    kv_len_t = torch.tensor([200], dtype=torch.int32, device=device)
    kw = dict(num_splits=5, split_size=64, block_m=64)
    assert torch.equal(decode_attention(q, k, v, kv_len_t, tokens_per_program=2, **kw),
                       decode_attention(q, k, v, kv_len_t, **kw))


DECODE_CASES = [
    # kv_len, T, num_q_heads, num_kv_heads, head_dim, causal
    (1, 1, 2, 2, 16, True),
    (37, 1, 4, 1, 32, True),
    (37, 3, 2, 1, 16, True),
    (37, 3, 4, 2, 32, False),
    (130, 1, 4, 1, 16, True),
    (130, 16, 2, 2, 16, False),
    (64, 16, 4, 1, 16, True),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kv_len,num_q_tokens,num_q_heads,num_kv_heads,head_dim,causal", DECODE_CASES)
def test_decode_matches_reference(kv_len, num_q_tokens, num_q_heads, num_kv_heads, head_dim, causal, dtype, device):
    q, k, v = make_inputs(kv_len, num_q_tokens, num_q_heads, num_kv_heads, head_dim, dtype, device)
    kv_len_t = torch.tensor([kv_len], dtype=torch.int64, device=device)
    out = decode_attention(q, k, v, kv_len_t, causal=causal, num_splits=3)
    assert out.shape == q.shape and out.dtype == dtype and out.is_contiguous()
    atol, rtol = TOLERANCES[dtype]
    assert_close(out, attention_ref(q, k, v, kv_len, causal), atol, rtol, "decode")


def test_decode_strided_q_and_scale(device):
    # q as a view into a fused qkv projection output: the token stride is not heads × head_dim.
    num_q_heads, num_kv_heads, head_dim, kv_len = 4, 2, 16, 45
    _, k, v = make_inputs(kv_len, 3, num_q_heads, num_kv_heads, head_dim, torch.float32, device)
    qkv = torch.randn(3, (num_q_heads + 2 * num_kv_heads) * head_dim, device=device)
    q = qkv[:, : num_q_heads * head_dim].view(3, num_q_heads, head_dim)
    assert not q.is_contiguous()
    kv_len_t = torch.tensor([kv_len], dtype=torch.int32, device=device)
    out = decode_attention(q, k, v, kv_len_t, num_splits=2, scale=0.3)
    assert_close(out, attention_ref(q, k, v, kv_len, True, scale=0.3), 1e-4, 1e-4, "strided q")
    out = prefill_attention(q, k, v, kv_len, scale=0.3, block_m=16, block_n=16)
    assert_close(out, attention_ref(q, k, v, kv_len, True, scale=0.3), 1e-4, 1e-4, "strided q prefill")


def test_decode_reads_kv_len_from_the_tensor(device):
    # One cache, one set of buffers, two lengths: the length comes from the tensor's contents.
    q, k, v = make_inputs(70, 2, 2, 1, 16, torch.float32, device)
    kv_len_t = torch.tensor([70], dtype=torch.int32, device=device)
    for kv_len in (70, 9):
        kv_len_t.fill_(kv_len)
        out = decode_attention(q, k, v, kv_len_t, num_splits=4)
        assert_close(out, attention_ref(q, k, v, kv_len, True), 1e-4, 1e-4, f"kv_len={kv_len}")


PREFILL_CASES = [
    # kv_len, T, num_q_heads, num_kv_heads, head_dim, causal, block_m, block_n
    (1, 1, 2, 1, 16, True, 16, 16),
    (37, 37, 2, 1, 32, True, 16, 16),
    (50, 19, 4, 2, 16, True, 16, 16),
    (50, 19, 2, 2, 16, False, 16, 16),
    (40, 40, 4, 1, 16, False, 16, 32),
    (130, 33, 2, 1, 16, True, 32, 16),
    (37, 37, 2, 2, 32, True, 128, 64),
]


@pytest.mark.parametrize("fast_softmax", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kv_len,num_q_tokens,num_q_heads,num_kv_heads,head_dim,causal,block_m,block_n", PREFILL_CASES)
def test_prefill_matches_reference(
    kv_len, num_q_tokens, num_q_heads, num_kv_heads, head_dim, causal, block_m, block_n, dtype, fast_softmax, device
):
    q, k, v = make_inputs(kv_len, num_q_tokens, num_q_heads, num_kv_heads, head_dim, dtype, device)
    out = prefill_attention(q, k, v, kv_len, causal=causal, block_m=block_m, block_n=block_n,
                            fast_softmax=fast_softmax)
    assert out.shape == q.shape and out.dtype == dtype and out.is_contiguous()
    atol, rtol = TOLERANCES[dtype]
    assert_close(out, attention_ref(q, k, v, kv_len, causal), atol, rtol, "prefill")


@pytest.mark.parametrize("kv_len,num_q_tokens,num_q_heads,num_kv_heads,head_dim,causal,block_m,block_n",
                         [PREFILL_CASES[2], PREFILL_CASES[5]])
def test_prefill_longest_first_changes_only_the_order(
    kv_len, num_q_tokens, num_q_heads, num_kv_heads, head_dim, causal, block_m, block_n, device
):
    q, k, v = make_inputs(kv_len, num_q_tokens, num_q_heads, num_kv_heads, head_dim, torch.float32, device)
    ours = prefill_attention(q, k, v, kv_len, causal=causal, block_m=block_m, block_n=block_n, longest_first=True)
    assert torch.equal(ours, prefill_attention(q, k, v, kv_len, causal=causal, block_m=block_m, block_n=block_n,
                                               longest_first=False))
    assert_close(ours, attention_ref(q, k, v, kv_len, causal), *TOLERANCES[torch.float32], "longest first")


@pytest.mark.parametrize("fast_softmax", [False, True])
@pytest.mark.parametrize("kv_len,num_q_tokens,num_q_heads,num_kv_heads,head_dim,causal,block_m,block_n",
                         [PREFILL_CASES[1], PREFILL_CASES[2], PREFILL_CASES[3], PREFILL_CASES[5]])
def test_prefill_tma_matches_pointer_loads(
    kv_len, num_q_tokens, num_q_heads, num_kv_heads, head_dim, causal, block_m, block_n, fast_softmax, device
):
    """Tiles moved by TMA descriptors, q a view into a fused QKV buffer as the engine passes it, the cache
    NaN past kv_len: the pointer path's output, bit for bit, and the reference's."""
    q, k, v = make_inputs(kv_len, num_q_tokens, num_q_heads, num_kv_heads, head_dim, torch.bfloat16, device)
    qkv = torch.cat([q, k[-num_q_tokens:, :].nan_to_num(), v[-num_q_tokens:, :].nan_to_num()], dim=1)[:, :num_q_heads]
    assert not qkv.is_contiguous() and tma_loads_fit(qkv, k, v)
    args = dict(causal=causal, block_m=block_m, block_n=block_n, fast_softmax=fast_softmax)
    ours = prefill_attention(qkv, k, v, kv_len, tma=True, **args)
    assert torch.equal(ours, prefill_attention(qkv, k, v, kv_len, tma=False, **args))
    assert_close(ours, attention_ref(q, k, v, kv_len, causal), *TOLERANCES[torch.bfloat16], "tma")


def test_prefill_tma_falls_back_where_tiles_cannot_move_by_tma(device):
    q, k, v = make_inputs(50, 19, 4, 2, 16, torch.float32, device)
    assert not tma_loads_fit(q, k, v)
    assert not tma_loads_fit(q.to(torch.bfloat16), k.to(torch.bfloat16)[:, :, :8], v.to(torch.bfloat16)[:, :, :8])
    assert torch.equal(prefill_attention(q, k, v, 50, tma=True, block_m=16, block_n=16),
                       prefill_attention(q, k, v, 50, tma=False, block_m=16, block_n=16))


def test_bad_inputs(device):
    q, k, v = make_inputs(20, 2, 4, 2, 16, torch.float32, device)
    kv_len = torch.tensor([20], dtype=torch.int32, device=device)
    with pytest.raises(ConfigError, match="num_splits must be at least 1, got 0"):
        decode_attention(q, k, v, kv_len, num_splits=0)
    with pytest.raises(ConfigError, match="kv_len is on meta"):
        decode_attention(q, k, v, torch.tensor([20], dtype=torch.int32, device="meta"))
    with pytest.raises(ConfigError, match="int32/int64 tensor"):
        decode_attention(q, k, v, 20)
    wide_q = torch.randn(2, 4, 32, device=device)
    with pytest.raises(ConfigError, match="head_dim 32 but the KV cache has head_dim 16"):
        decode_attention(wide_q, k, v, kv_len)
    with pytest.raises(ConfigError, match="head_dim 32 but the KV cache has head_dim 16"):
        prefill_attention(wide_q, k, v, 20)
    with pytest.raises(ConfigError, match="not a multiple of num_kv_heads"):
        decode_attention(torch.randn(2, 3, 16, device=device), k, v, kv_len)
    with pytest.raises(ConfigError, match="tokens_per_program must be a positive integer, got 0"):
        decode_attention(q, k, v, kv_len, tokens_per_program=0)


def test_tokens_per_program_follow_the_gpu_section(monkeypatch):
    from tileinfer.ops import attention
    monkeypatch.setattr(attention, "section", lambda device, name: {})
    assert attention.SplitPolicy.of("cpu").per_program(1024, 16) == 16  # no section: one row block
    monkeypatch.setattr(attention, "section",
                        lambda device, name: {"row_blocks_below": 4096, "tokens_per_program": 4})
    policy = attention.SplitPolicy.of("cpu")
    assert [policy.per_program(n, 16) for n in (1024, 4095, 4096, 8192)] == [4, 4, 16, 16]
    assert policy.per_program(1024, 1) == 1
    assert policy.per_program(1024, 3) == 3


def test_row_blocks_bound_their_split_count():
    from tileinfer.ops.attention import SplitPolicy
    free = SplitPolicy(row_blocks_below=4096, tokens_per_program=4)
    bound = SplitPolicy(row_blocks_below=4096, tokens_per_program=4, row_block_max_splits=4)
    assert [free.num_splits(n, 16) for n in (1024, 2048, 4096, 8192)] == [4, 8, 8, 16]
    assert [bound.num_splits(n, 16) for n in (1024, 2048, 4095, 4096, 8192)] == [4, 4, 4, 8, 16]
    assert bound.num_splits(2048, 1) == free.num_splits(2048, 1) == 16  # one token: no row blocks, no bound
    assert SplitPolicy(row_block_max_splits=4).num_splits(2048, 16) == 8  # no row blocks: no bound
    assert SplitPolicy(max_splits=2, row_blocks_below=4096, tokens_per_program=4,
                       row_block_max_splits=4).num_splits(2048, 16) == 2


def test_split_policy_reads_the_gpu_section(monkeypatch):
    from tileinfer.ops import attention
    monkeypatch.setattr(attention, "section", lambda device, name: {})
    assert attention.SplitPolicy.of("cpu") == attention.SplitPolicy()
    monkeypatch.setattr(attention, "section", lambda device, name: {
        "max_num_splits": 12, "row_blocks_below": 4096, "tokens_per_program": 4, "row_block_max_splits": 4,
        "one_token_max_splits": 24})
    assert attention.SplitPolicy.of("cpu") == attention.SplitPolicy(12, 4096, 4, 4, 24)
    assert attention.max_num_splits("cpu") == 12


def test_one_token_steps_go_past_the_split_limit_with_long_shares():
    from tileinfer.ops.attention import SplitPolicy
    lengths = (100, 1024, 4096, 8191, 8192, 12000, 32768, 131072)
    wide = SplitPolicy(one_token_max_splits=32)
    assert [wide.num_splits(n, 1) for n in lengths] == [1, 16, 16, 31, 32, 32, 32, 32]
    assert [SplitPolicy().num_splits(n, 1) for n in lengths] == [1, 16, 16, 16, 16, 16, 16, 16]
    assert [wide.num_splits(n, 16) for n in lengths] == [SplitPolicy().num_splits(n, 16) for n in lengths]
    assert SplitPolicy(max_splits=4, one_token_max_splits=8).num_splits(1024, 1) == 4  # shares under 256: the limit
    assert SplitPolicy(max_splits=4, one_token_max_splits=8).num_splits(4096, 1) == 8
    assert SplitPolicy(max_splits=64, one_token_max_splits=32).num_splits(8192, 1) == 64  # never fewer than without


def test_default_num_splits():
    assert default_num_splits(1) == 1
    for kv_len in (1, 100, 1024, 8192, 32768, 131072):
        for num_q_tokens in (1, 16):
            assert 1 <= default_num_splits(kv_len, num_q_tokens) <= 64
    assert default_num_splits(32768, 16) >= default_num_splits(1024, 16)


def test_short_chunks_take_the_sections_short_tiles():
    from tileinfer.ops.prefill_attention import tuned_tiles

    tuned = {"block_m": 128, "num_warps": 8, "short": {"max_queries": 2048, "block_m": 64, "num_warps": 4}}
    assert tuned_tiles(tuned, 2048) == {"block_m": 64, "num_warps": 4}
    assert tuned_tiles(tuned, 2049) == {"block_m": 128, "num_warps": 8}
    assert tuned_tiles({"block_m": 64}, 16) == {"block_m": 64}
    assert tuned == {"block_m": 128, "num_warps": 8, "short": {"max_queries": 2048, "block_m": 64, "num_warps": 4}}


@pytest.mark.parametrize("step", [False, True])
def test_decode_stamps_leave_the_output_and_time_each_program(device, step):
    """`stamps=`: the same output bits; every live program stamps its start, wait, q, loop and count in that
    order and the merging program also its merge; programs past the KV length only their start."""
    from tileinfer.ops.decode_attention import StepKV
    from tileinfer.ops.rope import rope_cos_sin
    from tileinfer.ops.stamps import SLOTS, stamp_buffer

    kv_len, t, heads, kv_heads, d, splits = 200, 1, 8, 2, 32, 5  # 4 live splits of 64 positions
    q, k, v = make_inputs(kv_len, t, heads, kv_heads, d, torch.bfloat16, device)
    kv_len_t = torch.tensor([kv_len], dtype=torch.int32, device=device)
    new = None
    if step:
        new = StepKV(k[kv_len - t:kv_len].clone(), v[kv_len - t:kv_len].clone(),
                     torch.ones(d, dtype=torch.bfloat16, device=device), torch.ones(d, dtype=torch.bfloat16, device=device),
                     rope_cos_sin(d, kv_len, 1e6, device), torch.arange(kv_len - t, kv_len, device=device), 1e-6)
    buf = stamp_buffer(kv_heads * splits, torch.device(device))
    caches = [(k.clone(), v.clone()) for _ in range(2)]
    out = decode_attention(q, *caches[0], kv_len_t, num_splits=splits, step_kv=new, stamps=buf)
    assert torch.equal(out, decode_attention(q, *caches[1], kv_len_t, num_splits=splits, step_kv=new))
    live = buf[:, 1] > 0
    assert live.sum() == kv_heads * 4 and (buf[~live, 0] > 0).all() and (buf[~live, 1:] == 0).all()
    stamped = buf[live, :5]
    assert (stamped > 0).all() and (stamped[:, 1:] >= stamped[:, :-1]).all()
    merged = buf[live, 5] > 0
    assert merged.sum() == kv_heads and (buf[live][merged, 5] >= buf[live][merged, 4]).all()
    assert (buf[:, 6:] == 0).all() and buf.shape[1] == SLOTS
    with pytest.raises(ConfigError, match="stamps must be a contiguous int64"):
        decode_attention(q, k, v, kv_len_t, num_splits=splits, stamps=buf[:-1])
