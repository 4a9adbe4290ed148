"""What the gate_up → down_proj kernel boundary costs in a one-token decode step, against the two in one
launch joined chunk by chunk: down_proj's programs take each chunk of the SwiGLU output as soon as the
gate_up programs that make it are done (one H200 call, ~1 min).

    python3 bench/mlp_dataflow.py --out DIR [--model qwen3-4b] [--chunks 256,512]

A Qwen3 shape's MLP, one token, bf16, random weights, over copies of both weights past L2:
- `launches`: the engine's gate_up GEMV with its SwiGLU epilogue, then its down_proj GEMV with the
  residual added (tuned `skinny_gemm`, PDL on): the down_proj waits for the gate_up's last program;
- `dataflow`: one launch. Each program takes a ticket as it starts: the first tickets own 16 rows of the
  SwiGLU output each (16 gate and 16 up rows of the weight) and count themselves into their chunk's
  counter when stored; the rest each own 16 rows of down_proj and walk its columns chunk by chunk, each
  weight tile read while they wait for that chunk's counter (the first before PDL's wait);
- `split`: the same programs in two launches: what joining them gains, apart from how the engine's tuned
  kernels and these differ;
- `flow`: the engine's two launches with its column flow (`tileinfer.ops.flow`, `TILEINFER_MLP_FLOW`): the
  down_proj's programs read the SwiGLU's columns as the gate_up's tiles count them.
Each row gives µs per MLP beside its floor (the weights' bytes over the read bandwidth measured in the
run); every variant is checked against torch first.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: E402

from tileinfer.ops.pdl import launch_options  # noqa: E402
from tileinfer.ops.skinny_gemm import _silu_mul  # noqa: E402

ROWS = 16  # SwiGLU outputs a gate_up program makes, down_proj rows a down program makes


@triton.jit
def _mlp_kernel(
    X, WGU, HB, WD, RES, Y, STATE, inter, hidden, chunks,
    BLOCK_K: tl.constexpr, CHUNK: tl.constexpr, ROWS: tl.constexpr, ROLES: tl.constexpr,
    STAGES: tl.constexpr, PDL: tl.constexpr,
):
    """Y = RES + WD · (silu(WG x) * (WU x)), WGU = [WG; WU] ([2I, H]). STATE: a counter per CHUNK columns of
    the SwiGLU output, the ticket and the down programs' done count; the last down program leaves it zeroed.
    ROLES 0: tickets assign the roles in one launch; 1: the gate_up programs alone; 2: the down programs
    alone, launched after them."""
    TILES: tl.constexpr = CHUNK // ROWS  # gate_up programs per chunk
    up_programs = tl.cdiv(inter, ROWS)
    down_programs = tl.cdiv(hidden, ROWS)
    ticket_ptr = STATE + chunks
    done_ptr = ticket_ptr + 1
    if ROLES == 0:
        ticket = tl.atomic_add(ticket_ptr, 1, sem="relaxed")
    elif ROLES == 1:
        ticket = tl.program_id(0)
    else:
        ticket = up_programs + tl.program_id(0)
    if ticket < up_programs:
        if PDL:
            gdc_wait()
            gdc_launch_dependents()
        rows = ticket * ROWS + tl.arange(0, ROWS)
        r_mask = rows < inter
        offs_k = tl.arange(0, BLOCK_K)
        acc_g = tl.zeros([ROWS, BLOCK_K], tl.float32)
        acc_u = tl.zeros([ROWS, BLOCK_K], tl.float32)
        for k0 in tl.range(0, hidden, BLOCK_K, num_stages=STAGES):
            k = k0 + offs_k
            mask = r_mask[:, None] & (k < hidden)[None, :]
            x = tl.load(X + k, mask=k < hidden, other=0.0).to(tl.float32)[None, :]
            acc_g += tl.load(WGU + rows[:, None] * hidden + k[None, :], mask=mask, other=0.0).to(tl.float32) * x
            acc_u += tl.load(WGU + (inter + rows)[:, None] * hidden + k[None, :], mask=mask,
                             other=0.0).to(tl.float32) * x
        h = _silu_mul(tl.sum(acc_g, 1), tl.sum(acc_u, 1), HB.dtype.element_ty)
        tl.store(HB + rows, h.to(HB.dtype.element_ty), mask=r_mask)
        tl.debug_barrier()
        tl.atomic_add(STATE + ticket // TILES, 1, sem="release")
    else:
        rows = (ticket - up_programs) * ROWS + tl.arange(0, ROWS)
        r_mask = rows < hidden
        offs_c = tl.arange(0, CHUNK)
        w_rows = WD + rows[:, None] * inter + offs_c[None, :]
        w = tl.load(w_rows, mask=r_mask[:, None] & (offs_c < inter)[None, :], other=0.0)
        if PDL:
            gdc_wait()
            gdc_launch_dependents()
        y = tl.zeros([ROWS], tl.float32)
        for c in range(chunks):
            cols = (c + 1) * CHUNK + offs_c  # the next chunk's tile is in flight while this one waits
            w_next = tl.load(w_rows + (c + 1) * CHUNK, mask=r_mask[:, None] & (cols < inter)[None, :], other=0.0)
            want = tl.minimum(TILES, up_programs - c * TILES)
            seen = tl.atomic_add(STATE + c, 0, sem="acquire")
            while seen < want:
                seen = tl.atomic_add(STATE + c, 0, sem="acquire")
            here = c * CHUNK + offs_c
            # .cg: other programs wrote it; never a stale L1 line
            h = tl.load(HB + here, mask=here < inter, other=0.0, cache_modifier=".cg")
            y += tl.sum(w.to(tl.float32) * h.to(tl.float32)[None, :], 1)
            w = w_next
        y += tl.load(RES + rows, mask=r_mask, other=0.0).to(tl.float32)
        tl.store(Y + rows, y.to(Y.dtype.element_ty), mask=r_mask)
        tl.debug_barrier()
        finished = tl.atomic_add(done_ptr, 1, sem="acq_rel")
        if finished == down_programs - 1:  # every ticket is taken and every chunk counted: reset
            for c in range(chunks):
                tl.atomic_xchg(STATE + c, 0, sem="relaxed")
            tl.atomic_xchg(ticket_ptr, 0, sem="relaxed")
            tl.atomic_xchg(done_ptr, 0, sem="relaxed")


def state_for(inter: int, chunk: int, device) -> torch.Tensor:
    """The zeroed chunk counters, ticket and done count one `mlp` call site needs."""
    return torch.zeros(triton.cdiv(inter, chunk) + 2, dtype=torch.int32, device=device)


def mlp(x, w_gate_up, w_down, residual, state, chunk: int = 256, launches: int = 1, block_k: int = 256,
        stages: int = 3, num_warps: int = 4):
    """residual + w_down · (silu(gate) * up) for one token x [1, H] (w_gate_up [2I, H] gate rows first,
    w_down [H, I]): gate_up's and down_proj's programs in one launch (`launches` 2: in two)."""
    hidden = x.shape[-1]
    inter = w_down.shape[1]
    chunks = triton.cdiv(inter, chunk)
    if w_gate_up.shape != (2 * inter, hidden) or w_down.shape[0] != hidden or residual.shape[-1] != hidden:
        raise ValueError(f"mlp: x {list(x.shape)}, w_gate_up {list(w_gate_up.shape)}, w_down {list(w_down.shape)} "
                         f"and residual {list(residual.shape)} do not make one MLP")
    if chunk % ROWS or chunk & (chunk - 1) or state.numel() != chunks + 2:
        raise ValueError(f"mlp: chunk {chunk} must be a power of two, a multiple of {ROWS}, and state must hold "
                         f"{chunks} counters + 2, got {state.numel()}")
    if launches not in (1, 2):
        raise ValueError(f"mlp: launches is 1 or 2, got {launches!r}")
    hb = torch.empty(inter, dtype=x.dtype, device=x.device)
    y = torch.empty(hidden, dtype=x.dtype, device=x.device)
    up_programs, down_programs = triton.cdiv(inter, ROWS), triton.cdiv(hidden, ROWS)

    def launch(grid, roles):
        _mlp_kernel[grid](x, w_gate_up, hb, w_down, residual, y, state, inter, hidden, chunks,
                          BLOCK_K=block_k, CHUNK=chunk, ROWS=ROWS, ROLES=roles, STAGES=stages,
                          num_warps=num_warps, **launch_options(x.device))
    if launches == 1:
        launch((up_programs + down_programs,), 0)
    else:
        launch((up_programs,), 1)
        launch((down_programs,), 2)
    return y.view(1, hidden)


def reference(x, w_gate_up, w_down, residual):
    """The same MLP from torch in fp32, the SwiGLU output rounded to x's dtype as the engine stores it."""
    inter = w_down.shape[1]
    gu = w_gate_up.float() @ x.float().reshape(-1)
    g, u = gu[:inter].to(x.dtype).float(), gu[inter:].to(x.dtype).float()
    h = (g * torch.sigmoid(g) * u).to(x.dtype).float()
    return (w_down.float() @ h + residual.float().reshape(-1)).to(x.dtype).view(1, -1)


VARIANTS = ("split", "dataflow")  # each at every chunk, after the engine's launches


def measure(hidden: int, inter: int, chunks, device: str, time_us, bandwidth_gbs: float,
            copies: int | None = None) -> list[dict]:
    """A row per variant: µs per MLP from `time_us(fn)`, its floor, its error against torch."""
    from tileinfer.ops.skinny_gemm import skinny_gemm

    gen = torch.Generator(device=device).manual_seed(inter)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen, device=device) * scale).to(torch.bfloat16)
    nbytes = 3 * inter * hidden * 2
    copies = copies or max(3, min(16, -(-300_000_000 // nbytes)))
    x, res0 = randn(1, hidden), randn(1, hidden)
    w_gu = [randn(2 * inter, hidden, scale=hidden ** -0.5) for _ in range(copies)]
    w_d = [randn(hidden, inter, scale=inter ** -0.5) for _ in range(copies)]
    residuals = [res0.clone() for _ in range(copies)]  # the engine's down_proj adds into its residual in place
    states = {c: [state_for(inter, c, device) for _ in range(copies)] for c in chunks}

    def run(variant, chunk):
        out = None
        for i in range(copies):
            if variant in VARIANTS:
                out = mlp(x, w_gu[i], w_d[i], residuals[i], states[chunk][i], chunk,
                          launches=2 if variant == "split" else 1)
            elif variant == "flow":
                out = skinny_gemm(skinny_gemm(x, w_gu[i], swiglu=True, flow_out="mlp"), w_d[i], residual=residuals[i],
                                  flow_in="mlp")
            else:
                out = skinny_gemm(skinny_gemm(x, w_gu[i], swiglu=True), w_d[i], residual=residuals[i])
        return out

    want = reference(x, w_gu[-1], w_d[-1], res0).float()
    floor_us = nbytes / (bandwidth_gbs * 1e9) * 1e6
    rows = []
    for variant, chunk in [("launches", ""), ("flow", ""), *((v, c) for c in chunks for v in VARIANTS)]:
        for r in residuals:
            r.copy_(res0)
        got = run(variant, chunk).float()
        err = ((got - want).norm() / want.norm()).item()
        us = time_us(lambda: run(variant, chunk)) / copies
        rows.append(dict(hidden=hidden, intermediate=inter, variant=variant, chunk=chunk, us=round(us, 2),
                         floor_us=round(floor_us, 2), over_floor_us=round(us - floor_us, 2), rel_err=f"{err:.2e}",
                         copies=copies, bandwidth_gbs=round(bandwidth_gbs, 1)))
        print(variant, chunk, rows[-1]["us"], "µs, floor", rows[-1]["floor_us"], rows[-1]["rel_err"], flush=True)
    return rows


def main(argv=None):
    from tileinfer.shapes import QWEN3

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="qwen3-4b", choices=[f"qwen3-{k}" for k in QWEN3])
    ap.add_argument("--chunks", default="256,512", help="SwiGLU columns a down program waits for at once")
    args = ap.parse_args(argv)
    try:
        chunks = [int(v) for v in args.chunks.split(",")]
        assert all(c % ROWS == 0 and c & (c - 1) == 0 for c in chunks)
    except (ValueError, AssertionError):
        ap.error(f"--chunks takes powers of two from {ROWS} up, comma-separated; got {args.chunks!r}")
    if not torch.cuda.is_available():
        raise SystemExit("mlp_dataflow.py times CUDA kernels: run it on a GPU")
    from triton.testing import do_bench_cudagraph

    from bench.ref.metric import gpu_tag, measure_read_bandwidth_gbs, write_rows
    from tileinfer.ops import pdl
    from tileinfer_profiling.run_info import command_line, run_info

    pdl.set_enabled(True)
    s = QWEN3[args.model.removeprefix("qwen3-")]
    info = {**run_info(), "command": command_line(), "weights_kind": "random", "model": args.model}
    bandwidth = measure_read_bandwidth_gbs()
    rows = [{**r, **info} for r in measure(s.hidden, s.intermediate, chunks, "cuda",
                                           lambda fn: do_bench_cudagraph(fn, rep=200) * 1e3, bandwidth)]
    os.makedirs(args.out, exist_ok=True)
    path = write_rows(rows, os.path.join(args.out, f"mlp_dataflow_{gpu_tag(info.get('gpu', ''))}.csv"),
                      last=tuple(info))
    print(f"\n{info.get('gpu')}, rev {info.get('git_rev')}, {args.model} MLP, one token, random weights, read "
          f"bandwidth {bandwidth:.0f} GB/s; {path}")
    print(f"{'variant':10} {'chunk':>6} {'µs':>7} {'floor':>7} {'over':>6} rel_err")
    for r in rows:
        print(f"{r['variant']:10} {r['chunk']!s:>6} {r['us']:7.2f} {r['floor_us']:7.2f} {r['over_floor_us']:6.2f} "
              f"{r['rel_err']}")


if __name__ == "__main__":
    main()
