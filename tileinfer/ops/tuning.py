"""Launch parameters tuned per GPU: one file per GPU in `configs/` (gemlite keeps its winners the same way).

    configs/nvidia_h200.json = {"gpu": "NVIDIA H200",
                                "skinny_gemm": {"NxK": {"m1" | "m4" | "m16": {"bf16" | "int8": {...}}}},
                                "w8a16_gemm": {"small_m" | "large_m": {...}},
                                "decode_attention": {...}, "prefill_attention": {...},
                                "norm_rope": {"block_t", "num_warps"}}

A file also records its GPU's compute capability, SM count and memory. A GPU without a file, or a kernel
without a section in its file, takes the section of a tuned GPU of its kind (the same capability and SM
count; of several, the nearest in memory: an H100 NVL or an H800 runs the H100's or the H200's tiles);
with none, each kernel's defaults in code. Nothing is tuned at call time (the engine captures CUDA
graphs). `bench/gemm_bench.py --tune` writes the skinny-GEMM section of the GPU it runs on; the other
sections come from the kernels' sweeps (`bench/attention_bench.py`, `tileinfer_profiling.sweeps`,
`bench/pointwise_bench.py --norm-rope-tiles`).
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
def own_configs(gpu: str) -> dict:
    """The sections of `gpu`'s own file ({} when it has none)."""
    path = config_path(gpu)
    return json.loads(path.read_text()) if path.exists() else {}


@lru_cache(maxsize=None)
def gpu_configs(gpu: str) -> dict:
    """Every tuned section `gpu` runs with: its own file's, and for each section it lacks, its kin's."""
    own = own_configs(gpu)
    kin = kin_of(gpu)
    if kin is None:
        return own
    return {**{k: v for k, v in own_configs(kin).items() if k not in IDENTITY}, **own, "gpu": gpu}


def borrowed_sections(gpu: str) -> dict[str, str]:
    """{section: the GPU it comes from} for the sections `gpu` takes from its kin."""
    kin = kin_of(gpu)
    own = own_configs(gpu)
    return {} if kin is None else {k: kin for k in own_configs(kin) if k not in own and k not in IDENTITY}


IDENTITY = ("gpu", "capability", "sms", "memory_gib")  # what a file says of its GPU, not of a kernel


def identity(gpu: str) -> dict | None:
    """The capability, SM count and memory of the GPU named `gpu` in this process's use (None: none is; a
    process that has not touched CUDA is not made to, so one that forks afterwards still can)."""
    if gpu == "cpu" or not torch.cuda.is_initialized():
        return None
    for index in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(index)
        if p.name == gpu:
            return {"capability": [p.major, p.minor], "sms": p.multi_processor_count,
                    "memory_gib": round(p.total_memory / 2**30, 1)}
    return None


@lru_cache(maxsize=None)
def kin_of(gpu: str) -> str | None:
    """The tuned GPU whose sections stand in for those `gpu` lacks: the same compute capability and SM
    count, the nearest in memory (then by name); None for a GPU not in use or without kin."""
    me = identity(gpu)
    if me is None:
        return None
    found = []
    for path in sorted(CONFIG_DIR.glob("*.json")):
        data = json.loads(path.read_text())
        name = data.get("gpu")
        if name and name != gpu and data.get("capability") == me["capability"] and data.get("sms") == me["sms"]:
            found.append((abs(data.get("memory_gib", 0) - me["memory_gib"]), name))
    return min(found)[1] if found else None


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
    """Replace one kernel's section in `gpu`'s own file (created if absent, with what the GPU is when it is
    visible) and drop the cached copies."""
    path = config_path(gpu)
    full = json.loads(path.read_text()) if path.exists() else {"gpu": gpu, **(identity(gpu) or {})}
    full[kernel] = values
    CONFIG_DIR.mkdir(exist_ok=True)
    path.write_text(json.dumps(full, indent=1, sort_keys=True) + "\n")
    clear_cache()
    return path


def clear_cache() -> None:
    """Forget the files read so far (after one is written or replaced)."""
    own_configs.cache_clear()
    gpu_configs.cache_clear()
    kin_of.cache_clear()
