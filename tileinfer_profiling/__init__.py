"""TileInfer's measuring half: kernel traces, rooflines, ceilings, sweeps and step profiles as DataFrames.

    from tileinfer_profiling import trace_kernels, per_layer, busy_fraction, attention_sweep, profile_step
"""

from tileinfer_profiling.aggregate import gemm_vs_attention_ms, per_class, per_layer
from tileinfer_profiling.busy import busy_by_phase, busy_fraction, busy_time, idle_gaps
from tileinfer_profiling.ceilings import Ceilings, measure as measure_ceilings
from tileinfer_profiling.compare import (bandwidth_comparison, bandwidth_comparison_figure, load_reference, read_rows,
                                         reference_fractions)
from tileinfer_profiling.roofline import (achieved, attention_bytes, attention_flops, dflash_step_bytes, floor_ms,
                                          linear_bytes, linear_flops, step_bytes)
from tileinfer_profiling.step import StepProfile, profile_step
from tileinfer_profiling.sweeps import attention_sweep, best_splits, drafter_attention_sweep, gemm_sweep
from tileinfer_profiling.trace import kernel_class, kernels_from_events, load_trace, trace_kernels

__all__ = ["trace_kernels", "kernels_from_events", "load_trace", "kernel_class", "per_layer", "per_class",
           "gemm_vs_attention_ms", "busy_fraction", "busy_time", "busy_by_phase", "idle_gaps", "linear_bytes", "linear_flops",
           "attention_bytes", "attention_flops", "step_bytes", "dflash_step_bytes", "achieved", "floor_ms",
           "Ceilings", "measure_ceilings", "attention_sweep", "gemm_sweep", "drafter_attention_sweep", "best_splits",
           "profile_step", "StepProfile", "load_reference", "reference_fractions", "read_rows", "bandwidth_comparison",
           "bandwidth_comparison_figure"]
