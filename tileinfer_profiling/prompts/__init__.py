"""The benchmark's prompts: generated Julia modules in the edit and explain templates, exact in tokens."""

from tileinfer_profiling.prompts.julia import generate_module
from tileinfer_profiling.prompts.render import (
    EDIT, EXAMPLE_POINT, EXPLAIN, POINTS, TASKS, ByteTokenizer, Point, Prompt, build_prompt, encode_ids,
    example_text, load_prompt, render_prompt, store_prompt, tokenizer_from_path,
)

__all__ = [
    "EDIT", "EXAMPLE_POINT", "EXPLAIN", "POINTS", "TASKS", "ByteTokenizer", "Point", "Prompt", "build_prompt",
    "encode_ids", "example_text", "generate_module", "load_prompt", "render_prompt", "store_prompt",
    "tokenizer_from_path",
]
