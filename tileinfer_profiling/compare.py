"""The reference comparison across GPUs, as a fraction of each GPU's memory bandwidth.

fraction = bytes a DFlash step must move ÷ step time ÷ the GPU's bandwidth, where step time =
tokens per step ÷ decode tok/s and the bytes are `dflash_step_bytes` at the reply's mean context
(prompt + half the new tokens). Engines on different GPUs become comparable this way.
"""

import math

import pandas as pd

from tileinfer.errors import ConfigError
from tileinfer.shapes import QWEN3_4B, QWEN3_4B_DFLASH
from tileinfer_profiling.prompts import POINTS
from tileinfer_profiling.roofline import dflash_step_bytes

KEYS = ["engine", "gpu", "gpu_bandwidth_gbs", "point", "task", "weights"]
_WIDE_METRICS = ("decode_tok_s", "tokens_per_step", "prompt_tokens", "new_tokens", "step_ms")


def load_reference(path):
    """The reference table: engine, gpu, gpu_bandwidth_gbs, point, task, weights, metric, value, unit, ...
    (one published figure per row)."""
    return pd.read_csv(path, dtype={"task": str, "weights": str}, keep_default_na=False,
                       na_values={"value": [""], "gpu_bandwidth_gbs": [""]})


def _long(df):
    """Rows as (KEYS…, metric, value): long format as is, bench rows (one column per metric) melted."""
    if "metric" in df.columns:
        return df[KEYS + ["metric", "value"]]
    metrics = [m for m in _WIDE_METRICS if m in df.columns]
    long = df.melt(id_vars=KEYS, value_vars=metrics, var_name="metric", value_name="value")
    return long.groupby(KEYS + ["metric"], as_index=False)["value"].median()


def _lookup(long, row, metric):
    """A metric for row's keys; a blank task or weights in the table matches every task/weights."""
    m = long[(long["metric"] == metric) & (long["engine"] == row["engine"]) & (long["gpu"] == row["gpu"])
             & (long["point"] == row["point"])]
    for key in ("task", "weights"):
        exact = m[m[key] == row[key]]
        m = exact if len(exact) else m[m[key] == ""]
    return float(m["value"].iloc[0]) if len(m) else math.nan


def reference_tokens_per_step(reference):
    """Tokens per step of the comparison's engines: engine × gpu × point × task × weights."""
    tps = reference[(reference["metric"] == "tokens_per_step") & (reference["task"] != "")]
    return tps[["engine", "gpu", "point", "task", "weights", "value"]].rename(columns={"value": "tokens_per_step"})


def tokens_per_step(reference, point, task, weights="bf16", engine="tileinfer"):
    """One engine's tokens per DFlash step in the comparison, e.g. 7.1 for TileInfer's 1k edit in BF16."""
    tps = reference_tokens_per_step(reference)
    hit = tps[(tps["engine"] == engine) & (tps["point"] == point) & (tps["task"] == task) & (tps["weights"] == weights)]
    if len(hit) != 1:
        raise ConfigError(f"the reference has {len(hit)} tokens-per-step figures for {engine} {point} {task} "
                          f"{weights}; points: {sorted(set(tps['point']))}, tasks: {sorted(set(tps['task']))}")
    return float(hit["tokens_per_step"].iloc[0])


def reference_fractions(reference, ours=None, target_cfg=QWEN3_4B, drafter_cfg=QWEN3_4B_DFLASH):
    """One row per engine × GPU × point × task × weights with decode tok/s and tokens per step:
    step_ms, kv_len (mean context), bytes_per_step, achieved_gbs, bandwidth_fraction.

    `reference`: the long table (`load_reference`); `ours`: more rows, long or in the bench's
    one-row-per-run format (engine, gpu, gpu_bandwidth_gbs, point, task, weights, decode_tok_s, …).
    """
    frames = [_long(reference)]
    if ours is not None and len(ours):
        frames.append(_long(ours))
    long = pd.concat(frames, ignore_index=True)
    for key in ("task", "weights"):
        long[key] = long[key].fillna("").astype(str)
    long["value"] = pd.to_numeric(long["value"], errors="coerce")
    points = long[long["metric"] == "decode_tok_s"].drop_duplicates(KEYS)
    rows = []
    for _, row in points.iterrows():
        if not row["weights"]:
            continue
        tok_s = _lookup(long, row, "decode_tok_s")
        tps = _lookup(long, row, "tokens_per_step")
        prompt = _lookup(long, row, "prompt_tokens")
        if math.isnan(prompt):
            prompt = POINTS[row["point"]].prompt_tokens if row["point"] in POINTS else math.nan
        new = _lookup(long, row, "new_tokens")
        kv_len = prompt + (0 if math.isnan(new) else new / 2)
        step_ms = 1e3 * tps / tok_s
        nbytes = dflash_step_bytes(target_cfg, drafter_cfg, int(kv_len), row["weights"]) if not math.isnan(kv_len) else math.nan
        gbs = nbytes / (step_ms * 1e-3) / 1e9
        rows.append({**{k: row[k] for k in KEYS}, "decode_tok_s": tok_s, "tokens_per_step": tps, "step_ms": step_ms,
                     "kv_len": kv_len, "bytes_per_step": nbytes, "achieved_gbs": gbs,
                     "bandwidth_fraction": gbs / float(row["gpu_bandwidth_gbs"])})
    return pd.DataFrame(rows)
