"""TileInfer: Qwen3 inference with DFlash speculative decoding on Triton kernels."""

from tileinfer.engine import Engine
from tileinfer.errors import CheckpointError, ConfigError, DrafterMismatchError, RequestError, TileInferError
from tileinfer.loading import load
from tileinfer.stats import Generation, GenerationStats

__version__ = "0.1.0"


def quantize_int8(model):
    """Every linear (LM head included) to symmetric per-output-channel INT8 weights, in place.

    `model`: an Engine (target and drafter) or one of its models. The tied embedding then looks its
    rows up in the INT8 LM head and dequantizes them: no second BF16 table is kept.
    """
    from tileinfer.quant import quantize_int8 as quantize
    if isinstance(model, Engine):
        for part in (model.target, model.drafter):
            if part is not None:
                quantize_int8(part)
        model.weights = "int8"
        model._drop_graphs()
        return model
    quantize(model)
    if hasattr(model, "refresh_views"):
        model.refresh_views()
    return model


__all__ = ["load", "Engine", "Generation", "GenerationStats", "quantize_int8", "TileInferError",
           "CheckpointError", "ConfigError", "DrafterMismatchError", "RequestError"]
