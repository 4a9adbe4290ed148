"""Tokens per DFlash step on the benchmark prompts, and the acceptance a random-weight pair replays."""

import pandas as pd

from tileinfer_profiling.compare import tokens_per_step
from tileinfer_profiling.engine_prompts import benchmark_prompt
from tileinfer_profiling.prompts import POINTS


def acceptance_runs(engine, tasks=("edit", "explain"), points=("1k",), new_tokens=128, accept_profile=None):
    """One DFlash generation per task × point: tokens per step and its histogram (greedy). `new_tokens`
    None: the benchmark's own count at each point (128 at 1k)."""
    rows = []
    for point in points:
        for task in tasks:
            n = POINTS[point].new_tokens if new_tokens is None else new_tokens
            gen = engine.generate(benchmark_prompt(engine, task, point), n, accept_profile=accept_profile)
            s = gen.stats
            rows.append({"point": point, "task": task, "prompt_tokens": s.prompt_tokens, "new_tokens": s.new_tokens,
                         "steps": s.steps, "mean_tokens_per_step": s.mean_tokens_per_step,
                         "decode_tok_s": s.decode_tok_s, "tokens_per_step": list(s.tokens_per_step)})
    return pd.DataFrame(rows, columns=["point", "task", "prompt_tokens", "new_tokens", "steps", "mean_tokens_per_step",
                                       "decode_tok_s", "tokens_per_step"])


def default_accept_profile(pair, reference, accept_profile=None, point="1k", task="edit", weights="bf16"):
    """What a step profile replays: the given profile; else, for random weights (whose drafter accepts
    nothing), TileInfer's tokens per step in the reference comparison at `point`, `task` and `weights`
    (fp16/fp32 use the BF16 figure); else None (real acceptance)."""
    if accept_profile is not None or pair is None or not pair.random_weights:
        return accept_profile
    return tokens_per_step(reference, point, task, weights="int8" if weights == "int8" else "bf16")


def acceptance_engine(engine, pair, weights="bf16"):
    """(Engine, Pair) whose real acceptance a report shows: the timed pair when it has trained weights and
    a drafter; else the embedded default pair (the stand-in where that is not installed)."""
    from tileinfer_profiling.pair import load_engine

    if engine is not None and engine.drafter is not None and not pair.random_weights:
        return engine, pair
    return load_engine(None, None, weights)
