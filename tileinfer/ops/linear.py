"""The engine's linear layer: y = x @ W.T, with W in BF16/FP16/FP32 or INT8 + a per-output-channel scale.

`linear_ref` is the definition (what gpt-fast does); `linear` dispatches by M:
  M <= 16, float weight  -> our skinny GEMM (skinny_gemm.py; GEMV for M = 1, tl.dot with M padded to 16 above)
  M <= 16, int8 weight   -> the same skinny kernel, converting int8 -> x.dtype in registers, scale in the epilogue
  M > 16,  float weight  -> F.linear (cuBLAS)
  M > 16,  int8 weight   -> our tiled W8A16 GEMM (w8a16_gemm.py); from DEQUANT_MIN_M rows, the definition:
                            the int8 weight widened to x's dtype (exact), cuBLAS, the scale in place
                            (on a GPU both passes our own launches, dequant.py; `linear_unscaled`
                            leaves the scale to the kernel that reads the product, as `linear_swiglu` does)
With `exact=True` a row's result does not depend on M up to 16 (skinny_gemm's exact mode);
`linear_rows_ref` is the same property for the PyTorch reference (M padded to 16). `linear_swiglu` is the
MLP's gate_up projection followed by SwiGLU, one skinny launch at M <= 16. `norm_linear` folds the
RMSNorm before a projection into it, `linear_add` the residual add after one, so a decode step's
layer needs no norm launch of its own; `mlp_add` is the MLP's pair of them, the down projection reading
the gate_up's columns as they are stored where the flow is on (and the residual flows across the norms,
`tileinfer.ops.flow`, feed a folded-norm projection from the residual projection before it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from tileinfer.errors import CheckpointError
from tileinfer.ops.dequant import scale_columns_, scale_columns_ref, widen_int8, widen_int8_ref
from tileinfer.ops.flow import MLP_FLOW
from tileinfer.ops.rmsnorm import rms_norm
from tileinfer.ops.skinny_gemm import MAX_M as SKINNY_MAX_M
from tileinfer.ops.skinny_gemm import skinny_gemm
from tileinfer.ops.swiglu import silu_mul
from tileinfer.ops.switches import Switch
from tileinfer.ops.w8a16_gemm import w8a16_gemm

_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# From this many rows an INT8 linear is compute-bound: widening its weight (1 byte read, 2 written per
# weight) costs less than our tiled W8A16 GEMM loses to cuBLAS there (the H200's 8k INT8 prefill took
# 225 ms against BF16's 150 ms, bench/results/comparison_8k_h200.md); below it the W8A16 GEMM reads half
# the bytes.
DEQUANT_MIN_M = 256
# Those products leave their per-column scale to the kernel that reads them (`linear_unscaled`,
# `linear_swiglu`); off (TILEINFER_DEFER_SCALES=0), a scale pass after each, for a benchmark's A/B.
DEFER_SCALES = Switch("TILEINFER_DEFER_SCALES", default=True)


@dataclass
class Linear:
    """One projection: y = x @ W.T (no bias).

    Either `weight` [N, K] (bf16/fp16/fp32), or `qweight` int8 [N, K] + `scale` [N] (fp32 as
    `quantize_linear` makes it; bf16 is accepted too, e.g. from a compressed-tensors checkpoint),
    meaning W = qweight * scale[:, None]. `parts` lists the checkpoint tensor names (without
    ".weight") and row counts a fused weight was concatenated from, in order.
    """

    weight: torch.Tensor | None = None
    qweight: torch.Tensor | None = None
    scale: torch.Tensor | None = None
    parts: tuple[tuple[str, int], ...] = ()

    def __post_init__(self):
        what = f"linear {self.parts[0][0]!r}" if self.parts else "linear"
        if (self.weight is None) == (self.qweight is None):
            raise CheckpointError(f"{what}: give exactly one of `weight` or `qweight` (+ `scale`)")
        if self.weight is not None:
            if self.weight.dim() != 2 or self.weight.dtype not in _FLOAT_DTYPES:
                raise CheckpointError(
                    f"{what}: weight must be a 2-D bf16/fp16/fp32 tensor, got {tuple(self.weight.shape)} "
                    f"{self.weight.dtype}; int8 weights go in `qweight` with a `scale`"
                )
            if self.scale is not None:
                raise CheckpointError(f"{what}: a float `weight` takes no `scale`")
        else:
            if self.qweight.dim() != 2 or self.qweight.dtype != torch.int8:
                raise CheckpointError(
                    f"{what}: qweight must be a 2-D int8 tensor, got {tuple(self.qweight.shape)} {self.qweight.dtype}"
                )
            if self.scale is None:
                raise CheckpointError(
                    f"{what}: int8 weight without a scale; a quantized linear needs `scale` [N] "
                    f"(re-export the checkpoint with its `.scale` tensors)"
                )
            n = self.qweight.shape[0]
            if self.scale.dtype not in (torch.float32, torch.bfloat16, torch.float16):
                raise CheckpointError(f"{what}: scale must be fp32 or bf16, got {self.scale.dtype}")
            if self.scale.numel() != n:
                raise CheckpointError(f"{what}: scale has {self.scale.numel()} entries for {n} output rows")
            if self.scale.dim() != 1:
                self.scale = self.scale.reshape(n)
        if self.parts and sum(rows for _, rows in self.parts) != self.out_features:
            raise CheckpointError(
                f"{what}: parts {self.parts} add up to {sum(r for _, r in self.parts)} rows, "
                f"the weight has {self.out_features}"
            )

    @property
    def out_features(self) -> int:
        return self.stored.shape[0]

    @property
    def in_features(self) -> int:
        return self.stored.shape[1]

    @property
    def is_quantized(self) -> bool:
        return self.qweight is not None

    @property
    def nbytes(self) -> int:
        """Bytes one call reads from the weight (qweight + scale when quantized)."""
        if self.is_quantized:
            return self.qweight.numel() * 1 + self.scale.numel() * self.scale.element_size()
        return self.weight.numel() * self.weight.element_size()

    @property
    def device(self) -> torch.device:
        return self.stored.device

    @property
    def stored(self) -> torch.Tensor:
        """The matrix as a call reads it: qweight when quantized, else weight."""
        return self.qweight if self.weight is None else self.weight

    def dequantized(self, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        """W as a float tensor (qweight * scale in fp32, then cast)."""
        if not self.is_quantized:
            return self.weight.to(dtype)
        return (self.qweight.float() * self.scale.float()[:, None]).to(dtype)

    def to(self, device) -> Linear:
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Linear(move(self.weight), move(self.qweight), move(self.scale), self.parts)


def _check_input(x: torch.Tensor, lin: Linear) -> None:
    if x.shape[-1] != lin.in_features:
        raise ValueError(
            f"linear: x has {x.shape[-1]} features (shape {tuple(x.shape)}) but the weight is "
            f"[{lin.out_features}, {lin.in_features}]; x's last dim must equal in_features"
        )
    if x.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"linear: x must be bf16/fp16/fp32, got {x.dtype}")


def linear_ref(x: torch.Tensor, lin: Linear) -> torch.Tensor:
    """y = x @ W.T in x.dtype: F.linear(x, W), or F.linear(x, qweight) * scale (gpt-fast's INT8 weight-only)."""
    _check_input(x, lin)
    if lin.is_quantized:
        # int8 values are exact in bf16/fp16, so the matmul sees exactly qweight.
        return (F.linear(x, lin.qweight.to(x.dtype)) * lin.scale).to(x.dtype)
    return F.linear(x, lin.weight.to(x.dtype))


def linear_rows_ref(x: torch.Tensor, lin: Linear) -> torch.Tensor:
    """`linear_ref` with each of up to SKINNY_MAX_M rows getting the same bits whatever M is: the rows are
    padded with zeros to SKINNY_MAX_M, so every call is the same GEMM shape. A BLAS picks other kernels,
    and so other summation orders, for other M (a GEMV at M = 1); within one shape its register-blocked
    kernels compute every row alike (tests/test_exact.py checks this bit for bit), as our skinny kernel does."""
    x2 = x.reshape(-1, x.shape[-1])
    m = x2.shape[0]
    if not 1 <= m <= SKINNY_MAX_M:
        return linear_ref(x, lin)
    padded = x2.new_zeros(SKINNY_MAX_M, x2.shape[1])
    padded[:m] = x2
    return linear_ref(padded, lin)[:m].clone().reshape(*x.shape[:-1], lin.out_features)  # frees the padding


def linear(x: torch.Tensor, lin: Linear, exact: bool = False) -> torch.Tensor:
    """Triton path for y = x @ W.T; x [..., K] -> [..., N] in x.dtype. Same result as `linear_ref`;
    with `exact`, each of up to 16 rows gets the same bits whatever the number of rows."""
    _check_input(x, lin)
    if x.device != lin.device:
        raise ValueError(f"linear: x is on {x.device}, the weight on {lin.device}")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, lin.in_features)
    m = x2.shape[0]
    if m == 0:
        return x.new_empty(*lead, lin.out_features)
    if m <= SKINNY_MAX_M:
        y = skinny_gemm(x2, lin.stored, lin.scale, exact=exact)
    elif lin.is_quantized and m < DEQUANT_MIN_M:
        y = w8a16_gemm(x2, lin.qweight, lin.scale)
    elif _widens(x2, lin):  # linear_ref's bits, the passes around cuBLAS at full bandwidth
        y = scale_columns_(_unscaled_product(x2, lin), lin.scale)
    elif lin.is_quantized:  # linear_ref's bits: the in-place product rounds as its fp32 temporary does
        y = scale_columns_ref(F.linear(x2, widen_int8_ref(lin.qweight, x2.dtype)), lin.scale)
    else:
        y = F.linear(x2, lin.weight.to(x.dtype))
    return y.reshape(*lead, lin.out_features)


def _widens(x2: torch.Tensor, lin: Linear) -> bool:
    """Whether `linear` runs cuBLAS on the widened INT8 weight and scales the product after it."""
    return lin.is_quantized and x2.shape[0] >= DEQUANT_MIN_M and x2.is_cuda and x2.device == lin.device


def _defers_scale(x2: torch.Tensor, lin: Linear) -> bool:
    """Whether that product's scale is left to the kernel that reads it (`DEFER_SCALES`)."""
    return DEFER_SCALES.on and _widens(x2, lin)


def _unscaled_product(x2: torch.Tensor, lin: Linear) -> torch.Tensor:
    return F.linear(x2, widen_int8(lin.qweight, x2.dtype))


def linear_unscaled(x: torch.Tensor, lin: Linear, exact: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(y, scale): where `linear` would scale cuBLAS's product of a widened INT8 weight in a pass of its own
    (DEQUANT_MIN_M rows or more, on a GPU), the product and the per-column scale that the kernel reading it
    applies as it loads (`silu_mul`, `rms_norm`, `qk_norm_rope` take it): the bits of `linear` once applied.
    Elsewhere (`linear`(x), None)."""
    _check_input(x, lin)
    x2 = x.reshape(-1, lin.in_features)
    if not _defers_scale(x2, lin):
        return linear(x, lin, exact), None
    return _unscaled_product(x2, lin).reshape(*x.shape[:-1], lin.out_features), lin.scale


def linear_swiglu(x: torch.Tensor, lin: Linear, exact: bool = False) -> torch.Tensor:
    """silu(gate) * up of x @ W.T for a fused gate_up `lin` [2I, K]: x [..., K] -> [..., I], with the bits of
    `silu_mul(linear(x, lin))`. At M <= 16 the skinny GEMM applies SwiGLU in its epilogue (no gate_up
    written, one launch fewer); an INT8 projection of DEQUANT_MIN_M rows or more leaves its scale to the
    SwiGLU's loads (`silu_mul`'s scale)."""
    _check_input(x, lin)
    x2 = x.reshape(-1, lin.in_features)
    m = x2.shape[0]
    if _defers_scale(x2, lin):  # the scale applied in the SwiGLU's loads: one pass over [M, 2I] fewer
        y = silu_mul(_unscaled_product(x2, lin), lin.scale)
        return y.reshape(*x.shape[:-1], lin.out_features // 2)
    if not 1 <= m <= SKINNY_MAX_M or x.device != lin.device:
        return silu_mul(linear(x, lin, exact))
    y = skinny_gemm(x2, lin.stored, lin.scale, exact=exact, swiglu=True)
    return y.reshape(*x.shape[:-1], lin.out_features // 2)


def linear_argmax(x: torch.Tensor, lin: Linear, exact: bool = False) -> torch.Tensor:
    """`linear(x, lin, exact).argmax(-1)`: x [..., K] -> [...] int64 ids. At M <= 16 one skinny launch that
    writes the ids and no [M, N] product (the LM head of a greedy step)."""
    _check_input(x, lin)
    x2 = x.reshape(-1, lin.in_features)
    if not _skinny_ok(x2, lin):
        return linear(x, lin, exact).argmax(dim=-1)
    y = skinny_gemm(x2, lin.stored, lin.scale, exact=exact, argmax=True)
    return y.reshape(x.shape[:-1])


def _skinny_ok(x2: torch.Tensor, lin: Linear) -> bool:
    return 1 <= x2.shape[0] <= SKINNY_MAX_M and x2.device == lin.device


def fold_norm_weight(lin: Linear, norm: torch.Tensor) -> Linear:
    """The float projection with the RMSNorm weight before it folded into its columns: W·diag(norm), so that
    rms_norm(x, norm) @ W.T = rms_norm(x, 1) @ (W·diag(norm)).T (one rounding of the product in W's dtype)."""
    if lin.is_quantized:
        raise ValueError("fold_norm_weight takes a float projection; fold before quantizing")
    if norm.shape != (lin.in_features,):
        raise ValueError(f"norm weight {tuple(norm.shape)} does not match {lin.in_features} input features")
    return replace(lin, weight=(lin.weight.float() * norm.float()).to(lin.weight.dtype))


def norm_linear(x: torch.Tensor, norm: torch.Tensor, eps: float, lin: Linear, exact: bool = False,
                swiglu: bool = False, folded: bool = False, sums: torch.Tensor | None = None,
                flow_in: str | None = None) -> torch.Tensor:
    """linear (or linear_swiglu) of rms_norm(x, norm, eps): at M <= 16 one skinny launch that applies the
    norm on the way in (no normed x written); else the two calls. `folded`: `lin` carries the norm's
    weight (`fold_norm_weight`) and `norm` is all ones. `sums` (with `folded`): the row sums a residual
    GEMM wrote with x (`linear_add(row_sums=True)`), so the launch takes Σx² from them. `flow_in`: x is
    the output of the launch just before, which counts its columns on that pair (`tileinfer.ops.flow`)."""
    _check_input(x, lin)
    x2 = x.reshape(-1, lin.in_features)
    if not _skinny_ok(x2, lin):
        _refuse_flow("norm_linear", flow_in, x2, lin)
        normed = rms_norm(x2, norm, eps)[0]
        y = linear_swiglu(normed, lin, exact) if swiglu else linear(normed, lin, exact)
    else:
        y = _skinny_norm_linear(x2, norm, eps, lin, exact, swiglu, folded, sums, flow_in)
    return y.reshape(*x.shape[:-1], y.shape[-1])


def _skinny_norm_linear(x2, norm, eps, lin: Linear, exact, swiglu, folded, sums, flow_in=None, flow_out=None):
    if folded and sums is not None:
        return skinny_gemm(x2, lin.stored, lin.scale, exact=exact, swiglu=swiglu, eps=eps, norm_sums=sums,
                           flow_in=flow_in, flow_out=flow_out)
    return skinny_gemm(x2, lin.stored, lin.scale, exact=exact, swiglu=swiglu, norm=None if folded else norm, eps=eps,
                       unit_norm=folded, flow_in=flow_in, flow_out=flow_out)


def _refuse_flow(what: str, flow, x2: torch.Tensor, lin: Linear) -> None:
    """A flow asked of a launch that is not our skinny GEMM: named, before anything runs."""
    if flow:
        raise ValueError(f"{what}: a flow's ends must be our skinny GEMMs; x {x2.dtype} {list(x2.shape)} on "
                         f"{x2.device}, weight on {lin.device}")


def linear_add(x: torch.Tensor, lin: Linear, residual: torch.Tensor, exact: bool = False,
               row_sums: bool = False, flow_in: str | None = None, flow_out: str | None = None):
    """residual += linear(x, lin), in place (the product rounded to the residual's dtype first, the sum
    rounded once, as rms_norm's residual add does); returns residual. One launch at M <= 16.
    `row_sums`: returns (residual, sums), the sums of the new residual's squares per tile that a folded
    norm after it takes (`norm_linear(sums=...)`), None where the launch is not our skinny GEMM.
    Column flows (`tileinfer.ops.flow`), by pair: `flow_in`, x is the output of the kernel launched just
    before, which counts its columns as it stores them (`decode_attention(flow=True)`): our skinny GEMM
    reads them as they come and clears the counts; `flow_out`, the new residual's columns are counted for
    the projection launched next (`norm_linear(flow_in=...)`)."""
    _check_input(x, lin)
    x2 = x.reshape(-1, lin.in_features)
    r2 = residual.view(-1, lin.out_features)
    skinny = _skinny_ok(x2, lin) and r2.dtype == x.dtype
    if not skinny:
        _refuse_flow("linear_add", flow_in or flow_out, x2, lin)
        residual.add_(linear(x, lin, exact))
        return (residual, None) if row_sums else residual
    out = skinny_gemm(x2, lin.stored, lin.scale, exact=exact, residual=r2, row_sums=row_sums, flow_in=flow_in,
                      flow_out=flow_out)
    return (residual, out[1]) if row_sums else residual


def mlp_add(x: torch.Tensor, gate_up: Linear, down: Linear, residual: torch.Tensor, exact: bool = False,
            row_sums: bool = False, norm: torch.Tensor | None = None, eps: float = 1e-6, folded: bool = False,
            sums: torch.Tensor | None = None, flow_in: str | None = None, flow_out: str | None = None):
    """residual += down(silu(gate) * up) of x's fused gate_up projection, in place: `linear_add` of
    `linear_swiglu` (of `norm_linear`'s with `norm`, `folded` and `sums` as it takes them), with its bits.
    Where both are our skinny GEMMs and `MLP_FLOW` flows this one, the down projection reads the SwiGLU's columns
    as the gate_up's tiles store them (`tileinfer.ops.flow`), not after its last program. `flow_in`: the
    gate_up reads x as the launch before counts it; `flow_out`: the down projection counts the new residual's
    columns for the launch after. Returns what `linear_add` returns."""
    _check_input(x, gate_up)
    x2 = x.reshape(-1, gate_up.in_features)
    r2 = residual.view(-1, down.out_features)
    int8_gemv = gate_up.is_quantized and x2.shape[0] == 1 and not exact
    pair = (_skinny_ok(x2, gate_up) and down.device == x.device and r2.dtype == x.dtype
            and down.in_features * 2 == gate_up.out_features and r2.shape[0] == x2.shape[0])
    if not pair:
        _refuse_flow("mlp_add", flow_in or flow_out, x2, gate_up)
    if not (pair and (MLP_FLOW.flows(int8_gemv) or flow_in or flow_out)):
        act = (norm_linear(x, norm, eps, gate_up, exact, swiglu=True, folded=folded, sums=sums)
               if norm is not None else linear_swiglu(x, gate_up, exact))
        return linear_add(act, down, residual, exact, row_sums)
    inner = "mlp" if MLP_FLOW.flows(int8_gemv) else None
    act = _skinny_norm_linear(x2, norm, eps, gate_up, exact, True, folded, sums, flow_in, inner)  # no norm: plain
    out = skinny_gemm(act, down.stored, down.scale, exact=exact, residual=r2, row_sums=row_sums, flow_in=inner,
                      flow_out=flow_out)
    return (residual, out[1]) if row_sums else residual


def embedding(ids: torch.Tensor, lin: Linear, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Row lookup in a (possibly tied, possibly INT8) table: weight[ids], or qweight[ids] * scale[ids, None].

    A quantized table dequantizes only the looked-up rows, so a tied INT8 LM head needs no second
    BF16 copy. Output dtype: `dtype`, else the weight's dtype, else bf16 for a quantized table.
    """
    if ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"embedding: ids must be int32/int64, got {ids.dtype}")
    if not lin.is_quantized:
        return lin.weight[ids].to(dtype or lin.weight.dtype)
    rows = lin.qweight[ids].float() * lin.scale.float()[ids].unsqueeze(-1)
    return rows.to(dtype or torch.bfloat16)


def quantize_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel INT8: scale = amax|W| over K / 127 (1 for an all-zero row), q = round(W / scale)."""
    w32 = w.float()
    amax = w32.abs().amax(dim=1)
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
    q = torch.round(w32 / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return q, scale


def quantize_linear(lin: Linear) -> Linear:
    """INT8 copy of `lin` (qweight int8 [N, K], scale fp32 [N]); an already quantized one is returned as is."""
    if lin.is_quantized:
        return lin
    q, scale = quantize_weight(lin.weight)
    return Linear(qweight=q, scale=scale, parts=lin.parts)
