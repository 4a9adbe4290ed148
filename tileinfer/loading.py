"""tileinfer.load: checkpoint → Engine, with every check done before anything is kept."""

import os

import torch

from tileinfer.checkpoint import eos_ids, load_tokenizer, read_tensors, resolve
from tileinfer.config import DFlashConfig, Qwen3Config, read_json
from tileinfer.engine import DEFAULT_PREFILL_CHUNK, Engine
from tileinfer.errors import ConfigError
from tileinfer.models.dflash import build_drafter
from tileinfer.models.qwen3 import fold_layer_norms
from tileinfer.models.qwen3_checkpoint import build_quantized_qwen3, build_qwen3
from tileinfer.ops.backend import Ops

WEIGHTS = ("bf16", "fp16", "fp32", "int8")
COMPUTE_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "int8": torch.bfloat16}


def default_model() -> str:
    from pathlib import Path
    return str(Path(__file__).parent / "assets" / "default" / "target")


def default_draft() -> str:
    from pathlib import Path
    return str(Path(__file__).parent / "assets" / "default" / "drafter")


def load(model=None, draft=None, weights: str = "bf16", device=None, backend: str | None = None,
         linear: str = "ours", prefill_chunk: int = DEFAULT_PREFILL_CHUNK, memory_budget: int | None = None,
         exact: bool | None = None) -> Engine:
    """Load a Qwen3 checkpoint (and optionally a DFlash drafter) into an Engine.

    model/draft: a checkpoint directory or a hub id in the local Hugging Face cache; model None is the
    embedded default pair (its drafter too unless draft is given). weights: "bf16", "fp16", "fp32" or
    "int8" (weight-only, per output channel). backend: "triton" or "torch" (default: triton on CUDA,
    torch on CPU). linear: "ours" (Triton GEMMs for small M) or "cublas". memory_budget: bytes the engine
    may hold in all; a request whose memory plan exceeds it is refused before any allocation (default:
    free device memory on CUDA, no check on CPU). exact: every kernel of a decode or verify step computes
    a row with the same bits whatever the number of tokens in the step, so greedy DFlash returns exactly
    the tokens of greedy decoding; False lets kernels pick faster paths per token count (plain decoding
    is faster, bench/results/exact_cost_h200.csv). None: the environment's TILEINFER_EXACT (1 or 0) if
    set, else on for the embedded pair and off otherwise.
    """
    if exact is None:
        env = os.environ.get("TILEINFER_EXACT")
        if env not in (None, "0", "1"):
            raise ConfigError(f"TILEINFER_EXACT must be 1 or 0, got {env!r}")
        exact = model is None if env is None else env == "1"
    if model is None:
        model, draft = default_model(), draft if draft is not None else default_draft()
    if weights not in WEIGHTS:
        raise ConfigError(f"weights must be one of {WEIGHTS}, got {weights!r}")
    if not isinstance(prefill_chunk, int) or prefill_chunk < 1:
        raise ConfigError(f"prefill_chunk must be a positive integer, got {prefill_chunk!r}")
    if memory_budget is not None and not (isinstance(memory_budget, (int, float)) and memory_budget > 0):
        raise ConfigError(f"memory_budget must be a positive number of bytes or None, got {memory_budget!r}")
    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' was asked for but no CUDA GPU is visible")
    if backend is None:
        backend = "triton" if device.type == "cuda" else "torch"
    if not isinstance(exact, bool):
        raise ConfigError(f"exact must be True or False, got {exact!r}")
    ops = Ops(backend, linear, exact=exact)
    dtype = COMPUTE_DTYPE[weights]

    path = resolve(model)
    raw = read_json(path / "config.json")
    config = Qwen3Config.from_dict(raw, f"{path}/config.json")
    quantized = "quantization_config" in raw
    if quantized:
        weights = "int8"  # a quantized checkpoint runs as it was saved
    if quantized:
        from tileinfer.quant import load_quantized_tensors
        tensors = load_quantized_tensors(path)
    else:
        tensors = read_tensors(path, device)
    draft_path = draft_config = draft_tensors = None
    if draft is not None:
        draft_path = resolve(draft)
        draft_config = DFlashConfig.from_dict(read_json(draft_path / "config.json"), f"{draft_path}/config.json")
        draft_config.check_fits(config)
        draft_tensors = read_tensors(draft_path, device)

    if quantized:
        target = build_quantized_qwen3(config, tensors, dtype, ops, str(path), device)
    else:
        target = build_qwen3(config, tensors, dtype, ops, str(path))
    drafter = build_drafter(draft_config, draft_tensors, dtype, target, ops, str(draft_path)) if draft_config else None
    if ops.folds_norm_weights:  # before quantizing, so that INT8 weights carry the norms too
        for layer in target.layers:
            fold_layer_norms(layer)
        for layer in drafter.layers if drafter is not None else ():
            fold_layer_norms(layer, input_norm=False)
    if weights == "int8":
        from tileinfer.quant import quantize_int8
        quantize_int8(target)
        if drafter is not None:
            quantize_int8(drafter)
            drafter.refresh_views()
    tokenizer = load_tokenizer(path)
    return Engine(target, drafter, tokenizer, eos_ids(path, config.eos_token_id, tokenizer), weights,
                  path=path, draft_path=draft_path, prefill_chunk=prefill_chunk,
                  memory_budget=memory_budget)
