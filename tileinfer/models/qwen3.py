"""Qwen3 for causal LM, as Hugging Face defines it, on TileInfer's ops.

forward(input_ids, positions, ctx) runs T tokens whose K/V go into the static cache at `positions`;
attention reads the cache up to ctx.kv_len. Fused weights: qkv_proj = [q; k; v], gate_up_proj = [gate; up]
(`qwen3_checkpoint` builds them from a Hugging Face checkpoint).
"""

from dataclasses import dataclass

import torch

from tileinfer import tracing
from tileinfer.config import Qwen3Config
from tileinfer.kv_cache import KVCache
from tileinfer.ops.backend import AttentionContext, Ops
from tileinfer.ops.linear import Linear, fold_norm_weight
from tileinfer.ops.rope import rope_cos_sin


@dataclass(slots=True)
class Qwen3Layer:
    input_layernorm: torch.Tensor
    qkv_proj: Linear
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    o_proj: Linear
    post_attention_layernorm: torch.Tensor
    gate_up_proj: Linear
    down_proj: Linear
    # RMSNorm weights folded into the projection after them (`fold_layer_norms`); the norm is then all ones
    input_norm_folded: bool = False
    post_norm_folded: bool = False


def self_attention(ops: Ops, config: Qwen3Config, layer: Qwen3Layer, qkv, positions, cos_sin,
                   k_cache, v_cache, ctx: AttentionContext, flow: bool = False, qkv_scale=None):
    """Attention output [T, heads × head_dim] of the projected qkv; writes this call's K/V into the cache first.
    A decode step's attention may ask L2 for o_proj's weight, which the next launch reads (`set_l2_ahead`),
    and with `flow` counts its output's columns for the o projection after it (`Ops.attention_flows`).
    `qkv_scale`: qkv is an INT8 product whose scale is still to apply (`Ops.linear_unscaled`)."""
    t, hq, hk, d = qkv.shape[0], config.num_attention_heads, config.num_key_value_heads, config.head_dim
    q = qkv[:, : hq * d].view(t, hq, d)
    k = qkv[:, hq * d: (hq + hk) * d].view(t, hk, d)
    v = qkv[:, (hq + hk) * d:].view(t, hk, d)
    return ops.step_attention(q, k, v, layer.q_norm, layer.k_norm, cos_sin, positions, config.rms_norm_eps,
                              k_cache, v_cache, ctx, ahead=layer.o_proj.stored, flow=flow,
                              qkv_scale=qkv_scale).view(t, hq * d)


def attention_block(ops: Ops, config: Qwen3Config, layer: Qwen3Layer, x, positions, cos_sin,
                    k_cache, v_cache, ctx: AttentionContext):
    """Self-attention of one Qwen3 layer on the normed x, o_proj included: (output, None or the per-column
    scale an INT8 prompt's o projection leaves to the norm after it, `Ops.linear_unscaled`)."""
    qkv, qkv_scale = ops.linear_unscaled(x, layer.qkv_proj)
    out = self_attention(ops, config, layer, qkv, positions, cos_sin, k_cache, v_cache, ctx, qkv_scale=qkv_scale)
    return ops.linear_unscaled(out, layer.o_proj)


def mlp_block(ops: Ops, layer: Qwen3Layer, x):
    return ops.linear(ops.linear_swiglu(x, layer.gate_up_proj), layer.down_proj)


def decoder_layer(ops: Ops, config: Qwen3Config, layer: Qwen3Layer, stream: list, positions, cos_sin,
                  k_cache, v_cache, ctx: AttentionContext, name: str, next_layer: Qwen3Layer | None = None):
    """Advance the residual stream [h, residual] through one pre-norm decoder layer, in place: the caller
    holds no reference to the old tensors, so each is freed as soon as it is used (prefill's peak memory
    per chunk depends on it). `name` labels the layer's profiler ranges. Steps that `ops.fused_layer`
    fuses keep the stream as [None, h + residual, its row sums, a flow] (`fused_decoder_layer`, which
    takes `next_layer`)."""
    eps = config.rms_norm_eps
    h, residual = stream[:2]
    if ops.fused_layer((residual if h is None else h).shape[0]):
        return fused_decoder_layer(ops, config, layer, stream, positions, cos_sin, k_cache, v_cache, ctx, name,
                                   next_layer)
    stream.clear()
    with tracing.annotate(f"{name}.attention", level="layer", kv_len=ctx.kv_len, num_splits=ctx.num_splits):
        x, residual = ops.rms_norm(h, layer.input_layernorm, eps, residual)
        h, h_scale = attention_block(ops, config, layer, x, positions, cos_sin, k_cache, v_cache, ctx)
    with tracing.annotate(f"{name}.mlp", level="layer", m=x.shape[0]):
        x, residual = ops.rms_norm(h, layer.post_attention_layernorm, eps, residual, h_scale)
        h = mlp_block(ops, layer, x)
    stream[:] = (h, residual)


def fused_decoder_layer(ops: Ops, config: Qwen3Config, layer: Qwen3Layer, stream: list, positions, cos_sin,
                        k_cache, v_cache, ctx: AttentionContext, name: str, next_layer: Qwen3Layer | None = None):
    """`decoder_layer` in four GEMM launches around the attention: each RMSNorm folded into the projection
    after it (where loading folded its weight into that projection, `fold_layer_norms`), each residual add
    into the projection before it; the stream leaves as [None, h + residual, sums, flow]: the sums of its
    rows' squares that the down projection wrote, which the next layer's folded norm reads instead of
    summing, and the pair on which the down projection counted its columns for `next_layer`'s qkv (the
    layer launched right after, nothing between; `Ops.residual_flows`), or None. The o projection may
    likewise feed the gate_up, and the attention the o projection (`Ops.attention_flows`)."""
    eps = config.rms_norm_eps
    h, residual = stream[:2]
    sums = stream[2] if len(stream) > 2 else None
    flow_in = stream[3] if len(stream) > 3 else None
    stream.clear()
    if residual is None:  # the first layer: the embedding rows are the residual stream
        residual = h
    with tracing.annotate(f"{name}.attention", level="layer", kv_len=ctx.kv_len, num_splits=ctx.num_splits):
        qkv = normed_linear(ops, residual, layer.input_layernorm, eps, layer.qkv_proj, layer.input_norm_folded,
                            sums=sums, flow_in=flow_in)
        flow = ops.attention_flows(ctx, residual, layer.o_proj)
        out = self_attention(ops, config, layer, qkv, positions, cos_sin, k_cache, v_cache, ctx, flow)
        # (our skinny o projection leaves row sums where it is no GEMV: the gate_up then folds the norm in)
        to_mlp = "gate_up" if layer.post_norm_folded and ops.residual_flows(residual, layer.gate_up_proj) else None
        _, sums = ops.linear_add(out, layer.o_proj, residual, flow_in="o" if flow else None, flow_out=to_mlp)
        del qkv, out  # not held through the MLP (the memory plan counts them in attention only)
    to_next = ("qkv" if next_layer is not None and next_layer.input_norm_folded
               and ops.residual_flows(residual, next_layer.qkv_proj) else None)
    with tracing.annotate(f"{name}.mlp", level="layer", m=residual.shape[0]):
        if layer.post_norm_folded and (sums is not None or ops.gemv(residual.shape[0])):
            _, sums = ops.mlp_add(residual, layer.gate_up_proj, layer.down_proj, residual,
                                  layer.post_attention_layernorm, eps, folded=True, sums=sums, flow_in=to_mlp,
                                  flow_out=to_next)
        else:
            if to_mlp:
                raise ValueError(f"{name}: the o projection counted its columns for a gate_up that needs the "
                                 "norm's own launch (no row sums came with the stream)")
            normed = ops.rms_norm(residual, layer.post_attention_layernorm, eps)[0]
            del sums
            _, sums = ops.mlp_add(normed, layer.gate_up_proj, layer.down_proj, residual, flow_out=to_next)
    stream[:] = (None, residual, sums, to_next)


def normed_linear(ops: Ops, x, norm, eps, lin: Linear, folded: bool, swiglu: bool = False, sums=None,
                  flow_in: str | None = None):
    """The projection (SwiGLU'd with `swiglu`) of rms_norm(x): one launch when the norm's weight is folded
    into `lin` and x's row sums come with it (`sums`) or the GEMM is a GEMV (which sums x² from registers);
    else the norm's own launch first: scaling x inside a tensor-core GEMM's loop costs more than that
    launch (each x tile goes back to shared memory before wgmma reads it), and so does summing x² there.
    `flow_in`: x comes from the launch before as it counts its columns (one launch only)."""
    if folded and (sums is not None or ops.gemv(x.shape[0])):
        return ops.norm_linear(x, norm, eps, lin, swiglu=swiglu, folded=True, sums=sums, flow_in=flow_in)
    if flow_in:
        raise ValueError(f"normed_linear: x comes on the {flow_in!r} flow, but the norm needs a launch of its own "
                         "(not folded, or no row sums came with x)")
    normed = ops.rms_norm(x, norm, eps)[0]
    return ops.linear_swiglu(normed, lin) if swiglu else ops.linear(normed, lin)


def fold_layer_norms(layer: Qwen3Layer, input_norm: bool = True) -> None:
    """Fold the layer's RMSNorm weights into the float projections after them (qkv, gate_up) and make the
    norms all ones: the folded GEMM then feeds its x tiles to the tensor cores untouched (`unit_norm`).
    `input_norm=False` leaves qkv alone (the DFlash drafter's K/V rows also project the context)."""
    if input_norm and not layer.input_norm_folded and not layer.qkv_proj.is_quantized:
        layer.qkv_proj = fold_norm_weight(layer.qkv_proj, layer.input_layernorm)
        layer.input_layernorm = torch.ones_like(layer.input_layernorm)
        layer.input_norm_folded = True
    if not layer.post_norm_folded and not layer.gate_up_proj.is_quantized:
        layer.gate_up_proj = fold_norm_weight(layer.gate_up_proj, layer.post_attention_layernorm)
        layer.post_attention_layernorm = torch.ones_like(layer.post_attention_layernorm)
        layer.post_norm_folded = True


def final_rms_norm(ops: Ops, h, residual, weight, eps):
    """rms_norm(h + residual) of a stream that may already hold its sum in `residual` (h None)."""
    if h is None:
        return ops.rms_norm(residual, weight, eps)[0]
    return ops.rms_norm(h, weight, eps, residual)[0]


class Qwen3ForCausalLM:
    def __init__(self, config: Qwen3Config, layers: list[Qwen3Layer], embed_tokens: Linear,
                 norm: torch.Tensor, lm_head: Linear, ops: Ops):
        self.config, self.layers, self.embed_tokens, self.norm, self.lm_head = config, layers, embed_tokens, norm, lm_head
        self.ops = ops
        self.device = norm.device
        # Rows past the context: a step may write K/V for positions it then discards, up to two blocks beyond.
        self.cos_sin = rope_cos_sin(config.head_dim, config.max_position_embeddings + 128, config.rope_theta, self.device)

    @property
    def dtype(self) -> torch.dtype:
        return self.norm.dtype

    def forward(self, input_ids, positions, cache: KVCache, ctx: AttentionContext,
                taps: torch.Tensor | None = None, tap_ids: list[int] = ()):
        """Final-normed hidden states [T, H]; layer outputs of `tap_ids` are written side by side into `taps`."""
        ops, hidden = self.ops, self.config.hidden_size
        stream = [ops.embedding(input_ids, self.embed_tokens), None]
        for i, layer in enumerate(self.layers):
            # the next layer's qkv may read this one's output as it comes where no tap copies it between
            after = self.layers[i + 1] if i + 1 < len(self.layers) and i not in tap_ids else None
            decoder_layer(ops, self.config, layer, stream, positions, self.cos_sin, cache.k[i], cache.v[i], ctx,
                          f"layer.{i}", after)
            for j, tapped in enumerate(tap_ids):  # a layer may be tapped more than once
                if tapped == i:
                    tap = taps[:, j * hidden:(j + 1) * hidden]
                    if stream[0] is None:  # the fused layer's stream holds h + residual already
                        tap.copy_(stream[1])
                    else:
                        torch.add(*stream, out=tap)
        return tuple(stream[:2])

    def final_norm(self, h, residual):
        """rms_norm of the last layer's stream (h None: residual already holds h + residual)."""
        return final_rms_norm(self.ops, h, residual, self.norm, self.config.rms_norm_eps)

    def logits(self, hidden):
        return self.ops.linear(hidden, self.lm_head)

    def greedy(self, hidden):
        """logits(hidden).argmax(-1), without the logits where the ops fuse the argmax into the LM head."""
        return self.ops.logits_argmax(hidden, self.lm_head)

    def named_linears(self):
        for i, layer in enumerate(self.layers):
            for name in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
                yield f"model.layers.{i}.{name}", getattr(layer, name)
        yield "lm_head", self.lm_head

    def set_linear(self, name: str, lin: Linear):
        if name == "lm_head":
            if self.embed_tokens is self.lm_head:
                self.embed_tokens = lin
            self.lm_head = lin
            return
        _, _, i, attr = name.split(".")
        setattr(self.layers[int(i)], attr, lin)

    def named_tensors(self):
        for i, layer in enumerate(self.layers):
            for name in ("input_layernorm", "post_attention_layernorm"):
                yield f"model.layers.{i}.{name}.weight", getattr(layer, name)
            yield f"model.layers.{i}.self_attn.q_norm.weight", layer.q_norm
            yield f"model.layers.{i}.self_attn.k_norm.weight", layer.k_norm
        yield "model.norm.weight", self.norm
        if self.embed_tokens is not self.lm_head:
            yield "model.embed_tokens.weight", self.embed_tokens.weight

    def weight_bytes(self) -> int:
        """Bytes read by one decode step: every linear once, LM head included."""
        return sum(lin.nbytes for _, lin in self.named_linears()) + sum(t.numel() * t.element_size() for _, t in self.named_tensors() if t.dim() == 1)

