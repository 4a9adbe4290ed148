"""The comparison's workload on TileInfer: BF16/INT8 x DFlash on/off x 1k/8k, edit and explain prompts.

    python -m bench.ref.tileinfer_spec --model Qwen/Qwen3-4B --draft z-lab/Qwen3-4B-DFlash-b16
    python -m bench.ref.tileinfer_spec --random-weights qwen3-4b --accept-profile edit=7.1,explain=2.9

Each configuration runs in fresh processes of this script (`--worker`), 3 at 1k and 2 at 8k unless
`--processes` says otherwise; every finished row is appended to `--out` at once. A summary table
(medians over processes, flagged where they disagree by more than 1 %) is printed at the end.
"""

import argparse
import os
import sys
import time
from pathlib import Path

from bench.ref.metric import (
    Row, accept_mode, decode_tok_s, environment, format_table, measure, summarize, timestamp, validate_row,
)
from bench.ref.procs import add_run_arguments, check_pinned, cpus_argv, emit_row, run_workers
from tileinfer_profiling.prompts import POINTS, ByteTokenizer, Point, build_prompt, load_prompt
from tileinfer_profiling.run_info import command_line

REPO = Path(__file__).resolve().parents[2]
DFLASH_BLOCK_SIZE = 16  # k = 15 drafts per step, as in the comparison
MODE = "cuda-graphs"  # Engine.generate's default: each decode step replays a captured CUDA graph
# Random-weight checkpoints, written once per preset and shared by the bench scripts.
BENCH_ROOT = Path(os.environ.get("TILEINFER_BENCH_ROOT", Path.home() / ".cache" / "tileinfer-bench"))


def parse_points(text):
    """'1k,8k' -> [Point]; 'P/N' (e.g. '256/16') is a custom point of P prompt and N new tokens."""
    points = []
    for name in text.split(","):
        if name in POINTS:
            points.append(POINTS[name])
        elif "/" in name:
            p, n = name.split("/")
            points.append(Point(name, int(p), int(n), 1))
        else:
            raise SystemExit(f"unknown point {name!r}: use 1k, 8k or PROMPT/NEW such as 256/16")
    return points


def parse_accept_profile(text):
    """'edit=7.1,explain=2.9' -> {'edit': 7.1, 'explain': 2.9}; a key may name its point too, as in
    '1k:edit=7.1,8k:edit=1.87' (see `profile_for`)."""
    if not text:
        return {}
    out = {}
    for item in text.split(","):
        task, _, value = item.partition("=")
        if not value:
            raise SystemExit(f"--accept-profile wants task=tokens_per_step pairs, got {item!r}")
        out[task.strip()] = float(value)
    return out


def profile_for(profile, point, task):
    """The tokens per step to replay for `task` at `point`: the 'point:task' entry, else the 'task' one."""
    return profile.get(f"{point}:{task}", profile.get(task))


def add_checkpoint_arguments(ap, draft_help):
    """--model/--draft, or --random-weights PRESET (written under --random-dir): what the specs measure."""
    ap.add_argument("--model", help="target checkpoint directory or hub id in the local HF cache")
    ap.add_argument("--draft", help=draft_help)
    ap.add_argument("--random-weights", metavar="PRESET",
                    help="benchmark a random-weight target of this preset (qwen3-4b) and a 5-layer drafter")
    ap.add_argument("--random-dir", help="where the random checkpoints are written (kept for reuse)")


def build_parser():
    ap = argparse.ArgumentParser(prog="python -m bench.ref.tileinfer_spec",
                                 description=__doc__.split("\n")[0])
    add_checkpoint_arguments(ap, "DFlash drafter checkpoint (needed for --dflash on)")
    ap.add_argument("--accept-profile", type=parse_accept_profile, default={},
                    help="replay this mean tokens per step per task, e.g. edit=7.1,explain=2.9, or per "
                    "point and task, e.g. 1k:edit=7.1,8k:edit=1.87")
    ap.add_argument("--points", type=parse_points, default=parse_points("1k,8k"))
    ap.add_argument("--tasks", default="edit,explain")
    ap.add_argument("--weights", default="bf16,int8")
    ap.add_argument("--dflash", default="on,off")
    ap.add_argument("--block-size", type=int, default=None, help="DFlash block (default: the drafter's)")
    ap.add_argument("--device", default=None)
    add_run_arguments(ap, "bench/runs/tileinfer-<time>.jsonl")
    return ap


def parse_checked(ap, argv):
    """Parsed arguments, with --model or --random-weights given."""
    args = ap.parse_args(argv)
    if not args.model and not args.random_weights:
        ap.error("pass --model (and --draft) or --random-weights PRESET")
    return args


def parse_args(argv=None):
    ap = build_parser()
    args = parse_checked(ap, argv)
    for flag, allowed in (("weights", {"bf16", "int8", "fp16", "fp32"}), ("dflash", {"on", "off"})):
        bad = set(getattr(args, flag).split(",")) - allowed
        if bad:
            ap.error(f"--{flag}: {', '.join(sorted(bad))} not in {', '.join(sorted(allowed))}")
    return args


def model_name(args):
    """What the rows' `model` says: the random-weight preset, or the target checkpoint's name."""
    return args.random_weights or Path(str(args.model)).name


def tileinfer_version():
    import tileinfer
    return tileinfer.__version__


def prepare_random(preset, directory=None):
    """Write (once) a random target of `preset` and a 5-layer drafter; return their directories."""
    from tileinfer.random_weights import write_dflash_drafter, write_qwen3

    root = Path(directory or BENCH_ROOT / preset)
    target, drafter = root / "target", root / "drafter"
    if not (target / "config.json").is_file():
        write_qwen3(target, preset)
    if not (drafter / "config.json").is_file():
        write_dflash_drafter(drafter, target, num_layers=5, block_size=DFLASH_BLOCK_SIZE)
    return str(target), str(drafter)


def prompt_ids(task, point, tokenizer, vocab_size, name, random_weights):
    """The prompt's token ids: stored or rendered for `tokenizer` (None: bytes, folded into the vocabulary)."""
    tokenizer = tokenizer if tokenizer is not None else ByteTokenizer()
    if isinstance(tokenizer, ByteTokenizer):
        name = "byte"
    if point.name in POINTS:
        ids = load_prompt(task, point.name, tokenizer, name=name).ids
    else:
        ids = build_prompt(task, point.prompt_tokens, tokenizer).ids
    if max(ids) >= vocab_size:
        if not random_weights:
            raise SystemExit(f"the tokenizer's ids reach {max(ids)}, past the model's vocabulary ({vocab_size})")
        ids = [i % vocab_size for i in ids]  # random weights: the ids only need to be valid
    return ids


def bench_prompt(engine, ids, new_tokens, trials=5, warmup_s=1.0, clock=time.perf_counter, **gen_kw):
    """(Timing, stats of the reply): the metric on one prompt, with the engine's own time of each prefill
    trial (`engine_prefill_trials_ms`); gen_kw go to every generate call."""
    inner = []

    def prefill():
        inner.append(engine.generate(ids, 1, **gen_kw).stats.prefill_ms)

    timing = measure(lambda: engine.generate(ids, new_tokens, **gen_kw), prefill,
                     trials=trials, warmup_s=warmup_s, clock=clock)
    timing.engine_prefill_trials_ms = inner[-trials:]  # the warm-up's calls come first
    return timing, timing.reply.stats


def run_worker(args, load=None, emit=emit_row, clock=time.perf_counter):
    """One configuration in this process: one row per task, handed to `emit` as it finishes."""
    if load is None:
        from tileinfer import load
    (point,) = args.points
    dflash = args.dflash == "on"
    random_weights = bool(args.random_weights)
    model, draft = args.model, args.draft
    env = environment(measure_bandwidth=not args.datasheet_bandwidth)  # before the weights take memory
    engine = load(model, draft=draft if dflash else None, weights=args.weights, device=args.device)
    rows = []
    for task in args.tasks.split(","):
        ids = prompt_ids(task, point, engine.tokenizer, engine.config.vocab_size,
                         Path(str(model)).name, random_weights)
        profile = profile_for(args.accept_profile, point.name, task) if dflash else None
        gen_kw = {"stop_ids": [] if random_weights else None, "accept_profile": profile,
                  "block_size": (args.block_size if dflash else 1)}
        timing, stats = bench_prompt(engine, ids, point.new_tokens, args.trials, args.warmup_s, clock, **gen_kw)
        row = Row(
            engine="tileinfer", task=task, point=point.name, prompt_tokens=len(ids),
            new_tokens=stats.new_tokens, weights=args.weights, dflash=dflash,
            block_size=int(getattr(stats, "block_size", None) or (1 if not dflash else DFLASH_BLOCK_SIZE)),
            latency_ms=timing.latency_ms, prefill_ms=timing.prefill_ms,
            decode_tok_s=decode_tok_s(stats.new_tokens, timing.latency_ms, timing.prefill_ms),
            tokens_per_step=stats.mean_tokens_per_step or 1.0, steps=stats.steps, process=args.process,
            **env, command=command_line(), weights_kind="random" if random_weights else "real",
            accept_mode=accept_mode(profile), timestamp=timestamp(),
            latency_trials_ms=timing.latency_trials_ms, prefill_trials_ms=timing.prefill_trials_ms,
            engine_prefill_trials_ms=timing.engine_prefill_trials_ms, model=model_name(args),
            version=tileinfer_version(), mode=MODE,
        ).as_dict()
        emit(validate_row(row))
        rows.append(row)
    return rows


def base_worker_argv(module, args, point, process):
    """A worker process's command, the arguments every spec shares: the point, tasks, trials, checkpoints."""
    argv = [sys.executable, "-m", module, "--worker", "--process", str(process),
            "--points", point.name if point.name in POINTS else f"{point.prompt_tokens}/{point.new_tokens}",
            "--tasks", args.tasks, "--trials", str(args.trials), "--warmup-s", str(args.warmup_s)]
    if not getattr(args, "prepared", False):  # checkpoints the workers write themselves are not named
        argv += ["--model", args.model] + (["--draft", args.draft] if args.draft else [])
    for flag, value in (("--random-weights", args.random_weights), ("--random-dir", args.random_dir),
                        ("--device", args.device)):
        if value is not None:
            argv += [flag, str(value)]
    if args.datasheet_bandwidth:
        argv.append("--datasheet-bandwidth")
    return argv + cpus_argv(args.cpus)


def worker_argv(args, point, weights, dflash, process):
    argv = base_worker_argv("bench.ref.tileinfer_spec", args, point, process) + ["--weights", weights,
                                                                                "--dflash", dflash]
    if args.accept_profile:
        argv += ["--accept-profile", ",".join(f"{k}={v:g}" for k, v in args.accept_profile.items())]
    if args.block_size is not None:
        argv += ["--block-size", str(args.block_size)]
    return argv


def jobs(args):
    """(label, argv) per configuration x process, the cheapest configurations first."""
    out = []
    for point in args.points:
        for weights in args.weights.split(","):
            for dflash in args.dflash.split(","):
                n = args.processes or point.processes
                for process in range(n):
                    label = f"{point.name} {weights} dflash={dflash} #{process}"
                    out.append((label, worker_argv(args, point, weights, dflash, process)))
    return out


def prepare_checkpoints(args):
    """--random-weights without --model: write (once) the random checkpoints; workers are not told their paths."""
    if args.random_weights and not args.model:
        args.model, args.draft = prepare_random(args.random_weights, args.random_dir)
        args.prepared = True


def coordinate(jobs, out, name, timeout_s=None, desc="configurations", cpus=None):
    """Run the (label, argv) workers, their rows appended to `out` (default bench/runs/<name>-<time>.jsonl);
    print the summary and write it beside the rows as markdown; return the rows."""
    out = Path(out or REPO / "bench" / "runs" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = run_workers(jobs, out, desc=desc, timeout_s=timeout_s, cpus=cpus)
    if not rows:
        raise SystemExit("no rows were produced")
    summary = summarize(rows)
    table = format_table(summary)
    print(table)
    out.with_suffix(".md").write_text(table)
    bad = [s for s in summary if not s["agree"]]
    if bad:
        print(f"{len(bad)} configuration(s) disagree across processes by more than 1 %", file=sys.stderr)
    print(f"{len(rows)} rows in {out}", file=sys.stderr)
    return rows


def main(argv=None):
    args = parse_args(argv)
    prepare_checkpoints(args)
    if "on" in args.dflash.split(",") and not args.draft:
        raise SystemExit("--dflash on needs --draft (or --random-weights); or pass --dflash off")
    if args.worker:
        check_pinned(args.cpus)
        run_worker(args)
        return
    coordinate(jobs(args), args.out, "tileinfer", args.timeout_s, cpus=args.cpus)


if __name__ == "__main__":
    main()
