"""The two backends: Triton kernels (GPU, or the interpreter on CPU) and their PyTorch references."""

from dataclasses import dataclass

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


class Ops:
    def __init__(self, backend: str, linear: str = "ours"):
        if backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if linear not in LINEAR_IMPLS:
            raise ConfigError(f"linear must be one of {LINEAR_IMPLS}, got {linear!r}")
        from tileinfer.ops import attention, linear as lin, rmsnorm, rope, swiglu
        self.backend = backend
        self.embedding = lin.embedding
        self.attention_ref = attention.attention_ref
        if backend == "torch":
            self.rms_norm = rmsnorm.rms_norm_ref
            self.qk_norm_rope = rope.qk_norm_rope_ref
            self.silu_mul = swiglu.silu_mul_ref
            self.linear = lin.linear_ref
        else:
            from tileinfer.ops import decode_attention, prefill_attention
            self.rms_norm = rmsnorm.rms_norm
            self.qk_norm_rope = rope.qk_norm_rope
            self.silu_mul = swiglu.silu_mul
            self.linear = lin.linear if linear == "ours" else lin.linear_ref
            self._decode = decode_attention.decode_attention
            self._prefill = prefill_attention.prefill_attention

    def attention(self, q, k_cache, v_cache, ctx: AttentionContext):
        if self.backend == "torch":
            return self.attention_ref(q, k_cache, v_cache, ctx.kv_len, ctx.causal)
        if ctx.kv_len_t is not None:
            return self._decode(q, k_cache, v_cache, ctx.kv_len_t, ctx.causal, ctx.num_splits)
        return self._prefill(q, k_cache, v_cache, ctx.kv_len, ctx.causal)
