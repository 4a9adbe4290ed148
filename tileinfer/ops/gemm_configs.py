"""Launch configs for the skinny GEMMs: tuned winners of the GPU (the "skinny_gemm" section of its file in
`configs/`, see `tuning.py`: {"NxK": {"m1" | "m4" | "m16": {"bf16" | "int8": {block_n, block_k, split_k,
num_warps, num_stages, fast_i8}}}}), else a heuristic. An LM head tuned with its argmax epilogue has its own
entries, "bf16_argmax" | "int8_argmax" (each tile's epilogue counts its arrival, so it wants fewer tiles).
`bench/gemm_bench.py --tune` writes the section (a small grid timed in CUDA graphs on the GPU in question).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from functools import lru_cache

import torch

from tileinfer.ops.tuning import gpu_configs

M_BUCKETS = (1, 4, 16)
NUM_SMS_GUESS = 132  # H200; only used by the heuristic when no device is visible
# Fields every config that sets none takes from these (0: as tuned), for engines loaded from now on: the A/B
# knobs of a benchmark, from TILEINFER_<FIELD> or `set_prefetch_k` / `set_prefetch_ahead` / `set_stream_k`.
_given = {field: int(os.environ.get(f"TILEINFER_{field.upper()}", "0"))
          for field in ("prefetch_k", "prefetch_ahead", "stream_k")}

@dataclass(frozen=True)
class GemmConfig:
    block_n: int
    block_k: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 4
    fast_i8: bool = True  # int8 -> float by integer ops instead of cvt (skinny_rows._int8_to_f32)
    prefetch_k: int = 0   # leading K blocks of each program's weights asked of L2 before PDL's wait
    k_warps: int = 1      # warps that share a tile's rows, each on a slice of every K-block (tl.dot only)
    prefetch_ahead: int = 0  # K-blocks ahead of its loop each iteration asks L2 for (HBM in flight beyond the stages)
    stream_k: int = 0     # programs per SM taking equal shares of all tiles' K-blocks (0: a program per tile and split)

    def as_dict(self) -> dict:
        return asdict(self)


def _give(field: str, value: int, what: str) -> None:
    if value < 0:
        raise ValueError(f"{what} must be >= 0, got {value}")
    _given[field] = value


def set_prefetch_k(blocks: int) -> None:
    """L2 prefetch of each program's first `blocks` weight K-blocks for every config that sets none
    (0: as tuned); engines loaded from now on capture their graphs with it. TILEINFER_PREFETCH_K sets it too."""
    _give("prefetch_k", blocks, "prefetch blocks")


def prefetch_k() -> int:
    return _given["prefetch_k"]


def set_prefetch_ahead(blocks: int) -> None:
    """In-loop L2 prefetch `blocks` weight K-blocks ahead for every config that sets none (0: as tuned);
    engines loaded from now on capture their graphs with it. TILEINFER_PREFETCH_AHEAD sets it too."""
    _give("prefetch_ahead", blocks, "prefetch-ahead blocks")


def prefetch_ahead() -> int:
    return _given["prefetch_ahead"]


def set_stream_k(per_sm: int) -> None:
    """Stream-K shares for `per_sm` programs an SM in every config that sets none (0: as tuned);
    engines loaded from now on capture their graphs with it. TILEINFER_STREAM_K sets it too."""
    _give("stream_k", per_sm, "stream-K programs per SM")


def stream_k() -> int:
    return _given["stream_k"]


def m_bucket(m: int) -> int:
    """The smallest bucket in M_BUCKETS holding m (m <= 16)."""
    for b in M_BUCKETS:
        if m <= b:
            return b
    raise ValueError(f"skinny GEMM configs cover M <= {M_BUCKETS[-1]}, got {m}")


@lru_cache(maxsize=None)
def _device_info(index: int) -> tuple[str, int]:
    props = torch.cuda.get_device_properties(index)
    return props.name, props.multi_processor_count


def num_sms(device: torch.device) -> int:
    """The SMs of `device` (NUM_SMS_GUESS where it is not a GPU)."""
    if device.type != "cuda":
        return NUM_SMS_GUESS
    return _device_info(device.index if device.index is not None else torch.cuda.current_device())[1]


def heuristic_config(n: int, k: int, m: int, kind: str, num_sms: int = NUM_SMS_GUESS) -> GemmConfig:
    """A config for a shape nobody tuned, from what the tunes of two GPUs chose: at M = 1 8 KB-16 KB K-blocks
    of weight a tile and split K until the programs cover the SMs twice; above it tl.dot tiles, INT8 in two
    warps converting by cvt, split K at most in two where the row tiles leave SMs idle."""
    # µs over the best of the H100's full tune of the 4B shapes, geometric mean over qkv, o, gate_up, down,
    # fc and lm_head (bench/results/gemm_heuristic_h100.csv), the rule before this one in brackets: M = 1
    # BF16 1.04 (1.09), INT8 1.06 (1.31); M = 16 BF16 1.08 (1.25), INT8 1.17 (1.64). The H200's tuned
    # winners (configs/nvidia_h200.json) take these tiles, or tiles of the same bytes, most often.
    int8 = kind == "int8"
    if m == 1:
        block_n, block_k, num_warps, num_stages, fast_i8, cover, max_split = 8, 512, 4, 4, True, 2, None
        if int8:
            block_n = 32
    elif int8:
        block_n, block_k, num_warps, num_stages, fast_i8, cover, max_split = 32, 256, 2, 6, False, 1, 2
    else:
        block_n, block_k, num_warps, num_stages, fast_i8, cover, max_split = 64, 128, 4, 4, True, 1, 2
    block_k = min(block_k, max(16, 1 << (k - 1).bit_length()))
    n_tiles = -(-n // block_n)
    split_k = 1
    while (n_tiles * split_k < cover * num_sms and k // (block_k * split_k * 2) >= 2
           and (max_split is None or split_k * 2 <= max_split)):
        split_k *= 2
    return GemmConfig(block_n=block_n, block_k=block_k, split_k=split_k, num_warps=num_warps,
                      num_stages=num_stages, fast_i8=fast_i8)


def get_config(n: int, k: int, m: int, kind: str, device: torch.device | None = None,
               argmax: bool = False) -> GemmConfig:
    """The config for an [m, k] x [n, k]^T product with `kind` "bf16" (any float weight) or "int8" weights;
    `argmax`: with the argmax epilogue (its own tuned entry where there is one)."""
    if device is not None and device.type == "cuda":
        name, num_sms = _device_info(device.index if device.index is not None else torch.cuda.current_device())
    else:
        name, num_sms = "cpu", NUM_SMS_GUESS
    cfg = _lookup(name, num_sms, n, k, m_bucket(m), kind, argmax)
    given = {f: v for f, v in _given.items() if v and not getattr(cfg, f)}
    return replace(cfg, **given) if given else cfg


@lru_cache(maxsize=4096)
def _lookup(gpu: str, num_sms: int, n: int, k: int, bucket: int, kind: str, argmax: bool = False) -> GemmConfig:
    entries = gpu_configs(gpu).get("skinny_gemm", {}).get(f"{n}x{k}", {}).get(f"m{bucket}", {})
    entry = (argmax and entries.get(f"{kind}_argmax")) or entries.get(kind)
    if entry:
        return GemmConfig(**entry)
    return heuristic_config(n, k, bucket, kind, num_sms)
