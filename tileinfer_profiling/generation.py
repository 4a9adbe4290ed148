"""One prompt decoded plainly and with DFlash, and where each run's time went."""

import pandas as pd

TIME_PARTS = ("prefill_ms", "drafter_ms", "verify_ms", "accept_ms", "other_ms")


def _row(label, gen):
    s = gen.stats
    drafter, verify, accept = (s.drafter_ms or 0.0), (s.verify_ms or 0.0), (s.accept_ms or 0.0)
    return {"mode": label, "block_size": s.block_size, "prompt_tokens": s.prompt_tokens, "new_tokens": s.new_tokens,
            "steps": s.steps, "mean_tokens_per_step": round(s.mean_tokens_per_step, 2),
            "decode_tok_s": round(s.decode_tok_s, 2), "prefill_ms": s.prefill_ms, "drafter_ms": drafter,
            "verify_ms": verify, "accept_ms": accept, "other_ms": max(0.0, s.decode_ms - drafter - verify - accept),
            "decode_ms": s.decode_ms}


def generate_both(engine, prompt, max_new_tokens, accept_profile=None, **generate_kwargs):
    """(table, {mode: Generation}): the same prompt decoded plainly and with DFlash (when a drafter is loaded);
    the table has one row per mode with the `TIME_PARTS` columns.

    One short warm-up generation first, so neither row pays for first-call set-up."""
    engine.generate(prompt, 2, block_size=1)
    modes = {"plain decode": dict(block_size=1)}
    if engine.drafter is not None:
        modes["DFlash"] = dict(block_size=None, accept_profile=accept_profile)
    gens = {label: engine.generate(prompt, max_new_tokens, **kw, **generate_kwargs) for label, kw in modes.items()}
    return pd.DataFrame([_row(label, g) for label, g in gens.items()]).set_index("mode"), gens
