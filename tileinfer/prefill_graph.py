"""Short prompts prefill as one CUDA-graph replay: which prompts, and the size they are padded to.

Eager prefill launches about ten kernels per layer from Python, and below a couple of thousand tokens the
host's pace shows: on the H200 a 1k prompt's prefill took 18 to 44 ms from one process to the next for
the same work, where an 8k prompt's, eight times the GPU's work, agreed within 1.2 %
(bench/results/comparison_{1k,8k}_h200.md). So `generate` runs a prompt of at most MAX_TOKENS tokens
that fits one prefill chunk as one replay of a graph captured for its padded size: the next power of two
from MIN_TOKENS up to STEP, then the next multiple of STEP (12 sizes in all, each captured on first use).

The padding rows hold token 0 at the positions after the prompt. Causal attention keeps them out of the
prompt's rows, the logits are the last prompt row's, and the K/V they leave past the prompt in the
target's and the drafter's caches is written again by the step that first covers those positions before
any attention reads it: every step writes its block's K/V before its attention, and attention reads
positions below its KV length only.
"""

from __future__ import annotations

MIN_TOKENS = 16
STEP = 256
MAX_TOKENS = 2048


def padded_tokens(prompt_len: int, prefill_chunk: int, max_positions: int) -> int | None:
    """The size an n-token prompt's prefill is padded to and captured at, or None where it runs eagerly:
    longer than MAX_TOKENS, or its padded size past one prefill chunk or the model's positions."""
    if not 1 <= prompt_len <= MAX_TOKENS:
        return None
    if prompt_len <= STEP:
        size = max(MIN_TOKENS, 1 << (prompt_len - 1).bit_length())
    else:
        size = -(-prompt_len // STEP) * STEP
    return size if size <= min(prefill_chunk, max_positions) else None


def sizes() -> list[int]:
    """Every padded size, smallest first."""
    small = [MIN_TOKENS << i for i in range((STEP // MIN_TOKENS).bit_length()) if MIN_TOKENS << i <= STEP]
    return small + list(range(2 * STEP, MAX_TOKENS + 1, STEP))
