"""The INT8 linear's passes around cuBLAS: the weight widened and the scale applied in place, against
their PyTorch definitions, bit for bit on a GPU; and an INT8 prompt whose products leave their scales to
the kernels that read them, against the same prompt with a scale pass after each product."""

import pytest
import torch

import tileinfer
from tests.conftest import DEVICE
from tests.helpers import tiny_target
from tileinfer.ops import linear as linear_module
from tileinfer.ops import INTERPRET
from tileinfer.ops.dequant import scale_columns_, scale_columns_ref, widen_int8, widen_int8_ref


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("shape", [(1, 1), (37, 50), (3, 4099), (256, 300)])
def test_widen_int8_is_exact(shape, dtype):
    gen = torch.Generator().manual_seed(1)
    q = torch.randint(-128, 128, shape, generator=gen, dtype=torch.int8).to(DEVICE)
    assert torch.equal(widen_int8(q, dtype), widen_int8_ref(q, dtype))


def test_widen_int8_takes_a_transposed_weight():
    q = torch.arange(-60, 60, dtype=torch.int8).reshape(8, 15).to(DEVICE).t()
    out = widen_int8(q, torch.bfloat16)
    assert out.shape == (15, 8) and torch.equal(out, q.to(torch.bfloat16))


@pytest.mark.parametrize("scale_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("m, n", [(1, 7), (17, 300), (300, 37), (40, 1024)])
def test_scale_columns_matches_mul(m, n, dtype, scale_dtype):
    gen = torch.Generator().manual_seed(2)
    wide = (100 * torch.randn(m, n + 5, generator=gen)).to(DEVICE, dtype)
    scale = (torch.rand(n, generator=gen) / 50).to(DEVICE, scale_dtype)
    buffer = wide.clone()
    ours, ref = buffer[:, 2:n + 2], wide.clone()[:, 2:n + 2]  # rows strided, as in a wider buffer
    assert scale_columns_(ours, scale) is ours
    scale_columns_ref(ref, scale)
    if INTERPRET and dtype != torch.float32:
        # the interpreter truncates fp32 -> bf16/fp16 where a GPU rounds: at most one ulp apart
        ulp = torch.finfo(dtype).eps * ref.float().abs()
        assert bool(((ours.float() - ref.float()).abs() <= ulp).all())
    else:
        assert torch.equal(ours, ref)
    assert torch.equal(buffer[:, :2], wide[:, :2]) and torch.equal(buffer[:, n + 2:], wide[:, n + 2:])


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="int8"):
        widen_int8(torch.zeros(3, 4, device=DEVICE), torch.bfloat16)
    y = torch.zeros(3, 4, device=DEVICE)
    with pytest.raises(ValueError, match="does not match 4 columns"):
        scale_columns_(y, torch.ones(5, device=DEVICE))
    with pytest.raises(ValueError, match="contiguous rows"):
        scale_columns_(y.t(), torch.ones(3, device=DEVICE))


@pytest.mark.gpu
def test_int8_prompt_with_deferred_scales_has_the_bits_of_scale_passes(tmp_path, monkeypatch):
    """qkv's scale in the Q/K norms and V copy, o's in the norm after it, gate_up's in the SwiGLU: an INT8
    prompt of DEQUANT_MIN_M tokens and more prefills to the logits and caches of a scale pass per product
    (`linear.DEFER_SCALES` off)."""
    target = tiny_target(tmp_path, dtype=torch.bfloat16, max_position_embeddings=1024)
    engine = tileinfer.load(target, weights="int8")
    ids = torch.randint(0, 150, (linear_module.DEQUANT_MIN_M + 45,), generator=torch.Generator().manual_seed(5))
    n = len(ids)  # the caches' rows past the prompt hold whatever their memory held

    def prefill():
        return engine.prompt_logits(ids.tolist()), engine.cache.k[0][:n].clone(), engine.cache.v[0][:n].clone()

    scaled_by_swiglu, silu_mul = [], linear_module.silu_mul
    monkeypatch.setattr(linear_module, "silu_mul",
                        lambda y, scale=None: (scaled_by_swiglu.append(scale is not None), silu_mul(y, scale))[1])
    deferred = prefill()
    assert scaled_by_swiglu and all(scaled_by_swiglu)
    monkeypatch.setattr(linear_module.DEFER_SCALES, "on", False)
    for a, b, what in zip(deferred, prefill(), ("logits", "K cache", "V cache")):
        assert torch.equal(a, b), what
    assert not all(scaled_by_swiglu)  # the passes' run gave the SwiGLU scaled products
