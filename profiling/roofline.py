"""Bytes and FLOPs each piece of a Qwen3 / DFlash step must move: the floor a kernel is measured against.

Conventions: a linear is y[m, n] = x[m, k] @ W[n, k]ᵀ; INT8 weights carry one fp32 scale per output
row (as `tileinfer.ops.linear.quantize_linear` makes them); activations are bf16. A whole step's
bytes are the weights (every linear, the norms, the LM head) plus the KV cache read; activations
(< 0.1 % at these sizes) are left out, as in FACTS.md's floor.
"""

import math

import numpy as np
import pandas as pd

from tileinfer.errors import ConfigError

WEIGHT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "int8": 1}
INT8_SCALE_BYTES = 4

# Hugging Face config fields of Qwen3-4B and of its DFlash drafter (z-lab/Qwen3-4B-DFlash-b16).
QWEN3_4B = dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True)
QWEN3_4B_DFLASH = dict(QWEN3_4B, num_hidden_layers=5, block_size=16, target_layer_ids=[1, 9, 17, 25, 33])


def _get(config, name, default=None):
    if isinstance(config, dict):
        value = config.get(name, (config.get("dflash_config") or {}).get(name, default))
    else:
        value = getattr(config, name, default)
    if value is None and default is None:
        raise ConfigError(f"the config lacks {name!r}; give a Qwen3 config (Hugging Face field names)")
    return value


def _weight_bytes(weights):
    if weights not in WEIGHT_BYTES:
        raise ConfigError(f"weights must be one of {tuple(WEIGHT_BYTES)}, got {weights!r}")
    return WEIGHT_BYTES[weights]


def linear_weight_bytes(n, k, weights="bf16"):
    """Bytes of one linear's weight: n·k elements, plus n fp32 scales for INT8."""
    return n * k * _weight_bytes(weights) + (n * INT8_SCALE_BYTES if weights == "int8" else 0)


def linear_bytes(n, k, m=1, weights="bf16", act_bytes=2):
    """Bytes one linear call moves: the weight (+ scales), x read and y written."""
    return linear_weight_bytes(n, k, weights) + m * k * act_bytes + m * n * act_bytes


def linear_flops(n, k, m=1):
    return 2 * m * n * k


def attention_bytes(kv_len, q_len, num_kv_heads, head_dim, dtype_bytes=2, *, num_q_heads=None, num_splits=None):
    """Bytes of attention of q_len queries over kv_len cached positions.

    K and V read once per KV head (GQA), q read, out written; with `num_splits` (a two-stage split-KV
    kernel: TileInfer's decode attention runs both stages even for one split) each split writes an
    fp32 partial output and log-sum-exp per query row, which the merge stage reads back.
    """
    num_q_heads = num_kv_heads if num_q_heads is None else num_q_heads
    kv = 2 * kv_len * num_kv_heads * head_dim * dtype_bytes
    q_out = 2 * q_len * num_q_heads * head_dim * dtype_bytes
    partials = 0 if not num_splits else 2 * num_splits * q_len * num_q_heads * (head_dim + 1) * 4
    return kv + q_out + partials


def attention_flops(kv_len, q_len, num_q_heads, head_dim, causal=False):
    """2·(q·k) + 2·(p·v) per visible (query, key) pair and head; causal: query i sees kv_len − q_len + i + 1 keys."""
    if causal:
        pairs = q_len * (kv_len - q_len) + q_len * (q_len + 1) // 2
    else:
        pairs = q_len * kv_len
    return 4 * num_q_heads * head_dim * pairs


def kv_bytes_per_position(config, dtype_bytes=2):
    """K and V of every layer for one position (Qwen3-4B: 147,456 B)."""
    return (_get(config, "num_hidden_layers") * _get(config, "num_key_value_heads") * _get(config, "head_dim")
            * 2 * dtype_bytes)


def qwen3_linears(config):
    """(name, n, k) of one layer's linears as TileInfer fuses them: qkv, o, gate_up, down."""
    h, d = _get(config, "hidden_size"), _get(config, "head_dim")
    hq, hk = _get(config, "num_attention_heads"), _get(config, "num_key_value_heads")
    inter = _get(config, "intermediate_size")
    return [("qkv", (hq + 2 * hk) * d, h), ("o", h, hq * d), ("gate_up", 2 * inter, h), ("down", h, inter)]


def _layers_bytes(config, weights):
    per_layer = sum(linear_weight_bytes(n, k, weights) for _, n, k in qwen3_linears(config))
    norms = (2 * _get(config, "hidden_size") + 2 * _get(config, "head_dim")) * 2  # input/post, q/k norms; bf16
    return _get(config, "num_hidden_layers") * (per_layer + norms)


def step_bytes(config, kv_len, m=1, weights="bf16", breakdown=False):
    """Bytes one forward step of m tokens over kv_len cached positions must read (Qwen3-4B BF16: 8.04 GB + KV).

    m changes only the activations, which the floor leaves out: at m <= 16 they are < 0.1 %.

    `breakdown=True` returns a dict: layers, lm_head, kv_cache, total.
    """
    h, vocab = _get(config, "hidden_size"), _get(config, "vocab_size")
    parts = {
        "layers": _layers_bytes(config, weights) + h * 2,  # + the final norm
        "lm_head": linear_weight_bytes(vocab, h, weights),
        "kv_cache": kv_len * kv_bytes_per_position(config),
    }
    parts["total"] = sum(parts.values())
    return parts if breakdown else parts["total"]


def _drafter_layer_ids(drafter_cfg):
    ids = _get(drafter_cfg, "target_layer_ids", default=[])
    if not ids:
        raise ConfigError("the drafter config lacks target_layer_ids (top level or under dflash_config)")
    return ids


def dflash_step_bytes(target_cfg, drafter_cfg, kv_len, weights="bf16", breakdown=False):
    """Bytes of one DFlash step at kv_len positions: verify (the target over the block) + drafter pass.

    The drafter reads its layers, fc (hidden × n_taps·hidden), its norms, the target's LM head again
    and its own KV cache; at Qwen3-4B BF16 that is 8.04 + 1.07 + 0.78 GB + KV (FACTS.md).
    `drafter_cfg` is a `DFlashConfig` (its `.layers` and `.target_layer_ids`) or a dict of HF fields.
    """
    layers_cfg = getattr(drafter_cfg, "layers", drafter_cfg)
    ids = getattr(drafter_cfg, "target_layer_ids", None) or _drafter_layer_ids(drafter_cfg)
    h = _get(target_cfg, "hidden_size")
    verify = step_bytes(target_cfg, kv_len, weights=weights, breakdown=True)
    drafter_layers = (_layers_bytes(layers_cfg, weights) + linear_weight_bytes(h, len(ids) * h, weights)
                      + 2 * h * 2)  # hidden_norm, norm
    parts = {
        "target_layers": verify["layers"],
        "target_lm_head": verify["lm_head"],
        "target_kv_cache": verify["kv_cache"],
        "drafter_layers": drafter_layers,
        "drafter_lm_head": verify["lm_head"],
        "drafter_kv_cache": kv_len * kv_bytes_per_position(layers_cfg),
    }
    parts["total"] = sum(parts.values())
    return parts if breakdown else parts["total"]


def _ceiling(ceilings, name):
    if ceilings is None:
        return math.nan
    value = ceilings.get(name) if isinstance(ceilings, dict) else getattr(ceilings, name, None)
    return math.nan if value is None else float(value)


def floor_ms(bytes_moved, flops=0, ceilings=None):
    """Roofline time: the longer of bytes ÷ read bandwidth and flops ÷ bf16 matmul rate (measured ceilings)."""
    read = _ceiling(ceilings, "read_gbs")
    rate = _ceiling(ceilings, "bf16_tflops")
    t_bytes = bytes_moved / (read * 1e9) * 1e3
    t_flops = 0.0 if math.isnan(rate) else flops / (rate * 1e12) * 1e3
    return np.maximum(t_bytes, t_flops)


def achieved(bytes_moved, time_ms, flops=0, ceilings=None):
    """GB/s and TFLOP/s reached in time_ms, and their fractions of the measured ceilings."""
    gbs = bytes_moved / (time_ms * 1e-3) / 1e9
    tflops = flops / (time_ms * 1e-3) / 1e12
    return {"gbs": gbs, "tflops": tflops,
            "frac_read_bw": gbs / _ceiling(ceilings, "read_gbs"),
            "frac_bf16_flops": tflops / _ceiling(ceilings, "bf16_tflops"),
            "floor_ms": floor_ms(bytes_moved, flops, ceilings)}


def add_achieved(df, ceilings=None, time_col="time_us"):
    """Columns gbs, tflops, frac_read_bw, frac_bf16_flops, floor_us from df's bytes, flops and time."""
    t_ms = df[time_col] / 1e3 if time_col.endswith("_us") else df[time_col]
    flops = df["flops"] if "flops" in df else 0
    out = achieved(df["bytes"], t_ms, flops, ceilings)
    df = df.copy()
    for key in ("gbs", "tflops", "frac_read_bw", "frac_bf16_flops"):
        df[key] = out[key]
    df["floor_us"] = pd.Series(out["floor_ms"], index=df.index) * 1e3
    return df
