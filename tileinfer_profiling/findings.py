"""The report's opening: what was measured here, on which device, against which floor and which peers,
as a few sentences of markdown built from the run's tables (each part is left out when its table is).

    findings_markdown(info=run_info(), pair=pair, generation=table, floors=step_floors(...), shares=...,
                      recorded_steps=..., acceptance=runs, acceptance_pair=acc_pair)
"""

import math

from tileinfer_profiling import fmt
from tileinfer_profiling.bandwidth_share import OURS

TOY = ("the embedded toy pair (an 11 M-parameter Qwen3 and a 2-layer DFlash drafter trained on the "
       "benchmark's Julia module templates)")


def where(info):
    """Device, versions and revision; on a CPU, what its timings can and cannot say."""
    versions = f"torch {info['torch']}, triton {info['triton']}, revision `{info['git_rev']}`"
    if info["device"] == "cuda":
        return f"**Measured here:** {info['gpu']} ({versions}); every timing excludes an untimed warm-up."
    return (f"**Measured here:** a CPU, no GPU ({versions}). The engine ran its PyTorch backend and the Triton "
            "kernels ran under the interpreter: this run's timings show that everything works, not how fast "
            "it is. The GPU figures below were recorded on an NVIDIA H200.")


def what(pair, embedded, weights, prompt_note, accept_profile=None):
    """Which pair was timed, on what, and whether its tokens per step are its own."""
    model = TOY if embedded else pair.note
    replay = (f" DFlash replays {fmt.num(accept_profile)} tokens per step (the comparison's figure for this "
              "prompt): its drafts are random, so its own acceptance would be nil." if accept_profile else "")
    return f"**Timed:** {model}, {weights.upper()} weights, on {prompt_note}.{replay}"


def generation(table):
    """Plain decoding against DFlash, from a `generate_both` table."""
    if table is None or not len(table):
        return None
    plain = table.loc["plain decode"] if "plain decode" in table.index else None
    parts = []
    if plain is not None:
        parts.append(f"plain decoding {fmt.rate(plain['decode_tok_s'])}")
    if "DFlash" in table.index:
        d = table.loc["DFlash"]
        speedup = d["decode_tok_s"] / plain["decode_tok_s"] if plain is not None and plain["decode_tok_s"] else math.nan
        parts.append(f"DFlash {fmt.rate(d['decode_tok_s'])} ({fmt.times(speedup)}) at {fmt.num(d['mean_tokens_per_step'])} "
                     f"tokens per step over {fmt.integer(d['steps'])} steps")
    return "**Generation:** " + "; ".join(parts) + "."


def floors(rows):
    """Each live step against its byte floor (rows of `step_floors`); None without rows."""
    if not rows:
        return None
    parts = [f"{r['mode']} step {fmt.ms(r['step_ms'])} against a floor of {fmt.ms(r['floor_ms'])} "
             f"({fmt.pct(r['floor_ms'] / r['step_ms'])} of the way)" for r in rows]
    return ("**Against the floor** (the step's weight and KV-cache bytes at the read bandwidth measured on this "
            "GPU): " + "; ".join(parts) + ".")


def peers(shares, point="8k", task="edit", weights="bf16"):
    """This project's recorded DFlash step beside vLLM's and the original TileInfer's, as bandwidth fractions."""
    if shares is None or not len(shares):
        return None
    hit = shares[(shares["point"] == point) & (shares["task"] == task) & (shares["weights"] == weights)]
    ours = hit[hit["engine"] == OURS]
    others = hit[hit["engine"] != OURS]
    if not len(ours) or not len(others):
        return None
    theirs = " and ".join(f"{r['label'].split(' · ')[0]} {fmt.pct(r['bandwidth_fraction'], 2)}"
                          for _, r in others.iterrows())
    gpu = others["gpu"].iloc[0]
    return (f"**Against peers** (recorded; a DFlash step's bytes ÷ its time ÷ the card's bandwidth, {point} {task} "
            f"{weights.upper()}): this project reaches {fmt.pct(ours['bandwidth_fraction'].iloc[0], 2)} of the "
            f"{ours['gpu'].iloc[0]}'s bandwidth, {theirs} of the {gpu}'s. Our rows are Qwen3-4B shapes with random "
            "weights replaying the comparison's tokens per step.")


def recorded_steps(steps, point="1k", weights="bf16"):
    """The recorded H200 plain and DFlash steps against their floors (rows of `recorded.engine_steps`)."""
    if steps is None or not len(steps):
        return None
    s = steps[(steps["point"] == point) & (steps["weights"] == weights)]
    plain = s[s["what"] == "plain decode"]
    dflash = s[(s["what"] == "dflash step") & s["accept"].astype(str).str.startswith("replay")]
    if not len(plain) or not len(dflash):
        return None
    p, d = plain.iloc[0], dflash.iloc[0]
    return (f"**Recorded on the {p['gpu']}** (Qwen3-4B shapes, random weights, {weights.upper()}, {point}): a plain "
            f"decode step takes {fmt.ms(p['step_ms'])}, {fmt.pct(p['of_floor'], 2)} of the way to its byte floor; a "
            f"DFlash step {fmt.ms(d['step_ms'])} ({fmt.pct(d['of_floor'], 2)}), {fmt.times(d['vs_plain_step'])} a "
            "plain step for up to 16 tokens.")


def acceptance(runs, embedded, reference_tps=None, described=False):
    """Tokens per step of the real drafts; the embedded pair's are labelled as a toy's, beside the range
    of the comparison's Qwen3-4B figures (`reference_tokens_per_step`) when given. `described`: the toy
    was described already (it is the timed pair)."""
    if runs is None or not len(runs):
        return None
    parts = [f"{fmt.num(r['mean_tokens_per_step'])} on {r['point']} {r['task']} ({fmt.integer(r['steps'])} steps)"
             for _, r in runs.iterrows()]
    who = ("the embedded toy pair" if described else TOY) if embedded else "the timed pair"
    caveat = ""
    if embedded:
        caveat = " — a toy trained on exactly these templates, not comparable with Qwen3-4B"
        if reference_tps is not None and len(reference_tps):
            lo, hi = reference_tps["tokens_per_step"].min(), reference_tps["tokens_per_step"].max()
            caveat += f" ({fmt.num(lo)}–{fmt.num(hi)} tokens per step in the comparison)"
    return f"**Acceptance** of {who}: " + ", ".join(parts) + f" tokens per step{caveat}."


def findings_markdown(info, *, pair=None, embedded=False, weights="bf16", prompt_note="", accept_profile=None,
                      generation_table=None, floor_rows=None, shares=None, steps=None, acceptance_runs=None,
                      acceptance_embedded=True, reference_tps=None):
    """The findings as a markdown list under a "Findings" heading."""
    lines = [where(info)]
    if pair is not None:
        lines.append(what(pair, embedded, weights, prompt_note, accept_profile))
    lines += [generation(generation_table), floors(floor_rows), peers(shares), recorded_steps(steps),
              acceptance(acceptance_runs, acceptance_embedded, reference_tps,
                                                           described=embedded and pair is not None)]
    return "## Findings\n\n" + "\n".join(f"- {line}" for line in lines if line)
