"""Random-weight checkpoints in Hugging Face layout, for tests and for benchmarks without real weights."""

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file

from tileinfer.config import Qwen3Config, build_target_layer_ids
from tileinfer.models.qwen3_checkpoint import expected_shapes
from tileinfer.shapes import QWEN3, ModelShape

# A stack small enough for the interpreter: tests and stand-ins.
TINY = ModelShape(hidden=64, intermediate=96, layers=4, q_heads=4, kv_heads=2, head_dim=16, vocab=160, tied=True)


def _preset(shape: ModelShape, max_position_embeddings: int, eos_token_id: int) -> dict:
    fields = shape.hf_fields()
    tied = fields.pop("tie_word_embeddings")
    return fields | dict(max_position_embeddings=max_position_embeddings, tie_word_embeddings=tied,
                         eos_token_id=eos_token_id)


# "qwen3-0.6b" … "qwen3-14b" (the Hugging Face configs' context and EOS), and "tiny".
PRESETS = {f"qwen3-{size}": _preset(shape, 40960, 151645) for size, shape in QWEN3.items()}
PRESETS["tiny"] = _preset(TINY, 512, 2)


def qwen3_config(preset="tiny", **overrides) -> dict:
    base = dict(PRESETS[preset]) if isinstance(preset, str) else {**PRESETS["tiny"], **preset}
    base |= overrides
    return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_act": "silu",
            "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0, "attention_bias": False, "attention_dropout": 0.0,
            "torch_dtype": "bfloat16", "initializer_range": 0.02, "use_cache": True, "bos_token_id": None, **base}


def _random(shape, generator, std, dtype):
    dev = generator.device
    if len(shape) == 1:  # norm weights near 1, as trained checkpoints have
        t = 1.0 + 0.1 * torch.randn(shape, generator=generator, device=dev)
    else:
        t = torch.randn(shape, generator=generator, device=dev) * std
    return t.to(dtype).cpu()


def _generator(seed):
    # Qwen3-4B has 4 B parameters: drawing them on a GPU takes seconds, on a CPU minutes.
    return torch.Generator(device="cuda" if torch.cuda.is_available() else "cpu").manual_seed(seed)


def _write(path: Path, config: dict, tensors: dict):
    """Write config + weights to a temp dir beside `path`, then rename: no half-written checkpoint."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
    try:
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def write_qwen3(path, preset="tiny", seed: int = 0, dtype=torch.bfloat16, std: float = 0.02, **overrides) -> Path:
    config = qwen3_config(preset, **overrides)
    config["torch_dtype"] = str(dtype).removeprefix("torch.")
    g = _generator(seed)
    shapes = expected_shapes(Qwen3Config.from_dict(config))
    tensors = {name: _random(shape, g, std, dtype) for name, shape in shapes.items()}
    return _write(path, config, tensors)


def write_dflash_drafter(path, target_path, num_layers: int = 5, block_size: int = 16, seed: int = 0,
                         dtype=torch.bfloat16, std: float = 0.02, mask_token_id: int | None = None,
                         target_layer_ids: list[int] | None = None) -> Path:
    """A drafter in z-lab's layout for the target at `target_path` (fields under dflash_config)."""
    target = json.loads((Path(target_path) / "config.json").read_text())
    layers = target["num_hidden_layers"]
    ids = target_layer_ids or build_target_layer_ids(layers, num_layers)
    config = {**target, "architectures": ["DFlashDraftModel"], "num_hidden_layers": num_layers,
              "block_size": block_size, "num_target_layers": layers,
              "dflash_config": {"mask_token_id": mask_token_id if mask_token_id is not None else target["vocab_size"] - 1,
                                "target_layer_ids": ids},
              "torch_dtype": str(dtype).removeprefix("torch.")}
    g = _generator(seed)
    shapes = {name[len("model."):]: shape for name, shape in expected_shapes(Qwen3Config.from_dict(config)).items()
              if name.startswith("model.layers.")}
    h = target["hidden_size"]
    shapes |= {"fc.weight": (h, len(ids) * h), "hidden_norm.weight": (h,), "norm.weight": (h,)}
    tensors = {name: _random(shape, g, std, dtype) for name, shape in shapes.items()}
    return _write(path, config, tensors)
