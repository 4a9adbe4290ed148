"""The memory plan against the CUDA allocator's peaks, for the embedded pair and a Qwen3-shaped random pair.

Prefill: the peak of the tensors allocated above what was held before one prefill (after a warm-up
prefill, so workspaces that stay held are not counted twice) against
`memory_plan(...).prefill_activation_bytes`; beside it the allocator's block peak, which must stay within
the plan and its share for whole blocks (WHOLE_BLOCK_SLACK_BYTES).
Step: the peak of one eager step's phases against `step_activation_bytes`, greedy and sampling (T = 1;
with top-k/top-p, from the candidates; top-p alone, from a sort), for plain decoding and DFlash blocks.
Pass: `plan_covers` (measured ≤ plan ≤ 1.10 × measured, or a few allocator granules over at tiny shapes). A row that fails names the
largest blocks live at its peak and the code that allocated them (`live_at_peak`).

    python bench/memory_check.py --out bench/results [--preset qwen3-4b]
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tileinfer  # noqa: E402
from bench.ref.metric import environment, gpu_tag, write_rows  # noqa: E402
from bench.ref.tileinfer_spec import BENCH_ROOT, prepare_random  # noqa: E402
from tileinfer import sampling  # noqa: E402
from tileinfer.memory import WHOLE_BLOCK_SLACK_BYTES  # noqa: E402
from tileinfer_profiling.memory_peaks import block_peak_bytes, live_at_peak, measure_peak_bytes, plan_covers  # noqa: E402
from tileinfer_profiling.run_info import command_line  # noqa: E402


def check(engine, label: str, prompt_lens, new_tokens: int) -> list[dict]:
    rows = []
    g = torch.Generator().manual_seed(0)
    for n in prompt_lens:
        ids = torch.randint(0, engine.config.vocab_size, (n,), generator=g).tolist()
        engine.generate(ids, new_tokens, stop_ids=[])  # caches, graphs and workspaces in place
        plan = engine.memory_plan(n, new_tokens)
        prefill = lambda: engine.prefill(ids)  # noqa: E731
        rows.append(judged(engine, prefill, dict(
            model=label, what="prefill", prompt_tokens=n, new_tokens=new_tokens,
            planned_bytes=plan.prefill_activation_bytes, measured_bytes=measure_peak_bytes(prefill, engine.device)[1])))
        for block in sorted({1, engine.block_max}):
            planned = plan.step_activation_bytes if block == engine.block_max else _plan(engine, n, new_tokens, 1)
            rows.append(_step_row(engine, label, ids, new_tokens, block, planned, f"step, block {block}"))
        for what, request in SAMPLING.items():  # the verify keeps its logits and log-probabilities
            params = sampling.check_params(**request)
            vocab = engine.config.vocab_size
            flags = dict(sample=True, filtered=params.filtered(vocab), candidates=params.candidates(vocab))
            for block in sorted({1, engine.block_max}):
                planned = _plan(engine, n, new_tokens, block, **flags)
                rows.append(_step_row(engine, label, ids, new_tokens, block, planned,
                                      f"step, block {block}, {what}", request, flags))
    return rows


# T=1 alone; with a top-k within the candidates (each row's largest logits) and top-p; top-p alone (a sort)
SAMPLING = {"T=1": dict(temperature=1.0), "T=1 top-k/p": dict(temperature=1.0, top_k=50, top_p=0.95),
            "T=1 top-p": dict(temperature=1.0, top_p=0.95)}


def _step_row(engine, label, ids, new_tokens, block, planned, what, request=None, flags=None) -> dict:
    """One eager step after a request of `ids` (the phase with the highest peak against `planned`)."""
    n = len(ids)
    engine.generate(ids, new_tokens, stop_ids=[], block_size=block, seed=1, **(request or {}))
    start = int(engine.start_t.item())
    shape = engine.step_shape(block, n + new_tokens, None, False, **(flags or {}))
    phases = {name: torch.inference_mode()(fn) for name, fn in engine._phases(shape, start)}
    peaks = {name: measure_peak_bytes(fn, engine.device)[1] for name, fn in phases.items()}
    worst = max(peaks, key=peaks.get)
    return judged(engine, phases[worst], dict(
        model=label, what=what, prompt_tokens=n, new_tokens=new_tokens, planned_bytes=planned,
        measured_bytes=peaks[worst], peak_phase=worst, phase_bytes=" ".join(f"{k}:{b}" for k, b in peaks.items())))


def judged(engine, call, row: dict) -> dict:
    """The row with its verdict; on CUDA also the allocator's block peak of `call` run once more and, for
    a failing row, the largest tensors live at its peak."""
    row["plan_over_measured"] = row["planned_bytes"] / row["measured_bytes"]
    row["ok"] = plan_covers(row["planned_bytes"], row["measured_bytes"])
    if torch.device(engine.device).type == "cuda":
        row["allocator_block_bytes"] = block_peak_bytes(call, engine.device)
        row["blocks_covered"] = row["allocator_block_bytes"] <= row["planned_bytes"] + WHOLE_BLOCK_SLACK_BYTES
        row["ok"] = row["ok"] and row["blocks_covered"]
        if not row["ok"]:
            _, blocks = live_at_peak(call, engine.device, top=8)
            row["live_at_peak"] = "; ".join(f"{size}B {where}" for size, where in blocks)
    print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    return row


def _plan(engine, n, new_tokens, block, **sampling_flags):
    """The step plan of a block of `block` tokens (1: plain decoding, the engine's model without its
    drafter), greedy or with `MemoryModel.sampling`'s flags."""
    import dataclasses
    from tileinfer.memory import MemoryModel
    model = MemoryModel.from_engine(engine)
    acts = (model.sampling(**sampling_flags) if sampling_flags else model).activations
    if block == 1 and engine.block_max > 1:
        acts = dataclasses.replace(acts, block_size=1, drafter=None, num_taps=0)
    return acts.step_bytes(n + new_tokens)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--preset", default="qwen3-4b")
    parser.add_argument("--root", default=str(BENCH_ROOT))
    args = parser.parse_args(argv)
    env = environment(measure_bandwidth=False)
    base = {k: env[k] for k in ("gpu", "torch", "triton", "git_rev")} | {"command": command_line()}
    rows = check(tileinfer.load(), "embedded pair", (200, 1000), 32)
    target, drafter = prepare_random(args.preset, Path(args.root) / args.preset)
    rows += [r | {"weights_kind": "random"} for r in
             check(tileinfer.load(target, draft=drafter), args.preset, (1024, 8192), 32)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = write_rows([r | base for r in rows], out / f"memory_plan_{gpu_tag(env['gpu'])}.csv", last=tuple(base))
    print(f"\n{env['gpu']}, torch {env['torch']}, rev {env['git_rev']}; rows in {path}")
    for r in rows:
        print(f"{r['model']:14} {r['what']:28} {r['prompt_tokens']:6} plan {r['planned_bytes'] / 1e6:9.3f} MB "
              f"measured {r['measured_bytes'] / 1e6:9.3f} MB  x{r['plan_over_measured']:.3f} {'ok' if r['ok'] else 'OFF'}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
