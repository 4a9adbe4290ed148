"""The memory model: the bytes a request will hold on the device, known before anything is allocated.

    total = weights + buffers (RoPE tables, step state, cuBLAS workspaces on CUDA)
          + target KV cache + drafter KV cache   (capacity as KVCache.ensure rounds it)
          + activations = peak of one prefill chunk + the step graphs' memory pool

Prefill runs the prompt in chunks of T = min(prefill_chunk, prompt) tokens, so past the KV caches
(and 8 bytes per prompt token for the ids) nothing grows with the prompt: a chunk's peak is that of
one decoder layer on T tokens — the residual stream (h, x, residual), the MLP's gate_up [T, 2I] and
its activation [T, I] — plus the taps [T, len(target_layer_ids)·H] the drafter turns into context
K/V right after, and the previous chunk's h and residual still bound. Logits exist for the last row
only. The step graphs' pool (blocks of block_size tokens) stays held while a later prompt prefills,
so the two add up. With the Triton backend the prefill attention is a flash kernel (no scores); the
PyTorch reference backend materialises [Hq, T, L] scores, and the model counts them.

Choosing the prefill chunk: activations grow ∝ T (≈ 110 KB per chunk token for Qwen3-4B in BF16 with
a DFlash drafter) against 168 KB per position of KV cache, while a chunk of a few thousand tokens
keeps the GEMMs and the attention kernel at full rate. DEFAULT_PREFILL_CHUNK (engine.py) is the
smallest chunk whose prefill time is within ~1–2 % of a one-shot prefill at 8k and 32k on the H200
(`bench/long_prompt_bench.py` measures 2048 / 4096 / 8192); at 4096 the plan gives 0.45 GB of prefill
activations + 0.03 GB for the step graphs, ≈ 9.6 % of the 5.0 GB target KV cache of a 32k prompt
(one-shot: 3.3 GB), and a longest prompt of 36.7k tokens under 16 GB with DFlash in BF16 (one-shot: 24.4k).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from tileinfer.errors import RequestError
from tileinfer.kv_cache import KV_GRANULE
from tileinfer.ops.attention import MAX_NUM_SPLITS, exact_grid_splits
from tileinfer.ops.linear import SKINNY_MAX_M

# Held by the CUDA caching allocator beyond the tensors the plan counts, so in the total but in no
# activation: cuBLAS workspaces once GEMMs ran (32 MiB per stream on Hopper: prefill on the default
# stream, graph warm-up on a side stream), and the rounding of a CUDA graph's private pool, which is
# carved in 2 MiB (small) and 20 MiB (large) segments.
CUDA_WORKSPACE_BYTES = 2 * 32 * 2**20
GRAPH_POOL_SLACK_BYTES = 24 * 2**20
MAX_GRID_SPLITS = exact_grid_splits(MAX_NUM_SPLITS)  # exact mode's grid, the larger
GB = 1e9


@dataclass(frozen=True, slots=True)
class StackShape:
    """The sizes of a Qwen3-style stack of decoder layers that set activation and KV sizes."""
    hidden: int
    intermediate: int
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int

    @classmethod
    def of(cls, config) -> "StackShape":
        return cls(config.hidden_size, config.intermediate_size, config.num_hidden_layers,
                   config.num_attention_heads, config.num_key_value_heads, config.head_dim)

    @property
    def qkv_rows(self) -> int:
        return (self.q_heads + 2 * self.kv_heads) * self.head_dim

    def kv_bytes_per_position(self, elem: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * elem

    def linear_shapes(self) -> list[tuple[int, int]]:
        """(N, K) of one layer's fused linears: qkv, o, gate_up, down."""
        h, i = self.hidden, self.intermediate
        return [(self.qkv_rows, h), (h, self.q_heads * self.head_dim), (2 * i, h), (h, i)]


@dataclass(frozen=True, slots=True)
class MemoryModel:
    """Everything the plan needs, read from an engine (`from_engine`) or from configs (`from_configs`)."""
    target: StackShape
    drafter: StackShape | None
    vocab: int
    max_positions: int
    block_size: int            # the drafter's block (1 without a drafter)
    num_taps: int              # len(target_layer_ids)
    elem: int                  # bytes per activation / KV element (the compute dtype)
    int8: bool                 # weight-only INT8 linears (the torch backend dequantizes them per call)
    backend: str               # "triton" | "torch"
    exact: bool                # exact mode (tileinfer.ops.backend.Ops)
    cuda: bool
    prefill_chunk: int
    weights_bytes: int
    buffers_bytes: int

    @property
    def allocator_bytes(self) -> int:
        """What the CUDA caching allocator holds beyond the planned tensors (0 off CUDA)."""
        return CUDA_WORKSPACE_BYTES + GRAPH_POOL_SLACK_BYTES if self.cuda and self.backend == "triton" else 0

    @classmethod
    def from_engine(cls, engine) -> "MemoryModel":
        target, drafter = engine.target, engine.drafter
        c = engine.config
        return cls(
            target=StackShape.of(c), drafter=StackShape.of(drafter.config.layers) if drafter else None,
            vocab=c.vocab_size, max_positions=c.max_position_embeddings, block_size=engine.block_max,
            num_taps=len(engine.tap_ids), elem=target.dtype.itemsize, int8=engine.weights == "int8",
            backend=engine.backend, exact=engine.exact, cuda=engine.is_cuda, prefill_chunk=engine.prefill_chunk,
            weights_bytes=held_weight_bytes(engine), buffers_bytes=held_buffer_bytes(engine))

    @classmethod
    def from_configs(cls, config, draft_config=None, weights: str = "bf16", backend: str = "triton",
                     cuda: bool = True, prefill_chunk: int = 4096, exact: bool = True) -> "MemoryModel":
        """Without loading anything: `config` a Qwen3Config, `draft_config` a DFlashConfig or None."""
        elem = {"bf16": 2, "fp16": 2, "fp32": 4, "int8": 2}[weights]
        int8 = weights == "int8"
        t = StackShape.of(config)
        d = StackShape.of(draft_config.layers) if draft_config else None
        num_taps = len(draft_config.target_layer_ids) if draft_config else 0
        block = draft_config.block_size if draft_config else 1

        def linear_bytes(n, k):
            return n * k + 4 * n if int8 else n * k * elem

        def stack_bytes(s):
            per_layer = sum(linear_bytes(n, k) for n, k in s.linear_shapes()) + (2 * s.hidden + 2 * s.head_dim) * elem
            return s.layers * per_layer

        weights_bytes = stack_bytes(t) + config.hidden_size * elem + linear_bytes(config.vocab_size, config.hidden_size)
        if not config.tie_word_embeddings:
            weights_bytes += config.vocab_size * config.hidden_size * elem
        rope = (config.max_position_embeddings + 128) * t.head_dim * 4
        if d is not None:
            weights_bytes += stack_bytes(d) + linear_bytes(d.hidden, num_taps * t.hidden) + 2 * d.hidden * elem
            rope += (max(draft_config.layers.max_position_embeddings, config.max_position_embeddings) + 128) * d.head_dim * 4
        state = 8 * (3 * block + 4) + block * num_taps * t.hidden * elem
        buffers = rope + state
        return cls(target=t, drafter=d, vocab=config.vocab_size, max_positions=config.max_position_embeddings,
                   block_size=block, num_taps=num_taps, elem=elem, int8=int8, backend=backend, exact=exact, cuda=cuda,
                   prefill_chunk=prefill_chunk, weights_bytes=weights_bytes, buffers_bytes=buffers)

    # ----------------------------------------------------------------------------------------------

    def kv_positions(self, prompt_len: int, max_new_tokens: int) -> int:
        """The KV capacity generate() allocates: room for two blocks past the end, rounded up."""
        needed = prompt_len + max_new_tokens + 2 * self.block_size
        return -(-needed // KV_GRANULE) * KV_GRANULE

    def plan(self, prompt_len: int, max_new_tokens: int, budget_bytes: int | None = None) -> "MemoryPlan":
        positions = self.kv_positions(prompt_len, max_new_tokens)
        target_kv = positions * self.target.kv_bytes_per_position(self.elem)
        drafter_kv = positions * self.drafter.kv_bytes_per_position(self.elem) if self.drafter else 0
        prefill = self.prefill_bytes(prompt_len)
        step = self.step_bytes(prompt_len + max_new_tokens + self.block_size)  # a last block may run past the end
        activations = prefill + step
        total = self.weights_bytes + self.buffers_bytes + target_kv + drafter_kv + activations + self.allocator_bytes
        return MemoryPlan(
            prompt_len=prompt_len, max_new_tokens=max_new_tokens, prefill_chunk=self.prefill_chunk,
            kv_positions=positions, weights_bytes=self.weights_bytes, buffers_bytes=self.buffers_bytes,
            target_kv_bytes=target_kv, drafter_kv_bytes=drafter_kv, prefill_activation_bytes=prefill,
            step_activation_bytes=step, activation_bytes=activations, allocator_bytes=self.allocator_bytes,
            total_bytes=total,
            budget_bytes=budget_bytes, model=self)

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

    # ---- activations ---------------------------------------------------------------------------

    def prefill_bytes(self, prompt_len: int) -> int:
        """Peak bytes of prefill beyond weights and KV caches: the worst of its chunks."""
        chunk = max(1, min(self.prefill_chunk, prompt_len))
        full, tail = divmod(prompt_len, chunk)
        candidates = []
        if full:  # the last full chunk, after a full one
            candidates.append(self._chunk_bytes(chunk, full * chunk, chunk if full > 1 else 0, prompt_len))
        if tail:
            candidates.append(self._chunk_bytes(tail, prompt_len, chunk if full else 0, prompt_len))
        return max(candidates)

    def _chunk_bytes(self, t: int, kv_len: int, previous: int, prompt_len: int) -> int:
        e, s = self.elem, self.target
        taps = t * self.num_taps * s.hidden * e
        held = 8 * prompt_len + 8 * t + taps + 2 * previous * s.hidden * e  # ids, positions, taps, last chunk's h/residual
        layer = self._layer_bytes(s, t, kv_len, causal=True, decode=False)
        drafter = self._append_context_bytes(t) + 2 * t * s.hidden * e if self.drafter else 0
        last_row = 2 * t * s.hidden * e + self._logits_bytes(1)
        return held + max(self._embedding_bytes(t), layer, drafter, last_row)

    def step_bytes(self, kv_len: int) -> int:
        """Peak bytes of one decode / DFlash step (its graphs' pool on CUDA)."""
        b = self.block_size
        verify = self._layer_bytes(self.target, b, kv_len, causal=True, decode=True)
        verify = max(verify, self._logits_bytes(b) + b * self.target.hidden * self.elem * 4)
        peak = verify
        if self.drafter is not None:
            draft = max(self._append_context_bytes(b),
                        self._layer_bytes(self.drafter, b, kv_len, causal=False, decode=True),
                        self._logits_bytes(b - 1) + b * self.drafter.hidden * self.elem * 4)
            peak = max(peak, draft)
        peak += 8 * 4 * b  # positions, kv lengths, matches, posterior
        return peak

    def _embedding_bytes(self, t: int) -> int:
        h = self.target.hidden
        return t * h * self.elem + (2 * t * h * 4 if self.int8 else 0)

    def _logits_bytes(self, t: int) -> int:
        if t <= 0:
            return 0
        n, h, e = self.vocab, self.target.hidden, self.elem
        logits = t * n * e + 8 * t  # + argmax
        if self.backend == "torch":
            return logits + self._torch_linear_scratch(n, h, t)
        return logits + self._split_k_bytes(n, h, t)

    def _split_k_bytes(self, n: int, k: int, m: int) -> int:
        """fp32 partial sums of a split-K skinny GEMM (M <= 16, Triton backend)."""
        if self.backend != "triton" or m > SKINNY_MAX_M:
            return 0
        from tileinfer.ops.gemm_configs import get_config
        cfg = get_config(n, k, SKINNY_MAX_M if self.exact else m, "int8" if self.int8 else "bf16",
                         torch.device("cuda") if self.cuda and torch.cuda.is_available() else None)
        block_k = min(cfg.block_k, max(16, 1 << (max(k, 1) - 1).bit_length()))
        k_per_split = -(-(-(-k // cfg.split_k)) // block_k) * block_k
        split_k = -(-k // k_per_split)
        return split_k * m * n * 4 if split_k > 1 else 0

    def _linear_scratch(self, s: StackShape, m: int, which: int) -> int:
        """Temporaries of one linear beyond its output: split-K partials, or the torch backend's."""
        n, k = s.linear_shapes()[which]
        if self.backend == "torch":
            return self._torch_linear_scratch(n, k, m)
        return self._split_k_bytes(n, k, m)

    def _torch_linear_scratch(self, n: int, k: int, m: int) -> int:
        """The PyTorch reference linear beyond its m output rows: in exact mode M <= 16 runs padded to 16
        rows (the padded input and output, then a copy of the m rows); INT8 weights are dequantized per
        call (W in the compute dtype, and an fp32 product)."""
        e = self.elem
        padded = self.exact and m <= SKINNY_MAX_M
        rows = SKINNY_MAX_M if padded else m
        extra = rows * (k + n) * e if padded else 0
        return extra + (n * k * e + rows * n * 4 if self.int8 else 0)

    def _layer_bytes(self, s: StackShape, t: int, kv_len: int, causal: bool, decode: bool) -> int:
        """Peak live bytes inside one decoder layer on t tokens, the residual stream included."""
        e, h, i, d = self.elem, s.hidden, s.intermediate, s.head_dim
        hq, hk = s.q_heads, s.kv_heads
        torch_ref = self.backend == "torch"
        up = 4 if e != 4 else 0  # an fp32 copy that the reference ops make of low-precision inputs
        stream = 3 * t * h * e
        if torch_ref:  # the reference ops' fp32 temporaries, as measured with torch.profiler on CPU
            norm = t * h * (e + 8 + up) + 8 * t
            rope = 3 * t * d * 4 + 4 * t * hq * d * 4
        else:
            norm = 2 * t * h * e
            rope = t * (hq + hk) * d * e
        qkv = t * s.qkv_rows * e + self._linear_scratch(s, t, 0)
        attn = self._attention_bytes(s, t, kv_len, causal, decode)
        attention = max(qkv + rope, t * s.qkv_rows * e + t * (hq + hk) * d * e + attn,
                        t * s.qkv_rows * e + t * (hq + hk) * d * e + t * hq * d * e + t * h * e
                        + self._linear_scratch(s, t, 1))
        if torch_ref:
            act = 2 * t * i * e + t * i * (8 + up)
        else:
            act = 3 * t * i * e
        mlp = max(2 * t * i * e + self._linear_scratch(s, t, 2), act,
                  t * i * e + t * h * e + self._linear_scratch(s, t, 3))
        return stream + max(norm, attention, mlp)

    def _attention_bytes(self, s: StackShape, t: int, kv_len: int, causal: bool, decode: bool) -> int:
        """The attention call's output and temporaries (q, K/V already counted by the caller)."""
        e, d, hq, hk = self.elem, s.head_dim, s.q_heads, s.kv_heads
        out = t * hq * d * e
        if self.backend == "torch":
            up = 4 if e != 4 else 0
            kv = 2 * kv_len * hq * d * 4 + 16 * kv_len                     # K, V repeated to Hq heads in fp32
            scores = 2 * hq * t * kv_len * 4 + (t * kv_len if causal else 0)  # scores, probs, mask
            return kv + max(kv_len * hk * d * up, scores + 2 * t * hq * d * 4)
        if decode:  # split-KV: partial outputs and log-sum-exps of every split, in fp32
            return out + MAX_GRID_SPLITS * t * hq * (d + 1) * 4
        return out

    def _append_context_bytes(self, t: int) -> int:
        """drafter.append_context on t features: fc output, its norm, each layer's K/V (two live)."""
        s, e = self.drafter, self.elem
        features = t * self.num_taps * self.target.hidden * e
        kv = t * 2 * s.kv_heads * s.head_dim * e
        k = t * s.kv_heads * s.head_dim * e
        fc = t * s.hidden * e
        norm = t * s.hidden * (e + 8 + (4 if e != 4 else 0)) + 8 * t if self.backend == "torch" else 2 * t * s.hidden * e
        rope = (3 * t * s.head_dim * 4 + 4 * k * 4 // e) if self.backend == "torch" else 0
        fc_scratch = (self._torch_linear_scratch(s.hidden, self.num_taps * self.target.hidden, t)
                      if self.backend == "torch" else self._split_k_bytes(s.hidden, self.num_taps * self.target.hidden, t))
        return features + max(fc + fc_scratch, norm, fc + 2 * kv + 2 * k + rope + self._linear_scratch_kv(t))

    def _linear_scratch_kv(self, t: int) -> int:
        s = self.drafter
        n, k = 2 * s.kv_heads * s.head_dim, s.hidden
        if self.backend == "torch":
            return self._torch_linear_scratch(n, k, t)
        return self._split_k_bytes(n, k, t)


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
    """RoPE tables and the step state."""
    tensors = [engine.target.cos_sin, engine.start_t, engine.ctx_start_t, engine.block_ids, engine.result,
               engine.forced_accept, engine.arange, engine.features]
    if engine.drafter is not None:
        tensors.append(engine.drafter.cos_sin)
    return _unique_bytes(tensors)


# ---- the engine's entry points -------------------------------------------------------------------

def plan(engine, prompt_len: int, max_new_tokens: int, budget_bytes: int | None = None,
         prefill_chunk: int | None = None) -> MemoryPlan:
    """The memory plan of a request of `prompt_len` tokens + `max_new_tokens` on `engine`."""
    model = MemoryModel.from_engine(engine)
    if prefill_chunk is not None:
        model = dataclasses.replace(model, prefill_chunk=prefill_chunk)
    return model.plan(prompt_len, max_new_tokens, budget_bytes)


def longest_prompt(engine, budget_bytes: int, max_new_tokens: int) -> int:
    return MemoryModel.from_engine(engine).longest_prompt(budget_bytes, max_new_tokens)


def default_budget(device: torch.device) -> int | None:
    """On CUDA: what this process holds plus what is free, capped by its per-process memory fraction.
    On CPU: None (no check)."""
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    budget = free + torch.cuda.memory_reserved(device)
    fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    if fraction is not None:
        budget = min(budget, int(fraction(device) * total))
    return budget


def check_budget(engine, prompt_len: int, max_new_tokens: int) -> MemoryPlan | None:
    """Raise RequestError when the request's plan exceeds the engine's memory budget; run before any allocation."""
    budget = engine.memory_budget if engine.memory_budget is not None else default_budget(engine.device)
    if budget is None or math.isinf(budget):
        return None
    p = plan(engine, prompt_len, max_new_tokens, budget_bytes=int(budget))
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


def measure_peak_bytes(fn, device) -> tuple[object, int]:
    """(fn(), peak bytes allocated during the call above what was allocated before it).

    CUDA: torch.cuda.max_memory_allocated. CPU: the allocation events of torch.profiler (tensors only).
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        result = fn()
        torch.cuda.synchronize(device)
        return result, torch.cuda.max_memory_allocated(device) - before
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return result, peak
