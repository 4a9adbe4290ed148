"""The two backends: Triton kernels (GPU, or the interpreter on CPU) and their PyTorch references."""

from dataclasses import dataclass
from functools import partial

import torch

from tileinfer.errors import ConfigError

BACKENDS = ("triton", "torch")
LINEAR_IMPLS = ("ours", "cublas")


@dataclass(slots=True)
class AttentionContext:
    """Per-call attention metadata: the KV length after this call's tokens are written."""
    kv_len: int                      # host copy; stale inside graph replays, so only eager paths read it
    kv_len_t: torch.Tensor | None    # device copy, read by the decode kernel (CUDA-graph safe)
    causal: bool = True
    num_splits: int = 8
    split_size: int = 0              # > 0: splits at fixed multiples of it (exact mode), else even shares
    block_m: int | None = None       # the query tile of the decode kernel, fixed in exact mode


class Ops:
    """The kernels a model runs on. `exact` (settable per call): every op computes a row of a step
    (1…16 tokens) with the bits it has when computed alone, so DFlash verify rows equal plain decoding's."""

    def __init__(self, backend: str, linear: str = "ours", exact: bool = False):
        if backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if linear not in LINEAR_IMPLS:
            raise ConfigError(f"linear must be one of {LINEAR_IMPLS}, got {linear!r}")
        from tileinfer.ops import attention, linear as lin, rmsnorm, rope, swiglu
        self.backend = backend
        self.exact = exact
        self.embedding = lin.embedding
        self.attention_ref = attention.attention_ref
        if backend == "torch":
            self.rms_norm = rmsnorm.rms_norm_ref
            self.qk_norm_rope = rope.qk_norm_rope_ref
            self.silu_mul = swiglu.silu_mul_ref
            self._linear = {False: lin.linear_ref, True: lin.linear_rows_ref}
            self._linear_swiglu = None
        else:
            from tileinfer.ops import decode_attention, prefill_attention
            self.rms_norm = rmsnorm.rms_norm
            self.qk_norm_rope = rope.qk_norm_rope
            self.silu_mul = swiglu.silu_mul
            if linear == "ours":
                self._linear = {False: lin.linear, True: partial(lin.linear, exact=True)}
                self._linear_swiglu = {False: lin.linear_swiglu, True: partial(lin.linear_swiglu, exact=True)}
            else:
                self._linear = {False: lin.linear_ref, True: lin.linear_rows_ref}
                self._linear_swiglu = None
            self._decode = decode_attention.decode_attention
            self._prefill = prefill_attention.prefill_attention

    def linear(self, x, lin):
        return self._linear[self.exact](x, lin)

    def linear_swiglu(self, x, gate_up):
        """silu(gate) * up of the fused gate_up projection: one launch where our skinny GEMM runs."""
        if self._linear_swiglu is None:
            return self.silu_mul(self.linear(x, gate_up))
        return self._linear_swiglu[self.exact](x, gate_up)

    def attention(self, q, k_cache, v_cache, ctx: AttentionContext):
        if self.backend == "torch":
            t = q.shape[0]
            if self.exact and ctx.causal and ctx.kv_len_t is not None and t > 1:
                # Each query alone, over exactly the keys it sees, as a one-token step computes it.
                start = ctx.kv_len - t
                return torch.cat([self.attention_ref(q[i:i + 1], k_cache, v_cache, start + i + 1, True)
                                  for i in range(t)])
            return self.attention_ref(q, k_cache, v_cache, ctx.kv_len, ctx.causal)
        if ctx.kv_len_t is not None:
            return self._decode(q, k_cache, v_cache, ctx.kv_len_t, ctx.causal, ctx.num_splits,
                                split_size=ctx.split_size, block_m=ctx.block_m)
        return self._prefill(q, k_cache, v_cache, ctx.kv_len, ctx.causal)
