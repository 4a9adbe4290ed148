"""The DFlash block-diffusion drafter: Qwen3 layers whose block queries attend, non-causally, to the
cached context K/V (from the target's tapped hidden states) and to the block itself.

append_context() turns new context features into K/V in the drafter's cache; draft() runs the block
(anchor + mask tokens) and returns the final-normed hidden states. Embedding and LM head are the target's.
"""

import dataclasses

from tileinfer.config import DFlashConfig
from tileinfer.kv_cache import KVCache
from tileinfer.models.qwen3 import Qwen3ForCausalLM, Qwen3Layer, decoder_layer, final_rms_norm
from tileinfer.models.qwen3_checkpoint import build_layer, check_tensors, expected_shapes
from tileinfer.ops.backend import AttentionContext, Ops
from tileinfer.ops.linear import Linear
from tileinfer.ops.rope import rope_cos_sin


def row_slice(lin: Linear, start: int) -> Linear:
    """Rows [start:] of a fused projection, sharing its storage."""
    if lin.is_quantized:
        return dataclasses.replace(lin, qweight=lin.qweight[start:], scale=lin.scale[start:], parts=())
    return dataclasses.replace(lin, weight=lin.weight[start:], parts=())


class DFlashDrafter:
    def __init__(self, config: DFlashConfig, layers: list[Qwen3Layer], fc: Linear, hidden_norm, norm,
                 target: Qwen3ForCausalLM, ops: Ops):
        self.config, self.layers, self.fc, self.hidden_norm, self.norm = config, layers, fc, hidden_norm, norm
        self.target, self.ops = target, ops
        c = config.layers
        self.cos_sin = rope_cos_sin(c.head_dim, max(c.max_position_embeddings, target.config.max_position_embeddings) + 128,
                                    c.rope_theta, norm.device)
        self.refresh_views()

    def refresh_views(self):
        q_rows = self.config.layers.num_attention_heads * self.config.layers.head_dim
        self.kv_proj = [row_slice(layer.qkv_proj, q_rows) for layer in self.layers]

    @property
    def feature_size(self) -> int:
        return len(self.config.target_layer_ids) * self.config.layers.hidden_size

    def append_context(self, features, positions, cache: KVCache):
        """K/V of new context positions: k_proj/v_proj of hidden_norm(fc(features)), k_norm and RoPE."""
        ops, c = self.ops, self.config.layers
        t, hk, d = features.shape[0], c.num_key_value_heads, c.head_dim
        ctx = ops.rms_norm(ops.linear(features, self.fc), self.hidden_norm, c.rms_norm_eps)[0]
        for i, layer in enumerate(self.layers):
            kv = ops.linear(ctx, self.kv_proj[i])
            ops.qk_norm_rope(None, kv[:, : hk * d].view(t, hk, d), None, layer.k_norm, self.cos_sin, positions,
                             c.rms_norm_eps, v=kv[:, hk * d:].view(t, hk, d), k_cache=cache.k[i], v_cache=cache.v[i])

    def draft(self, block_ids, positions, cache: KVCache, ctx: AttentionContext):
        """Final-normed hidden states of the block; ctx.kv_len counts the cached context plus the block."""
        ops, c = self.ops, self.config.layers
        stream = [ops.embedding(block_ids, self.target.embed_tokens), None]
        for i, layer in enumerate(self.layers):
            decoder_layer(ops, c, layer, stream, positions, self.cos_sin, cache.k[i], cache.v[i], ctx, f"drafter.layer.{i}")
        return final_rms_norm(ops, *stream[:2], self.norm, c.rms_norm_eps)

    def named_linears(self):
        for i, layer in enumerate(self.layers):
            for name in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
                yield f"layers.{i}.{name}", getattr(layer, name)
        yield "fc", self.fc

    def set_linear(self, name: str, lin: Linear):
        if name == "fc":
            self.fc = lin
        else:
            _, i, attr = name.split(".")
            setattr(self.layers[int(i)], attr, lin)
        self.refresh_views()

    def named_tensors(self):
        for i, layer in enumerate(self.layers):
            yield f"layers.{i}.input_layernorm.weight", layer.input_layernorm
            yield f"layers.{i}.post_attention_layernorm.weight", layer.post_attention_layernorm
            yield f"layers.{i}.self_attn.q_norm.weight", layer.q_norm
            yield f"layers.{i}.self_attn.k_norm.weight", layer.k_norm
        yield "hidden_norm.weight", self.hidden_norm
        yield "norm.weight", self.norm

    def weight_bytes(self) -> int:
        return sum(lin.nbytes for _, lin in self.named_linears())


def build_drafter(config: DFlashConfig, tensors: dict, dtype, target: Qwen3ForCausalLM, ops: Ops, where: str) -> DFlashDrafter:
    c = config.layers
    if tensors and all(name.startswith("model.") for name in tensors):
        tensors = {name[len("model."):]: t for name, t in tensors.items()}
    shapes = {name[len("model."):]: shape for name, shape in expected_shapes(c).items()
              if name.startswith("model.layers.")}
    shapes |= {"fc.weight": (c.hidden_size, len(config.target_layer_ids) * c.hidden_size),
               "hidden_norm.weight": (c.hidden_size,), "norm.weight": (c.hidden_size,)}
    check_tensors(tensors, shapes, where)
    layers = [build_layer(tensors, f"layers.{i}", dtype) for i in range(c.num_hidden_layers)]
    fc = Linear(weight=tensors.pop("fc.weight").to(dtype), parts=(("fc", c.hidden_size),))
    return DFlashDrafter(config, layers, fc, tensors.pop("hidden_norm.weight").to(dtype),
                         tensors.pop("norm.weight").to(dtype), target, ops)
