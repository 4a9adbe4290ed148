"""Where a generation step's time goes: one short generation traced eagerly, per phase and layer.

`profile_step` runs `engine.generate(..., eager=True)` with record_function scopes and layer ranges
on, so every kernel is attributed to its phase (drafter / verify / decode / accept) and layer; then,
on a GPU, the same generation with CUDA graphs for the totals and busy % (kernels replayed from a
graph carry no layer scopes).
"""

import math
from dataclasses import dataclass, field

import pandas as pd
import torch

from tileinfer_profiling.aggregate import gemm_vs_attention_ms, kernel_table, per_layer
from tileinfer_profiling.busy import busy_fraction, idle_gaps
from tileinfer_profiling.launches import launch_sites, target_roles
from tileinfer_profiling.trace import KERNEL_CLASSES, _trace
from tileinfer import tracing
from tileinfer.errors import ConfigError
from tileinfer.tracing import STEP_PHASES


@dataclass
class StepProfile:
    kernels: pd.DataFrame                   # eager run, attributed to phase/layer/part
    summary: pd.DataFrame                   # one row per variant ("eager", "graphs")
    stats: dict                             # GenerationStats.as_dict() of the eager run
    graph_kernels: pd.DataFrame | None = None
    graph_stats: dict | None = None
    tokens_per_step: list = field(default_factory=list)

    def per_layer(self):
        """ms per step of each layer's attention and MLP kernels (eager run)."""
        return per_layer(self.kernels, max(1, self.stats.get("steps") or 1))

    def gemm_vs_attention(self):
        return gemm_vs_attention_ms(self.kernels, max(1, self.stats.get("steps") or 1))

    def summary_table(self):
        """The summary rows transposed: one column per variant (eager, graphs)."""
        return self.summary.set_index("variant").T

    def kernel_table(self, top=15):
        """The `top` kernels of a decoding step (all of them for None), `aggregate.kernel_table`."""
        return kernel_table(self.kernels, max(1, self.stats.get("steps") or 1), top)

    def idle_gaps(self):
        """Where the GPU idled between the decoding steps' kernels, per pair of kernels around the gaps, µs
        per step (`busy.idle_gaps`): from the CUDA-graph run where there is one (the eager run's gaps are
        mostly the host's launches)."""
        kernels, stats = ((self.graph_kernels, self.graph_stats) if self.graph_kernels is not None
                          else (self.kernels, self.stats))
        steps = max(1, stats.get("steps") or 1)
        return idle_gaps(kernels[kernels["phase"] != "prefill"], steps)

    def launch_table(self, config, kv_len, weights="bf16"):
        """Each launch of a decoding step, timed inside the step's graph where it ran in one
        (`launches.launch_sites`), with its role in the target, the bytes that role reads at `kv_len`
        cached positions (`launches.target_roles`) and the GB/s its own time reached."""
        sites, unattributed = launch_sites(self.kernels, self.graph_kernels)
        sites = target_roles(sites, config, kv_len, weights)
        return sites.assign(gb_s=sites["floor_bytes"] / sites["own_us"] / 1e3, unattributed_share=unattributed)


def _stats_dict(generation):
    stats = generation.stats
    return stats.as_dict() if hasattr(stats, "as_dict") else dict(vars(stats))


def summarize(kernels, stats, variant="eager"):
    """One summary row: per-step kernel ms by phase and by class (own times, which add up to the GPU's busy
    time), wall ms per step, busy % of the steps.

    Busy % is over the decoding steps only: from the first to the last kernel outside prefill.
    """
    steps = stats.get("steps") or 0
    div = steps if steps else math.nan
    device = kernels["device"].iloc[0] if len(kernels) else "none"
    row = {"variant": variant, "device": device, "steps": steps, "new_tokens": stats.get("new_tokens"),
           "prompt_tokens": stats.get("prompt_tokens"), "mean_tokens_per_step": stats.get("mean_tokens_per_step"),
           "wall_step_ms": stats.get("decode_ms", math.nan) / div, "decode_tok_s": stats.get("decode_tok_s"),
           "exact": stats.get("exact")}
    in_steps = kernels[kernels["phase"] != "prefill"]
    row["kernel_ms_per_step"] = in_steps["own_us"].sum() / 1e3 / div
    by_phase = in_steps.groupby("phase")["own_us"].sum() / 1e3 / div
    for phase in STEP_PHASES:
        row[f"{phase}_ms"] = by_phase.get(phase, math.nan)
    table = gemm_vs_attention_ms(kernels, div) if len(in_steps) else None
    for cls in KERNEL_CLASSES:
        row[f"{cls}_ms"] = table.loc["step", cls] if table is not None else math.nan
    row["busy_pct"] = 100 * busy_fraction(in_steps) if len(in_steps) else math.nan
    row["prefill_kernel_ms"] = kernels.loc[kernels["phase"] == "prefill", "own_us"].sum() / 1e3
    return row


def profile_step(engine, prompt_ids, block_size=16, max_new_tokens=32, *, warmup=1, graphs=None,
                 accept_profile=None):
    """Profile a short generation of `max_new_tokens` after `prompt_ids` with DFlash blocks of `block_size`
    (1 = plain decode). `graphs`: also run with CUDA graphs (default: when on a GPU; True without one
    is an error). `accept_profile` is passed to `generate` (replayed acceptance for random weights).
    """
    cuda = torch.cuda.is_available() and str(getattr(engine, "device", "cuda")).startswith("cuda")
    if graphs is None:
        graphs = cuda
    elif graphs and not cuda:
        raise ConfigError("profile_step(graphs=True) needs the engine on a CUDA GPU; "
                          "CUDA graphs do not exist on the CPU — pass graphs=False")

    def run(eager):
        return lambda: engine.generate(prompt_ids, max_new_tokens, block_size=block_size, eager=eager,
                                       accept_profile=accept_profile)

    with tracing.record_scopes(), tracing.set_level("layer"):
        kernels, generation = _trace(run(True), warmup)
    kernels["label"] = "eager"
    stats = _stats_dict(generation)
    rows = [summarize(kernels, stats, "eager")]
    graph_kernels = graph_stats = None
    if graphs:
        # Step-level scopes only: they mark prefill; replayed kernels have no layer scopes anyway.
        with tracing.record_scopes(), tracing.set_level("step"):
            graph_kernels, graph_generation = _trace(run(False), warmup)
        graph_kernels["label"] = "graphs"
        graph_stats = _stats_dict(graph_generation)
        rows.append(summarize(graph_kernels, graph_stats, "graphs"))
    return StepProfile(kernels=kernels, summary=pd.DataFrame(rows), stats=stats, graph_kernels=graph_kernels,
                       graph_stats=graph_stats, tokens_per_step=list(stats.get("tokens_per_step") or []))
