"""Where and with what a measurement ran: the device, the versions, the git revision and the command
that every recorded row carries (columns gpu, device, torch, triton, git_rev, command)."""

import functools
import os
import shlex
import subprocess
import sys
from pathlib import Path

import torch

from tileinfer.errors import ConfigError


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


def require_gpu(what):
    """Raise ConfigError saying `what` needs a CUDA GPU, when there is none."""
    if not torch.cuda.is_available():
        raise ConfigError(f"{what} needs a CUDA GPU; this machine has none (torch {torch.__version__})")


@functools.lru_cache(maxsize=1)
def git_rev():
    """Short commit of the checkout this code runs from, with "-dirty" when tracked files have changes.

    TILEINFER_GIT_REV gives it where the tree has no .git (a copy sent to a GPU machine); "unknown"
    outside git."""
    if os.environ.get("TILEINFER_GIT_REV"):
        return os.environ["TILEINFER_GIT_REV"]
    here = Path(__file__).parent
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                             timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if rev.returncode or not rev.stdout.strip():
        return "unknown"
    return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def relative(path):
    """`path` relative to the working directory when it lies under it (commands are run from the
    repository root, so recorded paths stay valid on another machine), else as given."""
    text = str(path)
    if not os.path.isabs(text):
        return text
    try:
        return str(Path(text).relative_to(Path.cwd()))
    except ValueError:
        return text


def command_line(argv=None):
    """The command that is running, as it can be typed again at the repository root: `python -m module`
    for a module, `python path/to/script.py` for a script, paths under the working directory relative."""
    argv = list(sys.argv if argv is None else argv)
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        head = ["python", "-m", spec.name.removesuffix(".__main__")]
    elif argv[0].endswith(".py"):
        head = ["python", relative(argv[0])]
    else:
        head = [Path(argv[0]).name]
    args = []
    for arg in argv[1:]:
        flag, eq, value = arg.partition("=")
        args.append(f"{flag}={relative(value)}" if eq and flag.startswith("--") else relative(arg))
    return shlex.join(head + args)


def run_info(device=None):
    """gpu, device, torch, triton, git_rev: the columns every measured row carries."""
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = "none"
    device = resolve_device(device)
    return {"gpu": gpu_name(device), "device": device.type, "torch": torch.__version__,
            "triton": triton_version, "git_rev": git_rev()}
