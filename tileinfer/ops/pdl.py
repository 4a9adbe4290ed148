"""Programmatic Dependent Launch (compute capability 9.0 and later).

A kernel launched with PDL may become resident while the kernel before it in the stream finishes its last
wave: every step kernel starts with `gdc_wait` (nothing is read or written before the previous kernel has
completed and its memory is visible) and then `gdc_launch_dependents`, so each kernel's launch and
set-up overlap its predecessor's tail. Off unless asked for (`TILEINFER_PDL=1`, or `set_enabled`), and
never under the Triton interpreter or on the CPU. CUDA graphs keep the launches' PDL edges.
"""

import os

import torch

from tileinfer.ops import INTERPRET

_enabled = os.environ.get("TILEINFER_PDL", "0") == "1"


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
