"""What a notebook shows around its measurements: which machine ran them, sizes that suit it, and the
engine's range names.

    from tileinfer_profiling import notebook as nb
    nb.markdown(nb.device_note())
"""

import torch

from tileinfer import tracing
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
    "prefill": "the prompt through the target (and the drafter's context), in chunks; payload: tokens",
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
