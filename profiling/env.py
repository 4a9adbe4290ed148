"""What every measurement row carries: where and with what it was measured."""

import functools
import os
import subprocess
from pathlib import Path

import torch

from tileinfer.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent


def resolve_device(device=None):
    """torch.device to measure on: the given one, else CUDA when present, else CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {device} was asked for but this machine has no CUDA GPU; use device='cpu'")
    return device


def gpu_name(device):
    """The GPU's name, or "cpu"."""
    device = resolve_device(device)
    if device.type != "cuda":
        return "cpu"
    return torch.cuda.get_device_name(device)


@functools.lru_cache(maxsize=1)
def git_revision():
    """Short commit of the repository (TILEINFER_GIT_REV overrides; "unknown" outside git)."""
    if os.environ.get("TILEINFER_GIT_REV"):
        return os.environ["TILEINFER_GIT_REV"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def run_info(device=None):
    """gpu, device, torch, triton, git_rev: the columns every sweep row carries."""
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = "none"
    device = resolve_device(device)
    return {"gpu": gpu_name(device), "device": device.type, "torch": torch.__version__,
            "triton": triton_version, "git_rev": git_revision()}


def require_gpu(what):
    """Raise ConfigError saying `what` needs a CUDA GPU, when there is none."""
    if not torch.cuda.is_available():
        raise ConfigError(f"{what} needs a CUDA GPU; this machine has none (torch {torch.__version__})")
