"""The memory plan against the CUDA allocator's peaks, for the embedded pair and a Qwen3-shaped random pair.

Prefill: the peak allocated above what was held before one prefill (after a warm-up prefill, so
workspaces that stay held are not counted twice) against `memory_plan(...).prefill_activation_bytes`.
Step: the peak of one eager step's phases against `step_activation_bytes`. Pass: measured ≤ plan ≤
1.10 × measured.

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
from tileinfer_profiling.memory_peaks import measure_peak_bytes  # noqa: E402
from tileinfer_profiling.run_info import command_line  # noqa: E402

MARGIN = 1.10


def check(engine, label: str, prompt_lens, new_tokens: int) -> list[dict]:
    rows = []
    g = torch.Generator().manual_seed(0)
    for n in prompt_lens:
        ids = torch.randint(0, engine.config.vocab_size, (n,), generator=g).tolist()
        engine.generate(ids, new_tokens, stop_ids=[])  # caches, graphs and workspaces in place
        plan = engine.memory_plan(n, new_tokens)
        _, measured = measure_peak_bytes(lambda: engine.prefill(ids), engine.device)
        rows.append(dict(model=label, what="prefill", prompt_tokens=n, new_tokens=new_tokens,
                         planned_bytes=plan.prefill_activation_bytes, measured_bytes=measured))
        for block in sorted({1, engine.block_max}):
            engine.generate(ids, new_tokens, stop_ids=[], block_size=block)
            start = int(engine.start_t.item())
            shape = engine.step_shape(block, n + new_tokens, None, False)
            peaks = {name: measure_peak_bytes(torch.inference_mode()(fn), engine.device)[1]
                     for name, fn in engine._phases(shape, start)}
            rows.append(dict(model=label, what=f"step, block {block}", prompt_tokens=n, new_tokens=new_tokens,
                             planned_bytes=plan.step_activation_bytes if block == engine.block_max else
                             _plain_plan(engine, n, new_tokens), measured_bytes=max(peaks.values()),
                             peak_phase=max(peaks, key=peaks.get),
                             phase_bytes=" ".join(f"{name}:{b}" for name, b in peaks.items())))
    for r in rows:
        r["plan_over_measured"] = r["planned_bytes"] / r["measured_bytes"]
        r["ok"] = r["measured_bytes"] <= r["planned_bytes"] <= MARGIN * r["measured_bytes"]
        print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}, flush=True)
    return rows


def _plain_plan(engine, n, new_tokens):
    """The step plan of plain decoding: the same engine's model with a block of one and no drafter."""
    import dataclasses
    from tileinfer.memory import MemoryModel
    model = MemoryModel.from_engine(engine)
    acts = dataclasses.replace(model.activations, block_size=1, drafter=None, num_taps=0)
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
        print(f"{r['model']:14} {r['what']:15} {r['prompt_tokens']:6} plan {r['planned_bytes'] / 1e6:9.3f} MB "
              f"measured {r['measured_bytes'] / 1e6:9.3f} MB  x{r['plan_over_measured']:.3f} {'ok' if r['ok'] else 'OFF'}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
