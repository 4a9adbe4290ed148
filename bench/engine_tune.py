"""The skinny GEMMs' tuned configs chosen inside the engine: a tune's best tiles, timed alone, tried one entry at a
time in the decoding step they serve, each kept only where the whole step gets faster.

    python bench/gemm_bench.py --tune-only --models 4b --ms 1,16 --out DIR         # the trials, timed alone
    python bench/engine_tune.py --trials DIR/gemm_tune_trials.csv --model qwen3-4b --weights int8 --out DIR

A tile that wins alone can lose in the engine, where the launch before it still runs (PDL), its epilogue reads
the row sums its producer wrote, and a flow may feed it. Each entry (shape × M bucket × kind) of the trials
file gets its `--top` best distinct configs tried in place of the one the engine runs now (the GPU's file, or
the heuristic): M = 1 entries in plain decode, M = 4 / 16 entries in a DFlash step replaying the point's tokens
per step. Entries go largest first; a candidate is kept when its step is `--min-gain` faster than the best so
far, and later entries are tried on top of what was kept. Checkpoints have random weights (written once,
loaded through tileinfer.load for every candidate, so each captures its graphs with its configs).

Writes engine_tune_<gpu>.csv (every candidate: its µs alone, its step's tok/s, the incumbent's, kept or
not); `--budget-s` starts no candidate after that long (a call with a time limit keeps what it found);
`--install` merges what was kept into the GPU's configs file, beside a copy of the file it replaced under
--out (`<gpu>.before.json`, for `floor_bench.py --configs`).
"""

import argparse
import copy
import gc
import json
import sys
import time
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tileinfer  # noqa: E402
from bench import tuned_override  # noqa: E402
from bench.engine_bench import POINTS, checkpoints, replayed, timed  # noqa: E402
from bench.ref.metric import environment, gpu_tag, write_rows  # noqa: E402
from bench.ref.tileinfer_spec import BENCH_ROOT  # noqa: E402
from tileinfer.ops import gemm_configs, tuning  # noqa: E402
from tileinfer_profiling.run_info import command_line  # noqa: E402


def candidates(trials: pd.DataFrame, weights: str, ms, top: int, linears=None) -> list[dict]:
    """The entries of `weights` ("bf16": bf16 and bf16_argmax) at the buckets `ms` (of the `linears` named, None:
    all), largest first (by their best µs), each with its `top` fastest distinct configs:
    [{shape, name, bucket, kind, alone_us, configs}]."""
    kinds = trials["kind"].astype(str)
    rows = trials[kinds.str.split("_").str[0].eq(weights) & trials["m"].isin(ms)]
    if linears is not None:
        rows = rows[rows["shape"].isin(linears)]
    entries = []
    for (n, k, m, kind), g in rows.groupby(["n", "k", "m", "kind"]):
        g = g.sort_values("us").drop_duplicates("config")
        entries.append(dict(shape=f"{n}x{k}", name=str(g["shape"].iloc[0]), bucket=f"m{m}", kind=kind,
                            alone_us=float(g["us"].iloc[0]),
                            configs=[(json.loads(c), float(u)) for c, u in zip(g["config"][:top], g["us"][:top])]))
    return sorted(entries, key=lambda e: -e["alone_us"])


def with_entry(configs: dict, entry: dict, config: dict) -> dict:
    """`configs` (a whole GPU file) with one skinny-GEMM entry set to `config`."""
    out = copy.deepcopy(configs)
    out.setdefault("skinny_gemm", {}).setdefault(entry["shape"], {}).setdefault(entry["bucket"], {})[entry["kind"]] = config
    return out


def current(configs: dict, entry: dict) -> dict:
    """The config the engine runs now for `entry`: the file's, else the heuristic's (as a full dict)."""
    given = configs.get("skinny_gemm", {}).get(entry["shape"], {}).get(entry["bucket"], {})
    kind = entry["kind"]
    found = (kind.endswith("_argmax") and given.get(kind)) or given.get(kind.split("_")[0])
    if found:
        return gemm_configs.GemmConfig(**found).as_dict()
    n, k = map(int, entry["shape"].split("x"))
    return gemm_configs.heuristic_config(n, k, int(entry["bucket"][1:]), kind.split("_")[0]).as_dict()


def choose(configs: dict, entries: list[dict], step_tok_s, min_gain: float, record,
           out_of_time=lambda: False) -> dict:
    """Coordinate descent over `entries`: each candidate timed as `step_tok_s(configs, mode)` ("plain" for M = 1
    entries, "dflash" otherwise) against the best step so far, kept if `min_gain` faster; every trial handed
    to `record`; no candidate started once `out_of_time()`. Returns the configs with what was kept."""
    best = {}
    for entry in entries:
        mode = "plain" if entry["bucket"] == "m1" else "dflash"
        if mode not in best:
            best[mode] = step_tok_s(configs, mode)
            record(dict(entry_of(entry), candidate="incumbent", config=json.dumps(current(configs, entry)),
                        alone_us=float("nan"), mode=mode, tok_s=best[mode], incumbent_tok_s=best[mode], kept=True))
        was = current(configs, entry)
        for config, alone_us in entry["configs"]:
            full = gemm_configs.GemmConfig(**config).as_dict()
            if full == was:
                continue
            if out_of_time():
                return configs
            trial = with_entry(configs, entry, full)
            tok_s = step_tok_s(trial, mode)
            kept = tok_s > best[mode] * (1 + min_gain)
            record(dict(entry_of(entry), candidate="tried", config=json.dumps(full), alone_us=alone_us, mode=mode,
                        tok_s=tok_s, incumbent_tok_s=best[mode], kept=kept))
            if kept:
                configs, best[mode], was = trial, tok_s, full
    return configs


def entry_of(entry: dict) -> dict:
    return {"linear": entry["name"], "shape": entry["shape"], "bucket": entry["bucket"], "kind": entry["kind"]}


def engine_step(target, drafter, weights: str, point: str, new_tokens: int, repeats: int):
    """step_tok_s(configs, mode): decode tok/s of an engine loaded with `configs` in place of the GPU's file,
    plain or DFlash replaying the point's first tokens per step."""
    def step_tok_s(configs: dict, mode: str) -> float:
        with tuned_override.replaced(configs):
            engine = tileinfer.load(target, draft=drafter, weights=weights)
            g = torch.Generator().manual_seed(0)  # the same prompt for every candidate
            ids = torch.randint(0, engine.config.vocab_size, (POINTS[point],), generator=g).tolist()
            kw = {"block_size": 1} if mode == "plain" else {"accept_profile": replayed(point)[0]}
            r = timed(engine, ids, new_tokens, repeats, **kw)
            del engine
            gc.collect()
            torch.cuda.empty_cache() if torch.cuda.is_available() else None
        return r["decode_tok_s"]

    return step_tok_s


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", required=True, help="a tune's trials (gemm_bench.py --tune-only --out DIR writes "
                                                        "DIR/gemm_tune_trials.csv)")
    parser.add_argument("--model", default="qwen3-4b", help="the random-weight preset whose steps are timed")
    parser.add_argument("--weights", default="bf16", choices=("bf16", "int8"))
    parser.add_argument("--ms", default="1,16", help="M buckets whose entries are tried, comma-separated")
    parser.add_argument("--linears", default=None,
                        help="only these linears of the trials (qkv, o, gate_up, down, lm_head, fc; comma-separated)")
    parser.add_argument("--top", type=int, default=3, help="the fastest distinct configs alone tried per entry")
    parser.add_argument("--min-gain", type=float, default=0.005, help="a candidate's step must be this much faster")
    parser.add_argument("--point", default="1k", choices=sorted(POINTS))
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--budget-s", type=float, default=0,
                        help="start no candidate after this many seconds (0: no limit); what was kept stands")
    parser.add_argument("--install", action="store_true", help="merge what was kept into the GPU's configs file")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--root", default=str(BENCH_ROOT), help="where the random checkpoints are kept")
    args = parser.parse_args(argv)
    try:
        trials = pd.read_csv(args.trials)
        ms = [int(m) for m in args.ms.split(",")]
    except (OSError, ValueError) as e:
        parser.error(f"{e}")
    missing = {"n", "k", "m", "kind", "config", "us", "shape"} - set(trials.columns)
    if missing:
        parser.error(f"{args.trials} is not a tune's trials file: no {', '.join(sorted(missing))} column")
    linears = args.linears.split(",") if args.linears else None
    entries = candidates(trials, args.weights, ms, args.top, linears)
    if not entries:
        parser.error(f"{args.trials} has no {args.weights} entries at M = {args.ms}"
                     + (f" of {args.linears}" if linears else ""))
    if args.top < 1:
        parser.error("--top must be >= 1")
    gpu = tuning.gpu_of(torch.device("cuda")) if torch.cuda.is_available() else "cpu"
    installed = tuning.gpu_configs(gpu) or {"gpu": gpu}
    args.out.mkdir(parents=True, exist_ok=True)
    env = environment(measure_bandwidth=False)
    base = {**env, "command": command_line(), "weights_kind": "random", "model": args.model,
            "weights": args.weights, "point": args.point}
    rows = []
    path = args.out / f"engine_tune_{gpu_tag(env['gpu'])}.csv"

    def record(row):
        rows.append({**row, **base})
        write_rows(rows, path, last=tuple(base))  # a run cut short keeps what it measured
        print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)

    target, drafter = checkpoints(args.model, Path(args.root))
    step = engine_step(target, drafter, args.weights, args.point, args.new_tokens, args.repeats)
    start = time.perf_counter()
    chosen = choose(installed, entries, step, args.min_gain, record,
                    out_of_time=lambda: args.budget_s > 0 and time.perf_counter() - start > args.budget_s)
    kept = [r for r in rows if r["candidate"] == "tried" and r["kept"]]
    print(f"\n{len(kept)} of {sum(r['candidate'] == 'tried' for r in rows)} candidates kept; rows in {path}")
    if args.install and kept:
        before = tuning.config_path(gpu)
        if before.exists():
            (args.out / f"{before.stem}.before.json").write_text(before.read_text())
        print(f"installed: {tuning.write_section(gpu, 'skinny_gemm', chosen['skinny_gemm'])}")
        gemm_configs._lookup.cache_clear()
    return rows


if __name__ == "__main__":
    main()
