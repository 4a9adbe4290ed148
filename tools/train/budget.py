"""How the one GPU call's time divides, and what the step budget buys: an estimate printed before
training so the call is sized to fit.

Step times are from training runs on one H200: target 66 ms per step of 32 × 2,048 tokens (3,176 steps
in 210 s), drafter 28 ms per step of 16 × 2,048 tokens with 64 blocks per row (4,626 in 130 s). Longer
rows hold the same tokens per step; attention grows with the row length: with rows of 2k/4k/8k at
0.5/0.25/0.25 of the tokens the target averaged 68.8 ms per step (3,400 steps in 234 s,
bench/results/pair_training_h200.json), so attention is ~6 % of a 2,048-token step. That run's
evaluation of 40 prompts (28 of ≤ 1k tokens, 12 of 8k) took 98 s, and the call 498 s in all.
With rows of 2k/4k/8k/16k at 0.4/0.2/0.2/0.2 (continuing the shipped pair) the target averaged 73.4 ms
per step (2,975 in 218 s; this model says 74.7) and the drafter 31 ms (8,075 in 250 s).
"""

TARGET_MS_2K = 66.0
DRAFTER_MS_2K = 28.0
ATTENTION_SHARE_2K = 0.06
STARTUP_S = 30.0  # imports, CUDA init, loading the rows
EVAL_S_1K, EVAL_S_8K = 1.5, 4.5  # a prompt's speculative + plain decoding of 128 tokens, with the reference
SHIP_S = 10.0
CALL_LIMIT_S = 540.0  # one GPU call of 9 minutes


def step_ms(ms_2k, seq_len):
    return ms_2k * (1 - ATTENTION_SHARE_2K + ATTENTION_SHARE_2K * seq_len / 2048)


def estimate(target_seconds, drafter_seconds, token_shares, data_tokens, eval_prompt_lens, batch_size=32):
    """{name: value} of the call's time and the target's passes over the data; `token_shares` maps
    row length -> share of the sampled steps after the short-row warm-up."""
    mean_ms = sum(share * step_ms(TARGET_MS_2K, n) for n, share in token_shares.items())
    steps = target_seconds * 1000 / mean_ms
    eval_s = sum(EVAL_S_1K + (EVAL_S_8K - EVAL_S_1K) * max(0, n - 1024) / (8192 - 1024) for n in eval_prompt_lens)
    total = STARTUP_S + target_seconds + drafter_seconds + eval_s + 2 * SHIP_S
    return {"target_steps": int(steps), "target_tokens_M": round(steps * batch_size * 2048 / 1e6, 1),
            "passes_over_data": round(steps * batch_size * 2048 / max(data_tokens, 1), 1),
            "eval_seconds": round(eval_s), "call_seconds": round(total), "call_limit_seconds": CALL_LIMIT_S}


def report(est):
    fits = "fits" if est["call_seconds"] <= est["call_limit_seconds"] else "DOES NOT FIT"
    return (f"time budget: ~{est['call_seconds']} s of the {est['call_limit_seconds']:.0f} s call ({fits}); "
            f"target ~{est['target_steps']} steps, {est['target_tokens_M']} M tokens, "
            f"{est['passes_over_data']} passes over the data; evaluation ~{est['eval_seconds']} s")
