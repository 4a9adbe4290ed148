"""A request's host work: what a 1-token `generate` call spends outside the engine's own prefill window
(`stats.prefill_ms`), and the pieces of it that can be timed alone (the memory budget's queries, the
memory plan, the request's checks), medians and maxima over many calls. The comparison's 1-token latency
is the whole call, so this is the part of it no GPU work explains. The calls are timed back to back, and
again each after a reply of `--reply-tokens` (128, as the comparison's trials alternate them): the host
work a prefill trial does after a long reply.

    python bench/host_work.py --out bench/results [--preset qwen3-0.6b] [--calls 50] [--reply-tokens 128] [--profile]

`--profile` also runs the calls under cProfile and writes the functions that took the most of their own
time to `host_work_profile_<gpu>.txt` (the waits for the GPU are there too, under the calls that wait).
"""

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tileinfer  # noqa: E402
from bench.ref.metric import environment, gpu_tag, write_rows  # noqa: E402
from bench.ref.tileinfer_spec import BENCH_ROOT, prepare_random  # noqa: E402
from tileinfer import memory  # noqa: E402
from tileinfer_profiling.run_info import command_line  # noqa: E402


def _timed(engine, fn, calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        engine._sync()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def pieces(engine, ids: list[int]) -> dict:
    """name -> a call of one piece of the host work before the prefill."""
    out = {"memory plan (check_budget)": lambda: memory.check_budget(engine, len(ids), 1),
           "request checks (_check_request)": lambda: engine._check_request(ids, 1, [], None, None)}
    if engine.is_cuda:
        out |= {"free memory (torch.cuda.mem_get_info)": lambda: torch.cuda.mem_get_info(engine.device),
                "reserved bytes (torch.cuda.memory_reserved)": lambda: torch.cuda.memory_reserved(engine.device),
                "memory budget (memory.default_budget)": lambda: memory.default_budget(engine.device)}
    return out


def prompt_ids(engine, prompt_tokens: int) -> list[int]:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, engine.config.vocab_size, (prompt_tokens,), generator=g).tolist()


def call_rows(engine, ids: list[int], calls: int, reply_tokens: int = 0) -> list[dict]:
    """The 1-token call, the engine's prefill window inside it and the rest, each call after a reply of
    `reply_tokens` (untimed) when > 0."""
    walls, inner = [], []
    for _ in range(calls):
        if reply_tokens:
            engine.generate(ids, reply_tokens, stop_ids=[])
        engine._sync()
        t0 = time.perf_counter()
        stats = engine.generate(ids, 1, stop_ids=[]).stats
        walls.append((time.perf_counter() - t0) * 1e3)
        inner.append(stats.prefill_ms)
    outside = [w - i for w, i in zip(walls, inner)]
    label = f"generate(ids, 1) after a {reply_tokens}-token reply" if reply_tokens else "generate(ids, 1)"
    return [dict(what=f"{label}: the call", ms=statistics.median(walls), max_ms=max(walls)),
            dict(what=f"{label}: the engine's prefill window", ms=statistics.median(inner), max_ms=max(inner)),
            dict(what=f"{label}: outside the window", ms=statistics.median(outside), max_ms=max(outside))]


def measure(engine, prompt_tokens: int, calls: int, reply_tokens: int = 0) -> list[dict]:
    ids = prompt_ids(engine, prompt_tokens)
    for _ in range(5):
        engine.generate(ids, 1, stop_ids=[])
    rows = [dict(what=name, ms=statistics.median(t), max_ms=max(t))
            for name, fn in pieces(engine, ids).items() for t in [_timed(engine, fn, calls)]]
    rows += call_rows(engine, ids, calls)
    if reply_tokens:
        rows += call_rows(engine, ids, calls, reply_tokens)
    return [r | dict(prompt_tokens=prompt_tokens, calls=calls) for r in rows]


def profile(engine, prompt_tokens: int, calls: int, top: int = 30) -> str:
    """cProfile's table of `calls` 1-token requests, by each function's own time."""
    ids = prompt_ids(engine, prompt_tokens)
    engine.generate(ids, 1, stop_ids=[])
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        engine.generate(ids, 1, stop_ids=[])
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).strip_dirs().sort_stats("tottime").print_stats(top)
    return f"{calls} calls of generate(ids, 1), {prompt_tokens}-token prompt\n" + text.getvalue()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--preset", default="qwen3-0.6b", help="random checkpoint of a Qwen3 shape")
    ap.add_argument("--root", default=str(BENCH_ROOT), help="where the random checkpoints are kept")
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--reply-tokens", type=int, default=128,
                    help="also each call after a reply of this many tokens (0: back to back only)")
    ap.add_argument("--profile", action="store_true", help="also the calls under cProfile, by own time")
    ap.add_argument("--smoke", action="store_true", help="the embedded pair, a short prompt, few calls")
    args = ap.parse_args(argv)
    if args.smoke:
        engine, label, weights_kind = tileinfer.load(), "embedded pair", "embedded pair"
        args.prompt_tokens, args.calls = min(args.prompt_tokens, 32), min(args.calls, 3)
        args.reply_tokens = min(args.reply_tokens, 8)
    else:
        target, drafter = prepare_random(args.preset, Path(args.root) / args.preset)
        engine, label, weights_kind = tileinfer.load(target, drafter), args.preset, f"random ({args.preset})"
    if args.reply_tokens < 0:
        ap.error(f"--reply-tokens must be 0 or more, got {args.reply_tokens}")
    rows = measure(engine, args.prompt_tokens, args.calls, args.reply_tokens)
    env = environment(measure_bandwidth=False)
    base = {k: env[k] for k in ("gpu", "torch", "triton", "git_rev")} | {
        "model": label, "weights_kind": weights_kind, "command": command_line()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = write_rows([r | base for r in rows], out / f"host_work_{gpu_tag(env['gpu'])}.csv", last=tuple(base))
    print(f"{'what':70} {'ms':>8} {'max ms':>8}")
    for r in rows:
        print(f"{r['what']:70} {r['ms']:8.3f} {r['max_ms']:8.3f}")
    print(f"written {path}")
    if args.profile:
        table = profile(engine, args.prompt_tokens, args.calls)
        head = f"{base['gpu']}, torch {base['torch']}, triton {base['triton']}, rev {base['git_rev']}, {weights_kind}\n"
        prof_path = out / f"host_work_profile_{gpu_tag(env['gpu'])}.txt"
        prof_path.write_text(head + f"command: {base['command']}\n" + table)
        print("\n".join(table.splitlines()[:24]))
        print(f"written {prof_path}")


if __name__ == "__main__":
    main()
