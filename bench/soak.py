"""Soak: many mixed generate calls on one engine, the device memory it holds, and interrupted calls.

Calls mix prompt lengths, new-token counts, block sizes (plain and DFlash), stop ids, forced acceptance
and eager runs. Allocated bytes are read after every `--every` calls and must stay within `--tolerance-mb`
of the first reading (graphs and caches are made during the first stretch). Interrupted calls: a
KeyboardInterrupt raised from a timer thread at a random moment inside generate; the next call's tokens
must equal those of a fresh engine given the same request.

    python bench/soak.py --calls 10000 --out bench/results
"""

import _thread
import argparse
import json
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tileinfer  # noqa: E402
from bench.ref.metric import environment, gpu_tag, write_rows  # noqa: E402
from tileinfer_profiling.run_info import command_line  # noqa: E402


def random_request(g, vocab):
    def rand(lo, hi):
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    ids = torch.randint(0, vocab, (rand(1, 600),), generator=g).tolist()
    kw = dict(block_size=(1, 16, rand(2, 16))[rand(0, 2)], stop_ids=None if rand(0, 1) else [])
    if rand(0, 9) == 0:
        kw["accept_profile"] = rand(10, 40) / 10
    if rand(0, 49) == 0:
        kw["eager"] = True
    return ids, rand(1, 64), kw


def allocated() -> int:
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def interrupted(engine, fresh, g, vocab, delay_s):
    """Interrupt a long request after delay_s; then the next request must match a fresh engine's."""
    ids = torch.randint(0, vocab, (300,), generator=g).tolist()
    timer = threading.Timer(delay_s, _thread.interrupt_main)
    hit = False
    timer.start()
    try:
        engine.generate(ids, 400, stop_ids=[])
        timer.join()  # finished before the timer: wait so the interrupt cannot land later
    except KeyboardInterrupt:
        hit = True
    finally:
        timer.cancel()
    nxt = torch.randint(0, vocab, (50,), generator=g).tolist()
    ours = engine.generate(nxt, 48, stop_ids=[]).tokens
    return hit, ours == fresh.generate(nxt, 48, stop_ids=[]).tokens


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10000)
    parser.add_argument("--every", type=int, default=1000)
    parser.add_argument("--tolerance-mb", type=float, default=1.0)
    parser.add_argument("--interrupts", type=int, default=20)
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--max-seconds", type=float, default=float("inf"), help="stop the calls early (recorded)")
    args = parser.parse_args(argv)
    env = environment(measure_bandwidth=False)
    base = {k: env[k] for k in ("gpu", "torch", "triton", "git_rev")} | {"command": command_line(),
                                                                        "model": "embedded pair"}
    engine = tileinfer.load()
    vocab = engine.config.vocab_size
    g = torch.Generator().manual_seed(0)
    rows, t0 = [], time.perf_counter()
    first = None
    calls = 0
    for call in range(1, args.calls + 1):
        if time.perf_counter() - t0 > args.max_seconds:
            break
        calls = call
        ids, new, kw = random_request(g, vocab)
        engine.generate(ids, new, **kw)
        if call % args.every == 0:
            now = allocated()
            first = now if first is None else first
            rows.append(dict(kind="allocated", calls=call, allocated_bytes=now, drift_bytes=now - first,
                             reserved_bytes=torch.cuda.memory_reserved(), graphs=len(engine._graphs),
                             kv_capacity=engine.cache.capacity, elapsed_s=round(time.perf_counter() - t0, 1)))
            print(rows[-1], flush=True)
    fresh = tileinfer.load()
    outcomes = [interrupted(engine, fresh, g, vocab, float(torch.rand(1, generator=g)) * 0.05)
                for _ in range(args.interrupts)]
    rows.append(dict(kind="interrupts", calls=args.interrupts, interrupted=sum(h for h, _ in outcomes),
                     next_call_equal_to_fresh=sum(ok for _, ok in outcomes)))
    print(rows[-1], flush=True)
    drift = max((abs(r["drift_bytes"]) for r in rows if r["kind"] == "allocated"), default=0)
    ok = drift <= args.tolerance_mb * 2**20 and all(ok for _, ok in outcomes) and calls == args.calls
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = write_rows([r | base for r in rows], out / f"soak_{gpu_tag(env['gpu'])}.csv", last=tuple(base))
    summary = base | {"calls": calls, "calls_asked": args.calls, "max_drift_bytes": drift, "tolerance_bytes": args.tolerance_mb * 2**20,
                      "interrupted": rows[-1]["interrupted"], "next_call_equal": rows[-1]["next_call_equal_to_fresh"],
                      "interrupt_trials": args.interrupts, "ok": ok}
    print(json.dumps(summary))
    print(f"rows in {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
