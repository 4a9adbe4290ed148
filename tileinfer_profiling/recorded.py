"""Recorded result files read back in the live sweeps' formats, so recorded and live rows plot alike.

Every function takes the file (or directory) to read; the workbench knows the files' formats, not where
a caller keeps them.

    from tileinfer_profiling import recorded
    recorded.attention(results_dir / "attention_h200.csv")
"""

import json
import math
import statistics
from pathlib import Path

import pandas as pd

from tileinfer.shapes import QWEN3
from tileinfer_profiling.ceilings import H200
from tileinfer_profiling.roofline import step_bytes


def results(directory):
    """{file stem: DataFrame} of every CSV in `directory`."""
    return {p.stem: pd.read_csv(p) for p in sorted(Path(directory).glob("*.csv"))}


def index(directory):
    """One row per CSV in `directory`: rows, GPU(s), git revision(s)."""
    rows = []
    for name, df in results(directory).items():
        rows.append({"file": f"{name}.csv", "rows": len(df),
                     "gpu": ", ".join(sorted(map(str, df["gpu"].unique()))) if "gpu" in df else "",
                     "git_rev": ", ".join(sorted(map(str, df["git_rev"].unique()))) if "git_rev" in df else ""})
    return pd.DataFrame(rows)


def attention(path):
    """Split curves (section "splits") and SDPA decode rows of `attention_bench` as `attention_sweep` rows."""
    df = pd.read_csv(path).drop_duplicates(["section", "kernel", "kv_len", "num_q_tokens", "num_splits", "config"],
                                           keep="last")
    ours = df[(df["section"] == "splits") & (df["kernel"] == "decode")].assign(impl="ours")
    sdpa = df[(df["section"] == "decode") & (df["kernel"] == "sdpa")].assign(impl="sdpa")
    out = pd.concat([ours, sdpa], ignore_index=True).rename(columns={"num_q_tokens": "q_len", "kv_gbps": "gbs"})
    return out[["impl", "kv_len", "q_len", "num_splits", "time_us", "gbs", "gpu", "torch", "triton", "git_rev"]]


_GEMM_VARIANTS = {"ours_bf16": ("ours", "bf16"), "ours_int8": ("ours", "int8"), "cublas_bf16": ("cublas", "bf16"),
                  "torch_int8_ref": ("dequantize+cublas", "int8")}


def gemms(path, ms=(1, 16), ceilings=H200):
    """The linears of a `gemm_bench` file as `gemm_sweep` rows (impl, weights, time_us, gbs, floor_us),
    floors at the read ceiling of the GPU that recorded them."""
    df = pd.read_csv(path).drop_duplicates(["shape", "m", "variant"], keep="last")  # the latest run appends
    df = df[df["variant"].isin(_GEMM_VARIANTS) & (df["n"] > 0) & df["m"].isin(ms)].copy()
    df["impl"] = [_GEMM_VARIANTS[v][0] for v in df["variant"]]
    df["weights"] = [_GEMM_VARIANTS[v][1] for v in df["variant"]]
    df["time_us"] = df["us"]
    df["gbs"] = df["bytes"] / (df["time_us"] * 1e-6) / 1e9
    df["floor_us"] = df["bytes"] / (ceilings.read_gbs * 1e9) * 1e6
    df["frac_read_bw"] = df["gbs"] / ceilings.read_gbs
    return df[["shape", "n", "k", "m", "weights", "impl", "time_us", "gbs", "floor_us", "frac_read_bw", "bytes",
               "gpu", "git_rev"]].reset_index(drop=True)


def compiled(path, op_prefix=""):
    """The static resources of each launch site (`tileinfer profile compiled`), one row per kernel."""
    df = pd.read_csv(path, keep_default_na=False)
    df = df[df["op"].str.startswith(op_prefix)]
    cols = ["op", "shape", "m", "kind", "kernel", "num_warps", "num_stages", "regs", "local_bytes", "shared_bytes",
            "blocks_per_sm", "tensor_cores", "loop_instructions", "byte_floor_us", "instruction_floor_us",
            "binding_pipe"]
    return df[[c for c in cols if c in df]].reset_index(drop=True)


def engine_steps(path):
    """Plain decode and DFlash step costs beside their byte floors, one row per configuration."""
    df = pd.read_csv(path)
    df = df[df["step_ms"].notna()]
    cols = ["what", "weights", "point", "accept", "step_ms", "drafter_ms", "verify_ms", "floor_ms", "of_floor",
            "vs_plain_step", "decode_tok_s", "gpu", "git_rev"]
    return df[[c for c in cols if c in df]].round(3).reset_index(drop=True)


def spread(values) -> float:
    """How far a configuration's processes are apart on one metric: (max − min) / median; NaN if any value
    is NaN, infinite around a zero median."""
    values = [float(v) for v in values]
    if any(math.isnan(v) for v in values):
        return math.nan
    mid = statistics.median(values)
    return (max(values) - min(values)) / mid if mid else math.inf


def _rows(paths):
    rows = []
    for path in paths:
        rows += [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return pd.DataFrame(rows)


def comparison(paths):
    """The comparison's metric from JSON-lines row files (one row per prompt × configuration × process): one
    row per model, configuration and prompt, medians over its processes, how many there were and how far
    apart (max − min over the median) their decode speed and prefill were."""
    df = _rows(paths)
    if not len(df):
        return df
    keys = [c for c in ("model", "point", "task", "weights", "dflash", "accept_mode", "weights_kind", "gpu",
                        "git_rev") if c in df]
    out = df.groupby(keys, sort=False).agg(
        prefill_ms=("prefill_ms", "median"), decode_tok_s=("decode_tok_s", "median"),
        tokens_per_step=("tokens_per_step", "median"), processes=("decode_tok_s", "size"),
        decode_spread=("decode_tok_s", spread), prefill_spread=("prefill_ms", spread)).reset_index()
    cols = ["model", "point", "task", "weights", "dflash", "accept_mode", "prefill_ms", "decode_tok_s",
            "tokens_per_step", "processes", "decode_spread", "prefill_spread", "weights_kind", "gpu", "git_rev"]
    return out[[c for c in cols if c in out]].round(4)


def model_sizes(paths, point="1k", weights="bf16"):
    """How the engine scales over the Qwen3 shapes, from the comparison's rows of several models (`run_all.sh
    sizes` beside the main model's): per shape, plain decoding's tok/s and the share of its byte floor it
    reaches (weights + LM head + the KV cache at mid-reply ÷ the bandwidth measured in the same run, over
    1 / tok/s), DFlash's tok/s on each task, and the 1-token request."""
    df = _rows(paths)
    if not len(df):
        return df
    df = df[(df["point"] == point) & (df["weights"] == weights)]
    out = []
    for model, rows in df.groupby("model", sort=False):
        plain, dflash = rows[~rows["dflash"].astype(bool)], rows[rows["dflash"].astype(bool)]
        shape = QWEN3[model.removeprefix("qwen3-")]
        kv = statistics.median(plain["prompt_tokens"] + plain["new_tokens"] // 2)
        floor_ms = step_bytes(shape, kv, weights=weights) / (statistics.median(plain["gpu_bandwidth_gbs"]) * 1e6)
        plain_tok_s = statistics.median(plain["decode_tok_s"])
        row = {"model": model, "layers": shape.layers, "plain_tok_s": plain_tok_s, "floor_ms": floor_ms,
               "plain_of_floor": floor_ms * plain_tok_s / 1e3}
        for task, of_task in dflash.groupby("task"):
            row[f"dflash_{task}_tok_s"] = statistics.median(of_task["decode_tok_s"])
        row["prefill_ms"] = statistics.median(rows["prefill_ms"])
        row["git_rev"] = ", ".join(sorted(set(rows["git_rev"])))
        out.append(row)
    table = pd.DataFrame(out)
    order = {name: i for i, name in enumerate(f"qwen3-{size}" for size in QWEN3)}
    return table.sort_values("model", key=lambda m: m.map(order)).reset_index(drop=True).round(4)


def sampling_acceptance(path):
    """Tokens per DFlash step and acceptance per draft position by temperature (`bench/sampling_bench.py
    --parts acceptance`), in `acceptance.temperature_runs`' form: `acceptance_curves` takes either."""
    df = pd.read_csv(path)
    df["acceptance_per_position"] = [[float(a) for a in str(s).split()] for s in df["acceptance_per_position"]]
    cols = ["point", "task", "temperature", "top_k", "top_p", "seeds", "prompt_tokens", "new_tokens", "steps",
            "mean_tokens_per_step", "acceptance_per_position", "weights_kind", "gpu", "git_rev"]
    return df[[c for c in cols if c in df]]


def peer_speedups(path):
    """Our configurations against the engines a user would pick instead, on the same GPU, checkpoint and
    token ids (`bench.peers.speedup`'s CSV): decode tok/s of each and the ratio, and where both decode the
    same way the ratio of their step costs."""
    df = pd.read_csv(path)
    cols = ["point", "task", "weights", "dflash", "peer", "peer_version", "ours_tok_s", "peer_tok_s", "speedup",
            "ours_step_ms", "peer_step_ms", "step_speedup", "gpu", "git_rev"]
    return df[[c for c in cols if c in df]].round(3)


def long_prompts(path):
    """Prefill time and activation memory, chunked against one-shot, and DFlash decode after a long prompt."""
    df = pd.read_csv(path)
    df = df[df["what"].isin(["prefill", "dflash decode"])]
    df = df.assign(activation_gb=df["activation_bytes"] / 1e9, plan_activation_gb=df["plan_activation_bytes"] / 1e9)
    cols = ["what", "prompt_tokens", "chunk", "prefill_ms", "vs_one_shot", "activation_gb", "plan_activation_gb",
            "activation_over_kv", "decode_tok_s", "tokens_per_step", "git_rev"]
    return df[[c for c in cols if c in df]].round(3).reset_index(drop=True)
