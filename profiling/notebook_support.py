"""What the notebooks call: the model pair (with a stand-in until the embedded one exists), prompts, the
recorded H200 results in the sweeps' format, and the tables and figures each notebook shows.

    from profiling import notebook_support as nbs
    engine, pair = nbs.load_engine(model=None, draft=None)
    table, generations = nbs.generate_both(engine, nbs.encode(engine, "Explain a KV cache."), 64)
"""

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import torch

from profiling.ceilings import H200
from profiling.env import REPO, run_info
from profiling.plots import tokens_per_step_figure

RESULTS = REPO / "bench" / "results"
STAND_IN_DIR = Path.home() / ".cache" / "tileinfer" / "notebooks"
# A tiny pair whose context holds the 1k benchmark prompts: the stand-in while no embedded pair exists.
STAND_IN_CONTEXT = 2048

NVTX_RANGES = [
    ("prefill", "step", "the prompt through the target (and the drafter's context), in chunks; payload: tokens"),
    ("drafter", "step", "one drafter pass over the block [anchor, masks]: block_size − 1 draft tokens"),
    ("verify", "step", "the target over [anchor, drafts], causal over its KV cache; payload: kv_len"),
    ("accept", "step", "longest matching prefix, bonus token, KV length rolled back"),
    ("decode", "step", "plain decoding: the target over one token (block_size 1)"),
    ("layer.N.attention", "layer", "layer N's attention (q/k/v, norm + RoPE, split-KV kernel, o); drafter.layer.N.* in the drafter"),
    ("layer.N.mlp", "layer", "layer N's MLP (gate_up, SwiGLU, down)"),
]


def on_gpu():
    return torch.cuda.is_available()


def pick(value, gpu, cpu):
    """`value` when given, else the GPU or the CPU default of a notebook parameter."""
    if value is not None:
        return value
    return gpu if on_gpu() else cpu


def device_note():
    """Markdown saying what kind of timings follow: a CPU run's are for checking, not for speed."""
    info = run_info()
    if info["device"] == "cuda":
        return (f"**GPU run on {info['gpu']}** (torch {info['torch']}, triton {info['triton']}, "
                f"revision {info['git_rev']}): timings below are measured on this GPU.")
    return (f"**CPU run — every timing below is a CPU timing** (torch {info['torch']}, triton {info['triton']}, "
            f"revision {info['git_rev']}). The engine runs its PyTorch backend and the Triton kernels run under "
            "the interpreter: numbers show that things run, not how fast. The recorded H200 results "
            "(`bench/results/*.csv`) are shown beside them.")


def markdown(text):
    from IPython.display import Markdown
    return Markdown(text)


# ---------------------------------------------------------------------------------------------------
# The model pair

@dataclass(frozen=True)
class Pair:
    model: str
    draft: str | None
    random_weights: bool
    note: str


def _looks_random(path):
    # tileinfer.random_weights writes no tokenizer; trained checkpoints ship one.
    return Path(path).is_dir() and not (Path(path) / "tokenizer.json").is_file()


def write_stand_in(directory=None, num_layers=2):
    """A tiny random target + drafter (written once) whose context holds 1k prompts: (target, drafter)."""
    from tileinfer.random_weights import write_dflash_drafter, write_qwen3

    root = Path(directory or STAND_IN_DIR) / "random-tiny"
    target, drafter = root / "target", root / "drafter"
    if not (target / "config.json").is_file():
        write_qwen3(target, "tiny", max_position_embeddings=STAND_IN_CONTEXT)
    if not (drafter / "config.json").is_file():
        write_dflash_drafter(drafter, target, num_layers=num_layers)
    return str(target), str(drafter)


def resolve_pair(model=None, draft=None, stand_in_dir=None):
    """The checkpoints to load. model None: the embedded default pair, or, while it is not installed,
    a tiny random stand-in (said so in `note`)."""
    from tileinfer.loading import default_draft, default_model

    if model is None:
        if (Path(default_model()) / "config.json").is_file():
            model, draft = default_model(), draft or default_draft()
            return Pair(model, draft, False, "the embedded default pair (trained, `tileinfer/assets/default`)")
        model, stand_in_draft = write_stand_in(stand_in_dir)
        return Pair(model, draft or stand_in_draft, True,
                    "the embedded default pair is not installed here, so a tiny random pair stands in "
                    f"({model}): costs are real, tokens and acceptance are not")
    note = f"{model}" + (f" with the drafter {draft}" if draft else " without a drafter")
    return Pair(str(model), None if draft is None else str(draft), _looks_random(model), note)


def load_engine(model=None, draft=None, weights="bf16", **load_kwargs):
    """(Engine, Pair): `tileinfer.load` on the resolved pair."""
    import tileinfer

    pair = resolve_pair(model, draft)
    return tileinfer.load(pair.model, draft=pair.draft, weights=weights, **load_kwargs), pair


def run_markdown(engine, pair):
    """What this run is: device, versions, git revision, weights and whether they are real."""
    info = run_info(engine.device)
    where = f"GPU {info['gpu']}" if info["device"] == "cuda" else "CPU (no GPU on this machine)"
    kind = "random weights (timings are real, tokens and acceptance are not)" if pair.random_weights else "real weights"
    c = engine.config
    return "\n".join([
        f"- **device**: {where}; backend `{engine.backend}`",
        f"- **versions**: torch {info['torch']}, triton {info['triton']}; git revision `{info['git_rev']}`",
        f"- **model**: {pair.note}; {c.num_hidden_layers} layers, hidden {c.hidden_size}, "
        f"context {c.max_position_embeddings}; drafter: {'yes' if engine.drafter else 'none'}",
        f"- **weights**: {engine.weights}, {kind}",
    ])


def encode(engine, text):
    """Token ids of `text`: the checkpoint's tokenizer, else UTF-8 bytes folded into the vocabulary."""
    from bench.prompts import ByteTokenizer, encode_ids

    ids = encode_ids(engine.tokenizer or ByteTokenizer(), text)
    return [i % engine.config.vocab_size for i in ids]


def benchmark_prompt(engine, task, point, new_tokens=0):
    """The benchmark's `task` prompt ("edit" | "explain") at `point` ("1k" | "8k") for this engine's tokenizer;
    when prompt + new_tokens would overflow a small model's context, its last tokens that fit."""
    from bench.prompts import ByteTokenizer, load_prompt

    tokenizer = engine.tokenizer or ByteTokenizer()
    ids = load_prompt(task, point, tokenizer, name="byte" if engine.tokenizer is None else None).ids
    room = engine.config.max_position_embeddings - new_tokens - 2 * engine.block_max
    return [i % engine.config.vocab_size for i in ids[-max(1, room):]]


def nvtx_ranges():
    """The engine's range names as a markdown table: name, level, what it covers."""
    lines = ["| range | level | what it covers |", "|---|---|---|"]
    lines += [f"| `{name}` | {level} | {what} |" for name, level, what in NVTX_RANGES]
    return markdown("\n".join(lines))


# ---------------------------------------------------------------------------------------------------
# Generation: plain decode against DFlash

TIME_PARTS = ("prefill_ms", "drafter_ms", "verify_ms", "accept_ms", "other_ms")


def _row(label, gen):
    s = gen.stats
    drafter, verify, accept = (s.drafter_ms or 0.0), (s.verify_ms or 0.0), (s.accept_ms or 0.0)
    return {"mode": label, "block_size": s.block_size, "prompt_tokens": s.prompt_tokens, "new_tokens": s.new_tokens,
            "steps": s.steps, "mean_tokens_per_step": round(s.mean_tokens_per_step, 2),
            "decode_tok_s": round(s.decode_tok_s, 2), "prefill_ms": s.prefill_ms, "drafter_ms": drafter,
            "verify_ms": verify, "accept_ms": accept, "other_ms": max(0.0, s.decode_ms - drafter - verify - accept),
            "decode_ms": s.decode_ms}


def generate_both(engine, prompt, max_new_tokens, accept_profile=None, **generate_kwargs):
    """(table, {mode: Generation}): the same prompt decoded plainly and with DFlash (when a drafter is loaded).

    One short warm-up generation first, so neither row pays for first-call set-up."""
    engine.generate(prompt, 2, block_size=1)
    modes = {"plain decode": dict(block_size=1)}
    if engine.drafter is not None:
        modes["DFlash"] = dict(block_size=None, accept_profile=accept_profile)
    gens = {label: engine.generate(prompt, max_new_tokens, **kw, **generate_kwargs) for label, kw in modes.items()}
    return pd.DataFrame([_row(label, g) for label, g in gens.items()]).set_index("mode"), gens


def time_split_figure(table, title="Where the time went"):
    """Stacked bars of prefill / drafter / verify / accept / other ms per mode (rows of `generate_both`)."""
    fig = go.Figure()
    for part in TIME_PARTS:
        fig.add_bar(x=list(table.index), y=table[part].values, name=part.removesuffix("_ms"))
    fig.update_layout(barmode="stack", title=title + _device_suffix(), yaxis_title="ms (whole generation)",
                      height=380)
    return fig


def _device_suffix():
    return " — " + run_info()["gpu"] if on_gpu() else " — CPU timings"


# ---------------------------------------------------------------------------------------------------
# Recorded results (bench/results/*.csv) in the live sweeps' formats

def recorded_results(directory=RESULTS):
    """{file stem: DataFrame} of every recorded CSV (attention_h200, gemm_h200, pointwise_h200, …)."""
    return {p.stem: pd.read_csv(p) for p in sorted(Path(directory).glob("*.csv"))}


def recorded_index(directory=RESULTS):
    """One row per recorded CSV: rows, GPU(s), git revision(s)."""
    rows = []
    for name, df in recorded_results(directory).items():
        rev = "git_rev" if "git_rev" in df else "git_revision" if "git_revision" in df else None
        rows.append({"file": f"bench/results/{name}.csv", "rows": len(df),
                     "gpu": ", ".join(sorted(map(str, df["gpu"].unique()))) if "gpu" in df else "",
                     "git_rev": ", ".join(sorted(map(str, df[rev].unique()))) if rev else ""})
    return pd.DataFrame(rows)


def recorded_attention(path=RESULTS / "attention_h200.csv"):
    """The recorded split curves (section "splits") and SDPA decode rows as `attention_sweep` rows."""
    df = pd.read_csv(path).drop_duplicates(["section", "kernel", "kv_len", "num_q_tokens", "num_splits", "config"],
                                           keep="last")
    ours = df[(df["section"] == "splits") & (df["kernel"] == "decode")].assign(impl="ours")
    sdpa = df[(df["section"] == "decode") & (df["kernel"] == "sdpa")].assign(impl="sdpa")
    out = pd.concat([ours, sdpa], ignore_index=True).rename(columns={"num_q_tokens": "q_len", "kv_gbps": "gbs"})
    return out[["impl", "kv_len", "q_len", "num_splits", "time_us", "gbs", "gpu", "torch", "triton", "git_rev"]]


_GEMM_VARIANTS = {"ours_bf16": ("ours", "bf16"), "ours_int8": ("ours", "int8"), "cublas_bf16": ("cublas", "bf16"),
                  "torch_int8_ref": ("dequantize+cublas", "int8")}


def recorded_compiled(path=RESULTS / "compiled_sm90.csv", op_prefix=""):
    """The recorded static resources of each launch site (`python -m profiling compiled`), one row per kernel."""
    df = pd.read_csv(path, keep_default_na=False)
    df = df[df["op"].str.startswith(op_prefix)]
    cols = ["op", "shape", "m", "kind", "kernel", "num_warps", "num_stages", "regs", "local_bytes", "shared_bytes",
            "blocks_per_sm", "tensor_cores", "loop_instructions", "byte_floor_us", "instruction_floor_us",
            "binding_pipe"]
    return df[[c for c in cols if c in df]].reset_index(drop=True)


def recorded_gemms(path=RESULTS / "gemm_h200.csv", ms=(1, 16)):
    """The recorded linears of Qwen3-4B as `gemm_sweep` rows (impl, weights, time_us, gbs, floor_us)."""
    df = pd.read_csv(path).drop_duplicates(["shape", "m", "variant"], keep="last")  # the latest run appends
    df = df[df["variant"].isin(_GEMM_VARIANTS) & (df["n"] > 0) & df["m"].isin(ms)].copy()
    df["impl"] = [_GEMM_VARIANTS[v][0] for v in df["variant"]]
    df["weights"] = [_GEMM_VARIANTS[v][1] for v in df["variant"]]
    df["time_us"] = df["us"]
    df["gbs"] = df["bytes"] / (df["time_us"] * 1e-6) / 1e9
    df["floor_us"] = df["bytes"] / (H200.read_gbs * 1e9) * 1e6
    df["frac_read_bw"] = df["gbs"] / H200.read_gbs
    return df[["shape", "n", "k", "m", "weights", "impl", "time_us", "gbs", "floor_us", "frac_read_bw", "bytes",
               "gpu", "git_rev"]].reset_index(drop=True)


def gemm_floor_table(df):
    """time (µs) of each implementation beside the bytes ÷ read-ceiling floor, one row per shape × m × weights."""
    wide = df.pivot_table(index=["shape", "m", "weights"], columns="impl", values="time_us", sort=False)
    wide["floor_us"] = df.groupby(["shape", "m", "weights"], sort=False)["floor_us"].first()
    return wide.round(2)


def live_attention_sweep_args():
    """`attention_sweep` arguments sized for this machine: Qwen3-4B's heads on a GPU, a toy shape on a CPU."""
    if on_gpu():
        return dict(kv_lens=(1024, 8192, 32768), q_lens=(1, 16), num_splits_list=(1, 2, 4, 8, 16, 32))
    return dict(kv_lens=(128, 256), q_lens=(1,), num_splits_list=(1, 2, 4), num_q_heads=4, num_kv_heads=2,
                head_dim=16)


def best_splits(sweep):
    """Per (kv_len, q_len): the fastest split count, its time, SDPA's time and the speed-up over SDPA."""
    ours = sweep[sweep["impl"] == "ours"]
    best = ours.loc[ours.groupby(["kv_len", "q_len"])["time_us"].idxmin(), ["kv_len", "q_len", "num_splits", "time_us"]]
    one = ours[ours["num_splits"] == 1].set_index(["kv_len", "q_len"])["time_us"].rename("one_split_us")
    sdpa = sweep[sweep["impl"] == "sdpa"].groupby(["kv_len", "q_len"])["time_us"].first().rename("sdpa_us")
    out = best.set_index(["kv_len", "q_len"]).join(one).join(sdpa)
    out["vs_sdpa"] = out["sdpa_us"] / out["time_us"]
    return out.rename(columns={"num_splits": "best_num_splits", "time_us": "best_us"}).round(2).reset_index()


def live_gemm_shapes(config=None):
    """Tiny linears for a CPU sweep (the interpreter runs one program at a time), or Qwen3-4B's on a GPU."""
    if on_gpu():
        return None
    return {"qkv": (64, 64), "gate_up": (128, 64), "down": (64, 96)}


# ---------------------------------------------------------------------------------------------------
# Step profile

def kernel_table(prof, top=15):
    """The `top` kernels of a decoding step (prefill left out): calls and ms per step, mean µs, share."""
    steps = max(1, prof.stats.get("steps") or 1)
    k = prof.kernels[prof.kernels["phase"] != "prefill"].assign(phase=lambda d: d["phase"].fillna("unattributed"))
    t = (k.groupby(["phase", "name", "kernel_class"]).agg(calls=("duration_us", "size"), total_us=("duration_us", "sum"))
         .reset_index())
    t["calls_per_step"] = t["calls"] / steps
    t["ms_per_step"] = t["total_us"] / 1e3 / steps
    t["mean_us"] = t["total_us"] / t["calls"]
    t["share"] = t["total_us"] / t["total_us"].sum()
    t = t.sort_values("ms_per_step", ascending=False).head(top)
    return t[["phase", "name", "kernel_class", "calls_per_step", "ms_per_step", "mean_us", "share"]].round(4)


def layers_figure(prof, title="Kernel time per layer"):
    """`per_layer_figure` of the profile, or a figure saying that the trace carried no layer ranges."""
    from profiling.plots import per_layer_figure

    table = prof.per_layer()
    if len(table):
        return per_layer_figure(table, title=title + _device_suffix())
    fig = go.Figure()
    fig.add_annotation(text="no layer.N.* ranges in this trace (the engine emits them at trace level 'layer')",
                       showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(title=title + _device_suffix(), height=250)
    return fig


def default_accept_profile(pair, accept_profile=None):
    """What a step profile replays: the given profile, else for random weights the comparison's 1k edit
    figure (7.1 tokens per step; a random drafter accepts nothing), else None (real acceptance)."""
    if accept_profile is not None:
        return accept_profile
    return 7.1 if pair.random_weights else None


def floor_table(points=(1024, 8192)):
    """Qwen3-4B + DFlash drafter: bytes per step and the H200 floor (measured read ceiling) per weights × context."""
    from profiling.roofline import QWEN3_4B, QWEN3_4B_DFLASH, dflash_step_bytes, step_bytes

    rows = []
    for weights in ("bf16", "int8"):
        for kv_len in points:
            for mode, nbytes in (("plain decode", step_bytes(QWEN3_4B, kv_len, weights=weights)),
                                 ("DFlash step", dflash_step_bytes(QWEN3_4B, QWEN3_4B_DFLASH, kv_len, weights))):
                rows.append({"weights": weights, "kv_len": kv_len, "step": mode, "GB_per_step": nbytes / 1e9,
                             "H200_floor_ms": nbytes / (H200.read_gbs * 1e9) * 1e3})
    return pd.DataFrame(rows).round(3)


def step_summary(prof):
    """The profile's summary rows, transposed: one column per variant (eager, graphs)."""
    return prof.summary.set_index("variant").T


# ---------------------------------------------------------------------------------------------------
# Acceptance

def points_that_fit(engine, points, new_tokens):
    """The benchmark points whose prompt + new_tokens fit the model's context."""
    from bench.prompts import POINTS

    limit = engine.config.max_position_embeddings
    return [p for p in points if POINTS[p].prompt_tokens + new_tokens <= limit]


def acceptance_runs(engine, tasks=("edit", "explain"), points=("1k",), new_tokens=128, accept_profile=None):
    """One DFlash generation per task × point: tokens per step and its histogram (greedy)."""
    rows = []
    for point in points:
        for task in tasks:
            gen = engine.generate(benchmark_prompt(engine, task, point), new_tokens, accept_profile=accept_profile)
            s = gen.stats
            rows.append({"point": point, "task": task, "prompt_tokens": s.prompt_tokens, "new_tokens": s.new_tokens,
                         "steps": s.steps, "mean_tokens_per_step": s.mean_tokens_per_step,
                         "decode_tok_s": s.decode_tok_s, "tokens_per_step": list(s.tokens_per_step)})
    return pd.DataFrame(rows, columns=["point", "task", "prompt_tokens", "new_tokens", "steps", "mean_tokens_per_step",
                                       "decode_tok_s", "tokens_per_step"])


def acceptance_histogram_figure(runs, title="Tokens committed per step"):
    """Overlaid histograms (as grouped bars) of committed tokens per step, one trace per point × task."""
    fig = go.Figure()
    for _, r in runs.iterrows():
        counts = pd.Series(r["tokens_per_step"]).value_counts().sort_index()
        fig.add_bar(x=counts.index.tolist(), y=counts.values.tolist(),
                    name=f"{r['point']} {r['task']} (mean {r['mean_tokens_per_step']:.2f})")
    fig.update_layout(barmode="group", title=title, xaxis_title="tokens committed in the step (accepted + 1)",
                      yaxis_title="steps", height=380)
    return fig


def reference_tokens_per_step(reference=None):
    """Tokens per step of the comparison's engines (bench/ref/reference.csv): engine × gpu × point × task × weights."""
    from profiling.compare import load_reference

    ref = load_reference() if reference is None else reference
    tps = ref[(ref["metric"] == "tokens_per_step") & (ref["task"] != "")]
    return tps[["engine", "gpu", "point", "task", "weights", "value"]].rename(columns={"value": "tokens_per_step"})


def acceptance_comparison_figure(runs, weights="bf16", reference=None, label=None):
    """Mean tokens per step per point × task: this run beside the comparison's vLLM and TileInfer figures."""
    ref = reference_tokens_per_step(reference)
    ref = ref[ref["weights"] == weights]
    order = [f"{p} {t}" for p in ("1k", "8k") for t in ("edit", "explain")]
    fig = go.Figure()
    for (engine, gpu), g in ref.groupby(["engine", "gpu"], sort=False):
        y = g.assign(x=g["point"] + " " + g["task"]).set_index("x")["tokens_per_step"].reindex(order)
        fig.add_bar(x=order, y=y.values, name=f"{engine} · {gpu} (reference, {weights})")
    if len(runs):
        y = runs.assign(x=runs["point"] + " " + runs["task"]).set_index("x")["mean_tokens_per_step"].reindex(order)
        fig.add_bar(x=order, y=y.values, name=label or f"this run · {run_info()['gpu']}")
    fig.update_layout(barmode="group", title=f"Mean tokens per DFlash step ({weights} weights)",
                      yaxis_title="tokens per step", height=400)
    return fig


def tokens_histogram(tokens_per_step, title="Tokens committed per step"):
    return tokens_per_step_figure(tokens_per_step, title)


# ---------------------------------------------------------------------------------------------------
# Report

def report_summary(pair=None, generation=None, sweep=None, prof=None, runs=None):
    """The report's closing table: one (figure, value) row per thing measured; what did not run is left out."""
    info = run_info()
    rows = [("device", info["gpu"]), ("torch", info["torch"]), ("triton", info["triton"]), ("git revision", info["git_rev"])]
    if pair is not None:
        rows.append(("weights", "random" if pair.random_weights else "real"))
    if generation is not None:
        for mode, r in generation.iterrows():
            rows.append((f"{mode} decode tok/s", round(float(r["decode_tok_s"]), 2)))
            rows.append((f"{mode} tokens per step", round(float(r["mean_tokens_per_step"]), 2)))
    if sweep is not None and len(sweep):
        best = best_splits(sweep).iloc[-1]
        rows.append((f"best num_splits at kv_len {int(best['kv_len'])}, q_len {int(best['q_len'])}",
                     int(best["best_num_splits"])))
    if prof is not None:
        s = prof.summary.iloc[-1]
        rows += [(f"step kernel ms ({s['variant']})", round(float(s["kernel_ms_per_step"]), 3)),
                 (f"step busy % ({s['variant']})", round(float(s["busy_pct"]), 1))]
    if runs is not None:
        for _, r in runs.iterrows():
            rows.append((f"tokens per step, {r['point']} {r['task']}", round(float(r["mean_tokens_per_step"]), 2)))
    return pd.DataFrame(rows, columns=["figure", "value"]).astype({"value": str})


def write_summary(table, path):
    """Write the report's summary table as CSV when `path` is set (tileinfer.report prints it)."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(path, index=False)
    return table


def skipped(what):
    """Markdown for a section that `live=False` leaves to the recorded results."""
    return markdown(f"*{what}: not measured in this run (`live=False`); the recorded results above stand.*")


# Recorded engine runs on the H200 (bench/engine_bench.py, bench/ref/tileinfer_spec.py, bench/long_prompt_bench.py)

def recorded_engine_steps(path=RESULTS / "engine_h200.csv"):
    """Plain decode and DFlash step costs beside their byte floors, one row per configuration."""
    df = pd.read_csv(path)
    df = df[df["step_ms"].notna()]
    cols = ["what", "weights", "point", "accept", "step_ms", "drafter_ms", "verify_ms", "floor_ms", "of_floor",
            "vs_plain_step", "decode_tok_s", "gpu", "git_rev"]
    return df[[c for c in cols if c in df]].round(3).reset_index(drop=True)


def recorded_comparison(directory=RESULTS):
    """The comparison's metric (median latencies, decode tok/s) from bench/results/comparison_*_h200.jsonl."""
    rows = []
    for path in sorted(directory.glob("comparison_*_h200.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame(rows)
    cols = ["point", "task", "weights", "dflash", "accept_mode", "prefill_ms", "decode_tok_s", "tokens_per_step",
            "weights_kind", "gpu", "git_rev"]
    return df[[c for c in cols if c in df]].round(2)


def recorded_long_prompts(path=RESULTS / "long_prompts_h200.csv"):
    """Prefill time and activation memory, chunked against one-shot, and DFlash decode after a long prompt."""
    df = pd.read_csv(path)
    df = df[df["what"].isin(["prefill", "dflash decode"])]
    df = df.assign(activation_gb=df["activation_bytes"] / 1e9, plan_activation_gb=df["plan_activation_bytes"] / 1e9)
    cols = ["what", "prompt_tokens", "chunk", "prefill_ms", "vs_one_shot", "activation_gb", "plan_activation_gb",
            "activation_over_kv", "decode_tok_s", "tokens_per_step", "git_rev"]
    return df[[c for c in cols if c in df]].round(3).reset_index(drop=True)
