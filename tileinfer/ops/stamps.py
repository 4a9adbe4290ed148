"""Timestamps inside a kernel: `%globaltimer` (ns, one clock for every SM) where its phases end, a row of
SLOTS int64 per program, to see inside a CUDA graph where a kernel's time goes (how long its programs sit
before the grid-dependency wait, then load, compute, store, merge). A kernel takes a STAMPS constexpr and
the buffer; without STAMPS it compiles as if they were not there. Under the interpreter (no PTX) a stamp is
its slot's number plus one, so the buffer shows which stamps ran."""

import torch
import triton
import triton.language as tl

from tileinfer.ops import INTERPRET

SLOTS = 8
_SLOTS: tl.constexpr = tl.constexpr(SLOTS)
_ASM: tl.constexpr = tl.constexpr(not INTERPRET)


@triton.jit
def stamp(buf, program, SLOT: tl.constexpr, after):
    """Row `program`, slot SLOT of `buf` gets the time now (every thread writes the same word). `after`, an
    fp32 scalar, is an operand of the timer's read, so the time is taken once it is computed: pass a sum of
    what the phase produced (0.0 for none)."""
    if _ASM:
        now = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r,f", [program, after], dtype=tl.int64,
                                        is_pure=False, pack=1)
    else:
        now = (program * 0 + SLOT + 1).to(tl.int64)
    tl.store(buf + program * _SLOTS + SLOT, now)


def stamp_buffer(programs: int, device: torch.device) -> torch.Tensor:
    """A zeroed [programs, SLOTS] buffer: a slot still 0 after the launch was not stamped."""
    return torch.zeros(programs, SLOTS, dtype=torch.int64, device=device)
