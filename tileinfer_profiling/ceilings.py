"""Measured ceilings of a GPU: read bandwidth, copy bandwidth, bf16 matmul rate — measured once, cached.

The floor a kernel is compared with is what this GPU can actually do, not its datasheet: on the
H200 the read-only sum of 2 GiB runs at 4.19 TB/s against 4.8 on paper (`H200` below).
"""

import datetime
import json
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from tileinfer_profiling.run_info import gpu_name, resolve_device
from tileinfer_profiling.timing import bench_us

CACHE_DIR = Path.home() / ".cache" / "tileinfer"


@dataclass(frozen=True)
class Ceilings:
    gpu: str
    read_gbs: float
    copy_gbs: float  # read + write bytes per second
    bf16_tflops: float
    date: str
    method: str
    device: str = "cuda"

    def as_dict(self):
        return asdict(self)


# `measure()` on an H200, 2026-11-29; for plots made away from the GPU.
H200 = Ceilings(gpu="NVIDIA H200", read_gbs=4190.0, copy_gbs=4270.0, bf16_tflops=679.0, date="2026-11-29",
                method="sum of a 2 GiB bf16 tensor; device-to-device copy; cuBLAS bf16 8192³ matmul")
# Memory bandwidth on the datasheet (GB/s): the bound above the measured ceilings.
DATASHEET_GBS = {"NVIDIA H200": 4800.0}


# Datasheet read bandwidths (GB/s), for GPUs whose rows carry no measured figure. Longest match wins.
DATASHEET_BANDWIDTH_GBS = {
    "H200": 4800, "H100 PCIe": 2000, "H100": 3350, "A100-SXM4-80GB": 2039, "A100-PCIE-80GB": 1935,
    "A100": 1555, "L40S": 864, "L4": 300, "RTX 4090": 1008, "RTX 4080 SUPER": 736, "RTX 4080": 717,
    "RTX 3090": 936, "B200": 8000,
}


def datasheet_bandwidth_gbs(gpu_name):
    """The datasheet's read bandwidth of a GPU by name (NaN when the table has none)."""
    matches = [k for k in DATASHEET_BANDWIDTH_GBS if k.lower() in gpu_name.lower()]
    return DATASHEET_BANDWIDTH_GBS[max(matches, key=len)] if matches else math.nan


def cache_path(gpu, cache_dir=None):
    slug = re.sub(r"[^A-Za-z0-9]+", "-", gpu).strip("-").lower()
    return Path(cache_dir or CACHE_DIR) / f"ceilings-{slug}.json"


def load(device=None, cache_dir=None):
    """The cached ceilings of this device's GPU, or None."""
    path = cache_path(gpu_name(device), cache_dir)
    if not path.exists():
        return None
    return Ceilings(**json.loads(path.read_text()))


def _bandwidths(device, read_elems):
    x = torch.ones(read_elems, dtype=torch.bfloat16, device=device)
    y = torch.empty_like(x)
    nbytes = x.numel() * x.element_size()
    read_us, timer = bench_us(lambda: x.sum(), device)
    copy_us, _ = bench_us(lambda: y.copy_(x), device)
    return nbytes / read_us / 1e3, 2 * nbytes / copy_us / 1e3, nbytes, timer


def _measure(device, read_elems, matmul_n):
    read, copy, nbytes, timer = _bandwidths(device, read_elems)
    a = torch.randn(matmul_n, matmul_n, dtype=torch.bfloat16, device=device)
    b = torch.randn(matmul_n, matmul_n, dtype=torch.bfloat16, device=device)
    mm_us, _ = bench_us(lambda: a @ b, device)
    method = (f"{timer}: sum of {nbytes / 2**20:.0f} MiB bf16 (read), copy of it (read + write), "
              f"bf16 {matmul_n}³ matmul")
    return read, copy, 2 * matmul_n**3 / mm_us / 1e6, method


def measure(device=None, *, refresh=False, cache_dir=None):
    """Ceilings of `device` (default: the GPU, else the CPU).

    GPU: a 2 GiB bf16 tensor summed (read) and copied, an 8192³ bf16 matmul; cached as JSON under
    ~/.cache/tileinfer/ceilings-<gpu>.json with the date and method, reused unless `refresh`.
    CPU: 32 MiB and 256³, wall clock, labelled "cpu", not cached.
    """
    device = resolve_device(device)
    if device.type != "cuda":
        read, copy, tflops, method = _measure(device, 16 * 2**20, 256)
        return Ceilings(gpu="cpu", read_gbs=read, copy_gbs=copy, bf16_tflops=tflops,
                        date=datetime.date.today().isoformat(), method=method, device="cpu")
    if not refresh:
        cached = load(device, cache_dir)
        if cached is not None:
            return cached
    with torch.cuda.device(device):
        read, copy, tflops, method = _measure(device, 2**30, 8192)
        torch.cuda.empty_cache()
    ceilings = Ceilings(gpu=gpu_name(device), read_gbs=read, copy_gbs=copy, bf16_tflops=tflops,
                        date=datetime.datetime.now().isoformat(timespec="seconds"), method=method)
    path = cache_path(ceilings.gpu, cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(ceilings.as_dict(), indent=1))
    return ceilings
