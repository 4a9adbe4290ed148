"""The memory plan: the bytes a request will hold on the device, known before anything is allocated.

    total = weights + buffers (RoPE tables, step state) + target KV cache + drafter KV cache
          + activations (peak of one prefill chunk + the step graphs' tensors) + allocator

Weights and buffers are the bytes of the tensors the engine holds (`held_*`, or the byte model when
planning from configs alone), KV caches the capacity `KVCache.ensure` will allocate, activations the
tensor-by-tensor model of `tileinfer.activations`; `allocator` is what the CUDA caching allocator
holds beyond tensors. A request whose plan exceeds the budget is refused before any allocation.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import torch

from tileinfer import byte_model, prefill_graph
from tileinfer.activations import ActivationModel
from tileinfer.errors import RequestError
from tileinfer.kv_cache import KV_GRANULE
from tileinfer.ops.attention import SplitPolicy
from tileinfer.ops.backend import Ops
from tileinfer.shapes import DrafterShape, ModelShape

# Held by the CUDA caching allocator beyond the tensors the plan counts: cuBLAS workspaces once GEMMs
# ran (32 MiB per stream on Hopper: prefill on the default stream, graph warm-up on a side stream), the
# rounding of the step graphs' private pool, carved in 2 MiB (small) and 20 MiB (large) segments, and
# whole blocks: a tensor of a MiB or more is handed a block up to 1 MiB larger when the rest would be
# no more (8 such tensors are live at the Qwen3-4B prefill peaks, bench/results/memory_plan_h200.csv).
CUDA_WORKSPACE_BYTES = 2 * 32 * 2**20
GRAPH_POOL_SLACK_BYTES = 24 * 2**20
WHOLE_BLOCK_SLACK_BYTES = 8 * 2**20
GB = 1e9


@dataclass(frozen=True, slots=True)
class MemoryModel:
    """Everything the plan needs, read from an engine (`from_engine`) or from configs (`from_configs`)."""
    target: ModelShape
    drafter: ModelShape | None
    max_positions: int
    weights_bytes: int
    buffers_bytes: int
    activations: ActivationModel

    @property
    def block_size(self) -> int:
        return self.activations.block_size

    @property
    def prefill_chunk(self) -> int:
        return self.activations.prefill_chunk

    @property
    def allocator_bytes(self) -> int:
        """What the CUDA caching allocator holds beyond the planned tensors (0 off CUDA)."""
        a = self.activations
        return CUDA_WORKSPACE_BYTES + GRAPH_POOL_SLACK_BYTES + WHOLE_BLOCK_SLACK_BYTES \
            if a.cuda and a.backend == "triton" else 0

    def with_prefill_chunk(self, chunk: int) -> MemoryModel:
        return dataclasses.replace(self, activations=dataclasses.replace(self.activations, prefill_chunk=chunk))

    def sampling(self, sample: bool = True, filtered: bool = False, candidates: int = 0) -> MemoryModel:
        """The model of a sampling request (its verify steps keep their logits and log-probabilities;
        `filtered`: with top-k / top-p, from `candidates` logits per row or a sort) or, False, a greedy one."""
        filtered = sample and filtered
        acts = dataclasses.replace(self.activations, sample=sample, filtered=filtered,
                                   candidates=candidates if filtered else 0)
        return dataclasses.replace(self, activations=acts)

    @classmethod
    def from_engine(cls, engine) -> MemoryModel:
        c, drafter = engine.config, engine.drafter
        target = ModelShape.of(c)
        draft = ModelShape.of(drafter.config.layers) if drafter else None
        acts = ActivationModel(target=target, drafter=draft, block_size=engine.block_max,
                               num_taps=len(engine.tap_ids), elem=engine.target.dtype.itemsize,
                               int8=engine.weights == "int8", backend=engine.backend, exact=engine.exact,
                               cuda=engine.is_cuda, prefill_chunk=engine.prefill_chunk,
                               splits=SplitPolicy.of(engine.device),
                               fused_layers=engine.ops.fuse_norms, fused_gemms=engine.ops.folds_norm_weights,
                               step_kv=engine.ops.step_kv, fused_argmax=engine.ops.fused_argmax,
                               max_positions=c.max_position_embeddings)
        weights_bytes, buffers_bytes = engine.held_bytes()
        return cls(target=target, drafter=draft, max_positions=c.max_position_embeddings,
                   weights_bytes=weights_bytes, buffers_bytes=buffers_bytes, activations=acts)

    @classmethod
    def from_configs(cls, config, draft_config=None, weights: str = "bf16", backend: str = "triton",
                     cuda: bool = True, prefill_chunk: int = 4096, exact: bool = True,
                     fuse_norms: bool | None = None) -> MemoryModel:
        """Without loading anything: `config` a Qwen3Config, `draft_config` a DFlashConfig or None;
        `fuse_norms` None: as Ops reads it."""
        ops = Ops(backend, exact=exact, fuse_norms=fuse_norms)
        elem = byte_model.compute_bytes(weights)
        target = ModelShape.of(config)
        draft = DrafterShape.of(draft_config) if draft_config else None
        weights_bytes = byte_model.model_weight_bytes(target, weights)["total"]
        rope = (config.max_position_embeddings + 128) * target.head_dim * 4
        block = draft.block_size if draft else 1
        num_taps = len(draft.target_layer_ids) if draft else 0
        if draft:
            weights_bytes += byte_model.drafter_weight_bytes(draft, weights)
            rope += (max(draft_config.layers.max_position_embeddings, config.max_position_embeddings) + 128) \
                * draft.layers.head_dim * 4
        state = 8 * (3 * block + 4) + block * num_taps * target.hidden * elem
        if cuda and backend == "triton":  # Engine.graph_prefill: prompt ids, positions, last row, its logits
            state += 8 * (2 * prefill_graph.MAX_TOKENS + 1) + target.vocab * elem
        acts = ActivationModel(target=target, drafter=draft.layers if draft else None, block_size=block,
                               num_taps=num_taps, elem=elem, int8=weights == "int8", backend=backend, exact=exact,
                               cuda=cuda, prefill_chunk=prefill_chunk, fused_layers=ops.fuse_norms,
                               fused_gemms=ops.folds_norm_weights, step_kv=ops.step_kv,
                               fused_argmax=ops.fused_argmax, max_positions=config.max_position_embeddings)
        return cls(target=target, drafter=acts.drafter, max_positions=config.max_position_embeddings,
                   weights_bytes=weights_bytes, buffers_bytes=rope + state, activations=acts)

    def kv_positions(self, prompt_len: int, max_new_tokens: int) -> int:
        """The KV capacity generate() allocates: room for two blocks past the end, rounded up."""
        needed = prompt_len + max_new_tokens + 2 * self.block_size
        return -(-needed // KV_GRANULE) * KV_GRANULE

    def plan(self, prompt_len: int, max_new_tokens: int, budget_bytes: int | None = None) -> MemoryPlan:
        positions = self.kv_positions(prompt_len, max_new_tokens)
        elem = self.activations.elem
        target_kv = positions * byte_model.kv_bytes_per_position(self.target, elem)
        drafter_kv = positions * byte_model.kv_bytes_per_position(self.drafter, elem) if self.drafter else 0
        prefill, step = _activation_peaks(self.activations, prompt_len, prompt_len + max_new_tokens)
        total = (self.weights_bytes + self.buffers_bytes + target_kv + drafter_kv + prefill + step
                 + self.allocator_bytes)
        return MemoryPlan(
            prompt_len=prompt_len, max_new_tokens=max_new_tokens, prefill_chunk=self.prefill_chunk,
            kv_positions=positions, weights_bytes=self.weights_bytes, buffers_bytes=self.buffers_bytes,
            target_kv_bytes=target_kv, drafter_kv_bytes=drafter_kv, prefill_activation_bytes=prefill,
            step_activation_bytes=step, activation_bytes=prefill + step, allocator_bytes=self.allocator_bytes,
            total_bytes=total, budget_bytes=budget_bytes, model=self)

    def longest_prompt(self, budget_bytes: int, max_new_tokens: int) -> int:
        """The longest prompt whose plan fits `budget_bytes` (0 if none does); at most the model's context."""
        lo, hi = 0, self.max_positions - max_new_tokens
        while lo < hi:  # the total never shrinks as the prompt grows
            mid = (lo + hi + 1) // 2
            if self.plan(mid, max_new_tokens).total_bytes <= budget_bytes:
                lo = mid
            else:
                hi = mid - 1
        return max(lo, 0)


@dataclass(slots=True)
class MemoryPlan:
    """Bytes one generate() call holds on the device; `total_bytes` is what a budget is checked against."""
    prompt_len: int
    max_new_tokens: int
    prefill_chunk: int
    kv_positions: int
    weights_bytes: int
    buffers_bytes: int
    target_kv_bytes: int
    drafter_kv_bytes: int
    prefill_activation_bytes: int
    step_activation_bytes: int
    activation_bytes: int
    allocator_bytes: int
    total_bytes: int
    budget_bytes: int | None = None
    model: MemoryModel | None = dataclasses.field(default=None, repr=False)

    @property
    def kv_bytes(self) -> int:
        return self.target_kv_bytes + self.drafter_kv_bytes

    @property
    def fits(self) -> bool | None:
        return None if self.budget_bytes is None else self.total_bytes <= self.budget_bytes

    def longest_prompt(self, budget_bytes: int | None = None, max_new_tokens: int | None = None) -> int:
        """The longest prompt that fits `budget_bytes` (default: this plan's budget) with `max_new_tokens`."""
        budget = self.budget_bytes if budget_bytes is None else budget_bytes
        if budget is None:
            raise ValueError("give budget_bytes: this plan has no budget")
        return self.model.longest_prompt(budget, self.max_new_tokens if max_new_tokens is None else max_new_tokens)

    def as_dict(self) -> dict:
        row = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "model"}
        row["kv_bytes"] = self.kv_bytes
        if self.budget_bytes is not None:
            row["fits"] = self.fits
            row["longest_prompt"] = self.longest_prompt()
        return row

    def __str__(self) -> str:
        parts = [f"weights {self.weights_bytes / GB:.2f}", f"buffers {self.buffers_bytes / GB:.2f}",
                 f"target KV {self.target_kv_bytes / GB:.2f}", f"drafter KV {self.drafter_kv_bytes / GB:.2f}",
                 f"activations {self.activation_bytes / GB:.2f} (prefill {self.prefill_activation_bytes / GB:.2f}"
                 f" + steps {self.step_activation_bytes / GB:.2f})"]
        if self.allocator_bytes:
            parts.append(f"allocator {self.allocator_bytes / GB:.2f}")
        text = (f"prompt {self.prompt_len} + {self.max_new_tokens} new (chunk {self.prefill_chunk}): "
                f"{self.total_bytes / GB:.2f} GB = " + " + ".join(parts))
        if self.budget_bytes is not None:
            text += f"; budget {self.budget_bytes / GB:.2f} GB, longest prompt {self.longest_prompt()}"
        return text


# ---- what an engine holds --------------------------------------------------------------------------

def _unique_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        if t is None:
            continue
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


def _model_tensors(model):
    for _, lin in model.named_linears():
        yield from (lin.weight, lin.qweight, lin.scale)
    yield from (t for _, t in model.named_tensors())


def held_weight_bytes(engine) -> int:
    """Bytes of every weight tensor the engine's target and drafter hold (shared ones once)."""
    tensors = list(_model_tensors(engine.target))
    embed = engine.target.embed_tokens
    tensors += [embed.weight, embed.qweight, embed.scale]
    if engine.drafter is not None:
        tensors += list(_model_tensors(engine.drafter))
    return _unique_bytes(tensors)


def held_buffer_bytes(engine) -> int:
    """RoPE tables, the step state and the padded prefill's inputs and output."""
    tensors = [engine.target.cos_sin, engine.start_t, engine.ctx_start_t, engine.block_ids, engine.result,
               engine.forced_accept, engine.arange, engine.features]
    if engine.drafter is not None:
        tensors.append(engine.drafter.cos_sin)
    if engine.graph_prefill:
        tensors += [engine.padded_ids, engine.padded_positions, engine.padded_last, engine.padded_logits]
    return _unique_bytes(tensors)


# ---- the engine's entry points -------------------------------------------------------------------

@functools.lru_cache(maxsize=1024)
def _activation_peaks(acts: ActivationModel, prompt_len: int, max_length: int) -> tuple[int, int]:
    """(prefill, step) activation peaks, kept: the same for every request of a shape, and each a walk over
    the launches of a layer that every generate call would otherwise repeat."""
    return acts.prefill_bytes(prompt_len), acts.step_bytes(max_length)


def plan(engine, prompt_len: int, max_new_tokens: int, budget_bytes: int | None = None,
         prefill_chunk: int | None = None, sample: bool = False, filtered: bool = False,
         candidates: int = 0) -> MemoryPlan:
    """The memory plan of a request of `prompt_len` tokens + `max_new_tokens` on `engine` (`sample`: one
    that samples, temperature > 0; `filtered`: with top-k / top-p; `candidates`: SamplingParams.candidates)."""
    model = engine.memory_model(sample, filtered, candidates)
    if prefill_chunk is not None:
        model = model.with_prefill_chunk(prefill_chunk)
    return model.plan(prompt_len, max_new_tokens, budget_bytes)


def longest_prompt(engine, budget_bytes: int, max_new_tokens: int) -> int:
    return MemoryModel.from_engine(engine).longest_prompt(budget_bytes, max_new_tokens)


def default_budget(device: torch.device) -> int | None:
    """On CUDA: what this process holds plus what is free, capped by its per-process memory fraction.
    On CPU: None (no check)."""
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    # the nested statistics: torch.cuda.memory_reserved flattens all of them first (0.09 ms a request on the H200)
    budget = free + torch.cuda.memory_stats_as_nested_dict(device)["reserved_bytes"]["all"]["current"]
    fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    if fraction is not None:
        budget = min(budget, int(fraction(device) * total))
    return budget


def check_budget(engine, prompt_len: int, max_new_tokens: int, sample: bool = False,
                 filtered: bool = False, candidates: int = 0) -> MemoryPlan | None:
    """Raise RequestError when the request's plan exceeds the engine's memory budget; run before any allocation."""
    budget = engine.memory_budget if engine.memory_budget is not None else default_budget(engine.device)
    if budget is None or math.isinf(budget):
        return None
    p = plan(engine, prompt_len, max_new_tokens, budget_bytes=int(budget), sample=sample, filtered=filtered,
             candidates=candidates)
    if p.fits:
        return p
    longest = p.longest_prompt()
    advice = (f"the longest prompt that fits with {max_new_tokens} new tokens is {longest} tokens"
              if longest else "not even a one-token prompt fits")
    raise RequestError(
        f"a prompt of {prompt_len} tokens + {max_new_tokens} new needs {p.total_bytes / GB:.2f} GB "
        f"(weights {p.weights_bytes / GB:.2f}, KV caches {p.kv_bytes / GB:.2f}, activations "
        f"{p.activation_bytes / GB:.2f} at prefill_chunk {p.prefill_chunk}) but the memory budget is "
        f"{budget / GB:.2f} GB; {advice}. Shorten the prompt or max_new_tokens, load with a smaller "
        f"prefill_chunk, or raise engine.memory_budget")
