"""The engine: prefill, then steps of [drafter pass →] verify → accept, each step a CUDA-graph replay.

Plain greedy decoding is the same loop with a block of one token and no drafter. Device state (the
anchor's position, the block, the drafter's new context) is updated inside the graphs, so the host
reads only each step's result; the next step is launched before that read whenever its block size
cannot depend on it.
"""

import time
from collections import deque

import torch

from tileinfer import memory, tracing
from tileinfer.errors import ConfigError, RequestError
from tileinfer.kv_cache import KVCache
from tileinfer.models.dflash import DFlashDrafter
from tileinfer.models.qwen3 import Qwen3ForCausalLM
from tileinfer.ops.attention import default_num_splits
from tileinfer.ops.backend import AttentionContext
from tileinfer.stats import Generation, GenerationStats
from tileinfer.replay import accept_schedule

DEFAULT_PREFILL_CHUNK = 4096


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
        self._graphs: dict = {}
        self._pool = None
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
        pin = dev.type == "cuda"
        self._host_results = [torch.zeros(b + 1, dtype=torch.int64, pin_memory=pin) for _ in range(3)]

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    # ----------------------------------------------------------------------------------------------
    # One step, written once: run eagerly or captured as graphs.

    def _draft(self, size: int, num_splits: int, host_start: int):
        drafter = self.drafter
        with tracing.annotate("drafter", kv_len=host_start + size, m=size):
            self.block_ids[1:].fill_(self.mask_token_id)
            drafter.append_context(self.features, self.ctx_start_t + self.arange, self.draft_cache)
            positions = self.start_t + self.arange[:size]
            kv_len_t = (self.start_t + size).to(torch.int32)
            ctx = AttentionContext(host_start + size, kv_len_t, causal=False, num_splits=num_splits)
            hidden = drafter.draft(self.block_ids[:size], positions, self.draft_cache, ctx)
            drafts = self.target.logits(hidden[1:size]).argmax(dim=-1)
            self.block_ids[1:size].copy_(drafts)

    def _verify(self, size: int, num_splits: int, host_start: int, replay: bool):
        target = self.target
        with tracing.annotate("verify" if size > 1 else "decode", kv_len=host_start + size, m=size, num_splits=num_splits):
            positions = self.start_t + self.arange[:size]
            kv_len_t = (self.start_t + size).to(torch.int32)
            ctx = AttentionContext(host_start + size, kv_len_t, causal=True, num_splits=num_splits)
            taps = self.features[:size] if self.tap_ids and size > 1 else None
            h, residual = target.forward(self.block_ids[:size], positions, self.cache, ctx,
                                         taps=taps, tap_ids=self.tap_ids if taps is not None else ())
            posterior = target.logits(target.final_norm(h, residual)).argmax(dim=-1)
        with tracing.annotate("accept"):
            matches = (self.block_ids[1:size] == posterior[: size - 1]).to(torch.int64)
            accepted = matches.cumprod(0).sum().view(1)
            if replay:
                accepted = torch.minimum(self.forced_accept, torch.full_like(accepted, size - 1))
            self.result[:1].copy_(accepted)
            self.result[1:size + 1].copy_(posterior)
            self.ctx_start_t.copy_(self.start_t)
            self.start_t.add_(accepted + 1)
            self.block_ids[:1].copy_(posterior.gather(0, accepted))

    def _step_fns(self, size, num_splits, host_start, replay):
        fns = []
        if size > 1:
            fns.append(lambda: self._draft(size, num_splits, host_start))
        fns.append(lambda: self._verify(size, num_splits, host_start, replay))
        return fns

    def _graph(self, key, fn):
        graph = self._graphs.get(key)
        if graph is None:
            saved = [t.clone() for t in (self.start_t, self.ctx_start_t, self.block_ids, self.result)]
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                fn()  # compiles the Triton kernels outside the capture
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                fn()
            self._pool = graph.pool()
            for t, s in zip((self.start_t, self.ctx_start_t, self.block_ids, self.result), saved):
                t.copy_(s)
            self._graphs[key] = graph
        return graph

    # ----------------------------------------------------------------------------------------------

    def _check_request(self, prompt, max_new_tokens, stop_ids, block_size, num_splits):
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise RequestError("this checkpoint has no tokenizer.json: pass the prompt as a list of token ids")
            if not prompt:
                raise RequestError("the prompt is empty")
            ids = self.tokenizer.encode(prompt).ids
        else:
            ids = [int(t) for t in (prompt.tolist() if torch.is_tensor(prompt) else prompt)]
        if not ids:
            raise RequestError("the prompt is empty: give at least one token")
        vocab = self.config.vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise RequestError(f"prompt token ids {bad[:5]} are outside the vocabulary [0, {vocab})")
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
        stop = set(self.eos_token_ids if stop_ids is None else stop_ids)
        return ids, block_size, stop

    def memory_plan(self, prompt_len: int, max_new_tokens: int, budget_bytes: int | None = None) -> memory.MemoryPlan:
        """Weights, KV caches and peak activations in bytes for a request; with a budget, the longest prompt that fits."""
        return memory.plan(self, prompt_len, max_new_tokens, budget_bytes)

    def _sync(self):
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def _ensure_caches(self, positions):
        grew = self.cache.ensure(positions)
        if self.draft_cache is not None:
            grew |= self.draft_cache.ensure(positions)
        if grew:
            self._graphs.clear()

    @torch.inference_mode()
    def prefill(self, ids: list[int], draft: bool = True) -> torch.Tensor:
        """Run the prompt through the target in chunks (and the drafter's context with it); the first token."""
        target, chunk = self.target, self.prefill_chunk
        drafter = self.drafter if draft else None
        tokens = torch.tensor(ids, dtype=torch.int64, device=self.device)
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
            last = target.final_norm(h[-1:], residual[-1:])
            return target.logits(last).argmax(dim=-1)

    @torch.inference_mode()
    def prompt_logits(self, prompt) -> torch.Tensor:
        """Logits at every prompt position [T, vocab], one prefill: for comparisons, not for serving."""
        ids, _, _ = self._check_request(prompt, 1, None, None, None)
        self._ensure_caches(len(ids) + 2 * self.block_max)
        tokens = torch.tensor(ids, dtype=torch.int64, device=self.device)
        positions = torch.arange(len(ids), dtype=torch.int64, device=self.device)
        h, residual = self.target.forward(tokens, positions, self.cache, AttentionContext(len(ids), None))
        return self.target.logits(self.target.final_norm(h, residual)).float()

    @torch.inference_mode()
    def generate(self, prompt, max_new_tokens: int, stop_ids=None, block_size: int | None = None,
                 eager: bool = False, accept_profile=None, num_splits: int | None = None) -> Generation:
        ids, block, stop = self._check_request(prompt, max_new_tokens, stop_ids, block_size, num_splits)
        n_prompt = len(ids)
        memory.check_budget(self, n_prompt, max_new_tokens)  # before anything is allocated
        max_length = n_prompt + max_new_tokens
        self._ensure_caches(max_length + 2 * self.block_max)
        if num_splits is None:
            num_splits = default_num_splits(max_length, block)
        use_graphs = self.is_cuda and not eager and self.backend == "triton"
        replay = accept_profile is not None
        pipelined = self.backend == "triton"  # the torch backend reads the host's KV length
        schedule = accept_schedule(accept_profile) if replay else None
        stats = GenerationStats(prompt_tokens=n_prompt, block_size=block)

        self._sync()
        t0 = time.perf_counter()
        first = self.prefill(ids, draft=block > 1)
        self.block_ids[:1].copy_(first)
        self.start_t.fill_(n_prompt)
        self.ctx_start_t.fill_(n_prompt)
        out = [int(first.item())]
        t1 = time.perf_counter()
        stats.prefill_ms = (t1 - t0) * 1e3

        events = [] if self.is_cuda else None
        host_ms = {"drafter": 0.0, "verify": 0.0}
        pending = deque()
        launches = [0]
        start = n_prompt  # host view of the anchor's position
        launched_to = start  # the largest anchor position a launched step may leave
        stopped = out[0] in stop
        if stopped:
            stats.stop_reason = "stop"

        def launch(size):
            if replay:
                self.forced_accept.fill_(next(schedule) - 1)
            fns = self._step_fns(size, num_splits, start, replay)
            marks, host = [], {}
            for i, fn in enumerate(fns):
                phase = "drafter" if len(fns) == 2 and i == 0 else "verify"
                tic = time.perf_counter()
                if events is not None:
                    marks.append(torch.cuda.Event(enable_timing=True))
                    marks[-1].record()
                if use_graphs:
                    self._graph((phase, size, num_splits, replay), fn).replay()
                else:
                    fn()
                host[phase] = (time.perf_counter() - tic) * 1e3
            if events is not None:
                marks.append(torch.cuda.Event(enable_timing=True))
                marks[-1].record()
            result = self._host_results[launches[0] % len(self._host_results)]
            launches[0] += 1
            result.copy_(self.result, non_blocking=True)
            done = torch.cuda.Event() if self.is_cuda else None
            if done is not None:
                done.record()
            pending.append((size, result, done, (len(fns), marks), host))

        accept_s = 0.0
        while not stopped and start + 1 < max_length:
            if not pending:
                launch(min(block, max_length - start))
                launched_to = start + pending[-1][0]
            size, result, done, marks, host = pending.popleft()
            # Only steps whose result is used count: a step launched ahead may not be.
            if events is not None:
                events.append(marks)
            for phase, ms in host.items():
                host_ms[phase] += ms
            # Launch the next step before reading this one when its block cannot depend on this result.
            if pipelined and max_length - launched_to >= block and launched_to + 1 < max_length:
                launch(block)
                launched_to += block
            tic = time.perf_counter()
            if done is not None:
                done.synchronize()
            result = result.tolist()
            accepted = result[0]
            produced = min(accepted + 1, max_length - start - 1)
            committed = result[1:1 + produced]
            for i, token in enumerate(committed):
                if token in stop:
                    committed, stopped = committed[:i + 1], True
                    stats.stop_reason = "stop"
                    break
            out += committed
            start += len(committed)
            stats.tokens_per_step.append(len(committed))
            accept_s += time.perf_counter() - tic
            if stopped or len(committed) != accepted + 1:
                break
        self._sync()
        pending.clear()
        t2 = time.perf_counter()
        stats.decode_ms = (t2 - t1) * 1e3
        stats.steps = len(stats.tokens_per_step)
        stats.new_tokens = len(out)
        stats.accept_ms = accept_s * 1e3
        if events is not None:
            drafter_ms = verify_ms = 0.0
            for n, marks in events:
                if n == 2:
                    drafter_ms += marks[0].elapsed_time(marks[1])
                verify_ms += marks[-2].elapsed_time(marks[-1])
            stats.drafter_ms, stats.verify_ms = drafter_ms, verify_ms
        else:
            stats.drafter_ms, stats.verify_ms = host_ms["drafter"], host_ms["verify"]
        text = self.tokenizer.decode(out) if self.tokenizer is not None else None
        return Generation(tokens=out, text=text, stats=stats)
