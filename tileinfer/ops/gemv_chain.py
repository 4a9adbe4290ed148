"""A decoder's one-token step, attention aside, in one persistent launch: its phases parted by grid barriers.

A plain decode step is a chain of projections — per layer qkv, o, gate_up and down, each reading the
output of the one before — and every launch of it pays its ramp-up and tail: ~17 µs a layer beyond the
bytes on the H200 (bench/results/floor_h200.csv), with PDL. This kernel runs the chain in one launch of
resident programs: each phase's row tiles are dealt round-robin over the grid, and a grid barrier (an
arrival count and a generation number, `counters.grid_barrier_words`) stands between phases. Before it
waits at a barrier, a program asks L2 for the first weight blocks it reads in the next phase: weights do
not depend on the activations, so they stream in while the slowest program of the grid finishes.
`bench/persistent_chain.py` weighs it against the same layers run by the engine's launched kernels in a
CUDA graph with PDL, and against the byte floor: the measure of what a persistent decode step can win.

Per layer, x the residual stream [H] and g1, g2 the layer's two RMSNorm weights:

    a = W_qkv · rmsnorm(x, g1)                                   qkv; each program sums x² itself
    x = x + W_o · a[:K_o]                                        o (the attention's place: q's rows), the add
    c = silu(gate) · up, [gate; up] = W_gate_up · rmsnorm(x, g2)  gate_up and SwiGLU (gate rows, then up)
    x = x + W_down · c                                           down, the add

Weights of one kind are stacked over layers (`w_qkv [L, N_qkv, H]`, `w_o [L, H, K_o]`, `w_gate_up [L, 2I, H]`,
`w_down [L, H, I]`; bf16, or int8 with per-row fp32 scales [L, N]), the norm weights `g1`, `g2 [L, H]`. The
programs must all be resident at once (the grid is at most the GPU's SMs); under the Triton interpreter,
which runs programs one by one, each phase is its own launch and there are no barriers. Reference:
`gemv_chain_ref`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tileinfer.ops import INTERPRET
from tileinfer.ops.counters import grid_barrier_words
from tileinfer.ops.pdl import prefetch_l2
from tileinfer.ops.skinny_gemm import _silu_mul, _weight_to

BARRIER_GEN: tl.constexpr = tl.constexpr(32)  # the generation's word: a 128-byte line after the count's
BARRIER_STALL: tl.constexpr = tl.constexpr(48)  # raised by a program that gave up waiting
MAX_SPINS: tl.constexpr = tl.constexpr(1 << 22)


def barrier_stalled(device) -> bool:
    """Whether a grid barrier on `device` gave up waiting since the last call (which clears the flag); a
    stalled chain's result is wrong. Synchronizes."""
    words = grid_barrier_words(torch.device(device))
    stalled = bool(words[BARRIER_STALL.value].item())
    words[BARRIER_STALL.value] = 0
    return stalled


def gemv_chain_ref(x: torch.Tensor, w_qkv, w_o, w_gate_up, w_down, g1, g2, scales=None,
                   eps: float = 1e-6) -> torch.Tensor:
    """The layers in PyTorch, fp32 inside each phase and rounded to x's dtype where the kernel stores
    (`scales`: the four kinds' per-row scales [L, N] of int8 weights; None for float weights); returns x."""
    dtype, x = x.dtype, x.clone()
    half = w_gate_up.shape[1] // 2

    def proj(j, w, v):
        y = w.float() @ v.float()
        return y if scales is None else y * scales[j][layer].float()

    def rms(v, g):
        v = v.float()
        return v * torch.rsqrt(v.pow(2).mean() + eps) * g.float()

    for layer in range(w_qkv.shape[0]):
        a = proj(0, w_qkv[layer], rms(x, g1[layer])).to(dtype)
        x = (proj(1, w_o[layer], a[: w_o.shape[2]]).to(dtype).float() + x.float()).to(dtype)
        gate_up = proj(2, w_gate_up[layer], rms(x, g2[layer]))
        gate, up = gate_up[:half].to(dtype).float(), gate_up[half:].to(dtype).float()
        c = (gate * torch.sigmoid(gate) * up).to(dtype)
        x = (proj(3, w_down[layer], c).to(dtype).float() + x.float()).to(dtype)
    return x


@triton.jit
def _grid_barrier(words_ptr, programs):
    """Every program waits until all `programs` have arrived; what each stored before is visible after.
    The last to arrive resets the count and moves the generation on; the others spin on a volatile read of
    it, then acquire. A program that spins MAX_SPINS reads (seconds: a grid not all resident) gives up and
    raises the stall flag (`barrier_stalled`) rather than hang the GPU."""
    count_ptr = words_ptr
    gen_ptr = words_ptr + BARRIER_GEN
    tl.debug_barrier()
    gen = tl.atomic_add(gen_ptr, 0, sem="acquire")
    arrived = tl.atomic_add(count_ptr, 1, sem="acq_rel")
    if arrived == programs - 1:
        tl.atomic_xchg(count_ptr, 0, sem="relaxed")
        tl.atomic_add(gen_ptr, 1, sem="release")
    else:
        seen = tl.load(gen_ptr, volatile=True)
        spins = 0
        while (seen == gen) & (spins < MAX_SPINS):
            seen = tl.load(gen_ptr, volatile=True)
            spins += 1
        if seen == gen:
            tl.atomic_xchg(words_ptr + BARRIER_STALL, 1, sem="relaxed")
        tl.atomic_add(gen_ptr, 0, sem="acquire")
    tl.debug_barrier()


@triton.jit
def _phase(x_ptr, w_ptr, scale_ptr, g_ptr, y_ptr, N, K, half, inv_k, eps, pid, programs, ROWS: tl.constexpr,
           BLOCK_K: tl.constexpr, HAS_SCALE: tl.constexpr, NORM: tl.constexpr, SWIGLU: tl.constexpr,
           RESIDUAL: tl.constexpr, KP: tl.constexpr):
    """y[n] = Σ_k W[n, k] x[k] (× scale[n] for int8 W, widened by integer ops) for this program's row tiles
    (ROWS rows, dealt round-robin), the next weight block in flight while one is multiplied; x read from L2
    (`.cg`: other programs wrote it in the phase before). NORM: x is rmsnorm(x, g) (Σx² over all K = KP
    padded, by every program; the products take x·g, the sums 1/RMS). SWIGLU: rows n and half + n of W,
    y = silu(gate) · up. RESIDUAL: y[n] += the product, rounded first (y is the stream)."""
    r = 1.0
    if NORM:
        offs = tl.arange(0, KP)
        xs = tl.load(x_ptr + offs, mask=offs < K, other=0.0, cache_modifier=".cg").to(tl.float32)
        r = tl.rsqrt(tl.sum(xs * xs, axis=0) * inv_k + eps)
    for tile in range(pid, tl.cdiv(N, ROWS), programs):
        offs_n = tile * ROWS + tl.arange(0, ROWS)
        rows = w_ptr + offs_n[:, None].to(tl.int64) * K
        n_mask = (offs_n < N)[:, None]
        offs_k = tl.arange(0, BLOCK_K)
        w_next = tl.load(rows + offs_k[None, :], mask=n_mask & (offs_k < K)[None, :], other=0.0)
        u_next = w_next
        if SWIGLU:
            u_next = tl.load(rows + half * K + offs_k[None, :], mask=n_mask & (offs_k < K)[None, :], other=0.0)
        acc = tl.zeros((ROWS, BLOCK_K), dtype=tl.float32)
        acc_up = tl.zeros((ROWS, BLOCK_K), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            w = w_next
            u = u_next
            ahead = k0 + BLOCK_K + offs_k
            w_next = tl.load(rows + ahead[None, :], mask=n_mask & (ahead < K)[None, :], other=0.0)
            if SWIGLU:
                u_next = tl.load(rows + half * K + ahead[None, :], mask=n_mask & (ahead < K)[None, :], other=0.0)
            xk = tl.load(x_ptr + k0 + offs_k, mask=k0 + offs_k < K, other=0.0, cache_modifier=".cg").to(tl.float32)
            if NORM:
                xk *= tl.load(g_ptr + k0 + offs_k, mask=k0 + offs_k < K, other=0.0).to(tl.float32)
            acc += _weight_to(w, tl.float32, HAS_SCALE) * xk[None, :]
            if SWIGLU:
                acc_up += _weight_to(u, tl.float32, HAS_SCALE) * xk[None, :]
        y = tl.sum(acc, axis=1) * r
        if HAS_SCALE:
            y *= tl.load(scale_ptr + offs_n, mask=offs_n < N, other=0.0)
        if SWIGLU:
            up = tl.sum(acc_up, axis=1) * r
            if HAS_SCALE:
                up *= tl.load(scale_ptr + half + offs_n, mask=offs_n < N, other=0.0)
            y = _silu_mul(y, up, y_ptr.dtype.element_ty)
        if RESIDUAL:
            res = tl.load(y_ptr + offs_n, mask=offs_n < N, other=0.0, cache_modifier=".cg").to(tl.float32)
            y = y.to(y_ptr.dtype.element_ty).to(tl.float32) + res
        tl.store(y_ptr + offs_n, y.to(y_ptr.dtype.element_ty), mask=offs_n < N)


@triton.jit
def _prefetch_phase(w_ptr, N, K, pid, programs, ROWS: tl.constexpr, BLOCK_K: tl.constexpr,
                    BLOCKS: tl.constexpr, LINE: tl.constexpr):
    """Ask L2 for the first BLOCKS weight blocks this program reads in a phase, in the order it reads them
    (its row tiles in turn, each K-block of a tile in turn); lines past the matrix ask for its first line."""
    k_blocks = tl.cdiv(K, BLOCK_K)
    for i in tl.static_range(BLOCKS):
        offs_n = (pid + (i // k_blocks) * programs) * ROWS + tl.arange(0, ROWS)
        offs_k = (i % k_blocks) * BLOCK_K + tl.arange(0, BLOCK_K // LINE) * LINE
        ok = (offs_n < N)[:, None] & (offs_k < K)[None, :]
        prefetch_l2(tl.where(ok, w_ptr + offs_n[:, None].to(tl.int64) * K + offs_k[None, :], w_ptr))


@triton.jit
def _gemv_chain_kernel(
    x_ptr, a_ptr, c_ptr, wq_ptr, wo_ptr, wg_ptr, wd_ptr, sq_ptr, so_ptr, sg_ptr, sd_ptr, g1_ptr, g2_ptr,
    barrier_ptr, H, NQ, KO, I, inv_h, eps, first, count,
    ROWS_Q: tl.constexpr, ROWS_O: tl.constexpr, ROWS_G: tl.constexpr, ROWS_D: tl.constexpr,
    BK_Q: tl.constexpr, BK_O: tl.constexpr, BK_G: tl.constexpr, BK_D: tl.constexpr, HP: tl.constexpr,
    HAS_SCALE: tl.constexpr, BARRIERS: tl.constexpr, PREFETCH: tl.constexpr, LINE: tl.constexpr,
):
    """Phases first … first + count − 1 of the layers (phase 4l + j: layer l's j-th projection): x [H] →
    a [NQ] → x → c [I] → x."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    for p in range(first, first + count):
        layer = p // 4
        kind = p % 4
        wide = layer.to(tl.int64)
        if kind == 0:
            _phase(x_ptr, wq_ptr + wide * NQ * H, sq_ptr + layer * NQ, g1_ptr + layer * H, a_ptr, NQ, H, 0, inv_h,
                   eps, pid, programs, ROWS_Q, BK_Q, HAS_SCALE, True, False, False, HP)
        elif kind == 1:
            _phase(a_ptr, wo_ptr + wide * H * KO, so_ptr + layer * H, g1_ptr, x_ptr, H, KO, 0, inv_h, eps, pid,
                   programs, ROWS_O, BK_O, HAS_SCALE, False, False, True, HP)
        elif kind == 2:
            _phase(x_ptr, wg_ptr + wide * 2 * I * H, sg_ptr + layer * 2 * I, g2_ptr + layer * H, c_ptr, I, H, I,
                   inv_h, eps, pid, programs, ROWS_G, BK_G, HAS_SCALE, True, True, False, HP)
        else:
            _phase(c_ptr, wd_ptr + wide * H * I, sd_ptr + layer * H, g1_ptr, x_ptr, H, I, 0, inv_h, eps, pid,
                   programs, ROWS_D, BK_D, HAS_SCALE, False, False, True, HP)
        if BARRIERS:
            if PREFETCH > 0:
                nxt = p + 1
                nl = (nxt // 4).to(tl.int64)
                if nxt < first + count:
                    if nxt % 4 == 0:
                        _prefetch_phase(wq_ptr + nl * NQ * H, NQ, H, pid, programs, ROWS_Q, BK_Q, PREFETCH, LINE)
                    elif nxt % 4 == 1:
                        _prefetch_phase(wo_ptr + nl * H * KO, H, KO, pid, programs, ROWS_O, BK_O, PREFETCH, LINE)
                    elif nxt % 4 == 2:
                        up_rows = wg_ptr + nl * 2 * I * H
                        _prefetch_phase(up_rows, I, H, pid, programs, ROWS_G, BK_G, PREFETCH, LINE)
                        _prefetch_phase(up_rows + I * H, I, H, pid, programs, ROWS_G, BK_G, PREFETCH, LINE)
                    else:
                        _prefetch_phase(wd_ptr + nl * H * I, H, I, pid, programs, ROWS_D, BK_D, PREFETCH, LINE)
            _grid_barrier(barrier_ptr, programs)


def tile_rows(n: int, programs: int, most: int = 16, slack: float = 1.07) -> int:
    """Rows per tile for a phase of n rows dealt over `programs`: the largest power of two (at most `most`)
    whose busiest program has at most `slack` × the fewest rows any tiling gives it (the phase lasts as
    long as its busiest program; larger tiles keep more loads in flight)."""
    def busiest(rows):
        return -(-(-(-n // rows)) // programs) * rows
    sizes = [1 << i for i in range(most.bit_length()) if 1 << i <= most]
    best = min(busiest(r) for r in sizes)
    return max(r for r in sizes if busiest(r) <= slack * best)


def block_k(k: int, rows: int, weight_bytes: int = 2, load_bytes: int = 16384) -> int:
    """K-block of a phase: ~`load_bytes` of weights a load for the program (`rows` of them: twice the tile's
    for gate_up), within K's power of two."""
    return max(128, min(triton.next_power_of_2(k), load_bytes // weight_bytes // rows))


def gemv_chain(x: torch.Tensor, w_qkv, w_o, w_gate_up, w_down, g1, g2, scales=None, eps: float = 1e-6,
               programs: int | None = None, prefetch: int = 0, scratch: tuple | None = None) -> torch.Tensor:
    """The layers of `gemv_chain_ref` in one launch (one per phase under the interpreter); x [H] is updated
    in place and returned. `scales`: with int8 weights, each kind's per-row scales [L, N] (fp32).
    `programs`: the grid (default the GPU's SMs; never more, the barrier needs them all resident).
    `prefetch`: weight blocks of its next phase each program asks of L2 before a barrier. `scratch`: the
    (a, c) activation buffers, for callers that capture it in a CUDA graph."""
    layers, nq, h = w_qkv.shape
    ko, i = w_o.shape[2], w_gate_up.shape[1] // 2
    if not (w_o.shape[:2] == (layers, h) and w_gate_up.shape == (layers, 2 * i, h)
            and w_down.shape == (layers, h, i) and g1.shape == g2.shape == (layers, h)):
        raise ValueError(f"a chain takes w_qkv [L, Nq, H], w_o [L, H, Ko], w_gate_up [L, 2I, H], w_down [L, H, I], "
                         f"g1 and g2 [L, H]; got {tuple(w_qkv.shape)}, {tuple(w_o.shape)}, {tuple(w_gate_up.shape)}, "
                         f"{tuple(w_down.shape)}, {tuple(g1.shape)}, {tuple(g2.shape)}")
    if ko > nq:
        raise ValueError(f"o reads {ko} of qkv's {nq} outputs: too many")
    tensors = (x, w_qkv, w_o, w_gate_up, w_down, g1, g2)
    if x.shape != (h,) or not all(t.is_contiguous() for t in tensors):
        raise ValueError(f"x must be a contiguous [{h}] and the weights contiguous")
    weights = (w_qkv, w_o, w_gate_up, w_down)
    int8 = [w.dtype == torch.int8 for w in weights]
    if any(int8) != all(int8) or (scales is not None) != all(int8):
        raise ValueError("int8 weights take `scales`, one [L, N] per kind; float weights none "
                         f"(got {[str(w.dtype) for w in weights]}, scales {'given' if scales is not None else 'none'})")
    if scales is not None and not all(s.shape == w.shape[:2] and s.dtype == torch.float32 and s.is_contiguous()
                                      for s, w in zip(scales, weights)):
        raise ValueError("each kind's scales are a contiguous fp32 [L, N] beside its weights")
    if INTERPRET or x.device.type != "cuda":
        programs = programs or 4
    else:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        programs = min(programs or sms, sms)
    a, c = scratch or (x.new_empty(nq), x.new_empty(i))
    rows = [tile_rows(n, programs) for n in (nq, h, i, h)]
    size = w_qkv.element_size()
    blocks = [block_k(k, r * (2 if j == 2 else 1), size) for j, (k, r) in enumerate(zip((h, ko, h, i), rows))]
    barrier = grid_barrier_words(x.device)
    launches = [(p, 1) for p in range(4 * layers)] if INTERPRET else [(0, 4 * layers)]
    for first, count in launches:
        _gemv_chain_kernel[(programs,)](
            x, a, c, *weights, *(scales or weights), g1, g2, barrier, h, nq, ko, i, 1.0 / h, eps, first, count,
            ROWS_Q=rows[0], ROWS_O=rows[1], ROWS_G=rows[2], ROWS_D=rows[3],
            BK_Q=blocks[0], BK_O=blocks[1], BK_G=blocks[2], BK_D=blocks[3], HP=triton.next_power_of_2(h),
            HAS_SCALE=scales is not None, BARRIERS=not INTERPRET, PREFETCH=0 if INTERPRET else prefetch,
            LINE=128 // size, num_warps=8)
    return x
