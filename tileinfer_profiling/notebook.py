"""What a notebook shows around its measurements: which machine ran them, sizes that suit it, and the
engine's range names.

    from tileinfer_profiling import notebook as nb
    nb.markdown(nb.device_note())
"""

import torch

from tileinfer import tracing
from tileinfer_profiling import fmt  # noqa: F401  (nb.fmt in the notebooks)
from tileinfer_profiling.run_info import run_info


def on_gpu():
    return torch.cuda.is_available()


def pick(value, gpu, cpu):
    """`value` when given, else the GPU or the CPU default of a notebook parameter."""
    if value is not None:
        return value
    return gpu if on_gpu() else cpu


def markdown(text):
    from IPython.display import Markdown
    return Markdown(text)


def device_note():
    """Markdown saying what kind of timings follow: a CPU run's are for checking, not for speed."""
    info = run_info()
    if info["device"] == "cuda":
        return (f"**GPU run on {info['gpu']}** (torch {info['torch']}, triton {info['triton']}, "
                f"revision {info['git_rev']}): timings below are measured on this GPU.")
    return (f"**CPU run — every timing below is a CPU timing** (torch {info['torch']}, triton {info['triton']}, "
            f"revision {info['git_rev']}). The engine runs its PyTorch backend and the Triton kernels run under "
            "the interpreter: numbers show that things run, not how fast. Recorded GPU results are shown "
            "beside them.")


def run_markdown(engine, pair):
    """What this run is: device, versions, git revision, weights and whether they are real."""
    info = run_info(engine.device)
    where = f"GPU {info['gpu']}" if info["device"] == "cuda" else "CPU (no GPU on this machine)"
    kind = "random weights (timings are real, tokens and acceptance are not)" if pair.random_weights else "real weights"
    c = engine.config
    return "\n".join([
        f"- **device**: {where}; backend `{engine.backend}`",
        f"- **versions**: torch {info['torch']}, triton {info['triton']}; git revision `{info['git_rev']}`",
        f"- **model**: {pair.note}; {c.num_hidden_layers} layers, hidden {c.hidden_size}, "
        f"context {c.max_position_embeddings}; drafter: {'yes' if engine.drafter else 'none'}",
        f"- **weights**: {engine.weights}, {kind}",
    ])


def titled(title):
    """`title` with the machine its timings come from."""
    return f"{title} — {run_info()['gpu']}" if on_gpu() else f"{title} — CPU timings"


def skipped(what):
    """Markdown for a section that `live=False` leaves to the recorded results."""
    return markdown(f"*{what}: not measured in this run (`live=False`); the recorded results above stand.*")


PHASE_NOTES = {
    "prefill": ("the prompt through the target (and the drafter's context), in chunks or padded; "
                "payload: tokens (padded: the size)"),
    "drafter": "one drafter pass over the block [anchor, masks]: block_size − 1 draft tokens",
    "verify": "the target over [anchor, drafts], causal over its KV cache; payload: kv_len",
    "accept": "longest matching prefix, bonus token, KV length rolled back",
    "decode": "plain decoding: the target over one token (block_size 1)",
}
LAYER_NOTES = {
    "layer.N.attention": "layer N's attention (q/k/v, norm + RoPE, split-KV kernel, o); drafter.layer.N.* in the drafter",
    "layer.N.mlp": "layer N's MLP (gate_up, SwiGLU, down)",
}


def nvtx_ranges():
    """The engine's range names (`tileinfer.tracing.PHASES`, then the layer ranges) as a markdown table."""
    rows = [(name, "step", PHASE_NOTES[name]) for name in tracing.PHASES]
    rows += [(name, "layer", what) for name, what in LAYER_NOTES.items()]
    lines = ["| range | level | what it covers |", "|---|---|---|"]
    lines += [f"| `{name}` | {level} | {what} |" for name, level, what in rows]
    return markdown("\n".join(lines))


def live_attention_sweep_args():
    """`attention_sweep` arguments sized for this machine: Qwen3-4B's heads on a GPU, a toy shape on a CPU."""
    if on_gpu():
        return dict(kv_lens=(1024, 8192, 32768), q_lens=(1, 16), num_splits_list=(1, 2, 4, 8, 16, 32))
    return dict(kv_lens=(128, 256), q_lens=(1,), num_splits_list=(1, 2, 4), num_q_heads=4, num_kv_heads=2,
                head_dim=16)


def live_gemm_shapes():
    """Tiny linears for a CPU sweep (the interpreter runs one program at a time), or None (Qwen3-4B's) on a GPU."""
    if on_gpu():
        return None
    return {"qkv": (64, 64), "gate_up": (128, 64), "down": (64, 96)}


RECORDED_NOTE = ("this project: Qwen3-4B shapes with random weights on an NVIDIA H200, replaying the comparison's "
                 "tokens per step\nthe others: the comparison's published figures on an RTX 4080 SUPER")


def replay_note(accept_profile):
    """What DFlash's tokens per step are in this run: replayed (random weights) or the pair's own."""
    if accept_profile:
        return (f"DFlash replays {accept_profile:g} tokens per step (the comparison's figure for this prompt); "
                "the weights are random, so the costs are real and the tokens are not")
    return "tokens per step are the pair's own (greedy, real drafts)"


GENERATION_COLUMNS = ["prompt_tokens", "new_tokens", "steps", "mean_tokens_per_step", "decode_tok_s", "prefill_ms",
                      "drafter_ms", "verify_ms", "decode_ms"]


def generation_columns(table):
    """The columns of a `generate_both` table a report shows, mode as the first column."""
    return table[GENERATION_COLUMNS].reset_index().rename(columns={"mean_tokens_per_step": "tokens_per_step"})


def live_ceilings():
    """This GPU's measured ceilings (cached after the first run), or None on a CPU, whose floors say nothing."""
    if not on_gpu():
        return None
    from tileinfer_profiling.ceilings import measure
    return measure()


def note(text):
    """A short italic line under a section."""
    return markdown(f"*{text}*")


COMPILED_KEYS = ["op", "shape", "m", "kind"]
COMPILED_GROUPS = (["kernel", "num_warps", "num_stages", "regs", "local_bytes", "shared_bytes", "blocks_per_sm",
                    "tensor_cores"],
                   ["loop_instructions", "byte_floor_us", "instruction_floor_us", "binding_pipe"])


def compiled_tables(df):
    """`recorded.compiled` rows as two tables: resources per launch site, then its two floors."""
    from tileinfer_profiling.tables import split
    return split(df, COMPILED_KEYS, COMPILED_GROUPS,
                 ["Resources per launch site (compiled for sm_90, not run)",
                  "The main loop's instruction floor beside the byte floor"])


def acceptance_title(pair):
    """The acceptance chart's title: whose drafts, and for the embedded pair, that it is a toy."""
    from tileinfer_profiling.pair import is_embedded
    if pair is not None and is_embedded(pair):
        return "Tokens per step of the embedded toy pair (11 M parameters, trained on these templates): real drafts"
    if pair is not None and pair.random_weights:
        return "Tokens per step of a random-weight stand-in: its drafts are random, its acceptance means nothing"
    return "Tokens per step of the timed pair: real drafts"


def kernel_note():
    """What the rows of a step profile are on this machine."""
    if on_gpu():
        return "GPU kernels of the eager run, attributed to phases by the engine's scopes"
    return "on a CPU these are torch's top-level CPU ops of the eager run (the PyTorch backend), not GPU kernels"
