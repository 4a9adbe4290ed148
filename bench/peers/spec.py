"""The comparison's workload on the engines a user would pick instead, with the comparison's metric and rows.

    python -m bench.peers.spec --random-weights qwen3-4b --points 1k
    python -m bench.peers.spec --model Qwen/Qwen3-4B --draft z-lab/Qwen3-4B-DFlash-b16 --engines hf-eager

Engines (`--engines`): `hf-eager` (transformers `generate`, dynamic cache), `hf-compile` (static cache
and torch.compile mode="reduce-overhead", with fallbacks: `bench/peers/hf.py`), `dflash-ref` (the public
DFlash reference, `bench/peers/dflash_ref.py`). Same checkpoint and prompt token ids as
`bench.ref.tileinfer_spec`, BF16, greedy. Each engine x point runs in fresh processes (`--processes`,
default 3 at 1k and 2 at 8k); every finished row is appended to `--out` at once. `--new-tokens 256,dflash-ref=32`
caps replies (all engines, or one): a capped row says so in `note`.
"""

import argparse
import json
from pathlib import Path

from bench.ref.metric import Row, decode_tok_s, environment, measure, timestamp, validate_row
from bench.ref.procs import add_run_arguments, check_pinned, emit_row
from bench.ref.tileinfer_spec import (
    add_checkpoint_arguments, base_worker_argv, coordinate, model_name, parse_checked, parse_points,
    prepare_checkpoints, prompt_ids,
)
from tileinfer_profiling.run_info import command_line

ENGINES = ("hf-eager", "hf-compile", "dflash-ref")
RANDOM_DFLASH_NOTE = ("random weights: the drafts are almost never accepted, so decode tok/s is its step rate; "
                      "its step costs drafter_ms_per_step + verify_ms_per_step at any acceptance")


def parse_engines(text):
    engines = [e for e in text.split(",") if e]
    bad = sorted(set(engines) - set(ENGINES))
    if bad:
        raise argparse.ArgumentTypeError(f"unknown engine(s) {', '.join(bad)}: use {', '.join(ENGINES)}")
    return engines


def parse_new_tokens(text):
    """'256,dflash-ref=32' -> {'': 256, 'dflash-ref': 32}: a cap for every engine, or for one."""
    out = {}
    for item in (text or "").split(","):
        if not item:
            continue
        engine, _, value = item.rpartition("=")
        if engine and engine not in ENGINES:
            raise argparse.ArgumentTypeError(f"--new-tokens: unknown engine {engine!r}")
        try:
            out[engine] = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--new-tokens wants N or engine=N items, got {item!r}") from None
    return out


def new_tokens_for(caps, engine, point):
    """(new tokens, note): the point's reply length, or the engine's cap when smaller."""
    cap = caps.get(engine, caps.get(""))
    if cap is None or cap >= point.new_tokens:
        return point.new_tokens, ""
    return cap, f"reply capped at {cap} of the point's {point.new_tokens} new tokens"


def build_parser():
    ap = argparse.ArgumentParser(prog="python -m bench.peers.spec", description=__doc__.split("\n")[0])
    add_checkpoint_arguments(ap, "DFlash drafter checkpoint (for dflash-ref)")
    ap.add_argument("--engines", type=parse_engines, default=list(ENGINES))
    ap.add_argument("--points", type=parse_points, default=parse_points("1k,8k"))
    ap.add_argument("--tasks", default="edit,explain")
    ap.add_argument("--new-tokens", type=parse_new_tokens, default={},
                    help="cap the replies: N for every engine, engine=N for one (e.g. 256,dflash-ref=32)")
    ap.add_argument("--device", default=None)
    add_run_arguments(ap, "bench/runs/peers-<time>.jsonl")
    return ap


def parse_args(argv=None):
    return parse_checked(build_parser(), argv)


def _format_new_tokens(caps):
    return ",".join(f"{k}={v}" if k else str(v) for k, v in caps.items())


def worker_argv(args, engine, point, process):
    argv = base_worker_argv("bench.peers.spec", args, point, process) + ["--engines", engine]
    if args.new_tokens:
        argv += ["--new-tokens", _format_new_tokens(args.new_tokens)]
    return argv


def jobs(args):
    """(label, argv) per point x engine x process."""
    return [(f"{point.name} {engine} #{process}", worker_argv(args, engine, point, process))
            for point in args.points for engine in args.engines
            for process in range(args.processes or point.processes)]


def build_runner(engine, model, draft, random_weights, device=None):
    """The runner of `engine` on the checkpoint(s), BF16, on `device` (default: CUDA when present)."""
    import torch

    from bench.peers import dflash_ref, hf
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    target = hf.load_model(model, device)
    if engine == "dflash-ref":
        if not draft:
            raise SystemExit("dflash-ref needs --draft (or --random-weights)")
        eos = target.generation_config.eos_token_id
        stop = None if random_weights else ([eos] if isinstance(eos, int) else eos)
        return dflash_ref.DFlashRefRunner(target, dflash_ref.load_drafter(draft, device), stop)
    hf.set_stop_ids(target, [] if random_weights else None)
    return hf.HFRunner(target, "eager" if engine == "hf-eager" else "static-compile")


def _tokenizer(model, random_weights):
    if random_weights:
        return None  # the ByteTokenizer's ids, as TileInfer's rows on random weights
    from bench.ref.vllm_spec import local_checkpoint
    from tileinfer_profiling.prompts import tokenizer_from_path
    return tokenizer_from_path(local_checkpoint(model))


def _vocab_size(model):
    from bench.ref.vllm_spec import local_checkpoint
    return json.loads((Path(local_checkpoint(model)) / "config.json").read_text())["vocab_size"]


def run_worker(args, make_runner=build_runner, emit=emit_row):
    """One engine at one point in this process: one row per task, handed to `emit` as it finishes."""
    (point,) = args.points
    (engine,) = args.engines
    random_weights = bool(args.random_weights)
    env = environment(measure_bandwidth=not args.datasheet_bandwidth)  # before the weights take memory
    runner = make_runner(engine, args.model, args.draft, random_weights, args.device)
    tokenizer, vocab = _tokenizer(args.model, random_weights), _vocab_size(args.model)
    new_tokens, cap_note = new_tokens_for(args.new_tokens, engine, point)
    rows = []
    for task in args.tasks.split(","):
        ids = prompt_ids(task, point, tokenizer, vocab, Path(str(args.model)).name, random_weights)
        runner.prepare(ids, new_tokens)
        timing = measure(lambda: runner.reply(ids, new_tokens), lambda: runner.reply(ids, 1),
                         trials=args.trials, warmup_s=args.warmup_s)
        reply = timing.reply
        drafter_ms, verify_ms = runner.pass_times(ids, new_tokens)
        notes = [runner.note, cap_note, RANDOM_DFLASH_NOTE if runner.dflash and random_weights else ""]
        row = Row(
            engine=runner.engine, task=task, point=point.name, prompt_tokens=len(ids),
            new_tokens=len(reply.tokens), weights="bf16", dflash=runner.dflash, block_size=runner.block_size,
            latency_ms=timing.latency_ms, prefill_ms=timing.prefill_ms,
            decode_tok_s=decode_tok_s(len(reply.tokens), timing.latency_ms, timing.prefill_ms),
            tokens_per_step=reply.tokens_per_step, steps=reply.steps, process=args.process, **env,
            command=command_line(), weights_kind="random" if random_weights else "real", accept_mode="real",
            timestamp=timestamp(), latency_trials_ms=timing.latency_trials_ms,
            prefill_trials_ms=timing.prefill_trials_ms,
            model=model_name(args), version=runner.version, mode=runner.mode,
            note="; ".join(n for n in notes if n), drafter_ms_per_step=drafter_ms, verify_ms_per_step=verify_ms,
        ).as_dict()
        emit(validate_row(row))
        rows.append(row)
    return rows


def main(argv=None):
    args = parse_args(argv)
    prepare_checkpoints(args)
    if args.worker:
        check_pinned(args.cpus)
        run_worker(args)
        return
    coordinate(jobs(args), args.out, "peers", args.timeout_s, desc="peer processes", cpus=args.cpus)


if __name__ == "__main__":
    main()
