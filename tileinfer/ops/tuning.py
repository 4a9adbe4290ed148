"""Launch parameters tuned per GPU: one file per GPU in `configs/` (gemlite keeps its winners the same way).

    configs/nvidia_h200.json = {"gpu": "NVIDIA H200",
                                "skinny_gemm": {"NxK": {"m1" | "m4" | "m16": {"bf16" | "int8": {...}}}},
                                "w8a16_gemm": {"small_m" | "large_m": {...}},
                                "decode_attention": {...}, "prefill_attention": {...},
                                "norm_rope": {"block_t", "num_warps"}}

A GPU without a file, or a kernel without a section, gets each kernel's defaults in code; nothing is
tuned at call time (the engine captures CUDA graphs). `bench/gemm_bench.py --tune` writes the
skinny-GEMM section of the GPU it runs on; the other sections come from the kernels' sweeps
(`bench/attention_bench.py`, `tileinfer_profiling.sweeps`, `bench/pointwise_bench.py --norm-rope-tiles`).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import torch

CONFIG_DIR = Path(__file__).with_name("configs")


def gpu_slug(gpu: str) -> str:
    """"NVIDIA H200" -> "nvidia_h200": the file name of a GPU's configs."""
    return re.sub(r"[^a-z0-9]+", "_", gpu.lower()).strip("_")


def config_path(gpu: str) -> Path:
    return CONFIG_DIR / f"{gpu_slug(gpu)}.json"


@lru_cache(maxsize=None)
def gpu_configs(gpu: str) -> dict:
    """Every tuned section of `gpu` ({} when the GPU has no file)."""
    path = config_path(gpu)
    return json.loads(path.read_text()) if path.exists() else {}


@lru_cache(maxsize=None)
def device_name(index: int) -> str:
    return torch.cuda.get_device_properties(index).name


def gpu_of(device) -> str:
    """The GPU name of a torch device, "cpu" for anything else (no file: defaults in code)."""
    device = torch.device(device) if device is not None else None
    if device is None or device.type != "cuda":
        return "cpu"
    return device_name(device.index if device.index is not None else torch.cuda.current_device())


def section(device, kernel: str) -> dict:
    """The tuned parameters of `kernel` on `device`'s GPU ({}: use the kernel's defaults)."""
    return gpu_configs(gpu_of(device)).get(kernel, {})


def write_section(gpu: str, kernel: str, values: dict) -> Path:
    """Replace one kernel's section in `gpu`'s file (created if absent) and drop the cached copy."""
    path = config_path(gpu)
    full = json.loads(path.read_text()) if path.exists() else {"gpu": gpu}
    full[kernel] = values
    CONFIG_DIR.mkdir(exist_ok=True)
    path.write_text(json.dumps(full, indent=1, sort_keys=True) + "\n")
    gpu_configs.cache_clear()
    return path
