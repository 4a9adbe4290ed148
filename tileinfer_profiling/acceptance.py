"""Tokens per DFlash step on the benchmark prompts (greedy and sampled), and the acceptance a
random-weight pair replays."""

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


TEMPERATURES = (0.0, 0.6, 1.0)


def temperature_runs(engine, tasks=("edit", "explain"), points=("1k",), new_tokens=128, temperatures=TEMPERATURES,
                     seed=0, seeds=1, top_k=None, top_p=None, stop_ids=None, warmup=True):
    """DFlash generations per point × task × temperature (0: greedy, once; above: speculative sampling with
    `seeds` seeds from `seed`, pooled): tokens per step and how often each draft position is accepted.
    One row per point, task and temperature; acceptance_curves() gives the curves in long form. `warmup`:
    one untimed generation per temperature first, so decode_tok_s holds no compilation or graph capture."""
    rows = []
    for point in points:
        for task in tasks:
            prompt = benchmark_prompt(engine, task, point, new_tokens)
            for temperature in temperatures:
                kw = dict(stop_ids=stop_ids, temperature=temperature, top_k=top_k, top_p=top_p)
                if warmup:
                    engine.generate(prompt, new_tokens, seed=seed, **kw)
                runs = [engine.generate(prompt, new_tokens, seed=seed + i, **kw).stats
                        for i in range(1 if temperature == 0 else seeds)]
                steps = sum(s.steps for s in runs)
                offered = [sum(c) for c in zip(*(s.drafts_offered for s in runs))]
                accepted = [sum(c) for c in zip(*(s.drafts_accepted for s in runs))]
                rows.append({"point": point, "task": task, "temperature": temperature, "top_k": top_k,
                             "top_p": top_p, "seeds": len(runs), "prompt_tokens": runs[0].prompt_tokens,
                             "new_tokens": sum(s.new_tokens for s in runs), "steps": steps,
                             "mean_tokens_per_step": sum(sum(s.tokens_per_step) for s in runs) / max(steps, 1),
                             "decode_tok_s": sum(s.decode_tok_s for s in runs) / len(runs),
                             "acceptance_per_position": [a / o if o else 0.0 for a, o in zip(accepted, offered)]})
    return pd.DataFrame(rows, columns=["point", "task", "temperature", "top_k", "top_p", "seeds", "prompt_tokens",
                                       "new_tokens", "steps", "mean_tokens_per_step", "decode_tok_s",
                                       "acceptance_per_position"])


def acceptance_curves(runs: pd.DataFrame) -> pd.DataFrame:
    """temperature_runs() in long form: one row per draft position (1 … block - 1) with its acceptance."""
    long = runs.explode("acceptance_per_position", ignore_index=True).dropna(subset=["acceptance_per_position"])
    long["position"] = long.groupby(["point", "task", "temperature"]).cumcount() + 1
    long = long.rename(columns={"acceptance_per_position": "acceptance"}).astype({"acceptance": float})
    return long[["point", "task", "temperature", "position", "acceptance", "mean_tokens_per_step"]]


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
