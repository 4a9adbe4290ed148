"""The engine: prefill, then steps of [drafter pass →] verify → accept, each step a CUDA-graph replay
(and the prefill of a short prompt one too: tileinfer.prefill_graph).

Plain greedy decoding is the same loop with a block of one token and no drafter. Device state (the
anchor's position, the block, the drafter's new context) is updated inside the graphs, so the host
reads only each step's result; the next step is launched before that read whenever its block size
cannot depend on it. With a temperature, verify samples instead (tileinfer.sampling): plain decoding
from the target's filtered distribution, DFlash by speculative sampling of its argmax drafts.
"""

import array
import time
from collections import deque
from dataclasses import dataclass, field

import torch

from tileinfer import memory, prefill_graph, sampling, tracing
from tileinfer.errors import ConfigError, RequestError
from tileinfer.kv_cache import KVCache
from tileinfer.models.dflash import DFlashDrafter
from tileinfer.models.qwen3 import Qwen3ForCausalLM
from tileinfer.accept_profile import accept_schedule
from tileinfer.ops.attention import (SplitPolicy, exact_block_m, exact_grid_splits, exact_num_splits,
                                     exact_split_size, max_num_splits)
from tileinfer.ops.backend import AttentionContext
from tileinfer.ops.sample import sample_block
from tileinfer.stats import Generation, GenerationStats

DEFAULT_PREFILL_CHUNK = 4096


def prompt_ids(prompt) -> torch.Tensor:
    """A prompt's token ids as a 1-D int64 tensor on the CPU. A list is read in one pass in C (`array`'s
    int64 conversion, which refuses anything that is not an integer): each pass of Python over a
    1,000-token prompt cost a request ~0.05 ms, more or less from one prompt to the next, by where in
    memory its int objects lie."""
    if torch.is_tensor(prompt):
        if prompt.dim() != 1 or prompt.is_floating_point() or prompt.is_complex():
            raise RequestError(f"a prompt tensor must hold token ids: 1-D and integer, got shape "
                               f"{tuple(prompt.shape)} of {prompt.dtype}")
        return prompt.detach().to("cpu", torch.int64)
    try:
        ids = array.array("q", prompt)
    except (TypeError, OverflowError) as e:
        raise RequestError(f"prompt token ids must be integers: {e}") from None
    return torch.frombuffer(ids, dtype=torch.int64) if ids else torch.empty(0, dtype=torch.int64)


@dataclass(frozen=True, slots=True)
class StepShape:
    """What a step's graphs are captured for."""
    size: int          # tokens in the block: 1 is plain decoding, more a DFlash step
    num_splits: int    # attention splits (the decode kernel's grid)
    split_size: int    # > 0: split boundaries at its multiples (exact mode); 0: even shares of the KV length
    forced: bool       # acceptance forced from an accept profile instead of computed
    sample: bool = False     # speculative sampling instead of greedy verification
    filtered: bool = False   # top-k / top-p on (their sort is skipped otherwise)
    candidates: int = 0      # ... from each row's largest logits (SamplingParams.candidates), 0: a sort
    tokens_per_program: int = 0  # query tokens of the block each attention program takes (0: all)


@dataclass(slots=True)
class StepInFlight:
    """A launched step whose result the host has not read yet."""
    size: int
    result: torch.Tensor                 # pinned host copy of the engine's result buffer
    done: object                         # a CUDA event recorded after the copy (None on CPU)
    marks: list = field(default_factory=list)   # CUDA events around its phases
    host_ms: dict = field(default_factory=dict)


class Engine:
    def __init__(self, target: Qwen3ForCausalLM, drafter: DFlashDrafter | None, tokenizer, eos_token_ids,
                 weights: str, path=None, draft_path=None, prefill_chunk: int = DEFAULT_PREFILL_CHUNK,
                 memory_budget: int | None = None):
        self.target, self.drafter, self.tokenizer = target, drafter, tokenizer
        self.config = target.config
        self.eos_token_ids = list(eos_token_ids)
        self.weights, self.path, self.draft_path = weights, path, draft_path
        self.device = target.device
        self.ops = target.ops
        self.backend = self.ops.backend
        self.prefill_chunk = prefill_chunk
        # Bytes the engine may hold in all (weights included); None: free device memory on CUDA, no check on CPU.
        self.memory_budget = memory_budget
        c = self.config
        self.cache = KVCache(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, target.dtype, self.device)
        self.block_max = drafter.config.block_size if drafter else 1
        if drafter:
            d = drafter.config.layers
            self.draft_cache = KVCache(d.num_hidden_layers, d.num_key_value_heads, d.head_dim, target.dtype, self.device)
            self.tap_ids = list(drafter.config.target_layer_ids)
            self.mask_token_id = drafter.config.mask_token_id
        else:
            self.draft_cache, self.tap_ids, self.mask_token_id = None, [], 0
        self.graph_prefill = self.is_cuda and self.backend == "triton"
        self._graphs: dict = {}
        self._pool = None
        self._launches = 0
        self._held = None
        self._models = {}  # memory_model's, by what it is built from
        self._state()

    def _state(self):
        """Static buffers read and written by the step graphs."""
        dev, b = self.device, self.block_max
        self.start_t = torch.zeros(1, dtype=torch.int64, device=dev)       # position of the anchor
        self.ctx_start_t = torch.zeros(1, dtype=torch.int64, device=dev)   # first new drafter-context position
        self.block_ids = torch.zeros(b, dtype=torch.int64, device=dev)     # [anchor, drafts…]
        self.result = torch.zeros(b + 1, dtype=torch.int64, device=dev)    # [accepted, committed candidates…]
        self.forced_accept = torch.zeros(1, dtype=torch.int64, device=dev)
        self.arange = torch.arange(b, dtype=torch.int64, device=dev)
        feat = self.drafter.feature_size if self.drafter else 0
        self.features = torch.zeros(b, feat, dtype=self.target.dtype, device=dev)  # taps of the last verify
        self.sampler = sampling.SamplerState(b, dev)  # temperature, top-k/p, the request's uniforms
        pin = dev.type == "cuda"
        self._host_results = [torch.zeros(b + 1, dtype=torch.int64, pin_memory=pin) for _ in range(3)]
        self._prompt_state()

    def _prompt_state(self):
        """The padded prefill's static inputs and output (prefill_graph), where short prompts prefill padded:
        `graph_prefill`, on by default where generate replays graphs (CUDA, our kernels)."""
        self.padded_ids = self.padded_positions = self.padded_last = self.padded_logits = None
        if self.graph_prefill:
            dev, n = self.device, prefill_graph.MAX_TOKENS
            self.padded_ids = torch.zeros(n, dtype=torch.int64, device=dev)
            self.padded_positions = torch.arange(n, dtype=torch.int64, device=dev)
            self.padded_last = torch.zeros(1, dtype=torch.int64, device=dev)
            self.padded_logits = torch.zeros(1, self.config.vocab_size, dtype=self.target.dtype, device=dev)

    @property
    def exact(self) -> bool:
        """Exact mode: greedy DFlash returns exactly greedy decoding's tokens (each row of a step computed
        as it is alone); `load(exact=...)` sets the default, `generate(exact=...)` one call's."""
        return self.ops.exact

    @exact.setter
    def exact(self, value: bool):
        if not isinstance(value, bool):
            raise ConfigError(f"exact must be True or False, got {value!r}")
        self.ops.exact = value

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    # ----------------------------------------------------------------------------------------------
    # One step, written once: run eagerly or captured as graphs.

    def _attention_ctx(self, shape: StepShape, host_start: int, causal: bool) -> AttentionContext:
        """The target's (causal) attention reads cache rows that earlier steps wrote; the drafter's block
        (not causal) also reads the context rows that this step's `append_context` has just written."""
        kv_len_t = (self.start_t + shape.size).to(torch.int32)
        c = self.config
        block_m = exact_block_m(c.num_attention_heads, c.num_key_value_heads) if shape.split_size and causal else None
        return AttentionContext(host_start + shape.size, kv_len_t, causal=causal, num_splits=shape.num_splits,
                                split_size=shape.split_size if causal else 0, block_m=block_m,
                                settled=causal, tokens_per_program=shape.tokens_per_program or None)

    def _draft(self, shape: StepShape, host_start: int):
        drafter, size = self.drafter, shape.size
        with tracing.annotate("drafter", kv_len=host_start + size, m=size):
            self.block_ids[1:].fill_(self.mask_token_id)
            drafter.append_context(self.features, self.ctx_start_t + self.arange, self.draft_cache)
            positions = self.start_t + self.arange[:size]
            ctx = self._attention_ctx(shape, host_start, causal=False)
            hidden = drafter.draft(self.block_ids[:size], positions, self.draft_cache, ctx)
            drafts = self.target.greedy(hidden[1:size])
            self.block_ids[1:size].copy_(drafts)

    def _verify(self, shape: StepShape, host_start: int):
        target, size = self.target, shape.size
        with tracing.annotate("verify" if size > 1 else "decode", kv_len=host_start + size, m=size,
                              num_splits=shape.num_splits):
            positions = self.start_t + self.arange[:size]
            ctx = self._attention_ctx(shape, host_start, causal=True)
            taps = self.features[:size] if self.tap_ids and size > 1 else None
            h, residual = target.forward(self.block_ids[:size], positions, self.cache, ctx,
                                         taps=taps, tap_ids=self.tap_ids if taps is not None else ())
            normed = target.final_norm(h, residual)
            logits = target.logits(normed) if shape.sample else None
            posterior = None if shape.sample else target.greedy(normed)
        with tracing.annotate("accept"):
            accepted = None
            if shape.sample:
                accepted, posterior = self._sample(logits, self.block_ids[1:size], shape.filtered,
                                                   shape.candidates)
            self.ops.commit(self.block_ids, posterior, size, self.result, self.start_t, self.ctx_start_t,
                            accepted, self.forced_accept if shape.forced else None)

    def _sample(self, logits, drafts, filtered: bool, candidates: int = 0):
        """Speculative sampling of a block (a single token without drafts): (accepted [1], tokens [size])."""
        s = self.sampler
        if sampling.fused_step(self.backend, logits.is_cuda):
            return sample_block(logits, drafts, s.next_uniforms(), s.temperature, s.top_k, s.top_p, filtered)
        logp = sampling.log_probs(logits, s.temperature, s.top_k, s.top_p, filtered, candidates)
        return sampling.speculative_sample(logp, drafts, s.next_uniforms())

    def _phases(self, shape: StepShape, host_start: int) -> list[tuple[str, object]]:
        """The step as (phase, function) pairs: [drafter,] verify."""
        phases = []
        if shape.size > 1:
            phases.append(("drafter", lambda: self._draft(shape, host_start)))
        phases.append(("verify", lambda: self._verify(shape, host_start)))
        return phases

    def _drop_graphs(self):
        """Forget every captured graph, and their memory pool with them: a capture into a pool whose graphs
        are all gone trips the caching allocator's use-count assert."""
        self._graphs.clear()
        self._pool = None

    def _graph(self, key, fn):
        graph = self._graphs.get(key)
        if graph is None:
            state = (self.start_t, self.ctx_start_t, self.block_ids, self.result, self.sampler.row)
            saved = [t.clone() for t in state]
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                fn()  # compiles the Triton kernels (and fits their configs) outside the capture
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                fn()
            self._pool = graph.pool()
            for t, s in zip(state, saved):
                t.copy_(s)
            self._graphs[key] = graph  # only a whole capture is kept: an interrupted one is dropped
        return graph

    def _launch(self, shape: StepShape, host_start: int, use_graphs: bool) -> StepInFlight:
        """Run one step's phases (graph replays or eager calls) and queue the copy of its result to the host."""
        step = StepInFlight(shape.size, self._host_results[self._launches % len(self._host_results)], None)
        self._launches += 1
        for phase, fn in self._phases(shape, host_start):
            tic = time.perf_counter()
            if self.is_cuda:
                step.marks.append(torch.cuda.Event(enable_timing=True))
                step.marks[-1].record()
            if use_graphs:
                self._graph((phase, shape), fn).replay()
            else:
                fn()
            step.host_ms[phase] = (time.perf_counter() - tic) * 1e3
        if self.is_cuda:
            step.marks.append(torch.cuda.Event(enable_timing=True))
            step.marks[-1].record()
        step.result.copy_(self.result, non_blocking=True)
        if self.is_cuda:
            step.done = torch.cuda.Event()
            step.done.record()
        return step

    # ----------------------------------------------------------------------------------------------

    def _check_request(self, prompt, max_new_tokens, stop_ids, block_size, num_splits, temperature=0.0,
                       top_k=None, top_p=None, seed=None):
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise RequestError("this checkpoint has no tokenizer.json: pass the prompt as a list of token ids")
            if not prompt:
                raise RequestError("the prompt is empty")
            prompt = self.tokenizer.encode(prompt).ids
        ids = prompt_ids(prompt)
        if not len(ids):
            raise RequestError("the prompt is empty: give at least one token")
        vocab = self.config.vocab_size
        lo, hi = (int(v) for v in torch.aminmax(ids))
        if lo < 0 or hi >= vocab:
            bad = ids[(ids < 0) | (ids >= vocab)][:5].tolist()
            raise RequestError(f"prompt token ids {bad} are outside the vocabulary [0, {vocab})")
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise RequestError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
        limit = self.config.max_position_embeddings
        if len(ids) + max_new_tokens > limit:
            raise RequestError(f"prompt ({len(ids)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the "
                               f"model's context of {limit} positions")
        if block_size is None:
            block_size = self.block_max
        if not isinstance(block_size, int) or not 1 <= block_size <= self.block_max:
            what = f"1 … {self.block_max} (the drafter's block size)" if self.drafter else "1 (no drafter is loaded)"
            raise RequestError(f"block_size must be in {what}, got {block_size!r}")
        if num_splits is not None and (not isinstance(num_splits, int) or num_splits < 1):
            raise ConfigError(f"num_splits must be an integer ≥ 1, got {num_splits!r}")
        params = sampling.check_params(temperature, top_k, top_p, seed)
        stop = set(self.eos_token_ids if stop_ids is None else stop_ids)
        return ids, block_size, stop, params

    def memory_plan(self, prompt_len: int, max_new_tokens: int, budget_bytes: int | None = None,
                    sample: bool = False, filtered: bool = False, candidates: int = 0) -> memory.MemoryPlan:
        """Weights, KV caches and peak activations in bytes for a request (`sample`: temperature > 0,
        `filtered`: with top-k / top-p, `candidates`: SamplingParams.candidates); with a budget, the
        longest prompt that fits."""
        return memory.plan(self, prompt_len, max_new_tokens, budget_bytes, sample=sample, filtered=filtered,
                           candidates=candidates)

    def memory_model(self, sample: bool = False, filtered: bool = False, candidates: int = 0) -> memory.MemoryModel:
        """memory.MemoryModel.from_engine(self).sampling(sample, filtered, candidates), built again only when
        what it is built from changes: every generate call checks its request against the budget, and
        building it costs ~0.05 ms of host time that no GPU work explains."""
        ops = self.ops
        key = (id(self.target), id(self.drafter), self.weights, self.graph_prefill, self.exact, self.prefill_chunk,
               self.backend, id(ops), ops.fuse_norms, ops.step_kv, ops.fused_argmax, sample, filtered, candidates)
        model = self._models.get(key)
        if model is None:
            if len(self._models) >= 16:
                self._models.clear()
            model = self._models[key] = memory.MemoryModel.from_engine(self).sampling(sample, filtered, candidates)
        return model

    def held_bytes(self) -> tuple[int, int]:
        """(weights, fixed buffers): the bytes this engine holds (memory.held_weight_bytes, held_buffer_bytes),
        walked again only when the models, their weights' kind or the padded prefill's buffers change. The
        walk over every tensor costs a 36-layer model about 1 ms, and every generate call plans its memory."""
        key = (id(self.target), id(self.drafter), self.weights, self.graph_prefill)
        if self._held is None or self._held[0] != key:
            self._held = (key, memory.held_weight_bytes(self), memory.held_buffer_bytes(self))
        return self._held[1:]

    def _sync(self):
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def _ensure_caches(self, positions):
        grew = self.cache.ensure(positions)
        if self.draft_cache is not None:
            grew |= self.draft_cache.ensure(positions)
        if grew:
            self._drop_graphs()

    @torch.inference_mode()
    def prefill(self, ids, draft: bool = True) -> torch.Tensor:
        """Run the prompt (token ids) through the target in chunks (and the drafter's context with it); the
        first token. A prompt that `generate` prefills as a graph runs here the same padded prefill, eagerly."""
        return self._prefill(prompt_ids(ids), draft, graphs=False).argmax(dim=-1)

    def _prefill(self, ids: torch.Tensor, draft: bool, graphs: bool) -> torch.Tensor:
        """prefill's work; the logits [1, vocab] at the last prompt position. A short prompt (`padded_size`)
        runs padded, as one graph replay with `graphs`."""
        size = self.padded_size(len(ids))
        if size is None:
            return self._prefill_chunks(ids, draft)
        self._ensure_caches(size)
        self.padded_ids[:len(ids)].copy_(ids)
        self.padded_ids[len(ids):size].zero_()
        self.padded_last.fill_(len(ids) - 1)
        with tracing.annotate("prefill", tokens=len(ids), padded=size):
            run = lambda: self._prefill_padded(size, draft)  # noqa: E731
            if graphs:
                self._graph(("prefill", size, draft, self.exact), run).replay()
            else:
                run()
        return self.padded_logits

    def padded_size(self, prompt_len: int) -> int | None:
        """The size this engine pads a prompt's prefill to (prefill_graph.padded_tokens), None: unpadded."""
        if not self.graph_prefill:
            return None
        return prefill_graph.padded_tokens(prompt_len, self.prefill_chunk, self.config.max_position_embeddings)

    def _prefill_padded(self, size: int, draft: bool) -> None:
        """The prompt in `padded_ids` padded to `size` tokens, in one chunk; its last row's logits written to
        `padded_logits` (that row's index in `padded_last`): every tensor it reads or writes is static."""
        target, drafter = self.target, self.drafter if draft else None
        tokens, positions = self.padded_ids[:size], self.padded_positions[:size]
        taps = torch.empty(size, drafter.feature_size, dtype=target.dtype, device=self.device) if drafter else None
        h, residual = target.forward(tokens, positions, self.cache, AttentionContext(size, None, causal=True),
                                     taps=taps, tap_ids=self.tap_ids if drafter else ())
        if drafter:
            drafter.append_context(taps, positions, self.draft_cache)
        last = target.final_norm(None if h is None else h.index_select(0, self.padded_last),
                                 residual.index_select(0, self.padded_last))
        self.padded_logits.copy_(target.logits(last))

    def _prefill_chunks(self, ids: torch.Tensor, draft: bool) -> torch.Tensor:
        """The prompt in chunks of `prefill_chunk` tokens, eagerly; the logits [1, vocab] at its last position."""
        target, chunk = self.target, self.prefill_chunk
        drafter = self.drafter if draft else None
        self._ensure_caches(len(ids))
        tokens = ids.to(self.device)
        n = len(ids)
        with tracing.annotate("prefill", tokens=n):
            for lo in range(0, n, chunk):
                hi = min(n, lo + chunk)
                positions = torch.arange(lo, hi, dtype=torch.int64, device=self.device)
                taps = (torch.empty(hi - lo, drafter.feature_size, dtype=target.dtype, device=self.device)
                        if drafter else None)
                ctx = AttentionContext(hi, None, causal=True)
                h, residual = target.forward(tokens[lo:hi], positions, self.cache, ctx, taps=taps,
                                             tap_ids=self.tap_ids if drafter else ())
                if drafter:
                    drafter.append_context(taps, positions, self.draft_cache)
            last = target.final_norm(None if h is None else h[-1:], residual[-1:])
            return target.logits(last)

    @torch.inference_mode()
    def prompt_logits(self, prompt) -> torch.Tensor:
        """Logits at every prompt position [T, vocab], one prefill: for comparisons, not for serving."""
        ids, _, _, _ = self._check_request(prompt, 1, None, None, None)
        self._ensure_caches(len(ids) + 2 * self.block_max)
        tokens = ids.to(self.device)
        positions = torch.arange(len(ids), dtype=torch.int64, device=self.device)
        h, residual = self.target.forward(tokens, positions, self.cache, AttentionContext(len(ids), None))
        return self.target.logits(self.target.final_norm(h, residual)).float()

    def step_shape(self, size: int, max_length: int, num_splits: int | None, forced: bool, sample: bool = False,
                   filtered: bool = False, candidates: int = 0) -> StepShape:
        """The shape of a step of `size` tokens in a request whose tokens end at `max_length`."""
        if not self.exact:
            policy = SplitPolicy.of(self.device)
            if num_splits is None:
                num_splits = policy.num_splits(max_length, size)
            return StepShape(size, num_splits, 0, forced, sample, filtered, candidates,
                             policy.per_program(max_length, size))
        if num_splits is None:  # one split size for the whole request, whatever the step's size
            num_splits = exact_num_splits(max_length, max_num_splits(self.device))
        return StepShape(size, exact_grid_splits(num_splits), exact_split_size(max_length, num_splits), forced,
                         sample, filtered, candidates)

    @torch.inference_mode()
    def generate(self, prompt, max_new_tokens: int, stop_ids=None, block_size: int | None = None,
                 eager: bool = False, accept_profile=None, num_splits: int | None = None,
                 exact: bool | None = None, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float | None = None, seed: int | None = None) -> Generation:
        """temperature 0 decodes greedily; above 0 it samples from the target's distribution at that
        temperature, filtered by top_k / top_p as vLLM does (DFlash stays lossless in distribution).
        seed: the same seed gives the same tokens on the same device and revision (None: a fresh one,
        recorded in the stats). accept_profile forces acceptance counts: the costs are real, the tokens not."""
        if exact is not None and exact != self.exact:
            default, self.exact = self.exact, exact
            try:
                return self.generate(prompt, max_new_tokens, stop_ids, block_size, eager, accept_profile, num_splits,
                                     temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
            finally:
                self.exact = default
        ids, block, stop, params = self._check_request(prompt, max_new_tokens, stop_ids, block_size, num_splits,
                                                       temperature, top_k, top_p, seed)
        n_prompt = len(ids)
        vocab = self.config.vocab_size
        sample, filtered, candidates = not params.greedy, params.filtered(vocab), params.candidates(vocab)
        memory.check_budget(self, n_prompt, max_new_tokens, sample=sample, filtered=filtered,  # before any allocation
                            candidates=candidates)
        max_length = n_prompt + max_new_tokens
        self._ensure_caches(max_length + 2 * self.block_max)
        use_graphs = self.is_cuda and not eager and self.backend == "triton"
        forced = accept_profile is not None
        schedule = accept_schedule(accept_profile) if forced else None
        pipelined = self.backend == "triton"  # the torch backend reads the host's KV length
        seed = params.seed if params.seed is not None or not sample else sampling.random_seed()
        stats = GenerationStats(prompt_tokens=n_prompt, block_size=block, exact=self.exact,
                                temperature=params.temperature, top_k=params.top_k, top_p=params.top_p, seed=seed)
        if sample and self.sampler.start(params, seed, max_new_tokens + 1, self.config.vocab_size):
            self._drop_graphs()

        self._sync()
        t0 = time.perf_counter()
        logits = self._prefill(ids, draft=block > 1, graphs=use_graphs)
        first = self._sample(logits, self.block_ids[1:1], filtered, candidates)[1] if sample else logits.argmax(dim=-1)
        self.block_ids[:1].copy_(first)
        self.start_t.fill_(n_prompt)
        self.ctx_start_t.fill_(n_prompt)
        out = [int(first.item())]
        self._committed(out)
        t1 = time.perf_counter()
        stats.prefill_ms = (t1 - t0) * 1e3

        def launch(size: int, host_start: int) -> StepInFlight:
            if forced:
                self.forced_accept.fill_(next(schedule) - 1)
            shape = self.step_shape(size, max_length, num_splits, forced, sample, filtered, candidates)
            return self._launch(shape, host_start, use_graphs)

        read, pending = [], deque()
        start = n_prompt                # the host's view of the anchor's position
        launched_to = start             # the furthest anchor position a launched step may leave
        stopped = out[0] in stop
        accept_s = 0.0
        try:
            while not stopped and start + 1 < max_length:
                if not pending:
                    pending.append(launch(min(block, max_length - start), start))
                    launched_to = start + pending[-1].size
                step = pending.popleft()
                read.append(step)  # only steps whose result is used count
                # Launch the next step before reading this one when its block cannot depend on this result.
                if pipelined and max_length - launched_to >= block and launched_to + 1 < max_length:
                    pending.append(launch(block, start))
                    launched_to += block
                tic = time.perf_counter()
                committed, stopped, cut = self._read(step, start, max_length, stop)
                stats.count_drafts(step.size, int(step.result[0]))
                out += committed
                self._committed(committed)
                start += len(committed)
                # what this step left is known now: the furthest anchor is the steps still in flight's
                launched_to = start + sum(s.size for s in pending)
                stats.tokens_per_step.append(len(committed))
                accept_s += time.perf_counter() - tic
                if cut:
                    break
        finally:  # an interrupt leaves no work in flight and the engine ready for the next call
            self._sync()
            pending.clear()
        t2 = time.perf_counter()
        if stopped:
            stats.stop_reason = "stop"
        stats.decode_ms = (t2 - t1) * 1e3
        stats.steps = len(stats.tokens_per_step)
        stats.new_tokens = len(out)
        stats.accept_ms = accept_s * 1e3
        self._phase_times(stats, read)
        text = self.tokenizer.decode(out) if self.tokenizer is not None else None
        return Generation(tokens=out, text=text, stats=stats)

    def _committed(self, tokens: list[int]) -> None:
        """Called with the first token and then each step's committed tokens (streaming.watch listens)."""

    def _read(self, step: StepInFlight, start: int, max_length: int, stop: set) -> tuple[list[int], bool, bool]:
        """The tokens a step commits, whether a stop id ended them, and whether they were cut short
        (by a stop id or the length limit: later steps in flight are then void)."""
        if step.done is not None:
            step.done.synchronize()
        result = step.result.tolist()
        produced = min(result[0] + 1, max_length - start - 1)
        committed = result[1:1 + produced]
        for i, token in enumerate(committed):
            if token in stop:
                return committed[:i + 1], True, True
        return committed, False, produced != result[0] + 1

    def _phase_times(self, stats: GenerationStats, steps: list[StepInFlight]) -> None:
        """Drafter and verify milliseconds: CUDA event pairs on a GPU, host clocks on a CPU."""
        if not self.is_cuda:
            stats.drafter_ms = sum(s.host_ms.get("drafter", 0.0) for s in steps)
            stats.verify_ms = sum(s.host_ms.get("verify", 0.0) for s in steps)
            return
        stats.drafter_ms = sum(s.marks[0].elapsed_time(s.marks[1]) for s in steps if len(s.marks) == 3)
        stats.verify_ms = sum(s.marks[-2].elapsed_time(s.marks[-1]) for s in steps)
