"""Peak activation bytes of a prefill chunk and of a decode / DFlash step, tensor by tensor.

Prefill runs the prompt in chunks of T = min(prefill_chunk, prompt) tokens, so past the KV caches (and
8 bytes per prompt token for the ids) nothing grows with the prompt; on CUDA with our kernels a short
prompt runs as one chunk padded to T = `prefill_graph.padded_tokens`, its ids and positions in static
buffers and its last row picked by index (`Engine._prefill_padded`). A chunk's peak is that of one
decoder layer on T tokens — the residual stream (h, x, residual), the MLP's gate_up [T, 2I] and its
activation [T, I] (a step of T <= 16 on the Triton backend computes the activation in the gate_up GEMM) — plus the taps [T, len(target_layer_ids)·H] the drafter turns into context K/V
right after, and the previous chunk's h and residual still bound. Logits exist for the last row only.
Up to 16 tokens with `Ops.fuse_norms` a layer is `fused_decoder_layer`: its stream is one tensor (h +
residual) and the row sums of its squares; in our GEMMs the norms and residual adds leave no tensor of their
own, but for the first layer's (and the drafter's) input norm on the tensor-core path.
With the Triton backend the prefill attention is a flash kernel (no scores); the PyTorch reference
materialises [Hq, T, L] scores. Every tensor is counted as the allocator holds it: on CUDA the caching
allocator rounds each one up to 512 bytes, which dominates for small models.

Choosing the prefill chunk: activations grow ∝ T against the KV cache's bytes per position, while a
chunk of a few thousand tokens keeps the GEMMs and the attention kernel at full rate;
`bench/long_prompt_bench.py` measures the trade (engine.DEFAULT_PREFILL_CHUNK is its choice).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import torch

from tileinfer.ops.attention import SplitPolicy, exact_grid_splits, exact_num_splits
from tileinfer.ops.backend import fused_layer, gemv
from tileinfer.ops.linear import DEQUANT_MIN_M, SKINNY_MAX_M
from tileinfer.ops.sample import buffers as sample_buffers
from tileinfer.prefill_graph import padded_tokens
from tileinfer.sampling import fused_step, reads_candidates
from tileinfer.shapes import ModelShape

CUDA_ALLOCATION_BYTES = 512  # the CUDA caching allocator's rounding of every block
SAMPLING_SCALARS = 16  # small tensors of a sampling step live at its peak (11 measured on the H200)


@dataclass(frozen=True, slots=True)
class ActivationModel:
    target: ModelShape
    drafter: ModelShape | None
    block_size: int            # the drafter's block (1 without a drafter)
    num_taps: int              # len(target_layer_ids)
    elem: int                  # bytes per activation element (the compute dtype)
    int8: bool                 # weight-only INT8 linears
    backend: str               # "triton" | "torch"
    exact: bool                # exact mode (tileinfer.ops.backend.Ops)
    cuda: bool
    prefill_chunk: int
    splits: SplitPolicy = SplitPolicy()  # how the engine's GPU cuts a step's attention
    fused_layers: bool = False  # Ops.fuse_norms (which steps it fuses: backend.fused_layer)
    fused_gemms: bool = False   # Ops.folds_norm_weights: ... with the norms and adds inside our GEMMs
    step_kv: bool = False       # Ops.step_kv: decode steps' Q/K norms, RoPE and KV write in the attention
    fused_argmax: bool = False  # Ops.fused_argmax: greedy tokens come from the LM head's launch, no logits
    sample: bool = False        # a sampling request: the verify's logits exist (drafts stay greedy)
    filtered: bool = False      # ... with top-k / top-p (their sort and cumulative sums)
    candidates: int = 0         # ... read from each row's largest logits instead (SamplingParams.candidates)
    max_positions: int | None = None  # the model's context (a padded prefill stays within it); None: unbounded

    def b(self, *dims: int, e: int | None = None) -> int:
        """Bytes the allocator holds for one tensor of shape `dims` (elements of `e` bytes, default the
        compute dtype's)."""
        n = prod(dims) * (self.elem if e is None else e)
        if self.cuda and n:
            return -(-n // CUDA_ALLOCATION_BYTES) * CUDA_ALLOCATION_BYTES
        return n

    @property
    def reference(self) -> bool:
        return self.backend == "torch"

    def _fused(self, t: int) -> bool:
        return fused_layer(self.fused_layers, t)

    def _gemv(self, t: int) -> bool:
        return gemv(t, self.exact)

    # ---- prefill ------------------------------------------------------------------------------------

    def padded_prefill(self, prompt_len: int) -> int | None:
        """The size a prompt's prefill is padded to (`Engine.padded_size`), None where it runs unpadded."""
        if not self.cuda or self.reference:
            return None
        limit = self.max_positions if self.max_positions is not None else prompt_len + self.prefill_chunk
        return padded_tokens(prompt_len, self.prefill_chunk, limit)

    def prefill_bytes(self, prompt_len: int) -> int:
        """Peak bytes of prefill beyond weights and KV caches: the worst of its chunks."""
        padded = self.padded_prefill(prompt_len)
        if padded is not None:
            return self._chunk_bytes(padded, padded, 0, prompt_len, padded=True)
        chunk = max(1, min(self.prefill_chunk, prompt_len))
        full, tail = divmod(prompt_len, chunk)
        candidates = []
        if full:  # the last full chunk, after a full one
            candidates.append(self._chunk_bytes(chunk, full * chunk, chunk if full > 1 else 0, prompt_len))
        if tail:
            candidates.append(self._chunk_bytes(tail, prompt_len, chunk if full else 0, prompt_len))
        return max(candidates)

    def _chunk_bytes(self, t: int, kv_len: int, previous: int, prompt_len: int, padded: bool = False) -> int:
        """A chunk of t tokens; `padded`: the padded prefill, whose ids and positions are static buffers and
        whose last row is a copy (index_select) of h and of the residual."""
        h, b = self.target.hidden, self.b
        taps = b(t, self.num_taps * h) if self.drafter else 0
        ids = 0 if padded else b(prompt_len, e=8) + b(t, e=8)
        held = ids + taps + (self._stream_bytes(previous) if previous else 0)
        layer = self._layer_bytes(self.target, t, kv_len, causal=True, decode=False)
        drafter = self._append_context_bytes(t) + self._stream_bytes(t) if self.drafter else 0
        picked = (1 if self._fused(t) else 2) * b(1, h) if padded else 0  # the last row's copies
        last_row = self._stream_bytes(t) + self._logits_bytes(1) + picked
        return held + max(self._embedding_bytes(t), layer, drafter, last_row)

    def _stream_bytes(self, t: int) -> int:
        """The residual stream a layer leaves on t tokens: h and residual, or their sum alone (fused)."""
        return (1 if self._fused(t) else 2) * self.b(t, self.target.hidden)

    # ---- one step -----------------------------------------------------------------------------------

    def step_bytes(self, max_length: int) -> int:
        """Peak bytes of one decode / DFlash step of a request whose tokens end at `max_length`."""
        size, b, h = self.block_size, self.b, self.target.hidden
        kv_len = max_length + size
        verify = self._layer_bytes(self.target, size, kv_len, causal=True, decode=True, max_length=max_length)
        verify_logits = self._sampling_bytes(size) if self.sample else self._greedy_bytes(size)
        peak = max(verify, verify_logits + self._final_norm_bytes(size, h))
        if self.drafter is not None:
            d = self.drafter.hidden
            draft = max(self._append_context_bytes(size),
                        self._layer_bytes(self.drafter, size, kv_len, causal=False, decode=True,
                                          max_length=max_length),
                        self._greedy_bytes(size - 1) + self._final_norm_bytes(size, d))
            peak = max(peak, draft)
        return peak + 4 * b(size, e=8)  # positions, KV lengths, matches, posterior

    # ---- pieces -------------------------------------------------------------------------------------

    def _embedding_bytes(self, t: int) -> int:
        h = self.target.hidden
        return self.b(t, h) + (2 * self.b(t, h, e=4) if self.int8 else 0)

    def _final_norm_bytes(self, t: int, hidden: int) -> int:
        """The last layer's stream and what the final RMSNorm writes beside it: its output, and the
        stream's sum where h and residual are still apart (the reference ops' fp32 copies: 4 tensors)."""
        b = self.b
        if self.reference or not self._fused(t):
            return 4 * b(t, hidden)
        return 2 * b(t, hidden)

    def _sampling_bytes(self, t: int) -> int:
        """The verify's logits and `sampling.log_probs` on t rows: the tempered fp32 copy and the log-probs,
        then `speculative_sample`'s drawn row beside them. Top-k / top-p add one threshold per row, found
        from candidates (`_candidate_bytes`) or from a sort: the sort's values and int64 order, then the
        softmax and its cumulative sum and a mask. On CUDA a sort of rows longer than 4,096 is a radix sort
        that also holds 32 B per element (20 B for one row) and cub's scratch, under 0.5 B per element;
        shorter rows sort in place. The Qwen3-4B top-k/top-p step that the plan missed without it: 122.3 MB
        on the H200 (bench/results/memory_plan_h200.csv). On a GPU's Triton backend the step is
        `ops.sample.sample_block`: the logits and its buffers (with top-k / top-p on BF16 logits, a 256 KiB
        key histogram per row), the step's scalars among them, and the step's row of uniforms (with the
        reference path's 16 scalars on top instead, the plan of a one-token step held 8,704 B more than the
        H200 measured at 9cac3ef)."""
        n = self.target.vocab
        fp32 = self.b(t, n, e=4)
        logits = self.b(t, n)
        drawn = logits + fp32 + self.b(n, e=4) + 2 * self.b(n, e=8)  # the row, its float64 exp and CDF
        # the step's per-row scalars (thresholds, sums, accepted count, the token): an allocator block each
        logits += SAMPLING_SCALARS * self.b(t, e=8)
        drawn += SAMPLING_SCALARS * self.b(t, e=8)
        if fused_step(self.backend, self.cuda):
            scratch = sum(self.b(prod(shape), e=dtype.itemsize)
                          for shape, dtype in sample_buffers(t, n, torch.float32 if self.elem == 4 else torch.bfloat16,
                                                         self.filtered).values())
            uniforms = self.b(self.block_size, e=8)  # the step's row of the uniform table
            return max(self._logits_bytes(t), self.b(t, n) + scratch + uniforms)
        if not self.filtered:
            return max(self._logits_bytes(t), logits + 2 * fp32, drawn)
        if reads_candidates(t, self.candidates):
            return max(self._logits_bytes(t), logits + self._candidate_bytes(t), drawn)
        after_sort = logits + 4 * fp32 + self.b(t, n, e=1)
        if not self.cuda or n <= 4096:
            return max(self._logits_bytes(t), after_sort, drawn)
        radix = (8 if t > 1 else 5) * fp32 + self.b(-(-t * n // 2), e=1)
        return max(self._logits_bytes(t), after_sort, drawn, logits + fp32 + 3 * fp32 + radix)

    def _candidate_bytes(self, t: int) -> int:
        """`sampling.filter_logits` from each row's `candidates` largest logits, beyond the logits, at its
        largest of: the tempered fp32 copy with the top's values and int64 indices; the ties' mask and its
        int32 cast; the candidates' sums; the masked copy and its mask."""
        n, c = self.target.vocab, self.candidates
        fp32, mask, vals = self.b(t, n, e=4), self.b(t, n, e=1), self.b(t, c, e=4)
        return max(fp32 + vals + self.b(t, c, e=8), fp32 + mask + self.b(t, n, e=4) + vals, fp32 + 6 * vals,
                   2 * fp32 + mask + vals)

    def _greedy_bytes(self, t: int) -> int:
        """The LM head's greedy tokens on t rows: its logits and their argmax, or the ids alone where the
        argmax is in its launch."""
        if not self.fused_argmax or t <= 0:
            return self._logits_bytes(t)
        return self.b(t, e=8) + self._linear_scratch(self.target.vocab, self.target.hidden, t)

    def _logits_bytes(self, t: int) -> int:
        if t <= 0:
            return 0
        n, h = self.target.vocab, self.target.hidden
        return self.b(t, n) + self.b(t, e=8) + self._linear_scratch(n, h, t)

    def _linear_scratch(self, n: int, k: int, m: int, swiglu: bool = False) -> int:
        """Temporaries of one [m, k] x [n, k]^T linear beyond its output.

        Triton: fp32 split-K partials of the skinny GEMM (M <= 16); INT8 weights from DEQUANT_MIN_M rows
        widened to the compute dtype (the product scaled in place). PyTorch reference: in exact mode
        M <= 16 runs padded to 16 rows (the padded input and output, then a copy of the m rows); INT8
        weights are dequantized per call (W in the compute dtype, and an fp32 product)."""
        if not self.reference:
            widened = self.b(n, k) if self.int8 and m >= DEQUANT_MIN_M else 0
            return self._split_k_bytes(n, k, m, swiglu) + widened
        padded = self.exact and m <= SKINNY_MAX_M
        rows = SKINNY_MAX_M if padded else m
        extra = self.b(rows, k) + self.b(rows, n) if padded else 0
        return extra + (self.b(n, k) + self.b(rows, n, e=4) if self.int8 else 0)

    def _skinny_split(self, n: int, k: int, m: int, swiglu: bool = False) -> tuple[int, int]:
        """(partial slots, rows of W per program) of the skinny GEMM for this product, as it launches: the
        splits of K, or under stream-K the most programs that share a tile (a fused gate_up's tiles cover
        its gate half); 0 slots where no partials are written (the per-tile launch of whole K)."""
        from tileinfer.ops.gemm_configs import get_config
        from tileinfer.ops.skinny_gemm import launch_plan
        device = torch.device("cuda") if self.cuda and torch.cuda.is_available() else torch.device("cpu")
        cfg = get_config(n, k, SKINNY_MAX_M if self.exact else m, "int8" if self.int8 else "bf16",
                         device if device.type == "cuda" else None)
        plan = launch_plan(n // 2 if swiglu else n, k, cfg, device)
        return plan.slots if plan.slots > 1 or plan.stream else 0, cfg.block_n

    def _split_k_bytes(self, n: int, k: int, m: int, swiglu: bool = False) -> int:
        if m > SKINNY_MAX_M:
            return 0
        slots, _ = self._skinny_split(n, k, m, swiglu)
        return self.b(slots, m, n, e=4)

    def _row_sums_bytes(self, n: int, k: int, m: int) -> int:
        """The row sums [tiles, 16] fp32 a residual GEMM writes for the next folded norm."""
        _, block_n = self._skinny_split(n, k, m)
        return self.b(-(-n // block_n), SKINNY_MAX_M, e=4)

    def _norm_sums_bytes(self, n: int, k: int, m: int, swiglu: bool) -> int:
        """A folded norm's per-share Σx² [slots, tiles, rows per tile] in fp32 (where tiles write partials)."""
        slots, block_n = self._skinny_split(n, k, m, swiglu)
        tiles = -(-(n // 2 if swiglu else n) // block_n)
        rows = 16 if self.exact or m > 1 else 1
        return self.b(slots, tiles, rows, e=4)

    def _layer_bytes(self, s: ModelShape, t: int, kv_len: int, causal: bool, decode: bool,
                     max_length: int = 0) -> int:
        """Peak live bytes inside one decoder layer on t tokens, the residual stream included."""
        b, h, i, d, hq, hk = self.b, s.hidden, s.intermediate, s.head_dim, s.q_heads, s.kv_heads
        up = self.elem != 4  # the reference ops make an fp32 copy of low-precision inputs
        stream = 3 * b(t, h)
        if self.reference:  # the reference ops' fp32 temporaries, as measured with torch.profiler on CPU
            norm = b(t, h) + (3 if up else 2) * b(t, h, e=4) + 2 * b(t, e=4)
            rope = 3 * b(t, d, e=4) + 4 * b(t, hq, d, e=4)
        else:
            norm = 2 * b(t, h)
            rope = b(t, hq, d) + b(t, hk, d)
        qk = b(t, hq, d) + b(t, hk, d)
        if decode and self.step_kv:  # Ops.step_attention: norms, RoPE and the cache write inside
            qk = rope = 0
        if self._fused(t):
            return b(t, h) + self._fused_layer_bytes(s, t, kv_len, causal, decode, max_length, norm, rope, qk, up)
        qkv = b(t, s.qkv_rows)
        _, o_n, o_k = s.linears()[1]
        attention = max(qkv + self._linear_scratch(s.qkv_rows, h, t) + rope,
                        qkv + qk + self._attention_bytes(s, t, kv_len, causal, decode, max_length),
                        qkv + b(t, hq * d) + b(t, h) + self._linear_scratch(o_n, o_k, t))
        down = b(t, i) + b(t, h) + self._linear_scratch(h, i, t)
        if self.reference:
            act = b(t, 2 * i) + (3 if up else 2) * b(t, i, e=4)
        elif t <= SKINNY_MAX_M:  # SwiGLU in the gate_up GEMM's epilogue: no gate_up tensor
            return stream + max(norm, attention, b(t, i) + self._linear_scratch(2 * i, h, t, swiglu=True), down)
        else:
            act = b(t, 2 * i) + b(t, i)
        mlp = max(b(t, 2 * i) + self._linear_scratch(2 * i, h, t), act, down)
        return stream + max(norm, attention, mlp)

    def _fused_layer_bytes(self, s: ModelShape, t: int, kv_len: int, causal: bool, decode: bool,
                           max_length: int, norm: int, rope: int, qk: int, up: bool) -> int:
        """fused_decoder_layer's peak beside its one stream tensor (h + residual). In our GEMMs the norms
        and adds leave no tensor but, on the tensor-core path, the residual GEMMs' row sums (the down
        projection's held into the next layer's qkv, o's through the gate_up) and the first layer's normed x
        (every drafter layer's: not folded); GEMVs sum x² themselves. Other linears write the normed x first and the
        product before its add."""
        b, h, i, d, hq = self.b, s.hidden, s.intermediate, s.head_dim, s.q_heads
        _, o_n, o_k = s.linears()[1]
        qkv = b(t, s.qkv_rows)
        prev = sums_o = sums_down = 0
        if self.fused_gemms:
            added = 0
            qkv_gemm = self._linear_scratch(s.qkv_rows, h, t)
            gate_up = b(t, i) + self._linear_scratch(2 * i, h, t, swiglu=True)
            if self._gemv(t) and s is not self.drafter:  # every Σx² summed in the GEMVs: no row sums
                x = 0
                qkv_gemm += self._norm_sums_bytes(s.qkv_rows, h, t, False)
                gate_up += self._norm_sums_bytes(2 * i, h, t, True)
            else:
                x = b(t, h)
                prev, sums_o, sums_down = (self._row_sums_bytes(h, i, t), self._row_sums_bytes(o_n, o_k, t),
                                           self._row_sums_bytes(h, i, t))
                gate_up += sums_o
        else:
            x = added = b(t, h)
            qkv_gemm = self._linear_scratch(s.qkv_rows, h, t)
            act = b(t, 2 * i) + (3 if up else 2) * b(t, i, e=4) if self.reference else b(t, 2 * i) + b(t, i)
            gate_up = max(norm, x + b(t, 2 * i) + self._linear_scratch(2 * i, h, t), x + act)
        attention = max(norm if x else 0, prev + qkv + x + qkv_gemm + rope,
                        prev + qkv + qk + self._attention_bytes(s, t, kv_len, causal, decode, max_length),
                        prev + qkv + b(t, hq * d) + added + self._linear_scratch(o_n, o_k, t) + sums_o)
        down = b(t, i) + added + self._linear_scratch(h, i, t) + sums_down
        return max(attention, gate_up, down)

    def _attention_bytes(self, s: ModelShape, t: int, kv_len: int, causal: bool, decode: bool,
                         max_length: int) -> int:
        """The attention call's output and temporaries (q, K/V already counted by the caller)."""
        b, d, hq, hk = self.b, s.head_dim, s.q_heads, s.kv_heads
        out = b(t, hq, d)
        if self.reference:
            kv = 2 * b(kv_len, hq, d, e=4) + 2 * b(kv_len, e=8)       # K, V repeated to Hq heads in fp32
            scores = 2 * b(hq, t, kv_len, e=4) + (b(t, kv_len, e=1) if causal else 0)  # scores, probs, mask
            return kv + max(b(kv_len, hk, d, e=4) if self.elem != 4 else 0, scores + 2 * b(t, hq, d, e=4))
        if decode:  # split-KV: partial outputs and log-sum-exps of every split, in fp32
            if self.exact:  # the step's exact grid, the drafter's (even shares, not causal) as the verify's
                splits = exact_grid_splits(exact_num_splits(max_length, self.splits.max_splits))
            else:
                splits = self.splits.num_splits(max_length, t)
            return out + b(splits, t, hq, d, e=4) + b(splits, t, hq, e=4)
        return out

    def _append_context_bytes(self, t: int) -> int:
        """drafter.append_context on t features: fc output, its norm, each layer's K/V (two live); the
        reference's RoPE also copies K."""
        s, b = self.drafter, self.b
        hd, d, hk = s.hidden, s.head_dim, s.kv_heads
        features = b(t, self.num_taps * self.target.hidden)
        kv, k, fc = b(t, 2 * hk * d), b(t, hk, d), b(t, hd)
        if self.reference:
            norm = b(t, hd) + (3 if self.elem != 4 else 2) * b(t, hd, e=4) + 2 * b(t, e=4)
            rope = 2 * k + 3 * b(t, d, e=4) + 4 * b(t, hk, d, e=4)
        else:  # qk_norm_rope writes K and V straight into the cache
            norm, rope = 2 * b(t, hd), 0
        fc_scratch = self._linear_scratch(hd, self.num_taps * self.target.hidden, t)
        kv_scratch = self._linear_scratch(2 * hk * d, hd, t)
        return features + max(fc + fc_scratch, norm, fc + 2 * kv + rope + kv_scratch)
