"""The bytes of a Qwen3 model and a DFlash drafter: weights by kind, and the KV cache per position.

One byte model for what a step must read (the roofline's floor) and what a request holds (the memory
plan). Linears are stored as `weights` says; INT8 linears carry one fp32 scale per output row (as
`tileinfer.ops.linear.quantize_linear` makes them). Norms, activations and the KV cache are in the
compute dtype, which is bf16 for INT8 weights.
"""

from __future__ import annotations

from tileinfer.errors import ConfigError
from tileinfer.shapes import DrafterShape, ModelShape

WEIGHT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "int8": 1}
COMPUTE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "int8": 2}
INT8_SCALE_BYTES = 4


def _check(weights: str) -> None:
    if weights not in WEIGHT_BYTES:
        raise ConfigError(f"weights must be one of {tuple(WEIGHT_BYTES)}, got {weights!r}")


def compute_bytes(weights: str = "bf16") -> int:
    """Bytes per element of norms, activations and KV cache for a model with these weights."""
    _check(weights)
    return COMPUTE_BYTES[weights]


def linear_weight_bytes(n: int, k: int, weights: str = "bf16") -> int:
    """Bytes of one linear's weight [N, K], plus N fp32 scales for INT8."""
    _check(weights)
    return n * k * WEIGHT_BYTES[weights] + (n * INT8_SCALE_BYTES if weights == "int8" else 0)


def layer_weight_bytes(shape: ModelShape, weights: str = "bf16") -> int:
    """One decoder layer: its four fused linears and its norms (input, post-attention, q, k)."""
    linears = sum(linear_weight_bytes(n, k, weights) for _, n, k in shape.linears())
    return linears + (2 * shape.hidden + 2 * shape.head_dim) * compute_bytes(weights)


def model_weight_bytes(shape: ModelShape, weights: str = "bf16") -> dict[str, int]:
    """layers (the final norm included), lm_head, embedding (0 when tied to the LM head) and total."""
    parts = {"layers": shape.layers * layer_weight_bytes(shape, weights) + shape.hidden * compute_bytes(weights),
             "lm_head": linear_weight_bytes(shape.vocab, shape.hidden, weights),
             "embedding": 0 if shape.tied else shape.vocab * shape.hidden * compute_bytes(weights)}
    parts["total"] = sum(parts.values())
    return parts


def drafter_weight_bytes(drafter: DrafterShape, weights: str = "bf16") -> int:
    """A DFlash drafter's own weights: its layers, fc and two norms (hidden_norm, norm); the embedding
    and LM head are the target's."""
    s = drafter.layers
    return (s.layers * layer_weight_bytes(s, weights) + linear_weight_bytes(*drafter.fc, weights)
            + 2 * s.hidden * compute_bytes(weights))


def kv_bytes_per_position(shape: ModelShape, elem: int = 2) -> int:
    """K and V of every layer for one position, `elem` bytes per element."""
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * elem
