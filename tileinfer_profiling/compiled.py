"""Our kernels compiled for a GPU that is not here: registers, spills, shared memory, occupancy and the
SASS instruction mix of every kernel the engine launches, at a model's shapes and with the launch
configs tuned for that GPU.

Triton compiles for a named target without a device (its own ptxas); the cubin is read with the
cuobjdump that Triton ships. Nothing runs, so nothing here is a time: it answers "does every tuned
config still compile and fit on the H200?", "does it spill?", "how many blocks fit an SM?" and "how
many int8→float conversions per weight?" on any machine, CI's included.

The compile runs in a fresh interpreter (`python -m tileinfer_profiling.compiled --worker`): kernel modules pick
their interpreter or GPU path when imported, and the tests' interpreter has already picked.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass

import pandas as pd

from tileinfer.random_weights import PRESETS
from tileinfer.shapes import QWEN3_4B_DFLASH, ModelShape
from tileinfer_profiling.ceilings import H200
from tileinfer_profiling.prompts import POINTS

# Per-SM limits by compute capability (CUDA occupancy rules; Hopper keeps 1 KB of shared memory per block).
SM_LIMITS = {
    90: dict(regs=65536, reg_unit=256, shared=233472, shared_per_block=232448, reserved_per_block=1024,
             warps=64, blocks=32),
}
H200_CLOCK_GHZ = 1.98  # the H200's datasheet boost clock: the issue floor's assumption, not a reading
# Warp-instructions per SM per clock for compute capability 9.0 (the CUDA C++ Programming Guide's
# arithmetic-instruction throughput table ÷ 32 lanes) and the SASS opcodes each pipe runs. Tensor-core
# and memory instructions are left to the FLOP and byte floors.
ISSUE_PER_CLOCK = 4
PIPES = {
    "fp32": (4, ("FADD", "FMUL", "FFMA", "FMNMX", "FSETP", "FSEL")),
    "fp16x2": (4, ("HADD2", "HMUL2", "HFMA2")),
    "int": (2, ("IADD3", "VIADD", "IMAD", "LOP3", "SHF", "SEL", "ISETP", "PRMT", "LEA", "IABS", "IMNMX", "SGXT",
                "BMSK")),
    "conversion": (0.5, ("I2F", "F2I", "F2F", "I2FP", "F2FP", "FRND")),
    "mufu": (0.5, ("MUFU",)),
    "shuffle": (1, ("SHFL",)),
}
CONTEXT = POINTS["8k"].prompt_tokens  # cached positions the attention sites read: the comparison's 8k point
AT_1K = ", 1k"  # ... and sites at the 1k point, where a block's rows split over programs (row blocks)
STEP_KV = " + q/k norm, RoPE, KV write"  # decode steps with TILEINFER_STEP_KV=1
L2_AHEAD = ", o_proj asked of L2"  # ... with TILEINFER_L2_AHEAD=1 (decode_attention.set_l2_ahead)
SAMPLING = ("", " top-k/p")  # a sampling step: T > 0 alone, and with top-k / top-p
# SASS opcodes worth a column of their own (static counts in the kernel's code, not executed counts)
OPCODE_COLUMNS = ("HGMMA", "HMMA", "LDG", "LDGSTS", "STG", "I2F", "F2F", "I2FP", "PRMT", "LOP3", "FFMA",
                  "FADD", "FMUL", "MUFU", "SHFL", "BAR")


@dataclass(frozen=True)
class Case:
    """One launch site: an op at a model's shape (what the engine calls, with the tuned config)."""
    op: str
    shape: str
    m: int | None = None  # rows of a GEMM (tokens)
    kind: str = ""  # "bf16" / "int8" for GEMMs
    config: str = ""  # a skinny GEMM's GemmConfig as JSON; "" for the tuned one


# Ops.fuse_norms: the norms and adds folded in; "folded norm": the norm's weight carried by W (loading
# folds it into float projections) and Σx² summed in the loop (the first layer's GEMV), "norm from sums":
# Σx² read from the row sums the residual GEMM before wrote ("residual + row sums"), "norm": the weight
# applied in the loop (skinny_gemm's `norm=`); "argmax": a greedy step's LM head writes token ids
FUSED = {"qkv": ("norm", "folded norm", "norm from sums"), "o": ("residual", "residual + row sums"),
         "gate_up": ("norm", "folded norm", "norm from sums"), "down": ("residual", "residual + row sums"),
         "lm_head": ("argmax",)}
# The pairs with a flow on (`tileinfer.ops.flow`): the gate_up (or the decode attention) storing and counting
# its columns, the down (or o) projection reading them as counted; in a chain of flows the o, gate_up and
# down projections do both, and the next layer's qkv reads the down projection's columns
FLOW_OUT, FLOW_IN = " + flow out", " + flow in"
FLOWED = {"gate_up": ("", " + norm", " + folded norm", " + norm from sums"),
          "down": (" + residual", " + residual + row sums"), "o": (" + residual", " + residual + row sums")}
FLOW_OF = {"gate_up": FLOW_OUT, "down": FLOW_IN, "o": FLOW_IN}
# the chain's launches as a step makes them: a GEMV's folded norm sums x², a 16-row step's comes from row sums
CHAINED = {"qkv": (FLOW_IN, " + folded norm", " + norm from sums"),
           "o": (FLOW_IN + FLOW_OUT, " + residual", " + residual + row sums"),
           "gate_up": (FLOW_IN + FLOW_OUT, " + folded norm", " + norm from sums"),
           "down": (FLOW_IN + FLOW_OUT, " + residual", " + residual + row sums")}


def cases(preset: str = "qwen3-4b", draft_taps: int = len(QWEN3_4B_DFLASH.target_layer_ids),
          chunk: int = 4096) -> list[Case]:
    """Every kernel launch of a decode step, a DFlash step and a prefill chunk of the preset's shape."""
    s = ModelShape.of(PRESETS[preset])
    h, heads, kv, hd = s.hidden, s.q_heads, s.kv_heads, s.head_dim
    linears = {name: (n, k) for name, n, k in s.linears()} | {
        "lm_head": (s.vocab, h), "drafter fc": (h, draft_taps * h)}
    out = [Case(f"linear {name}", f"{n}x{k}", m, kind)
           for name, (n, k) in linears.items() for m in (1, 4, 16) for kind in ("bf16", "int8")]
    out += [Case(f"linear {name} + {fused}", f"{n}x{k}", m, kind)
            for name, kinds in FUSED.items() for fused in kinds for m in (1, 16) for kind in ("bf16", "int8")
            for n, k in [linears[name]]]
    out += [Case(f"linear {name}{fused}{FLOW_OF[name]}", f"{n}x{k}", m, kind)
            for name, kinds in FLOWED.items() for fused in kinds for m in (1, 16) for kind in ("bf16", "int8")
            for n, k in [linears[name]]]
    out += [Case(f"linear {name}{one if m == 1 else sixteen}{flows}", f"{n}x{k}", m, kind)
            for name, (flows, one, sixteen) in CHAINED.items() for m in (1, 16) for kind in ("bf16", "int8")
            for n, k in [linears[name]]]
    from tileinfer.ops.linear import DEQUANT_MIN_M
    # INT8 linears of a prefill chunk from DEQUANT_MIN_M rows are cuBLAS on a widened weight: ours below it
    out += [Case(f"linear {name} prefill", f"{n}x{k}", min(chunk, DEQUANT_MIN_M // 2), "int8")
            for name, (n, k) in linears.items() if name not in ("lm_head", "drafter fc")]
    # ... and from DEQUANT_MIN_M rows the weight widened, then the scale applied to cuBLAS's product: the
    # down projection's in a pass of its own, the others' by the kernel that reads the product (the "int8"
    # norms and SwiGLU below)
    out += [Case("widen_int8", f"{n}x{k}", chunk, "int8") for name, (n, k) in linears.items()
            if name in ("qkv", "gate_up")]
    out += [Case("scale_columns", f"{chunk}x{n}", chunk, "int8") for name, (n, k) in linears.items()
            if name == "down"]
    out += [Case("rms_norm", f"{t}x{h}", t) for t in (1, 16, chunk)]
    out += [Case("rms_norm + residual", f"{t}x{h}", t) for t in (1, 16, chunk)]
    out += [Case("rms_norm + residual", f"{chunk}x{h}", chunk, "int8")]
    out += [Case("qk_norm_rope + kv write", f"{t}x{heads}+{kv}x{hd}", t) for t in (1, 16, chunk)]
    out += [Case("qk_norm_rope + kv write", f"{chunk}x{heads}+{kv}x{hd}", chunk, "int8")]
    # steps fuse it into the gate_up GEMM; an INT8 prompt's gate_up leaves it the scale
    out += [Case("silu_mul", f"{chunk}x{s.intermediate}", chunk, kind) for kind in ("", "int8")]
    out += [Case("decode attention", f"q{t} {heads}/{kv}x{hd}", t) for t in (1, 16)]
    out += [Case("drafter attention", f"q16 {heads}/{kv}x{hd}", 16)]
    out += [Case(f"{who} attention{AT_1K}", f"q16 {heads}/{kv}x{hd}", 16) for who in ("decode", "drafter")]
    out += [Case(f"decode attention{STEP_KV}", f"q{t} {heads}/{kv}x{hd}", t) for t in (1, 16)]
    out += [Case(f"drafter attention{STEP_KV}", f"q16 {heads}/{kv}x{hd}", 16)]
    out += [Case(f"decode attention{STEP_KV if t == 1 else ''}{L2_AHEAD}", f"q{t} {heads}/{kv}x{hd}", t) for t in (1, 16)]
    out += [Case(f"decode attention{STEP_KV if t == 1 else ''}{FLOW_OUT}", f"q{t} {heads}/{kv}x{hd}", t) for t in (1, 16)]
    out += [Case("prefill attention", f"q{chunk} {heads}/{kv}x{hd}", chunk)]
    out += [Case(f"sample_block{how}", f"{t}x{s.vocab}", t) for how in SAMPLING for t in (1, 16)]
    out += [Case("embedding", f"{t}x{h}", t, kind) for t in (1, 16) for kind in ("bf16", "int8")]
    out += [Case("commit", f"{t}", t) for t in (1, 16)]
    return out


def gemm_variants(name: str, m: int, kind: str, configs, preset: str = "qwen3-4b", **kw) -> pd.DataFrame:
    """Launch configs (GemmConfig objects) of one skinny GEMM compared without timing them: each one's
    main-loop SASS, conversion opcodes and L2 prefetches, instruction floor and binding pipe, registers and
    blocks per SM."""
    site = next(c for c in cases(preset) if c.op == f"linear {name}" and c.m == m and c.kind == kind)
    chosen = [Case(site.op, site.shape, m, kind, json.dumps(c.as_dict())) for c in configs]
    table, opcodes = compile_cases(preset, chosen=chosen, **kw)
    mains = (opcodes["where"] == "main loop") & (opcodes["kernel"] == "_skinny_gemm_kernel")
    loops = opcodes[mains].pivot_table(
        index="config", columns="opcode", values="count", aggfunc="sum", fill_value=0)
    main = table[table["kernel"] == "_skinny_gemm_kernel"].set_index("config")
    for opcode in ("PRMT", "LOP3", "HADD2", "I2F", "HMMA", "HGMMA", "CCTL"):  # CCTL.E.PF2: an L2 prefetch
        main[f"loop_{opcode}"] = loops[opcode] if opcode in loops else 0
    return main.reset_index().sort_values("instruction_floor_us")


def occupancy(regs: int, shared: int, num_warps: int, arch: int = 90) -> int:
    """Resident blocks per SM (0: the kernel cannot launch)."""
    lim = SM_LIMITS[arch]
    if shared > lim["shared_per_block"]:
        return 0
    regs_per_warp = -(-max(regs, 1) * 32 // lim["reg_unit"]) * lim["reg_unit"]
    by_regs = lim["regs"] // (regs_per_warp * num_warps)
    by_shared = lim["shared"] // (shared + lim["reserved_per_block"])
    return min(by_regs, by_shared, lim["warps"] // num_warps, lim["blocks"])


_RES = re.compile(r"Function (\S+):\s*\n\s*REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")
_SASS = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(?:\.[\w.]+)?")
_SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)[.\w]*\s*([^;]*);")


_RING = re.compile(r"(%[\w.]+) = ttg\.local_alloc\s*:\s*\(\)\s*->\s*!ttg\.memdesc<(\d+)x\d+x\d+x")
_RING_VIEW = re.compile(r"(%[\w.]+) = ttg\.memdesc_index (%[\w.]+)\[")
_WGMMA = re.compile(r"ttng\.warp_group_dot (%[\w.]+), (%[\w.]+),")


def wgmma_ring_depths(ttgir: str) -> list[int]:
    """Buffers in the shared-memory ring behind each wgmma operand the pipeliner staged (one entry per
    distinct ring). They must be equal: a shallower ring is refilled for a later iteration while the
    asynchronous wgmma of this one may still read it (rings only read into registers may be shallower)."""
    depth = dict(_RING.findall(ttgir))
    ring_of = {view: ring for view, ring in _RING_VIEW.findall(ttgir) if ring in depth}
    rings = {ring_of[v] for pair in _WGMMA.findall(ttgir) for v in pair if v in ring_of}
    return sorted(int(depth[r]) for r in rings)


def main_loop(sass: str) -> Counter:
    """Opcodes of the longest backward-branch region (a kernel's K or KV loop), once per iteration per warp."""
    lines = [(int(a, 16), op, operands) for a, op, operands in _SASS_LINE.findall(sass)]
    loops = []
    for addr, op, operands in lines:
        target = re.search(r"0x([0-9a-f]+)", operands) if op == "BRA" else None
        if target and int(target.group(1), 16) < addr:
            loops.append((int(target.group(1), 16), addr))
    if not loops:
        return Counter()
    start, end = max(loops, key=lambda span: span[1] - span[0])
    return Counter(op for addr, op, _ in lines if start <= addr <= end)


def cubin_resources(cubin: bytes, cuobjdump: str) -> tuple[dict, Counter, Counter]:
    """(registers / stack / static shared / local bytes, opcode counts, main-loop opcode counts) of a
    cubin with one kernel."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = subprocess.run([cuobjdump, "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
        sass = subprocess.run([cuobjdump, "-sass", f.name], capture_output=True, text=True, check=True).stdout
    match = _RES.search(usage)
    if match is None:
        raise RuntimeError(f"no resource usage in cuobjdump's output:\n{usage}")
    _, regs, stack, shared, local = match.groups()
    res = dict(regs=int(regs), stack_bytes=int(stack), static_shared=int(shared), local_bytes=int(local))
    return res, Counter(_SASS.findall(sass)), main_loop(sass)


def compile_cases(preset: str = "qwen3-4b", arch: int = 90, gpu: str = "NVIDIA H200", num_sms: int = 132,
                  ops: list[str] | None = None, clock_ghz: float = H200_CLOCK_GHZ, read_gbs: float = H200.read_gbs,
                  chosen: list[Case] | None = None, timeout: float = 1800) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per case × kernel, opcode counts in long form) for `preset` compiled for sm_<arch>,
    GEMMs with `gpu`'s tuned configs (the heuristic where it has none). `ops` keeps cases whose op
    starts with one of them; `chosen` replaces the launch sites (e.g. `gemm_variants`). GEMM rows carry a
    byte floor at `read_gbs`, an issue floor at `clock_ghz` and an instruction floor (see `_floors`)."""
    cmd = [sys.executable, "-m", "tileinfer_profiling.compiled", "--worker", "--preset", preset, "--arch", str(arch),
           "--gpu", gpu, "--num-sms", str(num_sms), "--clock-ghz", str(clock_ghz), "--read-gbs", str(read_gbs)]
    if ops:
        cmd += ["--ops", json.dumps(ops)]
    if chosen:
        cmd += ["--cases", json.dumps([asdict(c) for c in chosen])]
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": _pythonpath()}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"compiling for sm_{arch} failed:\n{done.stderr.strip()[-4000:]}")
    rows = [{**json.loads(line), **_provenance()} for line in lines]
    opcodes = pd.DataFrame([dict(op=r["op"], shape=r["shape"], m=r["m"], kind=r["kind"], kernel=r["kernel"],
                                 config=r["config"], where=where, opcode=o, count=n)
                            for r in rows for where, key in (("kernel", "opcodes"), ("main loop", "loop_opcodes"))
                            for o, n in r[key].items()])
    for r in rows:
        counts = r.pop("opcodes")
        r.pop("loop_opcodes")
        r.update({f"sass_{o}": counts.get(o, 0) for o in OPCODE_COLUMNS})
    return pd.DataFrame(rows), opcodes


def _provenance() -> dict:
    """torch / triton / git revision of this machine; the target GPU is the row's own `gpu`."""
    from tileinfer_profiling.run_info import run_info
    info = run_info("cpu")
    del info["gpu"]
    return {**info, "device": "none: compiled, not run"}


def _pythonpath() -> str:
    """This interpreter's import path: the worker imports the same packages, installed or not."""
    return os.pathsep.join(p for p in sys.path if p)


def _work(kernel: str, grid: tuple, args: dict, case: Case) -> tuple[int, float, float] | None:
    """(main-loop trips per program, bytes that must move, FLOPs) of a GEMM or split-KV attention launch."""
    if kernel in ("_skinny_gemm_kernel", "_w8a16_gemm_kernel"):
        n, k = map(int, case.shape.split("x"))
        span = args["k_per_split"] if kernel == "_skinny_gemm_kernel" else args["K"]
        weight_bytes = n * k * (1 if case.kind == "int8" else 2)
        return -(-span // args["BLOCK_K"]), weight_bytes + 2 * case.m * (n + k), 2 * case.m * n * k
    if kernel == "_split_kv_attention_kernel":
        kv_len, splits, hd = int(args["KV_LEN"].item()), args["num_splits"], args["HEAD_DIM"]
        kv_heads, t, group = grid[0], args["NUM_Q_TOKENS"], args["GROUP"]
        trips = -(-(-(-kv_len // splits)) // args["BLOCK_N"])
        return trips, 2 * kv_len * kv_heads * hd * 2, 4 * t * group * kv_heads * kv_len * hd
    return None


def _floors(kernel: str, grid: tuple, args: dict, loop: Counter, num_warps: int, case: Case,
            clock_ghz: float, num_sms: int, read_gbs: float) -> dict:
    """For a GEMM's or split-KV attention's main kernel, in µs: the byte floor (what must be read or
    written ÷ read bandwidth), the FLOP floor (÷ the H200's measured BF16 rate), and the instruction
    floor: the main loop's SASS run by every warp of every program on every trip, through its busiest
    pipe (`PIPES`) or the schedulers' 4 issues per SM per clock, whichever takes longer. An
    instruction floor near the larger of the other two means the kernel cannot reach that floor
    however well its loads overlap."""
    work = _work(kernel, grid, args, case)
    if work is None:
        return {}
    trips, nbytes, flops = work
    programs = 1
    for g in grid:
        programs *= g
    per_us = num_sms * clock_ghz * 1e3 / (num_warps * programs * trips)  # SM-clocks per µs per warp-iteration
    clocks = {"issue": sum(loop.values()) / ISSUE_PER_CLOCK}
    for pipe, (rate, opcodes) in PIPES.items():
        clocks[pipe] = sum(loop.get(o, 0) for o in opcodes) / rate
    binding = max(clocks, key=clocks.get)
    byte_us = nbytes / (read_gbs * 1e3)
    flop_us = flops / (H200.bf16_tflops * 1e6)
    instruction_us = clocks[binding] / per_us
    return dict(loop_trips=trips, programs=programs, byte_floor_us=byte_us, flop_floor_us=flop_us,
                issue_floor_us=clocks["issue"] / per_us, instruction_floor_us=instruction_us,
                binding_pipe=binding, instruction_over_floor=instruction_us / max(byte_us, flop_us))


def _tensor_cores(opcodes: Counter) -> str:
    if opcodes.get("HGMMA"):
        return "wgmma (HGMMA)"
    if opcodes.get("HMMA"):
        return "mma.sync (HMMA)"
    return "none"


# ---- the worker: runs with TRITON_INTERPRET=0 in its own interpreter -------------------------------------

def _worker(preset: str, arch: int, gpu: str, num_sms: int, ops: list[str] | None, clock_ghz: float,
            read_gbs: float, chosen: list[Case] | None = None) -> None:
    import torch
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction

    class CompileOnly:
        """Stands in for the CUDA driver: device 0 of an sm_<arch> GPU; kernels are compiled, never launched."""
        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

        def get_current_target(self):
            return GPUTarget("cuda", arch, 32)

        def get_active_torch_device(self):
            return torch.device("cpu")

    driver.set_active(CompileOnly())
    launched = []
    jit_run = JITFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        kernel = jit_run(self, *args, grid=grid, warmup=True, **kwargs)
        launched.append((self.fn.__name__, kernel, tuple(grid), {**dict(zip(self.arg_names, args)), **kwargs}))
        return kernel

    JITFunction.run = run
    _tma_on_the_target()
    cuobjdump = knobs.nvidia.cuobjdump.path
    for case in chosen or cases(preset):
        if ops and not any(case.op.startswith(o) for o in ops):
            continue
        launched.clear()
        config = _launch(case, preset, gpu, num_sms)
        for name, kernel, grid, kernel_args in launched:
            res, opcodes, loop = cubin_resources(kernel.asm["cubin"], cuobjdump)
            md = kernel.metadata
            shared = md.shared + res["static_shared"]
            row = dict(op=case.op, shape=case.shape, m=case.m, kind=case.kind, kernel=name, config=config,
                       num_warps=md.num_warps, num_stages=md.num_stages, **res, shared_bytes=shared,
                       blocks_per_sm=occupancy(res["regs"], shared, md.num_warps, arch),
                       tensor_cores=_tensor_cores(opcodes), sass_instructions=sum(opcodes.values()),
                       loop_instructions=sum(loop.values()), opcodes=dict(opcodes), loop_opcodes=dict(loop),
                       wgmma_rings=" ".join(map(str, wgmma_ring_depths(kernel.asm["ttgir"]))),
                       l2_prefetches=kernel.asm["ptx"].count("prefetch.global.L2"),
                       **_floors(name, grid, kernel_args, loop, md.num_warps, case, clock_ghz, num_sms, read_gbs),
                       target=f"sm_{arch}", gpu=gpu, preset=preset)
            print(json.dumps(row), flush=True)


def _tma_on_the_target() -> None:
    """The sandbox's tensors live on the CPU, so the prefill attention would take its pointer loads; the
    target is an sm_90 GPU, where it moves its tiles by TMA wherever their layout allows. Ask the kernel's
    own check about the layout alone (its device test is skipped under the interpreter flag)."""
    from tileinfer.ops import prefill_attention as pa

    layout_and_device = pa.tma_loads_fit

    def layout_fits(q, k_cache, v_cache):
        interpret, pa.INTERPRET = pa.INTERPRET, True
        try:
            return layout_and_device(q, k_cache, v_cache)
        finally:
            pa.INTERPRET = interpret

    pa.tma_loads_fit = layout_fits


def _launch(case: Case, preset: str, gpu: str, num_sms: int) -> str:
    """Call the op as the engine does, on CPU tensors that are never read (nothing is launched)."""
    import torch

    from tileinfer.ops import (commit, decode_attention, dequant, embedding, flow, prefill_attention, rmsnorm,
                               rope, skinny_gemm, swiglu, w8a16_gemm)
    from tileinfer.ops.attention import MAX_STEP_TOKENS, SplitPolicy
    from tileinfer.ops.gemm_configs import GemmConfig, _lookup, m_bucket
    from tileinfer.ops.tuning import gpu_configs

    shape = ModelShape.of(PRESETS[preset])
    bf16 = torch.bfloat16
    heads, kv, hd = shape.q_heads, shape.kv_heads, shape.head_dim
    t = case.m
    if case.op.startswith("linear"):
        op, flows = case.op, {}
        for marker, end, pair in ((FLOW_OUT, "flow_out", "mlp"), (FLOW_IN, "flow_in", "o")):
            if op.endswith(marker):
                op, flows[end] = op.removesuffix(marker), pair
        n, k = map(int, case.shape.split("x"))
        x = torch.empty(t, k, dtype=bf16)
        w = torch.empty(n, k, dtype=torch.int8 if case.kind == "int8" else bf16)
        scale = torch.empty(n, dtype=torch.float32) if case.kind == "int8" else None
        if t > skinny_gemm.MAX_M:
            w8a16_gemm.w8a16_gemm_tiled(x, w, scale)
            return json.dumps(w8a16_gemm._prefill_config(t).__dict__)
        cfg = (GemmConfig(**json.loads(case.config)) if case.config
               else _lookup(gpu, num_sms, n, k, m_bucket(t), case.kind))
        name = op.split()[1]
        norm = torch.empty(k, dtype=bf16) if op.endswith("+ norm") else None
        residual = torch.empty(t, n, dtype=bf16) if "+ residual" in op else None
        sums = torch.empty(1, skinny_gemm.MAX_M) if op.endswith("norm from sums") else None
        if "flow_in" in flows:  # a consumer reads the counter set its producer's launch took
            flow.produced(x.device, flows["flow_in"], k)
        skinny_gemm.skinny_gemm(x, w, scale, config=cfg, swiglu=name == "gate_up", norm=norm, residual=residual,
                                unit_norm=op.endswith("+ folded norm"), argmax=op.endswith("+ argmax"),
                                row_sums=op.endswith("row sums"), norm_sums=sums, **flows)
        return json.dumps(cfg.as_dict())
    if case.op == "widen_int8":
        n, k = map(int, case.shape.split("x"))
        dequant.widen_int8(torch.empty(n, k, dtype=torch.int8), bf16)
        return ""
    if case.op == "scale_columns":
        m, n = map(int, case.shape.split("x"))
        dequant.scale_columns_(torch.empty(m, n, dtype=bf16), torch.empty(n))
        return ""
    if case.op.startswith("rms_norm"):
        h = shape.hidden
        x = torch.empty(t, h, dtype=bf16)
        residual = torch.empty_like(x) if "residual" in case.op else None
        scale = torch.empty(h) if case.kind == "int8" else None
        rmsnorm.rms_norm(x, torch.empty(h, dtype=bf16), 1e-6, residual=residual, x_scale=scale)
        return ""
    if case.op.startswith("qk_norm_rope"):
        qkv = torch.empty(t, (heads + 2 * kv) * hd, dtype=bf16)
        q, k, v = qkv.split([heads * hd, kv * hd, kv * hd], dim=1)
        cache = torch.empty(t + 16, kv, hd, dtype=bf16)
        cos_sin = torch.empty(t + 16, hd, dtype=torch.float32)
        own_section, rope.section = rope.section, lambda device, kernel: gpu_configs(gpu).get(kernel, {})
        try:  # the target GPU's tiles, not the CPU's defaults
            rope.qk_norm_rope(q.view(t, heads, hd), k.view(t, kv, hd), torch.empty(hd, dtype=bf16),
                              torch.empty(hd, dtype=bf16), cos_sin, torch.zeros(t, dtype=torch.int32), 1e-6,
                              v=v.view(t, kv, hd), k_cache=cache, v_cache=torch.empty_like(cache),
                              qkv_scale=torch.empty(qkv.shape[1]) if case.kind == "int8" else None)
        finally:
            rope.section = own_section
        if t <= MAX_STEP_TOKENS:
            return ""
        return json.dumps({**rope.ROWS_TILES, **gpu_configs(gpu).get("norm_rope", {})}, sort_keys=True)
    if case.op.startswith("sample_block"):  # a sampling step's launches (ops.sample), BF16 logits
        from tileinfer.ops import sample
        vocab = int(case.shape.split("x")[1])
        sample.sample_block(torch.empty(t, vocab, dtype=bf16), torch.zeros(t - 1, dtype=torch.int64),
                            torch.zeros(t, dtype=torch.float64), torch.ones(1), torch.ones(1, dtype=torch.int64),
                            torch.ones(1), filtered=case.op != "sample_block")
        return ""
    if case.op == "silu_mul":
        scale = torch.empty(2 * shape.intermediate) if case.kind == "int8" else None
        swiglu.silu_mul(torch.empty(t, 2 * shape.intermediate, dtype=bf16), scale)
        return ""
    if case.op == "embedding":
        from tileinfer.ops.linear import Linear
        rows = (Linear(qweight=torch.empty(shape.vocab, shape.hidden, dtype=torch.int8),
                       scale=torch.empty(shape.vocab)) if case.kind == "int8"
                else Linear(weight=torch.empty(shape.vocab, shape.hidden, dtype=bf16)))
        embedding.embedding(torch.zeros(t, dtype=torch.int64), rows)
        return ""
    if case.op == "commit":
        def ids(n):
            return torch.zeros(n, dtype=torch.int64)
        commit.commit(ids(16), ids(16), t, ids(17), ids(1), ids(1))
        return ""
    q = torch.empty(t, heads, hd, dtype=bf16)
    context = POINTS["1k"].prompt_tokens if case.op.endswith(AT_1K) else CONTEXT
    cache = torch.empty(context + t, kv, hd, dtype=bf16)
    if case.op == "prefill attention":
        tiles = prefill_attention.tuned_tiles(gpu_configs(gpu).get("prefill_attention", {}), t)
        prefill_attention.prefill_attention(q, cache, torch.empty_like(cache), t, causal=True, **tiles)
        return json.dumps(tiles, sort_keys=True)
    kv_len = torch.tensor([context + t], dtype=torch.int32)
    step_kv = None
    if STEP_KV in case.op:  # the step's raw q/k/v, views of one qkv projection output
        qkv = torch.empty(t, (heads + 2 * kv) * hd, dtype=bf16)
        q = qkv[:, : heads * hd].view(t, heads, hd)
        step_kv = decode_attention.StepKV(
            qkv[:, heads * hd: (heads + kv) * hd].view(t, kv, hd), qkv[:, (heads + kv) * hd:].view(t, kv, hd),
            torch.empty(hd, dtype=bf16), torch.empty(hd, dtype=bf16),
            torch.empty(context + t, hd, dtype=torch.float32), torch.zeros(t, dtype=torch.int64), 1e-6)
    policy = SplitPolicy.from_section(gpu_configs(gpu).get("decode_attention", {}))  # the target GPU's
    per_program = policy.per_program(context + t, t)
    ahead = torch.empty(shape.hidden, heads * hd, dtype=bf16) if case.op.endswith(L2_AHEAD) else None
    on_the_target, decode_attention.l2_ahead_for = decode_attention.l2_ahead_for, lambda device: True
    try:  # the switch and the device check as on the target: an sm_90 GPU with the switch on
        decode_attention.decode_attention(q, cache, torch.empty_like(cache), kv_len,
                                          causal=case.op.startswith("decode attention"),
                                          num_splits=policy.num_splits(context + t, t), step_kv=step_kv,
                                          tokens_per_program=per_program, l2_ahead=ahead,
                                          flow=case.op.endswith(FLOW_OUT))
    finally:
        decode_attention.l2_ahead_for = on_the_target
    return json.dumps({"tokens_per_program": per_program}) if per_program < t and step_kv is None else ""


def main(argv=None) -> None:
    import argparse
    p = argparse.ArgumentParser(prog="python -m tileinfer_profiling.compiled")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--preset", default="qwen3-4b")
    p.add_argument("--arch", type=int, default=90)
    p.add_argument("--gpu", default="NVIDIA H200")
    p.add_argument("--num-sms", type=int, default=132)
    p.add_argument("--ops", default=None, help="JSON list of op prefixes")
    p.add_argument("--cases", default=None, help="JSON list of Case fields (default: every launch site)")
    p.add_argument("--clock-ghz", type=float, default=H200_CLOCK_GHZ)
    p.add_argument("--read-gbs", type=float, default=H200.read_gbs)
    args = p.parse_args(argv)
    if not args.worker:
        p.error("run through tileinfer_profiling.compiled.compile_cases or `python -m tileinfer_profiling compiled`")
    if os.environ.get("TRITON_INTERPRET") == "1":
        p.error("the compile worker needs TRITON_INTERPRET=0")
    chosen = [Case(**c) for c in json.loads(args.cases)] if args.cases else None
    _worker(args.preset, args.arch, args.gpu, args.num_sms, json.loads(args.ops) if args.ops else None,
            args.clock_ghz, args.read_gbs, chosen)


if __name__ == "__main__":
    main()
