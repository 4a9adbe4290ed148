"""Prompts as token ids a loaded engine can take: its own tokenizer's, or UTF-8 bytes (random-weight
checkpoints have no tokenizer) folded into its vocabulary, cut to fit its context."""

from tileinfer_profiling.prompts import POINTS, ByteTokenizer, encode_ids, load_prompt


def encode(engine, text):
    """Token ids of `text`: the checkpoint's tokenizer, else UTF-8 bytes folded into the vocabulary."""
    ids = encode_ids(engine.tokenizer or ByteTokenizer(), text)
    return [i % engine.config.vocab_size for i in ids]


def benchmark_prompt(engine, task, point, new_tokens=0):
    """The benchmark's `task` prompt ("edit" | "explain") at `point` ("1k" | "8k") for this engine's tokenizer;
    when prompt + new_tokens would overflow a small model's context, its last tokens that fit."""
    tokenizer = engine.tokenizer or ByteTokenizer()
    ids = load_prompt(task, point, tokenizer, name="byte" if engine.tokenizer is None else None).ids
    room = engine.config.max_position_embeddings - new_tokens - 2 * engine.block_max
    return [i % engine.config.vocab_size for i in ids[-max(1, room):]]


def points_that_fit(engine, points, new_tokens):
    """The benchmark points whose prompt + new_tokens (None: the point's own count) fit the model's context."""
    limit = engine.config.max_position_embeddings
    return [p for p in points
            if POINTS[p].prompt_tokens + (POINTS[p].new_tokens if new_tokens is None else new_tokens) <= limit]
