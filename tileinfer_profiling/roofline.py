"""Bytes and FLOPs each piece of a Qwen3 / DFlash step must move: the floor a kernel is measured against.

Conventions: a linear is y[m, n] = x[m, k] @ W[n, k]ᵀ; weights and the KV cache are counted by
`tileinfer.byte_model`; activations are bf16. A whole step's bytes are the weights (every linear,
the norms, the LM head) plus the KV cache read; activations (< 0.1 % at these sizes) are left out.
"""

import math

import numpy as np
import pandas as pd

from tileinfer import byte_model
from tileinfer.byte_model import linear_weight_bytes
from tileinfer.shapes import QWEN3_4B, QWEN3_4B_DFLASH, DrafterShape, ModelShape


def linear_bytes(n, k, m=1, weights="bf16", act_bytes=2):
    """Bytes one linear call moves: the weight (+ scales), x read and y written."""
    return linear_weight_bytes(n, k, weights) + m * k * act_bytes + m * n * act_bytes


def linear_flops(n, k, m=1):
    return 2 * m * n * k


def attention_bytes(kv_len, q_len, num_kv_heads, head_dim, dtype_bytes=2, *, num_q_heads=None, num_splits=None):
    """Bytes of attention of q_len queries over kv_len cached positions.

    K and V read once per KV head (GQA), q read, out written; with `num_splits` (a two-stage split-KV
    kernel: TileInfer's decode attention runs both stages even for one split) each split writes an
    fp32 partial output and log-sum-exp per query row, which the head's merging program reads back.
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


def step_bytes(config, kv_len, m=1, weights="bf16", breakdown=False):
    """Bytes one forward step of m tokens over kv_len cached positions must read (Qwen3-4B BF16: 8.04 GB + KV).

    m changes only the activations, which the floor leaves out: at m <= 16 they are < 0.1 %.
    `config`: a `ModelShape`, a Qwen3Config or a dict of Hugging Face fields.
    `breakdown=True` returns a dict: layers, lm_head, kv_cache, total.
    """
    shape = ModelShape.of(config)
    weight = byte_model.model_weight_bytes(shape, weights)
    parts = {"layers": weight["layers"], "lm_head": weight["lm_head"],
             "kv_cache": kv_len * byte_model.kv_bytes_per_position(shape, byte_model.compute_bytes(weights))}
    parts["total"] = sum(parts.values())
    return parts if breakdown else parts["total"]


def dflash_step_bytes(target_cfg, drafter_cfg, kv_len, weights="bf16", breakdown=False):
    """Bytes of one DFlash step at kv_len positions: verify (the target over the block) + drafter pass.

    The drafter reads its layers, fc (hidden × n_taps·hidden), its norms, the target's LM head again
    and its own KV cache. `drafter_cfg`: a `DrafterShape`, a `DFlashConfig` or a dict of Hugging Face
    fields (target_layer_ids at the top level or under dflash_config).
    """
    drafter = DrafterShape.of(drafter_cfg)
    verify = step_bytes(target_cfg, kv_len, weights=weights, breakdown=True)
    parts = {
        "target_layers": verify["layers"],
        "target_lm_head": verify["lm_head"],
        "target_kv_cache": verify["kv_cache"],
        "drafter_layers": byte_model.drafter_weight_bytes(drafter, weights),
        "drafter_lm_head": verify["lm_head"],
        "drafter_kv_cache": kv_len * byte_model.kv_bytes_per_position(drafter.layers, byte_model.compute_bytes(weights)),
    }
    parts["total"] = sum(parts.values())
    return parts if breakdown else parts["total"]


def floor_table(target=QWEN3_4B, drafter=QWEN3_4B_DFLASH, points=(1024, 8192), ceilings=None):
    """Bytes per plain decode step and per DFlash step, and their floor at the ceilings' read bandwidth,
    per weights × context: a step at the floor is a fully memory-bound step."""
    rows = []
    for weights in ("bf16", "int8"):
        for kv_len in points:
            for mode, nbytes in (("plain decode", step_bytes(target, kv_len, weights=weights)),
                                 ("DFlash step", dflash_step_bytes(target, drafter, kv_len, weights))):
                rows.append({"weights": weights, "kv_len": kv_len, "step": mode, "GB_per_step": nbytes / 1e9,
                             "floor_ms": float(floor_ms(nbytes, 0, ceilings))})
    return pd.DataFrame(rows).round(3)


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


def generation_floors(engine, table, ceilings):
    """Each mode of a `generate_both` table as one step against its byte floor: rows of mode, step_ms (decode
    time per step), kv_len (the mean context), bytes, floor_ms at the ceilings' read bandwidth."""
    rows = []
    if table is None or ceilings is None:
        return rows
    for mode, r in table.iterrows():
        if not r["steps"]:
            continue
        kv_len = int(r["prompt_tokens"] + r["new_tokens"] / 2)
        if r["block_size"] > 1 and engine.drafter is not None:
            nbytes = dflash_step_bytes(engine.config, engine.drafter.config, kv_len, engine.weights)
        else:
            nbytes = step_bytes(engine.config, kv_len, weights=engine.weights)
        rows.append({"mode": "DFlash" if r["block_size"] > 1 else "plain decode", "step_ms": r["decode_ms"] / r["steps"],
                     "kv_len": kv_len, "bytes": nbytes, "floor_ms": float(floor_ms(nbytes, 0, ceilings))})
    return rows
