"""Programmatic Dependent Launch (compute capability 9.0 and later).

A kernel launched with PDL may become resident while the kernel before it in the stream finishes its last
wave: every step kernel triggers its dependents (`gdc_launch_dependents`) at its start and reads nothing
the kernel before may write, and writes nothing, until `gdc_wait` (that kernel completed, its memory
visible); the skinny GEMV loads its first weight tile before the wait, and the split-KV attention asks
L2 for its K/V (a prefetch, never a read into registers). Each kernel's launch, set-up and
first weight reads overlap its predecessor's tail (bench/results/floor_h200.csv has every shape with PDL
off and on). On wherever the GPU has it (compute capability 9.0 and
later) unless `TILEINFER_PDL=0` or `set_enabled(False)`; never under the Triton interpreter or on the CPU.
CUDA graphs keep the launches' PDL edges.
"""

import os

import torch
import triton
import triton.language as tl

from tileinfer.ops import INTERPRET

_enabled = os.environ.get("TILEINFER_PDL", "1") != "0"


def set_enabled(on: bool) -> None:
    """Launch the step kernels with PDL from now on (engines capture their graphs under the setting)."""
    global _enabled
    _enabled = bool(on)


def is_enabled() -> bool:
    return _enabled


def enabled_for(device: torch.device) -> bool:
    """PDL for kernels on `device`: asked for, compiled (not interpreted), on a GPU that has it."""
    device = torch.device(device)
    return (_enabled and not INTERPRET and device.type == "cuda"
            and torch.cuda.get_device_capability(device) >= (9, 0))


def launch_options(device: torch.device) -> dict:
    """The kernel launch's keyword arguments: the PDL constexpr and Triton's `launch_pdl` option."""
    on = enabled_for(device)
    return {"PDL": on, "launch_pdl": True} if on else {"PDL": False}


@triton.jit
def prefetch_l2(ptrs):
    """Ask L2 for the 128-byte line of each pointer (no register result): what a kernel may fetch before
    `gdc_wait`, since L2 is where the kernel before writes."""
    tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptrs],
                              dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def bulk_prefetch_l2(base, nbytes, rank, ranks, PIECE: tl.constexpr):
    """Ask L2 for this program's share (`rank` of `ranks`) of the `nbytes` bytes at `base` (an int8 pointer,
    16-byte aligned; nbytes a multiple of 16), in copy-engine requests of up to PIECE bytes issued by the
    program's first thread (`cp.async.bulk.prefetch`, sm_90): a few instructions for what a prefetch per
    128-byte line would take thousands. No register result; the thread goes on at once."""
    granules = nbytes // 16
    share = tl.cdiv(granules, ranks) * 16
    start = rank * share
    end = tl.minimum(start + share, nbytes)
    for off in tl.range(start, end, PIECE, loop_unroll_factor=1):
        size = tl.minimum(end - off, PIECE)
        tl.inline_asm_elementwise(
            "{\n\t.reg .pred first;\n\t.reg .b32 tid;\n\tmov.u32 tid, %tid.x;\n\tsetp.eq.u32 first, tid, 0;\n\t"
            "@first cp.async.bulk.prefetch.L2.global [$1], $2;\n\tmov.u32 $0, 0;\n\t}",
            "=r,l,r", [base + off, size], dtype=tl.int32, is_pure=False, pack=1)
