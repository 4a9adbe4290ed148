"""TileInfer's measuring half: kernel traces, rooflines, ceilings, sweeps and step profiles as DataFrames.

    from profiling import trace_kernels, per_layer, busy_fraction, attention_sweep, profile_step
"""

import os

import torch

# Triton kernel modules read this when first imported (tileinfer's import pulls them in): without a GPU
# they can only run under the interpreter.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from profiling.aggregate import gemm_vs_attention_ms, per_class, per_layer
from profiling.busy import busy_by_phase, busy_fraction, busy_time
from profiling.ceilings import Ceilings, measure as measure_ceilings
from profiling.compare import reference_fractions
from profiling.roofline import (achieved, attention_bytes, attention_flops, dflash_step_bytes, floor_ms, linear_bytes,
                                linear_flops, step_bytes)
from profiling.step import StepProfile, profile_step
from profiling.sweeps import attention_sweep, drafter_attention_sweep, gemm_sweep
from profiling.trace import kernel_class, kernels_from_events, load_trace, trace_kernels

__all__ = ["trace_kernels", "kernels_from_events", "load_trace", "kernel_class", "per_layer", "per_class",
           "gemm_vs_attention_ms", "busy_fraction", "busy_time", "busy_by_phase", "linear_bytes", "linear_flops",
           "attention_bytes", "attention_flops", "step_bytes", "dflash_step_bytes", "achieved", "floor_ms",
           "Ceilings", "measure_ceilings", "attention_sweep", "gemm_sweep", "drafter_attention_sweep",
           "profile_step", "StepProfile", "reference_fractions"]
