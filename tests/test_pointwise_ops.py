"""Pointwise ops (RMSNorm, QK-norm + RoPE, SwiGLU): Triton kernels against their references, and the
references against Hugging Face's Qwen3 modules."""

import functools

import pytest
import torch
from transformers.models.qwen3.configuration_qwen3 import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import (
    Qwen3MLP,
    Qwen3RMSNorm,
    Qwen3RotaryEmbedding,
    apply_rotary_pos_emb,
)

from tests.conftest import DEVICE, assert_close
from tileinfer.ops.dequant import scale_columns_, scale_columns_ref
from tileinfer.ops.rmsnorm import rms_norm, rms_norm_ref
from tileinfer.ops.rope import qk_norm_rope, qk_norm_rope_ref, rope_cos_sin
from tileinfer.ops.swiglu import silu_mul, silu_mul_ref

# the interpreter truncates fp32 -> bf16 instead of rounding: up to one bf16 ulp (2^-7 relative) apart
TOLERANCES = [(torch.float32, 1e-5, 1e-5), (torch.bfloat16, 1e-2, 2e-2)]
EPS = 1e-6
THETA = 1e6
MAX_POSITIONS = 1 << 17


def _weight(n, dtype):
    return (1.0 + 0.1 * torch.randn(n, device=DEVICE)).to(dtype)


@functools.cache
def _cos_sin(head_dim):
    return rope_cos_sin(head_dim, MAX_POSITIONS, THETA, device=DEVICE)


# ---- RMSNorm ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, atol, rtol", TOLERANCES)
@pytest.mark.parametrize("with_residual", [False, True])
@pytest.mark.parametrize("H", [7, 33, 96, 130])
@pytest.mark.parametrize("T", [1, 3, 17])
def test_rms_norm_matches_ref(T, H, with_residual, dtype, atol, rtol):
    # rows are strided: slices of wider buffers, as when x is part of a fused output
    x = torch.randn(T, H + 5, device=DEVICE).to(dtype)[:, 2:H + 2]
    residual = torch.randn(T, H + 3, device=DEVICE).to(dtype)[:, :H] if with_residual else None
    weight = _weight(H, dtype)
    out, h = rms_norm(x, weight, EPS, residual)
    out_ref, h_ref = rms_norm_ref(x, weight, EPS, residual)
    assert out.shape == (T, H) and out.dtype == dtype
    assert_close(out, out_ref, atol, rtol, "rms_norm out")
    if with_residual:
        assert h.dtype == dtype
        assert_close(h, h_ref, atol, rtol, "rms_norm h")
    else:
        assert h is x


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("with_residual", [True, False])
@pytest.mark.parametrize("T, H", [(1, 96), (9, 1000)])
def test_rms_norm_x_scale_is_the_scale_pass_before_it(T, H, with_residual, dtype):
    """An INT8 product's per-column scale applied as the norm loads it: the bits of the in-place scale pass
    then the norm (the stream h included), the product left as it is; the reference alike."""
    gen = torch.Generator().manual_seed(T * H)
    x = (300 * torch.randn(T, H + 5, generator=gen)).to(DEVICE, dtype)[:, 2:H + 2]
    residual = torch.randn(T, H, generator=gen).to(DEVICE, dtype) if with_residual else None
    scale = (torch.rand(H, generator=gen) / 100).to(DEVICE)
    weight = _weight(H, dtype)
    before = x.clone()
    for norm, scale_pass in ((rms_norm, scale_columns_), (rms_norm_ref, scale_columns_ref)):
        out, h = norm(x, weight, EPS, residual, scale)
        out_two, h_two = norm(scale_pass(x.clone(), scale), weight, EPS, residual)
        assert torch.equal(x, before) and torch.equal(out, out_two) and torch.equal(h, h_two), norm.__name__
    with pytest.raises(ValueError, match=rf"x_scale must be \[{H}\]"):
        rms_norm(x, weight, EPS, residual, scale[:-1])


@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm_ref_matches_hf(with_residual):
    H = 96
    x, residual = torch.randn(5, H), torch.randn(5, H)
    hf = Qwen3RMSNorm(H, eps=EPS)
    with torch.no_grad():
        hf.weight.copy_(_weight(H, torch.float32).cpu())
        h = x + residual if with_residual else x
        expected = hf(h)
    out, h_ref = rms_norm_ref(x, hf.weight.detach(), EPS, residual if with_residual else None)
    assert_close(h_ref, h, 0, 0, "h")
    assert_close(out, expected, 1e-6, 1e-6, "rms_norm_ref vs Qwen3RMSNorm")


# ---- QK-norm + RoPE --------------------------------------------------------------------------------

def _fused_qkv(T, num_q_heads, num_kv_heads, D, dtype):
    """q, k as strided views into one [T, (Hq + 2 Hk) * D] projection output, like the model's."""
    qkv = torch.randn(T, (num_q_heads + 2 * num_kv_heads) * D, device=DEVICE).to(dtype)
    q = qkv[:, : num_q_heads * D].view(T, num_q_heads, D)
    k = qkv[:, num_q_heads * D: (num_q_heads + num_kv_heads) * D].view(T, num_kv_heads, D)
    return q, k


def _positions(T, dtype):
    # out of order and far from 0, as after a long prompt
    return torch.randperm(MAX_POSITIONS - 1)[:T].sort(descending=True).values.to(dtype).to(DEVICE)


@pytest.mark.parametrize("dtype, atol, rtol", TOLERANCES)
@pytest.mark.parametrize("T, num_q_heads, num_kv_heads, D", [
    (1, 4, 2, 16), (3, 6, 1, 32), (17, 2, 2, 64), (3, 4, 2, 64), (17, 6, 1, 16), (1, 2, 2, 32),
    (77, 4, 2, 128), (130, 3, 1, 32), (33, 2, 2, 24),
])
def test_qk_norm_rope_matches_ref(T, num_q_heads, num_kv_heads, D, dtype, atol, rtol):
    q, k = _fused_qkv(T, num_q_heads, num_kv_heads, D, dtype)
    assert k.storage_offset() == num_q_heads * D  # a view into the fused qkv buffer
    q_weight, k_weight = _weight(D, dtype), _weight(D, dtype)
    positions = _positions(T, torch.int32 if T % 2 else torch.int64)
    args = (q, k, q_weight, k_weight, _cos_sin(D), positions, EPS)
    q_out, k_out = qk_norm_rope(*args)
    q_ref, k_ref = qk_norm_rope_ref(*args)
    assert q_out.is_contiguous() and k_out.is_contiguous()
    assert q_out.dtype == k_out.dtype == dtype
    assert_close(q_out, q_ref, atol, rtol, "q")
    assert_close(k_out, k_ref, atol, rtol, "k")


@pytest.mark.parametrize("dtype, atol, rtol", TOLERANCES)
def test_qk_norm_rope_without_q(dtype, atol, rtol):
    T, D = 3, 32
    _, k = _fused_qkv(T, 4, 2, D, dtype)
    k_weight = _weight(D, dtype)
    positions = torch.tensor([7, 0, 100_000], device=DEVICE)
    q_out, k_out = qk_norm_rope(None, k, None, k_weight, _cos_sin(D), positions, EPS)
    q_ref, k_ref = qk_norm_rope_ref(None, k, None, k_weight, _cos_sin(D), positions, EPS)
    assert q_out is None and q_ref is None
    assert_close(k_out, k_ref, atol, rtol, "k")


@pytest.mark.parametrize("D", [16, 64])
def test_rope_cos_sin_matches_hf(D):
    config = Qwen3Config(hidden_size=4 * D, num_attention_heads=4, num_key_value_heads=2, head_dim=D,
                         rope_parameters={"rope_type": "default", "rope_theta": THETA})
    positions = torch.tensor([0, 1, 5, 4095, 100_000])
    cos, sin = Qwen3RotaryEmbedding(config)(torch.zeros(1, dtype=torch.float32), positions[None])
    c, s = rope_cos_sin(D, MAX_POSITIONS, THETA)[positions].chunk(2, dim=-1)
    assert_close(torch.cat((c, c), -1), cos[0], 0, 0, "cos")
    assert_close(torch.cat((s, s), -1), sin[0], 0, 0, "sin")


def test_qk_norm_rope_ref_matches_hf():
    T, num_q_heads, num_kv_heads, D = 5, 4, 2, 32
    config = Qwen3Config(hidden_size=num_q_heads * D, num_attention_heads=num_q_heads,
                         num_key_value_heads=num_kv_heads, head_dim=D,
                         rope_parameters={"rope_type": "default", "rope_theta": THETA})
    q, k = torch.randn(T, num_q_heads, D), torch.randn(T, num_kv_heads, D)
    q_norm, k_norm = Qwen3RMSNorm(D, eps=EPS), Qwen3RMSNorm(D, eps=EPS)
    positions = torch.tensor([9, 3, 70_000, 0, 1])
    with torch.no_grad():
        q_norm.weight.copy_(_weight(D, torch.float32).cpu())
        k_norm.weight.copy_(_weight(D, torch.float32).cpu())
        cos, sin = Qwen3RotaryEmbedding(config)(q, positions[None])
        # HF layout is [batch, heads, seq, D]; ours is [T, heads, D], so broadcast cos/sin over dim 1
        q_hf, k_hf = apply_rotary_pos_emb(q_norm(q), k_norm(k), cos[0], sin[0], unsqueeze_dim=1)
    q_ref, k_ref = qk_norm_rope_ref(q, k, q_norm.weight.detach(), k_norm.weight.detach(),
                                    rope_cos_sin(D, MAX_POSITIONS, THETA), positions, EPS)
    assert_close(q_ref, q_hf, 1e-6, 1e-6, "q vs HF")
    assert_close(k_ref, k_hf, 1e-6, 1e-6, "k vs HF")


# ---- SwiGLU ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, atol, rtol", TOLERANCES)
@pytest.mark.parametrize("I", [7, 33, 96, 130, 1500])
@pytest.mark.parametrize("T", [1, 3, 17])
def test_silu_mul_matches_ref(T, I, dtype, atol, rtol):
    gate_up = (2 * torch.randn(T, 2 * I + 4, device=DEVICE)).to(dtype)[:, 1:2 * I + 1]
    out = silu_mul(gate_up)
    assert out.shape == (T, I) and out.dtype == dtype
    assert_close(out, silu_mul_ref(gate_up), atol, rtol, "silu_mul")


@pytest.mark.parametrize("scale_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("T, I", [(1, 7), (17, 130), (260, 1500)])
def test_silu_mul_scale_is_the_scale_pass_before_it(T, I, dtype, scale_dtype):
    """An INT8 gate_up's scale applied as silu_mul loads the product: the bits of the in-place scale pass
    followed by the plain silu_mul, the product itself left unscaled."""
    gen = torch.Generator().manual_seed(T + I)
    gate_up = (50 * torch.randn(T, 2 * I + 4, generator=gen)).to(DEVICE, dtype)[:, 1:2 * I + 1]
    scale = (torch.rand(2 * I, generator=gen) / 40).to(DEVICE, scale_dtype)
    before = gate_up.clone()
    out = silu_mul(gate_up, scale)
    assert torch.equal(gate_up, before)
    assert torch.equal(out, silu_mul(scale_columns_(gate_up.clone(), scale)))
    if dtype == torch.float32:
        assert_close(out, silu_mul_ref(scale_columns_ref(gate_up.clone(), scale)), 1e-5, 1e-5, "scaled silu_mul")


def test_silu_mul_names_a_scale_that_does_not_fit():
    gate_up = torch.zeros(3, 8, device=DEVICE)
    for bad in (torch.ones(4, device=DEVICE), torch.ones(8, 1, device=DEVICE)):
        with pytest.raises(ValueError, match=r"scale must be \[8\]"):
            silu_mul(gate_up, bad)


def test_silu_mul_ref_matches_hf():
    # gate first, then up: the order the model's fused gate_up weight must follow
    config = Qwen3Config(hidden_size=24, intermediate_size=40)
    mlp = Qwen3MLP(config)
    x = torch.randn(5, 24)
    with torch.no_grad():
        gate_up = torch.cat((mlp.gate_proj(x), mlp.up_proj(x)), dim=-1)
        assert_close(mlp.down_proj(silu_mul_ref(gate_up)), mlp(x), 1e-6, 1e-6, "silu_mul_ref vs Qwen3MLP")


@pytest.mark.parametrize("dtype, atol, rtol", TOLERANCES)
@pytest.mark.parametrize("with_q", [True, False])
@pytest.mark.parametrize("T", [5, 45])  # a step's tokens, a prompt's (tiles of tokens, the last one partial)
def test_qk_norm_rope_writes_the_caches(T, with_q, dtype, atol, rtol):
    hq, hk, D, P = 4, 2, 32, 67
    qkv = torch.randn(T, (hq + 2 * hk) * D, device=DEVICE).to(dtype)
    q = qkv[:, : hq * D].view(T, hq, D) if with_q else None
    k = qkv[:, hq * D:(hq + hk) * D].view(T, hk, D)
    v = qkv[:, (hq + hk) * D:].view(T, hk, D)
    weights = [torch.randn(D, device=DEVICE).to(dtype) for _ in range(2)]
    cos_sin = rope_cos_sin(D, P, 1e6, DEVICE)
    positions = torch.randperm(P, device=DEVICE)[:T]
    caches = {}
    for name, fn in (("ref", qk_norm_rope_ref), ("ours", qk_norm_rope)):
        kc = torch.full((P, hk, D), 7.0, device=DEVICE).to(dtype)
        vc = torch.full((P, hk, D), 7.0, device=DEVICE).to(dtype)
        q_out, k_out = fn(q, k, weights[0] if with_q else None, weights[1], cos_sin, positions, 1e-6,
                          v=v, k_cache=kc, v_cache=vc)
        assert k_out is None and (q_out is not None) == with_q
        caches[name] = (q_out, kc, vc)
    (q_ref, k_ref, v_ref), (q_ours, k_ours, v_ours) = caches["ref"], caches["ours"]
    assert_close(k_ours, k_ref, atol, rtol, "K cache")
    assert torch.equal(v_ours, v_ref)
    untouched = torch.ones(P, dtype=torch.bool, device=DEVICE)
    untouched[positions] = False
    assert bool((k_ours[untouched] == 7).all()) and bool((v_ours[untouched] == 7).all())
    if with_q:
        assert_close(q_ours, q_ref, atol, rtol, "Q")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("T", [5, 45])  # a step's launch, a prompt's tiles
def test_qk_norm_rope_qkv_scale_is_the_scale_pass_before_it(T, dtype):
    """q, k and v as views of an INT8 qkv product still unscaled: the bits of the in-place scale pass over
    the product first (q, the K and V caches), the product left as it is; the reference alike."""
    hq, hk, D, P = 4, 2, 32, 67
    gen = torch.Generator().manual_seed(T)
    qkv = (200 * torch.randn(T, (hq + 2 * hk) * D, generator=gen)).to(DEVICE, dtype)
    scale = (torch.rand((hq + 2 * hk) * D, generator=gen) / 60).to(DEVICE)
    weights = [(1 + 0.1 * torch.randn(D, generator=gen)).to(DEVICE, dtype) for _ in range(2)]
    cos_sin = rope_cos_sin(D, P, 1e6, DEVICE)
    positions = torch.randperm(P, generator=gen)[:T].to(DEVICE)

    def views(t):
        return (t[:, : hq * D].view(T, hq, D), t[:, hq * D:(hq + hk) * D].view(T, hk, D),
                t[:, (hq + hk) * D:].view(T, hk, D))

    before = qkv.clone()
    for fn, scale_pass in ((qk_norm_rope, scale_columns_), (qk_norm_rope_ref, scale_columns_ref)):
        runs = []
        for src, s in ((qkv, scale), (scale_pass(qkv.clone(), scale), None)):
            kc, vc = torch.zeros(P, hk, D, device=DEVICE, dtype=dtype), torch.zeros(P, hk, D, device=DEVICE, dtype=dtype)
            q, k, v = views(src)
            q_out, _ = fn(q, k, *weights, cos_sin, positions, EPS, v=v, k_cache=kc, v_cache=vc, qkv_scale=s)
            runs.append((q_out, kc, vc))
        assert torch.equal(qkv, before)
        for a, b, what in zip(*runs, ("q", "K cache", "V cache")):
            assert torch.equal(a, b), f"{fn.__name__} {what}"
    q, k, v = views(qkv)
    kc = torch.zeros(P, hk, D, device=DEVICE, dtype=dtype)
    with pytest.raises(ValueError, match=rf"qkv_scale must be \[{(hq + 2 * hk) * D}\]"):
        qk_norm_rope(q, k, *weights, cos_sin, positions, EPS, v=v, k_cache=kc, v_cache=kc.clone(),
                     qkv_scale=scale[:-1])
    with pytest.raises(ValueError, match="qkv_scale takes q, k and v"):
        qk_norm_rope(q, k, *weights, cos_sin, positions, EPS, qkv_scale=scale)


@pytest.mark.parametrize("tiles", [{"block_t": 16, "num_warps": 8}, {"block_t": 64, "num_warps": 2}])
def test_qk_norm_rope_prompt_tiles_from_the_gpu_section(tiles, monkeypatch):
    """A GPU's "norm_rope" section sets the prompt's tiles (the H200's, and one past the prompt's length)."""
    from tileinfer.ops import rope

    T, hq, hk, D, P = 45, 4, 2, 32, 67
    qkv = torch.randn(T, (hq + 2 * hk) * D, device=DEVICE).to(torch.bfloat16)
    q, k, v = (qkv[:, a * D:b * D].view(T, -1, D) for a, b in ((0, hq), (hq, hq + hk), (hq + hk, hq + 2 * hk)))
    weights = [torch.randn(D, device=DEVICE).to(torch.bfloat16) for _ in range(2)]
    cos_sin = rope_cos_sin(D, P, 1e6, DEVICE)
    positions = torch.randperm(P, device=DEVICE)[:T]
    asked = []
    monkeypatch.setattr(rope, "section", lambda device, kernel: asked.append(kernel) or dict(tiles))
    outs = {}
    for name, fn in (("ref", qk_norm_rope_ref), ("ours", qk_norm_rope)):
        kc, vc = (torch.zeros(P, hk, D, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
        q_out, _ = fn(q, k, *weights, cos_sin, positions, 1e-6, v=v, k_cache=kc, v_cache=vc)
        outs[name] = (q_out, kc, vc)
    assert asked == ["norm_rope"]
    for got, want, what in zip(outs["ours"], outs["ref"], ("Q", "K cache", "V cache")):
        assert_close(got, want, 2e-2, 2e-2, what)
