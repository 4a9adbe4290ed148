"""Results by feature: what each of TileInfer's features gains on its own, at the 1k reference point.

    python -m bench.features --model Qwen/Qwen3-4B --draft z-lab/Qwen3-4B-DFlash-b16
    python -m bench.features --random-weights qwen3-4b --accept-profile edit=7.1

The reference configuration is BF16, DFlash on, CUDA graphs, split-KV attention with the default
split count, TileInfer's skinny GEMMs. Each feature is switched off alone (or, for INT8, on) and
the same prompt is measured with the comparison's metric, in this one process; the table gives
decode tok/s and step ms with and without, and their ratio. Writes CSV and markdown.
"""

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.ref.metric import accept_mode, decode_tok_s, environment, gpu_tag, step_ms, timestamp
from bench.ref.procs import progress
from bench.ref.tileinfer_spec import (
    add_checkpoint_arguments, bench_prompt, model_name, parse_accept_profile, parse_points, prepare_random, profile_for, prompt_ids,
)
from tileinfer_profiling.run_info import command_line

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, eq=False)
class Setting:
    """One configuration: keyword arguments of `tileinfer.load` and of `Engine.generate`."""

    label: str
    load: dict = field(default_factory=dict)
    generate: dict = field(default_factory=dict)


REFERENCE = Setting("reference")
REFERENCE_TEXT = "BF16, DFlash, CUDA graphs, split-KV attention (default splits), skinny GEMMs"


@dataclass(frozen=True)
class Feature:
    name: str
    without: Setting
    with_: Setting = REFERENCE


FEATURES = [
    Feature("CUDA graphs", Setting("eager launches", generate={"eager": True})),
    Feature("split-KV attention", Setting("num_splits=1", generate={"num_splits": 1})),
    Feature("skinny GEMMs (vs cuBLAS)", Setting("cuBLAS linears", load={"linear": "cublas"})),
    Feature("DFlash (vs plain decode)", Setting("plain decode", generate={"block_size": 1})),
    Feature("INT8 weights (vs BF16)", REFERENCE, Setting("INT8 weights", load={"weights": "int8"})),
]


def measure_setting(setting, engines, make_engine, ids, new_tokens, base_generate, trials, warmup_s,
                    clock=time.perf_counter):
    """dict(decode_tok_s, step_ms, tokens_per_step, prefill_ms) of one setting, or an `error` saying why not."""
    key = tuple(sorted(setting.load.items()))
    try:
        if key not in engines:
            engines[key] = make_engine(**setting.load)
        gen = base_generate | setting.generate
        if gen.get("block_size") == 1:
            gen["accept_profile"] = None  # plain decode has no acceptance to replay
        timing, stats = bench_prompt(engines[key], ids, new_tokens, trials, warmup_s, clock=clock, **gen)
    except Exception as e:  # an engine build without this switch: reported in the table, not fatal
        return {"error": f"{type(e).__name__}: {e}"}
    return {"decode_tok_s": decode_tok_s(stats.new_tokens, timing.latency_ms, timing.prefill_ms),
            "step_ms": step_ms(timing.latency_ms, timing.prefill_ms, stats.steps),
            "tokens_per_step": stats.mean_tokens_per_step or 1.0, "prefill_ms": timing.prefill_ms,
            "steps": stats.steps, "new_tokens": stats.new_tokens}


def feature_table(make_engine, ids, new_tokens, base_generate=None, features=FEATURES, trials=5,
                  warmup_s=1.0, clock=time.perf_counter, engines=None):
    """One row per feature: tok/s and step ms without and with it, and the ratio (with / without).

    make_engine(**load_kwargs) -> Engine; each distinct load is built once. base_generate: keyword
    arguments of every generate call (stop_ids, accept_profile). engines: already built engines by
    their sorted load items (() for the reference).
    """
    base_generate = base_generate or {}
    engines, measured = dict(engines or {}), {}
    settings = list(dict.fromkeys(s for f in features for s in (f.with_, f.without)))
    for s in progress(settings, desc="settings", file=sys.stderr):
        measured[s] = measure_setting(s, engines, make_engine, ids, new_tokens, base_generate,
                                      trials, warmup_s, clock)
    rows = []
    for f in features:
        on, off = measured[f.with_], measured[f.without]
        row = {"feature": f.name, "without": f.without.label, "with": f.with_.label}
        for side, m in (("without", off), ("with", on)):
            for k in ("decode_tok_s", "step_ms", "tokens_per_step"):
                row[f"{k}_{side}"] = m.get(k, math.nan)
        row["ratio"] = row["decode_tok_s_with"] / row["decode_tok_s_without"] \
            if row["decode_tok_s_without"] else math.nan
        row["error"] = "; ".join(m["error"] for m in (off, on) if "error" in m)
        rows.append(row)
    return rows


def to_markdown(rows):
    lines = ["| feature | without | tok/s | step ms | with | tok/s | step ms | gain |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["error"]:
            lines.append(f"| {r['feature']} | {r['without']} | | | {r['with']} | | | not measured: "
                         f"{r['error'][:80]} |")
            continue
        lines.append(
            f"| {r['feature']} | {r['without']} | {r['decode_tok_s_without']:.1f} | "
            f"{r['step_ms_without']:.2f} | {r['with']} | {r['decode_tok_s_with']:.1f} | "
            f"{r['step_ms_with']:.2f} | {r['ratio']:.2f}x |")
    return "\n".join(lines) + "\n"


def to_dataframe(rows, env=None):
    import pandas as pd
    df = pd.DataFrame(rows)
    for k, v in (env or {}).items():
        df[k] = v
    return df


def recorded_command(argv):
    """The command as the rows record it: where the tables were written (--out-dir) is left out."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--out-dir":
            skip = True
        elif not arg.startswith("--out-dir="):
            kept.append(arg)
    return command_line(kept)


def build_parser():
    ap = argparse.ArgumentParser(prog="python -m bench.features", description=__doc__.split("\n")[0])
    add_checkpoint_arguments(ap, "DFlash drafter checkpoint")
    ap.add_argument("--accept-profile", type=parse_accept_profile, default={},
                    help="replayed tokens per step of the DFlash settings, e.g. edit=7.1 or 1k:edit=7.1")
    ap.add_argument("--point", default="1k")
    ap.add_argument("--task", default="edit")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--warmup-s", type=float, default=1.0)
    ap.add_argument("--device", default=None)
    ap.add_argument("--out-dir", default=str(REPO / "bench" / "results"))
    return ap


def main(argv=None):
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.random_weights and not args.model:
        args.model, args.draft = prepare_random(args.random_weights, args.random_dir)
    if not args.model or not args.draft:
        ap.error("pass --model and --draft, or --random-weights PRESET")
    import tileinfer

    (point,) = parse_points(args.point)

    def make_engine(**load_kw):
        return tileinfer.load(args.model, draft=args.draft, device=args.device, **load_kw)

    first = make_engine()
    random_weights = bool(args.random_weights)
    ids = prompt_ids(args.task, point, first.tokenizer, first.config.vocab_size,
                     Path(str(args.model)).name, random_weights)
    base = {"stop_ids": [] if random_weights else None,
            "accept_profile": profile_for(args.accept_profile, point.name, args.task)}
    env = environment() | {"point": point.name, "task": args.task, "model": model_name(args),
                           "weights_kind": "random" if random_weights else "real",
                           "accept_mode": accept_mode(base["accept_profile"]),
                           "timestamp": timestamp(), "command": recorded_command(sys.argv)}
    rows = feature_table(make_engine, ids, point.new_tokens, base, trials=args.trials,
                         warmup_s=args.warmup_s, engines={(): first})
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"features_{point.name}_{args.task}_{gpu_tag(env['gpu'])}".replace("/", "-")
    to_dataframe(rows, env).to_csv(out / f"{stem}.csv", index=False)
    table = to_markdown(rows)
    header = (f"Results by feature: {env['gpu']} ({env['gpu_bandwidth_gbs']} GB/s), {env['model']}, "
              f"{point.name} {args.task}, {env['weights_kind']} weights, acceptance {env['accept_mode']}, "
              f"git {env['git_rev']}\n\nreference = {REFERENCE_TEXT}; each row switches one feature.\n"
              f"`{env['command']}`\n\n")
    (out / f"{stem}.md").write_text(header + table)
    print(header + table)


if __name__ == "__main__":
    main()
