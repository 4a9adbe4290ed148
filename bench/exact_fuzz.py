"""Greedy DFlash against greedy decoding, token for token, over many fuzzed requests.

Embedded pair (real acceptance): prompts of three kinds — slices of the benchmark's text, random ids,
repetitive token runs — of 1 to 4k tokens, 1 to 400 new tokens, block sizes 2 to 16, with and without
stop ids (a stop id taken from the plain continuation lands inside a block). Each case runs plain
(block 1) and DFlash with the same request; any difference is a failure of exact mode.

Oracle (`--oracle PRESET`): a random-weight pair of a real Qwen3 shape with drafts replaced on the
device (inside the step graphs) by the target's own greedy continuation, corrupted at random positions,
so verify passes accept long runs at that shape's kernels.

    python bench/exact_fuzz.py --cases 1000 --out bench/results [--oracle qwen3-4b --oracle-cases 16]
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tileinfer  # noqa: E402
import tileinfer_profiling.prompts  # noqa: E402
from bench.ref.metric import environment, write_rows  # noqa: E402
from tileinfer_profiling.run_info import command_line  # noqa: E402

TEXT_DIR = Path(tileinfer_profiling.prompts.__file__).parent / "data"


def benchmark_ids(tokenizer) -> list[int]:
    text = "\n".join(p.read_text() for p in sorted(TEXT_DIR.glob("*.txt")))
    return tokenizer.encode(text).ids


def make_cases(count: int, vocab: int, text_ids: list[int], seed: int, max_prompt: int, max_new: int):
    g = torch.Generator().manual_seed(seed)

    def rand(lo, hi):  # inclusive
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    for i in range(count):
        kind = ("text", "random", "repetitive")[i % 3]
        n = rand(1, max_prompt) if rand(0, 3) else rand(1, 64)  # a quarter of the prompts short
        if kind == "text":
            lo = rand(0, max(0, len(text_ids) - n))
            ids = text_ids[lo:lo + n]
        elif kind == "random":
            ids = torch.randint(0, vocab, (n,), generator=g).tolist()
        else:
            motif = torch.randint(0, vocab, (rand(1, 8),), generator=g).tolist()
            ids = (motif * (n // len(motif) + 1))[:n]
        yield dict(case=i, kind=kind, prompt_len=len(ids), new_tokens=rand(1, max_new), block_size=rand(2, 16),
                   stop_mode=("none", "eos", "mid")[rand(0, 2)], ids=ids, stop_pick=rand(0, 10**6))


def run_case(engine, case) -> dict:
    ids, new = case["ids"], case["new_tokens"]
    stop = [] if case["stop_mode"] == "none" else None  # None: the checkpoint's EOS ids
    plain = engine.generate(ids, new, stop_ids=stop, block_size=1)
    if case["stop_mode"] == "mid" and len(plain.tokens) > 1:
        # a token of the continuation as the stop id: DFlash must stop inside a block at the same place
        stop = [plain.tokens[1 + case["stop_pick"] % (len(plain.tokens) - 1)]]
        plain = engine.generate(ids, new, stop_ids=stop, block_size=1)
    spec = engine.generate(ids, new, stop_ids=stop, block_size=case["block_size"])
    same = spec.tokens == plain.tokens
    first = None if same else next((i for i, (a, b) in enumerate(zip(spec.tokens, plain.tokens)) if a != b),
                                   min(len(spec.tokens), len(plain.tokens)))
    return {k: v for k, v in case.items() if k not in ("ids", "stop_pick")} | dict(
        equal=same, first_difference=first, plain_tokens=len(plain.tokens), dflash_tokens=len(spec.tokens),
        tokens_per_step=spec.stats.mean_tokens_per_step, stop_ids=len(stop) if stop is not None else "eos")


class OracleDrafts:
    """Drafts read on the device from a buffer holding the target's greedy continuation, with tokens at
    chosen positions corrupted: graph-capturable, so verify passes of long acceptance run as in serving."""

    def __init__(self, engine, sequence: list[int], corrupt: torch.Tensor):
        self.engine = engine
        dev = engine.device
        self.seq = torch.tensor(sequence + [0] * (2 * engine.block_max + 2), device=dev)
        self.corrupt = corrupt.to(dev)
        self.vocab = engine.config.vocab_size
        self.original = engine._draft

    def __call__(self, shape, host_start):
        self.original(shape, host_start)  # the drafter still runs: its costs and caches stay real
        e, size = self.engine, shape.size
        pos = e.start_t + 1 + e.arange[: size - 1]
        drafts = torch.where(self.corrupt[pos], (self.seq[pos] + 1) % self.vocab, self.seq[pos])
        e.block_ids[1:size].copy_(drafts)


def oracle_cases(preset: str, root: Path, count: int, weights: str, seed: int, prompt_len: int, new: int):
    from bench.ref.tileinfer_spec import prepare_random
    target, drafter = prepare_random(preset, root / preset)
    engine = tileinfer.load(target, draft=drafter, weights=weights, exact=True)
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(count):
        ids = torch.randint(0, engine.config.vocab_size, (prompt_len,), generator=g).tolist()
        plain = engine.generate(ids, new, stop_ids=[], block_size=1)
        rate = (0.02, 0.1, 0.3)[i % 3]
        corrupt = torch.rand(len(ids) + new + 64, generator=g) < rate
        engine._draft = OracleDrafts(engine, ids + plain.tokens, corrupt)
        try:
            spec = engine.generate(ids, new, stop_ids=[], block_size=16)
        finally:
            del engine._draft
            engine._drop_graphs()  # the oracle's graphs read this case's buffers
        same = spec.tokens == plain.tokens
        rows.append(dict(case=i, kind=f"oracle {preset}", weights=weights, prompt_len=prompt_len, new_tokens=new,
                         block_size=16, corrupt_rate=rate, equal=same,
                         first_difference=None if same else next(
                             (j for j, (a, b) in enumerate(zip(spec.tokens, plain.tokens)) if a != b), None),
                         tokens_per_step=spec.stats.mean_tokens_per_step, steps=spec.stats.steps))
        print(f"oracle {weights} case {i}: equal={same} tokens/step {spec.stats.mean_tokens_per_step:.2f}", flush=True)
    del engine
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--weights", default="bf16,int8")
    parser.add_argument("--max-prompt", type=int, default=4096)
    parser.add_argument("--max-new", type=int, default=400)
    parser.add_argument("--oracle", default=None, help="a random-weight preset, e.g. qwen3-4b")
    parser.add_argument("--oracle-cases", type=int, default=12)
    parser.add_argument("--oracle-prompt", type=int, default=1024)
    parser.add_argument("--oracle-new", type=int, default=192)
    parser.add_argument("--root", default=os.environ.get("TILEINFER_BENCH_ROOT", "/tmp/tileinfer-bench"))
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=float("inf"),
                        help="stop drawing cases for a weight kind past its share of this (rows so far are kept)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment(measure_bandwidth=False)
    base = {k: env[k] for k in ("gpu", "torch", "triton", "git_rev")} | {"command": command_line()}
    rows, t0 = [], time.perf_counter()
    kinds = args.weights.split(",")
    for n, weights in enumerate(kinds, 1):
        engine = tileinfer.load(weights=weights, exact=True)
        text = benchmark_ids(engine.tokenizer)
        cases = make_cases(args.cases, engine.config.vocab_size, text, args.seed, args.max_prompt, args.max_new)
        for case in cases:
            if time.perf_counter() - t0 > args.max_seconds * n / len(kinds):
                print(f"{weights}: time share spent after {case['case']} cases", flush=True)
                break
            row = run_case(engine, case) | {"weights": weights, "model": "embedded pair", "weights_kind": "trained"}
            rows.append(row)
            if not row["equal"]:
                print(f"DIFFERS: {row}", flush=True)
            if row["case"] % 100 == 99:
                print(f"{weights}: {row['case'] + 1} cases, {time.perf_counter() - t0:.0f} s", flush=True)
        del engine
    if args.oracle:
        for weights in args.weights.split(","):
            rows += [r | {"model": args.oracle, "weights_kind": "random"}
                     for r in oracle_cases(args.oracle, Path(args.root), args.oracle_cases, weights, args.seed,
                                           args.oracle_prompt, args.oracle_new)]
    rows = [r | base for r in rows]
    path = write_rows(rows, out / "exact_fuzz.csv", last=tuple(base))
    summary = {}
    for r in rows:
        key = f"{r['model']} {r['weights']}"
        s = summary.setdefault(key, {"cases": 0, "differ": 0, "tokens_per_step": 0.0})
        s["cases"] += 1
        s["differ"] += not r["equal"]
        s["tokens_per_step"] += r["tokens_per_step"]
    for s in summary.values():
        s["tokens_per_step"] = round(s["tokens_per_step"] / s["cases"], 2)
    (out / "exact_fuzz_summary.json").write_text(json.dumps(base | {"summary": summary}, indent=1) + "\n")
    print(f"\n{base['gpu']}, torch {base['torch']}, triton {base['triton']}, rev {base['git_rev']}; rows in {path}")
    for key, s in summary.items():
        print(f"{key:28} {s['cases']:5d} cases  {s['differ']:3d} differ  mean tokens/step {s['tokens_per_step']}")
    return 1 if any(s["differ"] for s in summary.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
