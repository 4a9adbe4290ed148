"""The comparison's metric and its rows.

Per prompt: the median latency of the reply (n new tokens) and of a 1-token request ("prefill") over
5 trials after a 1 s warm-up; decode tok/s = (n - 1) / (latency(n) - latency(1)). Each configuration
runs in fresh processes (3 at 1k, 2 at 8k) whose results must agree within 1 %. One row per prompt x
configuration x process, as a JSON line or a CSV row, whatever the engine: TileInfer, vLLM, or a peer
(transformers, the public DFlash reference) named by `engine`, `version` and `mode`.
"""

import csv
import json
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from tileinfer_profiling.ceilings import datasheet_bandwidth_gbs
from tileinfer_profiling.recorded import spread

TRIALS = 5
WARMUP_S = 1.0
AGREEMENT = 0.01
AGREEMENT_METRICS = ("decode_tok_s", "prefill_ms")

ENGINES = ("tileinfer", "vllm", "transformers", "dflash")


@dataclass
class Row:
    """One prompt x configuration x process. The fields after `timestamp` are optional: rows recorded
    before they existed read as "" / None there."""

    engine: str  # one of ENGINES
    task: str  # "edit" | "explain"
    point: str  # "1k" | "8k"
    prompt_tokens: int
    new_tokens: int
    weights: str  # "bf16" | "int8"
    dflash: bool
    block_size: int  # 1 = plain decode
    latency_ms: float  # median over the trials, reply of new_tokens tokens
    prefill_ms: float  # median over the trials, 1-token request
    decode_tok_s: float
    tokens_per_step: float  # mean committed tokens per decode step
    steps: int
    process: int
    gpu: str
    gpu_bandwidth_gbs: float
    gpu_bandwidth_source: str  # "measured" | "datasheet" | "unknown"
    torch: str
    triton: str
    git_rev: str
    command: str
    weights_kind: str  # "real" | "random"
    accept_mode: str  # "real" | "replay:<tokens per step>"
    timestamp: str
    latency_trials_ms: list = field(default_factory=list)
    prefill_trials_ms: list = field(default_factory=list)
    model: str = ""  # the checkpoint: a random-weight preset ("qwen3-4b") or the checkpoint's name
    version: str = ""  # the engine's version
    mode: str = ""  # how the engine ran, e.g. "cuda-graphs", "eager", "static-compile"
    note: str = ""  # what a reader must know about this row (a fallback taken, a capped reply)
    drafter_ms_per_step: float | None = None  # DFlash: the drafter pass and the verify forward, where
    verify_ms_per_step: float | None = None  # the engine times them apart
    # each 1-token request's prefill as the engine times it inside its call (prompt in, first token out),
    # where it reports one: prefill_trials_ms less these is the call's own work around the prefill
    engine_prefill_trials_ms: list = field(default_factory=list)

    def as_dict(self):
        return asdict(self)


ROW_FIELDS = tuple(f.name for f in fields(Row))
REQUIRED_FIELDS = ROW_FIELDS[:ROW_FIELDS.index("timestamp") + 1]


def validate_row(row):
    """Raise ValueError naming what is missing or mistyped in a row dict; return it."""
    missing = [k for k in REQUIRED_FIELDS if k not in row]
    if missing:
        raise ValueError(f"row lacks {', '.join(missing)}")
    if row["engine"] not in ENGINES or row["weights_kind"] not in ("real", "random"):
        raise ValueError(f"engine must be one of {', '.join(ENGINES)} and weights_kind 'real' or 'random': "
                         f"got {row['engine']!r}, {row['weights_kind']!r}")
    if not (row["accept_mode"] == "real" or row["accept_mode"].startswith("replay:")):
        raise ValueError(f"accept_mode must be 'real' or 'replay:<x>', got {row['accept_mode']!r}")
    for k in ("prompt_tokens", "new_tokens", "block_size", "steps", "process"):
        if not isinstance(row[k], int) or isinstance(row[k], bool):
            raise ValueError(f"{k} must be an int, got {row[k]!r}")
    for k in ("latency_ms", "prefill_ms", "decode_tok_s", "tokens_per_step", "gpu_bandwidth_gbs"):
        if not isinstance(row[k], (int, float)) or isinstance(row[k], bool):
            raise ValueError(f"{k} must be a number, got {row[k]!r}")
    if not isinstance(row["dflash"], bool):
        raise ValueError(f"dflash must be a bool, got {row['dflash']!r}")
    return row


# --- the arithmetic -------------------------------------------------------------------------------

def decode_tok_s(new_tokens, latency_ms, prefill_ms):
    """(n - 1) / (latency(n) - latency(1)): the tokens after the first, over the time they took."""
    if new_tokens < 2 or latency_ms <= prefill_ms:
        return math.nan
    return (new_tokens - 1) / ((latency_ms - prefill_ms) / 1e3)


def step_ms(latency_ms, prefill_ms, steps):
    """Mean cost of one decode step (drafter pass + verify with DFlash)."""
    return (latency_ms - prefill_ms) / steps if steps else math.nan


def accept_mode(profile):
    """'real', or 'replay:<x>' when the engine replays an acceptance profile."""
    if profile is None:
        return "real"
    if isinstance(profile, (list, tuple)):
        profile = sum(profile) / len(profile)
    return f"replay:{profile:g}"


@dataclass
class Timing:
    latency_ms: float
    prefill_ms: float
    latency_trials_ms: list
    prefill_trials_ms: list
    reply: object  # what the last reply call returned
    engine_prefill_trials_ms: list = field(default_factory=list)  # the engine's own, where the caller adds it


def measure(reply, prefill, trials=TRIALS, warmup_s=WARMUP_S, clock=time.perf_counter):
    """Median wall time of `reply()` and `prefill()` over `trials` each, after `warmup_s` of both.

    Both callables must return only once the device is done (token ids on the host).
    """
    start = clock()
    while clock() - start < warmup_s:
        reply()
        prefill()
    lat, pre, out = [], [], None
    for _ in range(trials):
        t0 = clock()
        prefill()
        t1 = clock()
        out = reply()
        t2 = clock()
        pre.append((t1 - t0) * 1e3)
        lat.append((t2 - t1) * 1e3)
    return Timing(statistics.median(lat), statistics.median(pre), lat, pre, out)


def spreads(rows, metrics=AGREEMENT_METRICS):
    """{metric: `recorded.spread` of its values across processes} for the metrics the rows have."""
    return {m: spread([r[m] for r in rows]) for m in metrics if rows}


def _verdict(each, tol):
    """(spread, ok): the largest of the metrics' spreads, and whether it is within `tol` (NaN never is)."""
    if any(math.isnan(v) for v in each.values()):
        return math.nan, False
    worst = max(each.values(), default=0.0)
    return worst, worst <= tol


def agreement(rows, metrics=AGREEMENT_METRICS, tol=AGREEMENT):
    """(spread, ok): the largest of `spreads` over `metrics`, and spread <= tol."""
    return _verdict(spreads(rows, metrics), tol)


CONFIG_KEY = ("engine", "mode", "model", "gpu", "weights_kind", "accept_mode", "point", "task", "weights",
              "dflash", "block_size")


def config_key(row):
    """The configuration a row measures; optional fields absent from older rows read as ""."""
    return tuple(row.get(k, "") for k in CONFIG_KEY)


def summarize(rows, tol=AGREEMENT):
    """One dict per configuration x prompt: medians over processes, the spread and whether they agree."""
    groups = {}
    for r in rows:
        groups.setdefault(config_key(r), []).append(r)
    out = []
    for key, group in groups.items():
        each = spreads(group)
        worst, ok = _verdict(each, tol)
        med = {m: statistics.median(float(r[m]) for r in group)
               for m in ("prompt_tokens", "new_tokens", "latency_ms", "prefill_ms", "decode_tok_s",
                         "tokens_per_step", "steps")}
        out.append(dict(zip(CONFIG_KEY, key)) | med | {
            "step_ms": step_ms(med["latency_ms"], med["prefill_ms"], med["steps"]),
            "processes": len(group), "spread": worst, "agree": ok,
            "decode_spread": each.get("decode_tok_s", math.nan), "prefill_spread": each.get("prefill_ms", math.nan)})
    return out


def _percent(value, tol):
    """A spread as a percentage, in bold past the tolerance."""
    text = f"{100 * value:.2f} %"
    return f"**{text}**" if math.isnan(value) or value > tol else text


def format_table(summary, tol=AGREEMENT):
    """Markdown table of `summarize` output; configurations whose processes disagree are flagged, and the
    spread of each metric across processes is shown, so a reader sees which one disagrees."""
    head = ("| engine | model | point | task | weights | DFlash | prefill ms | decode tok/s | tokens/step "
            "| step ms | processes | decode spread | prefill spread | agree |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for s in summary:
        verdict = "one process: unchecked" if s["processes"] < 2 else "yes" if s["agree"] else "**disagree**"
        engine = f"{s['engine']} {s['mode']}".strip()
        lines.append(
            f"| {engine} | {s['model'] or '-'} | {s['point']} | {s['task']} | {s['weights']} | "
            f"{'k=' + str(s['block_size'] - 1) if s['dflash'] else 'off'} | {s['prefill_ms']:.1f} | "
            f"{s['decode_tok_s']:.1f} | {s['tokens_per_step']:.2f} | {s['step_ms']:.2f} | "
            f"{s['processes']} | {_percent(s['decode_spread'], tol)} | {_percent(s['prefill_spread'], tol)} | "
            f"{verdict} |")
    return head + "\n".join(lines) + "\n"


# --- the environment ------------------------------------------------------------------------------

def measure_read_bandwidth_gbs(nbytes=2 << 30, repeats=10):
    """GB/s of summing `nbytes` of bf16 on the current CUDA device (median of `repeats`)."""
    import torch

    x = torch.ones(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    x.sum()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        x.sum()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    del x
    torch.cuda.empty_cache()
    return nbytes / statistics.median(times) / 1e9


def environment(measure_bandwidth=True):
    """gpu, gpu_bandwidth_gbs (+ source), torch, triton, git_rev for the rows."""
    import torch

    from tileinfer_profiling.run_info import run_info

    info = run_info()
    bandwidth, source = math.nan, "unknown"
    if torch.cuda.is_available():
        if measure_bandwidth:
            bandwidth, source = measure_read_bandwidth_gbs(), "measured"
        else:
            bandwidth = datasheet_bandwidth_gbs(info["gpu"])
            source = "unknown" if math.isnan(bandwidth) else "datasheet"
    return {"gpu": info["gpu"], "gpu_bandwidth_gbs": round(bandwidth, 1), "gpu_bandwidth_source": source,
            "torch": info["torch"], "triton": info["triton"], "git_rev": info["git_rev"]}


def timestamp():
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


# --- files ----------------------------------------------------------------------------------------

def append_jsonl(path, row):
    """Append one row and flush it to disk, so an interrupted run keeps every finished row."""
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path):
    """Rows of a JSONL file; a last line cut short by an interruption is skipped."""
    rows = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=ROW_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in ROW_FIELDS})


def write_rows(rows, path, last=()):
    """Rows with differing keys as one CSV: every key a column, the keys in `last` (provenance) at the end."""
    keys = sorted({k for r in rows for k in r}, key=lambda k: (k in last, k))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    return path


def gpu_tag(gpu):
    """A GPU name as results files carry it: 'h200', 'h100', or the name in lower case with underscores."""
    for short in ("H200", "H100"):
        if short in gpu:
            return short.lower()
    return gpu.replace(" ", "_").lower()
