"""TileInfer's kernels, each beside the plain-PyTorch reference that defines it.

Whether Triton runs kernels for real or under its interpreter is decided here, once, before any kernel
module is imported (Triton reads TRITON_INTERPRET when a kernel is defined): without a CUDA device the
kernels can only run interpreted on CPU tensors. An explicit TRITON_INTERPRET in the environment wins.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The interpreter's tl.dot on bf16 multiplies bit patterns: kernels upcast to fp32 under it.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
if INTERPRET:  # a dot's bits independent of the tile's shape, as on a GPU (ops/interpreter.py)
    from tileinfer.ops.interpreter import use_ordered_dot

    use_ordered_dot()
