"""The reference comparison across GPUs, as a fraction of each GPU's memory bandwidth.

fraction = bytes a DFlash step must move ÷ step time ÷ the GPU's bandwidth, where step time =
tokens per step ÷ decode tok/s and the bytes are `dflash_step_bytes` at the reply's mean context
(prompt + half the new tokens). Engines on different GPUs become comparable this way.

`bandwidth_comparison_figure(reference_csv, row_files)` is the chart: vLLM's and the original TileInfer's
bars on the RTX 4080 SUPER (the comparison's published figures) beside this project's, from its recorded
DFlash rows (JSON lines of the comparison's metric), for every point, task and weights.
"""

import json
import math
from pathlib import Path

import pandas as pd

from tileinfer.errors import ConfigError
from tileinfer.shapes import QWEN3_4B, QWEN3_4B_DFLASH
from tileinfer_profiling.ceilings import datasheet_bandwidth_gbs
from tileinfer_profiling.prompts import POINTS
from tileinfer_profiling.roofline import dflash_step_bytes

KEYS = ["source", "engine", "gpu", "gpu_bandwidth_gbs", "point", "task", "weights"]
# How the chart names each engine: the comparison's ("reference") and this project's rows ("ours").
LABELS = {("reference", "vllm"): "vLLM", ("reference", "tileinfer"): "TileInfer (original)",
          ("ours", "tileinfer"): "TileInfer (this project)"}
MAIN_MODEL = "qwen3-4b"  # the comparison's model as the rows of random weights name it
_WIDE_METRICS = ("decode_tok_s", "tokens_per_step", "prompt_tokens", "new_tokens", "step_ms")


def load_reference(path):
    """The reference table: engine, gpu, gpu_bandwidth_gbs, point, task, weights, metric, value, unit, ...
    (one published figure per row)."""
    return pd.read_csv(path, dtype={"task": str, "weights": str}, keep_default_na=False,
                       na_values={"value": [""], "gpu_bandwidth_gbs": [""]})


def _long(df, source):
    """Rows as (KEYS…, metric, value): long format as is, bench rows (one column per metric) melted."""
    df = df.assign(source=source)
    if "metric" in df.columns:
        return df[KEYS + ["metric", "value"]]
    metrics = [m for m in _WIDE_METRICS if m in df.columns]
    # each process measures the bandwidth again: one figure per configuration, so its processes are one bar
    same = [k for k in KEYS if k not in ("source", "gpu_bandwidth_gbs")]
    df["gpu_bandwidth_gbs"] = df.groupby(same, dropna=False)["gpu_bandwidth_gbs"].transform("median")
    long = df.melt(id_vars=KEYS, value_vars=metrics, var_name="metric", value_name="value")
    return long.groupby(KEYS + ["metric"], as_index=False)["value"].median()


def _lookup(long, row, metric):
    """A metric for row's keys; a blank task or weights in the table matches every task/weights."""
    m = long[(long["metric"] == metric) & (long["source"] == row["source"]) & (long["engine"] == row["engine"])
             & (long["gpu"] == row["gpu"]) & (long["point"] == row["point"])]
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
    one-row-per-run format (engine, gpu, gpu_bandwidth_gbs, point, task, weights, decode_tok_s, …);
    bench rows with a `dflash` column count only where it is true (the bytes are a DFlash step's).
    `source` says which table a row came from ("reference" or "ours").
    """
    frames = [_long(reference, "reference")]
    if ours is not None and "dflash" in ours.columns:
        ours = ours[ours["dflash"].astype(bool)]
    if ours is not None and len(ours):
        frames.append(_long(ours, "ours"))
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


def read_rows(paths):
    """Rows of the comparison's metric (JSON lines: one per prompt × configuration × process) from `paths`,
    as one DataFrame; optional fields absent from older rows (model, mode, …) read as ""."""
    rows = []
    for path in paths:
        rows += [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    df = pd.DataFrame(rows)
    for column in ("model", "mode", "version", "note"):
        if column not in df:
            df[column] = ""
        df[column] = df[column].fillna("")
    return df


def our_dflash_rows(rows, model=MAIN_MODEL, engine="tileinfer"):
    """This project's DFlash rows of the comparison's model (`model`, or unnamed in older rows)."""
    if rows.empty:
        return rows
    keep = (rows["engine"] == engine) & rows["dflash"].astype(bool) & rows["model"].isin(["", model])
    return rows[keep]


def bandwidth_comparison(reference, rows, model=MAIN_MODEL, bandwidth="datasheet"):
    """`reference_fractions` of the comparison's figures and this project's DFlash rows, with a `label`
    per engine: "vLLM", "TileInfer (original)" (both RTX 4080 SUPER), "TileInfer (this project)".

    `reference`: `load_reference`'s table; `rows`: `read_rows` of the recorded row files. `bandwidth`:
    "datasheet" divides every engine by its GPU's datasheet bandwidth, as the comparison's figures are
    (736 GB/s for the RTX 4080 SUPER, 4800 for the H200); "recorded" by what each row carries (ours
    measured: a sum of 2 GiB, lower than the datasheet's, so larger fractions).
    """
    if bandwidth not in ("datasheet", "recorded"):
        raise ConfigError(f"bandwidth must be 'datasheet' or 'recorded', got {bandwidth!r}")
    ours = our_dflash_rows(rows, model)
    if bandwidth == "datasheet" and len(ours):
        sheet = ours["gpu"].map(datasheet_bandwidth_gbs)
        ours = ours.assign(gpu_bandwidth_gbs=sheet.where(sheet.notna(), ours["gpu_bandwidth_gbs"]))
    fractions = reference_fractions(reference, ours)
    if fractions.empty:
        return fractions
    names = [LABELS.get((s, e), e) for s, e in zip(fractions["source"], fractions["engine"])]
    return fractions.assign(label=[f"{n} · {g}" for n, g in zip(names, fractions["gpu"])])


def bandwidth_comparison_figure(reference_csv, row_files, model=MAIN_MODEL, bandwidth="datasheet",
                                title="DFlash decode against each GPU's memory bandwidth"):
    """The report's comparison chart: one bar group per point × task × weights, one bar per engine · GPU:
    vLLM and the original TileInfer on the RTX 4080 SUPER (`reference_csv`, the comparison's figures)
    and this project's DFlash rows (`row_files`: JSON-lines row files such as
    comparison_1k_h200.jsonl and comparison_8k_h200.jsonl; processes' medians). Returns a plotly Figure;
    the table behind it is `bandwidth_comparison`.
    """
    from tileinfer_profiling.plots import reference_figure
    fractions = bandwidth_comparison(load_reference(reference_csv), read_rows(row_files), model, bandwidth)
    return reference_figure(fractions, title=title, bandwidth=bandwidth)
