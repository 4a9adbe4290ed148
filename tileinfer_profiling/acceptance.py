"""Tokens per DFlash step on the benchmark prompts, and the acceptance a random-weight pair replays."""

import pandas as pd

from tileinfer_profiling.compare import tokens_per_step
from tileinfer_profiling.engine_prompts import benchmark_prompt


def acceptance_runs(engine, tasks=("edit", "explain"), points=("1k",), new_tokens=128, accept_profile=None):
    """One DFlash generation per task × point: tokens per step and its histogram (greedy)."""
    rows = []
    for point in points:
        for task in tasks:
            gen = engine.generate(benchmark_prompt(engine, task, point), new_tokens, accept_profile=accept_profile)
            s = gen.stats
            rows.append({"point": point, "task": task, "prompt_tokens": s.prompt_tokens, "new_tokens": s.new_tokens,
                         "steps": s.steps, "mean_tokens_per_step": s.mean_tokens_per_step,
                         "decode_tok_s": s.decode_tok_s, "tokens_per_step": list(s.tokens_per_step)})
    return pd.DataFrame(rows, columns=["point", "task", "prompt_tokens", "new_tokens", "steps", "mean_tokens_per_step",
                                       "decode_tok_s", "tokens_per_step"])


def default_accept_profile(pair, reference, accept_profile=None, point="1k", task="edit"):
    """What a step profile replays: the given profile; else, for random weights (whose drafter accepts
    nothing), TileInfer's tokens per step in the reference comparison at `point` and `task` (BF16);
    else None (real acceptance)."""
    if accept_profile is not None or not pair.random_weights:
        return accept_profile
    return tokens_per_step(reference, point, task)
