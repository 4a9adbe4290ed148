"""RMSNorm with the residual add fused, as the Qwen3 decoder layer uses it.

h = x + residual (rounded to the model dtype, like the HF residual stream); out = rmsnorm(h) * weight.
x may be an INT8 projection's product still unscaled (`linear.linear_unscaled`): with `x_scale` each of
its columns is multiplied by its scale and rounded to x's dtype as it is loaded, the bits of
`dequant.scale_columns_` before the norm.
"""

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from tileinfer.ops.dequant import column_scaled, scale_columns_ref
from tileinfer.ops.pdl import launch_options


def rms_norm_ref(x, weight, eps, residual=None, x_scale=None):
    """Plain-PyTorch definition: returns (out, h); h is x itself when there is no residual or scale."""
    if x_scale is not None:
        x = scale_columns_ref(x.clone(), x_scale)
    h = x if residual is None else (x + residual).to(x.dtype)
    hf = h.float()
    out = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return out.to(x.dtype), h


@triton.jit
def _rms_norm_kernel(
    x_ptr, residual_ptr, weight_ptr, out_ptr, h_ptr, scale_ptr,
    stride_x, stride_r, stride_out, stride_h,
    H, eps,
    HAS_RESIDUAL: tl.constexpr, HAS_SCALE: tl.constexpr, BLOCK_H: tl.constexpr, PDL: tl.constexpr,
):
    """One row:  h = (x + residual) in x.dtype (or x);  out = h * rsqrt(mean(h^2) + eps) * weight, fp32 math.
    HAS_SCALE: x · scale rounded to x.dtype in place of x."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_H)
    mask = offs < H
    h = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0)
    h = column_scaled(h, scale_ptr, offs, mask, HAS_SCALE)
    if HAS_RESIDUAL:
        r = tl.load(residual_ptr + row * stride_r + offs, mask=mask, other=0.0)
        h = (h.to(tl.float32) + r.to(tl.float32)).to(h_ptr.dtype.element_ty)
    if HAS_RESIDUAL or HAS_SCALE:
        tl.store(h_ptr + row * stride_h + offs, h, mask=mask)
    hf = h.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(hf * hf, axis=0) / H + eps)
    w = tl.load(weight_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + offs, (hf * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def _num_warps(block):
    # one row of up to BLOCK elements per program: ~8-16 elements per thread keeps loads vectorised
    return max(1, min(16, block // 256))


def rms_norm(x, weight, eps, residual=None, x_scale=None):
    """Triton version of `rms_norm_ref`: x [T, H] (rows may be strided), weight [H] -> (out, h); `x_scale`
    [H]: x's per-column scale, applied as x is loaded (x itself is left as it is)."""
    assert x.dim() == 2 and x.stride(-1) == 1, "x must be [T, H] with contiguous rows"
    T, H = x.shape
    assert weight.shape == (H,) and weight.is_contiguous()
    if x_scale is not None and (x_scale.shape != (H,) or x_scale.device != x.device):
        raise ValueError(f"rms_norm: x_scale must be [{H}] on {x.device} (a column of x each), got "
                         f"{tuple(x_scale.shape)} on {x_scale.device}")
    out = torch.empty((T, H), dtype=x.dtype, device=x.device)
    if residual is None:
        h, res = (x if x_scale is None else torch.empty_like(out)), x
    else:
        assert residual.shape == x.shape and residual.stride(-1) == 1
        h, res = torch.empty_like(out), residual
    if T == 0:
        return out, h
    block = triton.next_power_of_2(H)
    _rms_norm_kernel[(T,)](
        x, res, weight, out, h, x_scale.contiguous() if x_scale is not None else weight,
        x.stride(0), res.stride(0), out.stride(0), h.stride(0),
        H, eps,
        HAS_RESIDUAL=residual is not None, HAS_SCALE=x_scale is not None, BLOCK_H=block,
        num_warps=_num_warps(block),
        **launch_options(x.device),
    )
    return out, h
