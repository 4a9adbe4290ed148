"""TileInfer: Qwen3 inference with DFlash speculative decoding on Triton kernels, and a profiling workbench."""

from tileinfer.engine import Engine
from tileinfer.errors import CheckpointError, ConfigError, DrafterMismatchError, RequestError, TileInferError
from tileinfer.loading import load
from tileinfer.stats import Generation, GenerationStats

__version__ = "0.1.0"


def quantize_int8(model):
    """Every linear of a model (LM head included) to per-output-channel INT8 weights, in place."""
    from tileinfer.quant import quantize_int8 as quantize
    return quantize(model)


__all__ = ["load", "Engine", "Generation", "GenerationStats", "quantize_int8", "TileInferError",
           "CheckpointError", "ConfigError", "DrafterMismatchError", "RequestError"]
