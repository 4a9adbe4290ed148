"""Triton's interpreter with a `tl.dot` whose bits do not depend on the shape of the tile around them.

The interpreter computes `tl.dot` with NumPy's matmul, that is with the machine's BLAS, whose kernels sum
in an order that depends on the matrices' shapes and on the CPU (AVX2 and AVX-512 machines differ). A
GPU's tile computes each output from its own row and column, so the kernels' exactness (a row's bits
the same in a one-row and a 16-row step, a fused epilogue equal to two launches) holds there and must
be testable here. Under the interpreter a dot is therefore summed over K in order, one product at a
time, for every output alike.
"""

import warnings

import numpy as np
from triton.runtime import interpreter


def _dot_in_k_order(self, a, b, d, input_precision, max_num_imprecise_acc):
    a_data, b_data = a.data, b.data
    if (a.dtype.primitive_bitwidth == 8 and a.dtype.is_floating()) or \
       (b.dtype.primitive_bitwidth == 8 and b.dtype.is_floating()):
        a_data = interpreter._convert_float(a_data, a.dtype, interpreter.tl.float16, None).view(np.float16)
        b_data = interpreter._convert_float(b_data, b.dtype, interpreter.tl.float16, None).view(np.float16)
    acc = d.data.dtype
    # [..., M, K, N] products reduced over K, a non-contiguous axis: NumPy adds them slice by slice
    products = a_data.astype(acc)[..., :, :, None] * b_data.astype(acc)[..., None, :, :]
    return interpreter.TensorHandle(np.add.reduce(products, axis=-2) + d.data, d.dtype.scalar)


def use_ordered_dot() -> None:
    """Replace the interpreter's `tl.dot` (Triton 3.x's InterpreterBuilder.create_dot)."""
    builder = getattr(interpreter, "InterpreterBuilder", None)
    if builder is None or not hasattr(builder, "create_dot"):
        warnings.warn("this Triton's interpreter has no InterpreterBuilder.create_dot: its tl.dot keeps the "
                      "machine's BLAS order, and exact-mode tests may fail on some CPUs")
        return
    builder.create_dot = _dot_in_k_order
