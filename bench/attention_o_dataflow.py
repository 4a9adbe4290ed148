"""What the attention → o_proj kernel boundary costs in a one-token decode step, against the two in one
launch joined head by head: the measurement that decides whether per-head dataflow is worth building
into the engine (one H200 call, ~1 min).

    python3 bench/attention_o_dataflow.py --out DIR [--kv-lens 1024,8192] [--o-block-n 8,16]

Qwen3-4B heads and hidden size, one query token, bf16, random weights; each chain starts with the QKV
projection whose q the attention reads (the engine's `skinny_gemm`, PDL on), over copies of the K/V
cache and of both weights past L2:
- `launches`: the engine's split-KV `decode_attention` (its split count), then its o_proj GEMV with the
  residual added: two launches, the o_proj waiting for the attention's last merge;
- `dataflow`: one launch. Each program takes a ticket as it starts: the first KV heads × splits tickets
  are the attention's programs (the head's last arrival merges it and raises the head's flag), the rest
  each own `o_block_n` rows of o_proj and take the heads in order as their flags rise, their weight
  tiles read while they wait (the first before PDL's wait). A ticket is taken only by a running program,
  so a waiting one never holds an SM an attention program needs;
- `dataflow_l2`: the same, each program first asking L2 for a share of o_proj's weight before PDL's wait;
- `split`: the same programs in two launches, the attention's then o_proj's: what joining them gains,
  apart from how the engine's tuned kernels and these differ;
- `flow`: the engine's two launches with its column flow (`tileinfer.ops.flow`, `TILEINFER_O_FLOW`): the
  o_proj's programs read each KV head's columns as the attention's merges count them;
- `qkv_attention`: the QKV projection and the attention alone, what o_proj adds in `launches`.
Each row gives µs per chain beside its floor (its bytes over the read bandwidth measured in the run);
both joined variants are checked against `launches` first. One-token steps in the engine also norm and
rotate q/k inside the attention (`step_kv`); both variants here leave that out alike.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: E402

from tileinfer.ops import INTERPRET  # noqa: E402
from tileinfer.ops.decode_attention import (  # noqa: E402
    LOG2E, _merge_head, _online_softmax_step, decode_attention, merge_rows, merge_unroll,
)
from tileinfer.ops.pdl import bulk_prefetch_l2, launch_options  # noqa: E402

PREFETCH_PIECE = tl.constexpr(16384)  # bytes per bulk L2 request


@triton.jit
def _attention_o_kernel(
    Q, K, V, KV_LEN, MID_O, MID_LSE, X, STATE, W, RES, Y,
    num_splits, chunk, qk_scale, n_rows, w_bytes,
    stride_qh, stride_kn, stride_kh, stride_vn, stride_vh, stride_os, stride_oh, stride_ls, stride_wn,
    KV_HEADS: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, MERGE_M: tl.constexpr, MERGE_UNROLL: tl.constexpr, O_BLOCK_N: tl.constexpr,
    SLICE_P2: tl.constexpr, L2_FIRST: tl.constexpr, ROLES: tl.constexpr, UPCAST: tl.constexpr,
    DOT_PRECISION: tl.constexpr, PDL: tl.constexpr,
):
    """Y = RES + W · attention(q, K, V) for one query token. STATE holds KV_HEADS arrival counters, KV_HEADS
    head flags, the ticket and the o_proj programs' done count; the last o_proj program leaves it zeroed.
    ROLES 0: tickets assign the roles in one launch; 1: the attention's programs alone (by program id), 2:
    o_proj's alone, launched after it (its flags all raised)."""
    SLICE: tl.constexpr = GROUP * HEAD_DIM  # o_proj's input columns from one KV head, padded to SLICE_P2
    counters = STATE
    flags = STATE + KV_HEADS
    ticket_ptr = STATE + 2 * KV_HEADS
    done_ptr = ticket_ptr + 1
    attention_programs = KV_HEADS * num_splits
    o_programs = tl.cdiv(n_rows, O_BLOCK_N)
    if L2_FIRST:  # the weight depends on nothing before: a share of it per program, before the wait
        bulk_prefetch_l2(W.to(tl.pointer_type(tl.int8)), w_bytes, tl.program_id(0), tl.num_programs(0),
                         PREFETCH_PIECE)
    # The state is this call site's alone (the kernel before never touches it): tickets are taken before
    # the wait, and o_proj's programs read their first weight tile there too.
    if ROLES == 0:
        ticket = tl.atomic_add(ticket_ptr, 1, sem="relaxed")
    elif ROLES == 1:
        ticket = tl.program_id(0)
    else:
        ticket = attention_programs + tl.program_id(0)
    if ticket < attention_programs:
        if PDL:
            gdc_wait()
            gdc_launch_dependents()
        kv_len = tl.load(KV_LEN).to(tl.int32)
        kv_head = ticket // num_splits
        split = ticket % num_splits
        start = split * chunk
        end = tl.minimum(start + chunk, kv_len)
        offs_d = tl.arange(0, HEAD_DIM)
        rows = tl.arange(0, BLOCK_M)
        row_valid = rows < GROUP
        head = kv_head * GROUP + rows % GROUP
        q = tl.load(Q + head[:, None] * stride_qh + offs_d[None, :], mask=row_valid[:, None], other=0.0)
        if UPCAST:
            q = q.to(tl.float32)
        q_pos = tl.zeros([BLOCK_M], tl.int32) + kv_len - 1
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        offs_n = tl.arange(0, BLOCK_N)
        k_base = K + kv_head * stride_kh + offs_d[None, :]
        v_base = V + kv_head * stride_vh + offs_d[None, :]
        for n0 in tl.range(start, end, BLOCK_N):
            n = n0 + offs_n
            m_i, l_i, acc = _online_softmax_step(
                q, k_base + n[:, None] * stride_kn, v_base + n[:, None] * stride_vn, n, q_pos, end, m_i, l_i, acc,
                qk_scale, MASK=True, CAUSAL=False, UPCAST=UPCAST, DOT_PRECISION=DOT_PRECISION)
        seen = l_i > 0.0
        out = acc / tl.where(seen, l_i, 1.0)[:, None]
        lse = tl.where(seen, m_i + tl.math.log2(tl.where(seen, l_i, 1.0)), float("-inf"))
        tl.store(MID_O + split * stride_os + head[:, None] * stride_oh + offs_d[None, :], out, mask=row_valid[:, None])
        tl.store(MID_LSE + split * stride_ls + head, lse, mask=row_valid)
        tl.debug_barrier()
        arrived = tl.atomic_add(counters + kv_head, 1, sem="acq_rel")
        if arrived == num_splits - 1:
            _merge_head(MID_O, MID_LSE, X, kv_head, 0, num_splits, stride_os, 0, stride_oh, stride_ls, 0, 0,
                        HEAD_DIM, 1, 1, GROUP, HEAD_DIM, MERGE_M, MERGE_UNROLL)
            tl.debug_barrier()
            tl.atomic_xchg(counters + kv_head, 0, sem="relaxed")
            tl.atomic_xchg(flags + kv_head, 1, sem="release")
    else:
        o_rows = (ticket - attention_programs) * O_BLOCK_N + tl.arange(0, O_BLOCK_N)
        n_mask = o_rows < n_rows
        offs_s = tl.arange(0, SLICE_P2)
        w_mask = n_mask[:, None] & (offs_s < SLICE)[None, :]
        w_rows = W + o_rows[:, None] * stride_wn + offs_s[None, :]
        y = tl.zeros([O_BLOCK_N], tl.float32)
        w = tl.load(w_rows, mask=w_mask, other=0.0)
        if PDL:
            gdc_wait()
            gdc_launch_dependents()
        for h in tl.static_range(KV_HEADS):
            if h + 1 < KV_HEADS:  # the next head's tile is in flight while this one waits
                w_next = tl.load(w_rows + (h + 1) * SLICE, mask=w_mask, other=0.0)
            raised = tl.atomic_add(flags + h, 0, sem="acquire")
            while raised == 0:
                raised = tl.atomic_add(flags + h, 0, sem="acquire")
            # .cg: the merging program wrote it; never a stale L1 line
            x = tl.load(X + h * SLICE + offs_s, mask=offs_s < SLICE, other=0.0, cache_modifier=".cg")
            y += tl.sum(w.to(tl.float32) * x.to(tl.float32)[None, :], 1)
            if h + 1 < KV_HEADS:
                w = w_next
        y += tl.load(RES + o_rows, mask=n_mask, other=0.0).to(tl.float32)
        tl.store(Y + o_rows, y.to(Y.dtype.element_ty), mask=n_mask)
        tl.debug_barrier()
        finished = tl.atomic_add(done_ptr, 1, sem="acq_rel")
        if finished == o_programs - 1:  # every ticket is taken and every flag raised: reset for the next launch
            for h in tl.static_range(KV_HEADS):
                tl.atomic_xchg(flags + h, 0, sem="relaxed")
            tl.atomic_xchg(ticket_ptr, 0, sem="relaxed")
            tl.atomic_xchg(done_ptr, 0, sem="relaxed")


def state_for(kv_heads: int, device) -> torch.Tensor:
    """The zeroed counters, flags, ticket and done count one `attention_o` call site needs."""
    return torch.zeros(2 * kv_heads + 2, dtype=torch.int32, device=device)


def attention_o(q, k_cache, v_cache, kv_len: torch.Tensor, w_o, residual, state, num_splits: int,
                o_block_n: int = 16, l2_first: bool = False, block_n: int = 64, num_warps: int = 4,
                num_stages: int = 3, launches: int = 1):
    """residual + w_o · attention(q, caches) for one token (q [1, Hq, D], caches [L, Hk, D], kv_len a 1-element
    int tensor of L' ≤ L read on the device), the attention's KV heads and o_proj's row blocks in one launch
    (`launches` 2: the same programs in two, the attention's then o_proj's)."""
    _, hq, d = q.shape
    hk = k_cache.shape[1]
    group = hq // hk
    n_rows = w_o.shape[0]
    if w_o.shape[1] != hq * d or residual.shape[-1] != n_rows or state.numel() != 2 * hk + 2:
        raise ValueError(f"attention_o: w_o {list(w_o.shape)}, residual {list(residual.shape)} and state "
                         f"{state.numel()} do not fit {hq} heads of {d} over {hk} KV heads")
    length = int(k_cache.shape[0])
    chunk = triton.cdiv(triton.cdiv(length, num_splits), block_n) * block_n
    splits = triton.cdiv(length, chunk)
    mid_o = torch.empty((splits, hq, d), dtype=torch.float32, device=q.device)
    mid_lse = torch.empty((splits, hq), dtype=torch.float32, device=q.device)
    x = torch.empty(hq * d, dtype=q.dtype, device=q.device)
    y = torch.empty(n_rows, dtype=q.dtype, device=q.device)
    if launches not in (1, 2):
        raise ValueError(f"attention_o: launches is 1 or 2, got {launches!r}")
    merge_m = merge_rows(1, group)
    attention_programs, o_programs = hk * splits, triton.cdiv(n_rows, o_block_n)

    def launch(grid, roles):
        _attention_o_kernel[grid](
            q, k_cache, v_cache, kv_len, mid_o, mid_lse, x, state, w_o, residual, y,
            splits, chunk, d ** -0.5 * LOG2E, n_rows, w_o.numel() * w_o.element_size(),
            q.stride(1), k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1),
            mid_o.stride(0), mid_o.stride(1), mid_lse.stride(0), w_o.stride(0),
            KV_HEADS=hk, GROUP=group, HEAD_DIM=d, BLOCK_M=max(16, triton.next_power_of_2(group)), BLOCK_N=block_n,
            MERGE_M=merge_m, MERGE_UNROLL=merge_unroll(merge_m, d, num_warps), O_BLOCK_N=o_block_n,
            SLICE_P2=triton.next_power_of_2(group * d), L2_FIRST=l2_first and not INTERPRET, ROLES=roles,
            UPCAST=INTERPRET, DOT_PRECISION="tf32", num_warps=num_warps, num_stages=num_stages,
            **launch_options(q.device))
    if launches == 1:
        launch((attention_programs + o_programs,), 0)
    else:
        launch((attention_programs,), 1)
        launch((o_programs,), 2)
    return y.view(1, n_rows)


def reference(q, k_cache, v_cache, kv_len: int, w_o, residual):
    """The same product in fp32 from torch: softmax attention over the first kv_len positions, its output
    rounded to q's dtype as the engine stores it, then o_proj and the residual."""
    hq, hk = q.shape[1], k_cache.shape[1]
    k = k_cache[:kv_len].float().repeat_interleave(hq // hk, dim=1)
    v = v_cache[:kv_len].float().repeat_interleave(hq // hk, dim=1)
    s = torch.einsum("hd,nhd->hn", q[0].float(), k) * q.shape[-1] ** -0.5
    o = torch.einsum("hn,nhd->hd", s.softmax(-1), v).to(q.dtype).float().reshape(-1)
    return (w_o.float() @ o + residual.float().reshape(-1)).to(q.dtype).view(1, -1)


VARIANTS = ("split", "dataflow", "dataflow_l2")  # each at every o_proj row block, after the two baselines


def measure(kv_len: int, dims: tuple, o_blocks, device: str, time_us, bandwidth_gbs: float,
            copies: int | None = None) -> list[dict]:
    """A row per variant at one KV length: µs per chain from `time_us(fn)`, its floor, its error against
    torch. `dims`: (query heads, KV heads, head dim, hidden size)."""
    from tileinfer.ops.attention import default_num_splits
    from tileinfer.ops.skinny_gemm import skinny_gemm

    hq, hk, d, hidden = dims
    gen = torch.Generator(device=device).manual_seed(kv_len)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen, device=device) * scale).to(torch.bfloat16)
    splits = default_num_splits(kv_len)
    per_copy = ((hq + 2 * hk) * d * hidden + hidden * hq * d + 2 * kv_len * hk * d) * 2
    copies = copies or max(3, min(16, -(-300_000_000 // per_copy)))
    x, res0 = randn(1, hidden), randn(1, hidden)
    w_qkv = [randn((hq + 2 * hk) * d, hidden, scale=hidden ** -0.5) for _ in range(copies)]
    w_o = [randn(hidden, hq * d, scale=(hq * d) ** -0.5) for _ in range(copies)]
    caches = [(randn(kv_len, hk, d), randn(kv_len, hk, d)) for _ in range(copies)]
    states = [state_for(hk, device) for _ in range(copies)]
    residuals = [res0.clone() for _ in range(copies)]  # the engine's o_proj adds into its residual in place
    kv_len_t = torch.tensor([kv_len], dtype=torch.int32, device=device)

    def chain(variant, o_block_n):
        out = None
        for i in range(copies):
            q = skinny_gemm(x, w_qkv[i])[:, :hq * d].view(1, hq, d)
            k, v = caches[i]
            if variant in VARIANTS:
                out = attention_o(q, k, v, kv_len_t, w_o[i], residuals[i], states[i], splits, o_block_n,
                                  l2_first=variant == "dataflow_l2", launches=2 if variant == "split" else 1)
            else:
                flow = variant == "flow"
                a = decode_attention(q, k, v, kv_len_t, num_splits=splits, flow=flow)
                out = a if variant == "qkv_attention" else skinny_gemm(a.view(1, hq * d), w_o[i], residual=residuals[i],
                                                                       flow_in="o" if flow else None)
        return out

    q0 = skinny_gemm(x, w_qkv[-1])[:, :hq * d].view(1, hq, d)
    want = reference(q0, *caches[-1], kv_len, w_o[-1], res0).float()
    rows = []
    for variant, o_block_n in [("launches", ""), ("flow", ""), ("qkv_attention", ""),
                               *((v, b) for b in o_blocks for v in VARIANTS)]:
        for r in residuals:
            r.copy_(res0)
        got = chain(variant, o_block_n or 16).float()
        err = "" if variant == "qkv_attention" else f"{((got - want).norm() / want.norm()).item():.2e}"
        us = time_us(lambda: chain(variant, o_block_n or 16)) / copies
        nbytes = per_copy - (hidden * hq * d * 2 if variant == "qkv_attention" else 0)
        floor_us = nbytes / (bandwidth_gbs * 1e9) * 1e6
        rows.append(dict(kv_len=kv_len, num_splits=splits, variant=variant, o_block_n=o_block_n, us=round(us, 2),
                         floor_us=round(floor_us, 2), over_floor_us=round(us - floor_us, 2), rel_err=err,
                         copies=copies, bandwidth_gbs=round(bandwidth_gbs, 1)))
        print(variant, o_block_n, kv_len, rows[-1]["us"], "µs, floor", rows[-1]["floor_us"], err, flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--kv-lens", default="1024,8192")
    ap.add_argument("--o-block-n", default="8,16", help="o_proj rows a dataflow program owns, comma-separated")
    args = ap.parse_args(argv)
    try:
        kv_lens = [int(v) for v in args.kv_lens.split(",")]
        o_blocks = [int(v) for v in args.o_block_n.split(",")]
        assert all(v > 0 for v in kv_lens) and all(v > 0 and v & (v - 1) == 0 for v in o_blocks)
    except (ValueError, AssertionError):
        ap.error(f"--kv-lens takes positive integers and --o-block-n powers of two, comma-separated; got "
                 f"{args.kv_lens!r} and {args.o_block_n!r}")
    if not torch.cuda.is_available():
        raise SystemExit("attention_o_dataflow.py times CUDA kernels: run it on a GPU")
    from triton.testing import do_bench_cudagraph

    from bench.ref.metric import gpu_tag, measure_read_bandwidth_gbs, write_rows
    from tileinfer.ops import pdl
    from tileinfer.shapes import QWEN3_4B as s
    from tileinfer_profiling.run_info import command_line, run_info

    pdl.set_enabled(True)
    info = {**run_info(), "command": command_line(), "weights_kind": "random", "model": "qwen3-4b"}
    bandwidth = measure_read_bandwidth_gbs()
    dims = (s.q_heads, s.kv_heads, s.head_dim, s.hidden)
    rows = [{**r, **info} for kv_len in kv_lens for r in measure(
        kv_len, dims, o_blocks, "cuda", lambda fn: do_bench_cudagraph(fn, rep=200) * 1e3, bandwidth)]
    os.makedirs(args.out, exist_ok=True)
    path = write_rows(rows, os.path.join(args.out, f"attention_o_dataflow_{gpu_tag(info.get('gpu', ''))}.csv"),
                      last=tuple(info))
    print(f"\n{info.get('gpu')}, rev {info.get('git_rev')}, Qwen3-4B heads, one token, random weights, read "
          f"bandwidth {bandwidth:.0f} GB/s; {path}")
    print(f"{'kv_len':>6} {'splits':>6} {'variant':14} {'o rows':>6} {'µs':>7} {'floor':>7} {'over':>6} rel_err")
    for r in rows:
        print(f"{r['kv_len']:6} {r['num_splits']:6} {r['variant']:14} {r['o_block_n']!s:>6} {r['us']:7.2f} "
              f"{r['floor_us']:7.2f} {r['over_floor_us']:6.2f} {r['rel_err']}")


if __name__ == "__main__":
    main()
