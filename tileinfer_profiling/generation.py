"""One prompt decoded plainly and with DFlash, and where each run's time went."""

import pandas as pd

TIME_PARTS = ("prefill_ms", "drafter_ms", "verify_ms", "accept_ms", "other_ms")


def _row(label, gen):
    s = gen.stats
    drafter, verify, accept = (s.drafter_ms or 0.0), (s.verify_ms or 0.0), (s.accept_ms or 0.0)
    return {"mode": label, "block_size": s.block_size, "prompt_tokens": s.prompt_tokens, "new_tokens": s.new_tokens,
            "steps": s.steps, "mean_tokens_per_step": s.mean_tokens_per_step,
            "decode_tok_s": s.decode_tok_s, "prefill_ms": s.prefill_ms, "drafter_ms": drafter,
            "verify_ms": verify, "accept_ms": accept, "other_ms": max(0.0, s.decode_ms - drafter - verify - accept),
            "decode_ms": s.decode_ms}


def generation_modes(engine, accept_profile=None):
    """{label: generate keywords}: plain decoding, and DFlash when the engine has a drafter."""
    modes = {"plain decode": dict(block_size=1)}
    if engine.drafter is not None:
        modes["DFlash"] = dict(block_size=None, accept_profile=accept_profile)
    return modes


def generate_both(engine, prompt, max_new_tokens, accept_profile=None, warmup=1, **generate_kwargs):
    """(table, {mode: Generation}): the same prompt decoded plainly and with DFlash (when a drafter is loaded);
    the table has one row per mode with the `TIME_PARTS` columns.

    Each mode first runs `warmup` untimed generations of the very same request, so Triton compilation,
    CUDA-graph capture and cache allocation, which happen on the first call of each step shape, are
    in no timing."""
    gens = {}
    for label, kw in generation_modes(engine, accept_profile).items():
        for _ in range(warmup):
            engine.generate(prompt, max_new_tokens, **kw, **generate_kwargs)
        gens[label] = engine.generate(prompt, max_new_tokens, **kw, **generate_kwargs)
    return pd.DataFrame([_row(label, g) for label, g in gens.items()]).set_index("mode"), gens
