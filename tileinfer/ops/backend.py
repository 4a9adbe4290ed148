"""The two backends: Triton kernels (GPU, or the interpreter on CPU) and their PyTorch references."""

import os
from dataclasses import dataclass
from functools import partial

import torch

from tileinfer.errors import ConfigError
from tileinfer.ops.flow import O_FLOW, RES_FLOW

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
    settled: bool = False            # rows before this call's were cached by an earlier step (`early_kv`)
    tokens_per_program: int | None = None  # query tokens a decode-kernel program takes (None: all)


def _switch(name: str, default: str = "1") -> bool:
    env = os.environ.get(name, default)
    if env not in ("0", "1"):
        raise ConfigError(f"{name} must be 1 or 0, got {env!r}")
    return env == "1"


def fuse_norms_setting() -> bool:
    """TILEINFER_FUSE_NORMS (1 or 0, default 1): fused decoder layers for steps of up to 16 tokens (`Ops.fused_layer`)."""
    return _switch("TILEINFER_FUSE_NORMS")


STEP_KV_MODES = {"0": "off", "1": "on", "decode": "decode"}


def step_kv_setting() -> str:
    """TILEINFER_STEP_KV: where a step's Q/K norms, RoPE and KV write run inside the attention's launch
    (`Ops.step_attention`): 1 every decode and verify step, 0 none, `decode` (the default) one-token steps
    outside exact mode. On the H200 it made Qwen3-4B's plain decode step at 1k 2 % faster (2.752 → 2.695
    ms) and its DFlash steps 2-3 % slower (3.92 → 4.00 ms; bench/results/floor_step_kv_h200.csv); exact
    mode keeps one path for a row at 1 and at 16 tokens."""
    env = os.environ.get("TILEINFER_STEP_KV", "decode")
    if env not in STEP_KV_MODES:
        raise ConfigError(f"TILEINFER_STEP_KV must be 1, 0 or decode, got {env!r}")
    return STEP_KV_MODES[env]


def fused_layer(fuse_norms: bool, t: int) -> bool:
    """Whether a step of t tokens runs `fused_decoder_layer` (for the ops and for the memory plan): steps
    of up to 16 tokens (our skinny GEMMs' rows) with `fuse_norms`. A GEMV (`gemv`) sums x² from the x
    it holds; on the tensor-core path each folded norm takes its rows' Σx² from the residual GEMM before
    it (`linear_add`'s row sums), and the first layer's, with none before it, is a launch of its own, where summing x² from a load of x of its own in every K-block cost a Qwen3-4B DFlash step
    4.60 ms against 3.82 ms with the norms apart (H200, bench/results/floor_fused_steps_h200.csv)."""
    return fuse_norms and t <= 16


def gemv(t: int, exact: bool) -> bool:
    """Whether our skinny GEMM on t rows is a GEMV (one row outside exact mode), not the tensor-core path."""
    return t == 1 and not exact


class Ops:
    """The kernels a model runs on. `exact` (settable per call): every op computes a row of a step
    (1…16 tokens) with the bits it has when computed alone, so DFlash verify rows equal plain decoding's.
    `fuse_norms`: steps of up to 16 tokens fold each RMSNorm into the projection after it and each residual
    add into the projection before it (`fused_layer`, `norm_linear`, `linear_add`); loading folds the norms'
    weights into the projections. None reads TILEINFER_FUSE_NORMS (1 or 0, default 1).
    `step_kv`: on the Triton backend, a decode step's Q/K norms, RoPE and KV-cache write run in the
    attention's launch (`step_attention`): True every step's, False none, None as TILEINFER_STEP_KV says
    (by default one-token steps outside exact mode: `step_kv_decode`)."""

    def __init__(self, backend: str, linear: str = "ours", exact: bool = False, fuse_norms: bool | None = None,
                 step_kv: bool | None = None):
        if backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if linear not in LINEAR_IMPLS:
            raise ConfigError(f"linear must be one of {LINEAR_IMPLS}, got {linear!r}")
        from tileinfer.ops import attention, commit, linear as lin, rmsnorm, rope, swiglu
        self.backend = backend
        self.exact = exact
        self.fuse_norms = fuse_norms_setting() if fuse_norms is None else fuse_norms
        mode = step_kv_setting() if step_kv is None else "on" if step_kv else "off"
        self.step_kv = backend == "triton" and mode == "on"
        self.step_kv_decode = backend == "triton" and mode == "decode"
        self._fused_gemms = backend == "triton" and linear == "ours"
        self._norm_linear, self._linear_add, self._linear_argmax = lin.norm_linear, lin.linear_add, lin.linear_argmax
        self._mlp_add = lin.mlp_add
        self._linear_unscaled = lin.linear_unscaled if self._fused_gemms else None
        self.embedding = lin.embedding
        self.attention_ref = attention.attention_ref
        if backend == "torch":
            self.commit = commit.commit_ref
            self.rms_norm = rmsnorm.rms_norm_ref
            self.qk_norm_rope = rope.qk_norm_rope_ref
            self.silu_mul = swiglu.silu_mul_ref
            self._linear = {False: lin.linear_ref, True: lin.linear_rows_ref}
            self._linear_swiglu = None
            self._step_kv = None
        else:
            from tileinfer.ops import decode_attention, embedding, prefill_attention
            self.commit = commit.commit
            self.embedding = embedding.embedding
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
            self._step_kv = decode_attention.StepKV
            self._prefill = prefill_attention.prefill_attention

    @property
    def step_kv_label(self) -> str:
        """Where the norms, RoPE and KV write run in the attention's launch, for tables: on, decode or off."""
        return "on" if self.step_kv else "decode" if self.step_kv_decode else "off"

    def fused_layer(self, t: int) -> bool:
        """Whether a step of t tokens runs `fused_decoder_layer` (`backend.fused_layer`)."""
        return fused_layer(self.fuse_norms, t)

    def gemv(self, t: int) -> bool:
        """Whether our skinny GEMM on t rows is a GEMV (`backend.gemv`)."""
        return gemv(t, self.exact)

    def linear(self, x, lin):
        return self._linear[self.exact](x, lin)

    def linear_unscaled(self, x, lin):
        """(y, scale): where our linears run, `linear.linear_unscaled` (a prompt's INT8 product whose
        per-column scale the kernel reading it applies: `rms_norm`'s x_scale, `step_attention`'s qkv_scale);
        else (linear(x), None)."""
        if self._linear_unscaled is None:
            return self.linear(x, lin), None
        return self._linear_unscaled(x, lin, self.exact)

    def linear_swiglu(self, x, gate_up):
        """silu(gate) * up of the fused gate_up projection: one launch where our skinny GEMM runs."""
        if self._linear_swiglu is None:
            return self.silu_mul(self.linear(x, gate_up))
        return self._linear_swiglu[self.exact](x, gate_up)

    @property
    def folds_norm_weights(self) -> bool:
        """Whether loading folds RMSNorm weights into the float projections after them: fused layers run
        on our skinny GEMM, whose tensor-core path then takes x as it is."""
        return self.fuse_norms and self._fused_gemms

    def norm_linear(self, x, norm, eps, lin, swiglu: bool = False, folded: bool = False, sums=None,
                    flow_in: str | None = None):
        """linear(rms_norm(x)) (linear_swiglu with `swiglu`): one launch where our skinny GEMM runs.
        `folded`: lin carries the norm's weight and `norm` is all ones (`fold_layer_norms`); `sums`: x's
        row sums from the residual GEMM that wrote it (`linear_add`); `flow_in`: x comes from a launch that
        counts its columns on that pair (`residual_flows`)."""
        if self._fused_gemms:
            return self._norm_linear(x, norm, eps, lin, self.exact, swiglu, folded, sums, flow_in)
        if flow_in:
            raise ValueError("norm_linear: a flow's consumer must be our skinny GEMM (Triton backend, our linears)")
        normed = self.rms_norm(x, norm, eps)[0]
        return self.linear_swiglu(normed, lin) if swiglu else self.linear(normed, lin)

    @property
    def fused_argmax(self) -> bool:
        """Whether `logits_argmax` runs in the LM head's launch (our skinny GEMM) with no logits written."""
        return self._fused_gemms

    def logits_argmax(self, x, lm_head):
        """linear(x, lm_head).argmax(-1): greedy tokens; one launch and no logits where our skinny GEMM runs."""
        if self._fused_gemms:
            return self._linear_argmax(x, lm_head, self.exact)
        return self.linear(x, lm_head).argmax(dim=-1)

    def linear_add(self, x, lin, residual, flow_in: str | None = None, flow_out: str | None = None):
        """residual += linear(x), in place: one launch where our skinny GEMM runs. Returns (residual, the
        new residual's row sums for the next folded norm, or None): a GEMV's norm sums x² from the x it holds
        in registers for nothing, and summing in the epilogue of the GEMM before it cost a Qwen3-0.6B plain
        step 0.94 ms against 0.83 (H200, bench/results/floor_norm_stats_h200.csv). `flow_in`: x comes from an
        attention launched with `flow` (`attention_flows`); `flow_out`: the new residual's columns are counted
        for the projection launched next (`residual_flows`)."""
        if self._fused_gemms:
            if self.gemv(x.numel() // x.shape[-1]):
                return self._linear_add(x, lin, residual, self.exact, flow_in=flow_in, flow_out=flow_out), None
            return self._linear_add(x, lin, residual, self.exact, row_sums=True, flow_in=flow_in, flow_out=flow_out)
        if flow_in or flow_out:
            raise ValueError("linear_add: a flow's ends must be our skinny GEMMs (Triton backend, our linears)")
        return residual.add_(self.linear(x, lin)), None

    def residual_flows(self, residual, consumer) -> bool:
        """Whether the residual projection that writes `residual` (o, down) counts its columns for the
        folded-norm projection `consumer` launched right after it (gate_up, the next layer's qkv) to read as
        they come (`flow.RES_FLOW`, where "int8" means an INT8 GEMV consumer): our skinny GEMMs on both ends."""
        t = residual.numel() // residual.shape[-1]
        return (self._fused_gemms and 1 <= t <= 16 and consumer.device == residual.device
                and RES_FLOW.flows(consumer.is_quantized and self.gemv(t)))

    def attention_flows(self, ctx: AttentionContext, residual, o_proj) -> bool:
        """Whether a step's decode attention counts its output's columns for the o projection's `linear_add`
        to read as they come (`flow.O_FLOW`): our skinny GEMMs on a decode step (up to 16 tokens, the KV
        length on the device) whose o projection sits beside the residual stream."""
        t = residual.numel() // residual.shape[-1]
        return (O_FLOW.on and self._fused_gemms and ctx.kv_len_t is not None and 1 <= t <= 16
                and o_proj.device == residual.device)

    def mlp_add(self, x, gate_up, down, residual, norm=None, eps: float = 1e-6, folded: bool = False, sums=None,
                flow_in: str | None = None, flow_out: str | None = None):
        """residual += down(silu(gate) * up) of x's (or with `norm`, rms_norm(x)'s, as `norm_linear` takes
        `norm`, `folded` and `sums`) gate_up projection, in place; returns (residual, row sums) as
        `linear_add`. Where our skinny GEMMs run, `linear.mlp_add` (`flow_in`: the gate_up reads x as the
        launch before counts it; `flow_out`: the down projection counts its columns for the next)."""
        if self._fused_gemms:
            sums_out = not self.gemv(x.numel() // x.shape[-1])
            out = self._mlp_add(x, gate_up, down, residual, self.exact, sums_out, norm, eps, folded, sums,
                                flow_in, flow_out)
            return out if sums_out else (out, None)
        if flow_in or flow_out:
            raise ValueError("mlp_add: a flow's ends must be our skinny GEMMs (Triton backend, our linears)")
        act = (self.norm_linear(x, norm, eps, gate_up, swiglu=True, folded=folded, sums=sums) if norm is not None
               else self.linear_swiglu(x, gate_up))
        return self.linear_add(act, down, residual)

    def step_attention(self, q, k, v, q_norm, k_norm, cos_sin, positions, eps, k_cache, v_cache,
                       ctx: AttentionContext, ahead=None, flow: bool = False, qkv_scale=None):
        """Attention of the projected q, k, v [T, heads, D]: Qwen3's Q/K RMSNorm and RoPE, this call's K/V
        into the caches, then attention over them; with `step_kv`, a decode step does it all in the
        attention's launch (`decode_attention`'s step_kv); with `step_kv_decode`, a one-token step outside
        exact mode does. `ahead`: the weight the next kernel reads, which a decode step's attention asks
        L2 for after its wait where `decode_attention.set_l2_ahead` is on. `flow`: its output's columns are
        counted for the o projection after it (`attention_flows`). `qkv_scale`: q, k and v are views of an
        INT8 qkv product still unscaled (`linear_unscaled`), scaled as the norms and the V copy load them."""
        fused = self.step_kv or (self.step_kv_decode and q.shape[0] == 1 and not self.exact)
        if fused and ctx.kv_len_t is not None and qkv_scale is None:
            return self._decode(q, k_cache, v_cache, ctx.kv_len_t, ctx.causal, ctx.num_splits,
                                split_size=ctx.split_size, block_m=ctx.block_m, early_kv=ctx.settled,
                                step_kv=self._step_kv(k, v, q_norm, k_norm, cos_sin, positions, eps), l2_ahead=ahead,
                                flow=flow)
        q, _ = self.qk_norm_rope(q, k, q_norm, k_norm, cos_sin, positions, eps, v=v, k_cache=k_cache, v_cache=v_cache,
                                 qkv_scale=qkv_scale)
        return self.attention(q, k_cache, v_cache, ctx, ahead, flow)

    def attention(self, q, k_cache, v_cache, ctx: AttentionContext, ahead=None, flow: bool = False):
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
                                split_size=ctx.split_size, block_m=ctx.block_m, early_kv=ctx.settled,
                                tokens_per_program=ctx.tokens_per_program, l2_ahead=ahead, flow=flow)
        if flow:
            raise ValueError("attention: only the decode attention (the KV length on the device) takes part in a flow")
        return self._prefill(q, k_cache, v_cache, ctx.kv_len, ctx.causal)
