"""The benchmark's prompts: generated Julia modules in the edit and explain templates, exact in tokens."""

from tileinfer_profiling.prompts.julia import generate_module
from tileinfer_profiling.prompts.render import (
    EDIT, EXPLAIN, POINTS, TASKS, ByteTokenizer, Point, Prompt, build_prompt, encode_ids,
    load_prompt, render_prompt, store_prompt, tokenizer_from_path,
)

__all__ = [
    "EDIT", "EXPLAIN", "POINTS", "TASKS", "ByteTokenizer", "Point", "Prompt", "build_prompt",
    "encode_ids", "generate_module", "load_prompt", "render_prompt", "store_prompt",
    "tokenizer_from_path",
]
