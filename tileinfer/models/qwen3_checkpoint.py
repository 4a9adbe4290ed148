"""The Qwen3 checkpoint in Hugging Face layout: its tensor names and shapes, the checks a checkpoint
must pass, and building `Qwen3ForCausalLM` from its tensors with the projections fused."""

import torch

from tileinfer.config import Qwen3Config
from tileinfer.errors import CheckpointError
from tileinfer.models.qwen3 import Qwen3ForCausalLM, Qwen3Layer
from tileinfer.ops.backend import Ops
from tileinfer.ops.linear import Linear


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
