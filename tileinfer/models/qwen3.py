"""Qwen3 for causal LM, as Hugging Face defines it, on TileInfer's ops.

forward(input_ids, positions, ctx) runs T tokens whose K/V go into the static cache at `positions`;
attention reads the cache up to ctx.kv_len. Fused weights: qkv_proj = [q; k; v], gate_up_proj = [gate; up].
"""

from dataclasses import dataclass

import torch

from tileinfer import tracing
from tileinfer.config import Qwen3Config
from tileinfer.errors import CheckpointError
from tileinfer.kv_cache import KVCache
from tileinfer.ops.backend import AttentionContext, Ops
from tileinfer.ops.linear import Linear
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


def attention_block(ops: Ops, config: Qwen3Config, layer: Qwen3Layer, x, positions, cos_sin,
                    k_cache, v_cache, ctx: AttentionContext):
    """Self-attention of one Qwen3 layer; writes this call's K/V into the layer's cache first."""
    t, hq, hk, d = x.shape[0], config.num_attention_heads, config.num_key_value_heads, config.head_dim
    qkv = ops.linear(x, layer.qkv_proj)
    q = qkv[:, : hq * d].view(t, hq, d)
    k = qkv[:, hq * d: (hq + hk) * d].view(t, hk, d)
    v = qkv[:, (hq + hk) * d:].view(t, hk, d)
    q, _ = ops.qk_norm_rope(q, k, layer.q_norm, layer.k_norm, cos_sin, positions, config.rms_norm_eps,
                            v=v, k_cache=k_cache, v_cache=v_cache)
    out = ops.attention(q, k_cache, v_cache, ctx)
    return ops.linear(out.view(t, hq * d), layer.o_proj)


def mlp_block(ops: Ops, layer: Qwen3Layer, x):
    return ops.linear(ops.silu_mul(ops.linear(x, layer.gate_up_proj)), layer.down_proj)


def decoder_layer(ops: Ops, config: Qwen3Config, layer: Qwen3Layer, stream: list, positions, cos_sin,
                  k_cache, v_cache, ctx: AttentionContext, name: str):
    """Advance the residual stream [h, residual] through one pre-norm decoder layer, in place: the caller
    holds no reference to the old tensors, so each is freed as soon as it is used (prefill's peak memory
    per chunk depends on it). `name` labels the layer's profiler ranges."""
    eps = config.rms_norm_eps
    h, residual = stream
    stream.clear()
    with tracing.annotate(f"{name}.attention", level="layer", kv_len=ctx.kv_len, num_splits=ctx.num_splits):
        x, residual = ops.rms_norm(h, layer.input_layernorm, eps, residual)
        h = attention_block(ops, config, layer, x, positions, cos_sin, k_cache, v_cache, ctx)
    with tracing.annotate(f"{name}.mlp", level="layer", m=x.shape[0]):
        x, residual = ops.rms_norm(h, layer.post_attention_layernorm, eps, residual)
        h = mlp_block(ops, layer, x)
    stream[:] = (h, residual)


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
            decoder_layer(ops, self.config, layer, stream, positions, self.cos_sin, cache.k[i], cache.v[i], ctx, f"layer.{i}")
            for j, tapped in enumerate(tap_ids):  # a layer may be tapped more than once
                if tapped == i:
                    torch.add(*stream, out=taps[:, j * hidden:(j + 1) * hidden])
        return tuple(stream)

    def final_norm(self, h, residual):
        return self.ops.rms_norm(h, self.norm, self.config.rms_norm_eps, residual)[0]

    def logits(self, hidden):
        return self.ops.linear(hidden, self.lm_head)

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


def fuse(tensors: dict, prefix: str, names: list[str], dtype) -> Linear:
    parts = tuple((f"{prefix}.{n}", tensors[f"{prefix}.{n}.weight"].shape[0]) for n in names)
    weight = torch.cat([tensors.pop(f"{prefix}.{n}.weight").to(dtype) for n in names], dim=0)
    return Linear(weight=weight, parts=parts)


def build_layer(tensors: dict, p: str, dtype) -> Qwen3Layer:
    """One decoder layer from checkpoint tensors under prefix p, projections fused."""
    return Qwen3Layer(
        input_layernorm=tensors.pop(f"{p}.input_layernorm.weight").to(dtype),
        qkv_proj=fuse(tensors, f"{p}.self_attn", ["q_proj", "k_proj", "v_proj"], dtype),
        q_norm=tensors.pop(f"{p}.self_attn.q_norm.weight").to(dtype),
        k_norm=tensors.pop(f"{p}.self_attn.k_norm.weight").to(dtype),
        o_proj=fuse(tensors, f"{p}.self_attn", ["o_proj"], dtype),
        post_attention_layernorm=tensors.pop(f"{p}.post_attention_layernorm.weight").to(dtype),
        gate_up_proj=fuse(tensors, f"{p}.mlp", ["gate_proj", "up_proj"], dtype),
        down_proj=fuse(tensors, f"{p}.mlp", ["down_proj"], dtype),
    )


def expected_shapes(config: Qwen3Config) -> dict[str, tuple[int, ...]]:
    h, d, hq, hk, inter = config.hidden_size, config.head_dim, config.num_attention_heads, config.num_key_value_heads, config.intermediate_size
    shapes = {"model.embed_tokens.weight": (config.vocab_size, h), "model.norm.weight": (h,)}
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, h)
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}"
        shapes |= {
            f"{p}.input_layernorm.weight": (h,), f"{p}.post_attention_layernorm.weight": (h,),
            f"{p}.self_attn.q_proj.weight": (hq * d, h), f"{p}.self_attn.k_proj.weight": (hk * d, h),
            f"{p}.self_attn.v_proj.weight": (hk * d, h), f"{p}.self_attn.o_proj.weight": (h, hq * d),
            f"{p}.self_attn.q_norm.weight": (d,), f"{p}.self_attn.k_norm.weight": (d,),
            f"{p}.mlp.gate_proj.weight": (inter, h), f"{p}.mlp.up_proj.weight": (inter, h),
            f"{p}.mlp.down_proj.weight": (h, inter),
        }
    return shapes


def check_tensors(tensors: dict, shapes: dict, where: str, optional: tuple[str, ...] = ()):
    """Missing, extra, misshapen or non-float tensors: a CheckpointError naming them."""
    names = set(tensors)
    missing = sorted(set(shapes) - names)
    extra = sorted(names - set(shapes) - set(optional))
    problems = []
    if missing:
        problems.append(f"missing tensors {missing[:4]}{' …' if len(missing) > 4 else ''} ({len(missing)} in all)")
    if extra:
        problems.append(f"unexpected tensors {extra[:4]}{' …' if len(extra) > 4 else ''} ({len(extra)} in all)")
    for name, shape in shapes.items():
        t = tensors.get(name)
        if t is None:
            continue
        if tuple(t.shape) != shape:
            problems.append(f"{name} has shape {tuple(t.shape)}, the config implies {shape}")
        elif not t.is_floating_point():
            problems.append(f"{name} has dtype {t.dtype}; expected bf16, fp16 or fp32")
    if problems:
        raise CheckpointError(f"{where} does not match its config: " + "; ".join(problems[:6]))


def build_quantized_qwen3(config: Qwen3Config, tensors: dict, dtype, ops: Ops, where: str, device) -> Qwen3ForCausalLM:
    """From tileinfer.quant.load_quantized_tensors: fused linears already built, INT8 or not."""
    def get(name):
        if name not in tensors:
            raise CheckpointError(f"{where} lacks {name}")
        value = tensors.pop(name)
        return value.to(device) if isinstance(value, Linear) else value.to(device, dtype)

    shapes = expected_shapes(config)
    layers = []
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}"
        layer = Qwen3Layer(
            input_layernorm=get(f"{p}.input_layernorm.weight"), qkv_proj=get(f"{p}.qkv_proj"),
            q_norm=get(f"{p}.self_attn.q_norm.weight"), k_norm=get(f"{p}.self_attn.k_norm.weight"),
            o_proj=get(f"{p}.o_proj"), post_attention_layernorm=get(f"{p}.post_attention_layernorm.weight"),
            gate_up_proj=get(f"{p}.gate_up_proj"), down_proj=get(f"{p}.down_proj"))
        expect = {"qkv_proj": (sum(shapes[f"{p}.self_attn.{n}_proj.weight"][0] for n in "qkv"), config.hidden_size),
                  "o_proj": shapes[f"{p}.self_attn.o_proj.weight"], "down_proj": shapes[f"{p}.mlp.down_proj.weight"],
                  "gate_up_proj": (2 * config.intermediate_size, config.hidden_size)}
        for name, shape in expect.items():
            lin = getattr(layer, name)
            if (lin.out_features, lin.in_features) != shape:
                raise CheckpointError(f"{where}: {p}.{name} is {lin.out_features}×{lin.in_features}, the config implies {shape[0]}×{shape[1]}")
        layers.append(layer)
    lm_head = get("lm_head")
    embed = tensors.pop("model.embed_tokens.weight", None)
    embed = lm_head if embed is None or isinstance(embed, Linear) else Linear(weight=embed.to(device, dtype))
    return Qwen3ForCausalLM(config, layers, embed, get("model.norm.weight"), lm_head, ops)


def build_qwen3(config: Qwen3Config, tensors: dict, dtype: torch.dtype, ops: Ops, where: str) -> Qwen3ForCausalLM:
    tied_extra = ("lm_head.weight",) if config.tie_word_embeddings else ()
    check_tensors(tensors, expected_shapes(config), where, optional=tied_extra)
    layers = [build_layer(tensors, f"model.layers.{i}", dtype) for i in range(config.num_hidden_layers)]
    embed = Linear(weight=tensors.pop("model.embed_tokens.weight").to(dtype), parts=(("model.embed_tokens", config.vocab_size),))
    if config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
        lm_head = embed
    else:
        lm_head = Linear(weight=tensors.pop("lm_head.weight").to(dtype), parts=(("lm_head", config.vocab_size),))
    return Qwen3ForCausalLM(config, layers, embed, tensors.pop("model.norm.weight").to(dtype), lm_head, ops)
