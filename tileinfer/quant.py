"""INT8 weight-only quantization: quantize a model, save/load TileInfer's quantized checkpoints, and
export the compressed-tensors W8A16 layout that vLLM loads.

TileInfer's quantized checkpoint (`save_quantized` / `load_quantized_tensors`) is an HF-style directory:
config.json (the model's own fields) + model.safetensors. Its config.json carries

    "quantization_config": {
        "quant_method": "tileinfer-int8",   # an unknown method to other loaders: they fail loudly
        "format_version": 1,
        "weights": "int8", "activations": "bf16",
        "strategy": "channel", "symmetric": true, "scale_dtype": "float32",
        "tied_embedding": true | false,     # embed_tokens IS the (quantized) lm_head; no BF16 table stored
        "linears": {"<linear name>": {"quantized": true, "parts": [["<ckpt name>", rows], ...]}, ...}
    }

and, per linear, the tensors "<name>.qweight" (int8 [N, K]) and "<name>.scale" (fp32 [N]), or
"<name>.weight" for a linear kept in floating point. W = qweight * scale[:, None]. Every other tensor
(norms, the embedding when untied) is stored under its HF name.

The compressed-tensors export follows llm-compressor's W8A16 preset as vLLM reads it
(`CompressedTensorsWNA16`, format "pack-quantized"): per HF projection (fused weights are split back
into their `parts`) "<name>.weight_packed" int32 [N, ceil(K / 4)] holding four int8 values per word,
each stored as q + 128 at bits 8i (little-endian along K), "<name>.weight_scale" [N, 1] in the model
dtype, and "<name>.weight_shape" int64 [N, K]. The LM head stays in BF16 and is listed in `ignore`
(vLLM does not quantize a tied embedding); its BF16 scale rounding is the only difference from
TileInfer's fp32 scales.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from tileinfer.errors import CheckpointError
from tileinfer.ops.linear import Linear, quantize_linear

QUANT_METHOD = "tileinfer-int8"
FORMAT_VERSION = 1
WEIGHTS_FILE = "model.safetensors"
_COPY_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
               "special_tokens_map.json", "generation_config.json")


def quantize_int8(model):
    """Quantize every linear of `model` (LM head included) to INT8 per-channel, in place; returns the model."""
    for _, lin in model.named_linears():
        if lin.is_quantized:
            continue
        q = quantize_linear(lin)
        lin.qweight, lin.scale, lin.weight = q.qweight, q.scale, None
    return model


def quantization_section(config: dict) -> dict | None:
    """TileInfer's quantization section of a config.json dict, or None if the checkpoint is not ours-quantized."""
    section = config.get("quantization_config")
    if not isinstance(section, dict) or section.get("quant_method") != QUANT_METHOD:
        return None
    if section.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"quantized checkpoint has format_version {section.get('format_version')!r}; this TileInfer "
            f"reads {FORMAT_VERSION}: re-quantize the BF16 checkpoint with tileinfer.quant.save_quantized"
        )
    return section


def _is_tied(model) -> bool:
    return bool(getattr(model.config, "tie_word_embeddings", False))


def _embed_name(name: str) -> bool:
    return name.endswith("embed_tokens.weight")


def _config_dict(model) -> dict:
    raw = dict(getattr(model.config, "raw", None) or {})
    raw.pop("quantization_config", None)
    return raw


def _write_dir(path: str | os.PathLike, write) -> Path:
    """Run write(tmp_dir) and move tmp_dir to `path`, so a failure leaves nothing half-written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        write(tmp)
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
            os.replace(path, old / path.name)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _copy_side_files(src, dst: Path) -> None:
    if src is None:
        return
    for name in _COPY_FILES:
        if (Path(src) / name).exists():
            shutil.copy2(Path(src) / name, dst / name)


def _cpu(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu").contiguous()


def save_quantized(model, path, tokenizer_from=None) -> Path:
    """Write `model` as a TileInfer quantized checkpoint directory (format: this module's docstring).

    Linears still in floating point are stored as such. `tokenizer_from`: a checkpoint directory whose
    tokenizer and generation-config files are copied along.
    """
    tied = _is_tied(model)
    linears = dict(model.named_linears())
    tensors: dict[str, torch.Tensor] = {}
    entries = {}
    for name, lin in linears.items():
        if lin.is_quantized:
            tensors[f"{name}.qweight"] = _cpu(lin.qweight)
            tensors[f"{name}.scale"] = _cpu(lin.scale.float())
        else:
            tensors[f"{name}.weight"] = _cpu(lin.weight)
        entries[name] = {"quantized": lin.is_quantized, "parts": [list(p) for p in lin.parts]}
    for name, t in model.named_tensors():
        if tied and _embed_name(name) and "lm_head" in linears:
            continue  # the tied embedding is the lm_head linear
        tensors[name] = _cpu(t)
    section = {
        "quant_method": QUANT_METHOD, "format_version": FORMAT_VERSION,
        "weights": "int8", "activations": "bf16", "strategy": "channel", "symmetric": True,
        "scale_dtype": "float32", "tied_embedding": tied and "lm_head" in linears, "linears": entries,
    }
    config = {**_config_dict(model), "quantization_config": section}

    def write(tmp: Path) -> None:
        save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        _copy_side_files(tokenizer_from, tmp)

    return _write_dir(path, write)


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{path}: no *.safetensors files in the quantized checkpoint")
    out = {}
    for f in files:
        with safe_open(str(f), framework="pt") as sf:
            for key in sf.keys():
                out[key] = sf.get_tensor(key)
    return out


def load_quantized_tensors(path) -> dict[str, Linear | torch.Tensor]:
    """Read a checkpoint written by `save_quantized`: {linear name: Linear, hf tensor name: tensor} on the CPU.

    With a tied embedding, "model.embed_tokens.weight" maps to the lm_head `Linear` itself (look rows
    up with `tileinfer.ops.linear.embedding`). Raises CheckpointError for a missing section, tensor or
    scale, or a dtype/shape that does not match.
    """
    path = Path(path)
    cfg_file = path / "config.json"
    if not cfg_file.exists():
        raise CheckpointError(f"{path}: no config.json; is this a checkpoint directory?")
    section = quantization_section(json.loads(cfg_file.read_text()))
    if section is None:
        raise CheckpointError(f"{path}: config.json has no '{QUANT_METHOD}' quantization_config; "
                              f"load it as a BF16 checkpoint, or write one with tileinfer.quant.save_quantized")
    tensors = _read_tensors(path)
    out: dict[str, Linear | torch.Tensor] = {}
    for name, entry in section["linears"].items():
        parts = tuple((str(n), int(r)) for n, r in entry.get("parts", ()))
        if entry.get("quantized", True):
            q, s = tensors.pop(f"{name}.qweight", None), tensors.pop(f"{name}.scale", None)
            if q is None:
                raise CheckpointError(f"{path}: quantized linear {name!r} has no '{name}.qweight' tensor")
            if s is None:
                raise CheckpointError(f"{path}: quantized linear {name!r} has no '{name}.scale' tensor; "
                                      f"the checkpoint is incomplete, write it again")
            if q.dtype != torch.int8:
                raise CheckpointError(f"{path}: '{name}.qweight' is {q.dtype}, expected torch.int8")
            if s.dtype not in (torch.float32, torch.bfloat16) or s.shape != (q.shape[0],):
                raise CheckpointError(f"{path}: '{name}.scale' is {s.dtype} {tuple(s.shape)}, "
                                      f"expected float32 [{q.shape[0]}]")
            out[name] = Linear(qweight=q, scale=s, parts=parts)
        else:
            w = tensors.pop(f"{name}.weight", None)
            if w is None:
                raise CheckpointError(f"{path}: linear {name!r} has no '{name}.weight' tensor")
            out[name] = Linear(weight=w, parts=parts)
    stray = [k for k in tensors if k.endswith((".qweight", ".scale"))]
    if stray:
        raise CheckpointError(f"{path}: tensors {stray[:4]} belong to no linear listed in quantization_config")
    out.update(tensors)
    if section.get("tied_embedding"):
        out.setdefault("model.embed_tokens.weight", out["lm_head"])
    return out


def pack_int8_to_int32(q: torch.Tensor) -> torch.Tensor:
    """compressed-tensors' pack-quantized layout for 8 bits: word j of a row = sum_i (q[4j + i] + 128) << 8i."""
    assert q.dtype == torch.int8 and q.dim() == 2
    n, k = q.shape
    words = math.ceil(k / 4)
    u = (q.to(torch.int32) + 128)
    if words * 4 != k:
        u = torch.nn.functional.pad(u, (0, words * 4 - k))
    u = u.view(n, words, 4)
    packed = u[..., 0] | (u[..., 1] << 8) | (u[..., 2] << 16) | (u[..., 3] << 24)  # wraps to int32 like the reference
    return packed.to(torch.int32)


def unpack_int32_to_int8(packed: torch.Tensor, k: int) -> torch.Tensor:
    """Inverse of `pack_int8_to_int32`."""
    shifts = torch.arange(4, dtype=torch.int32) * 8
    u = (packed.unsqueeze(-1) >> shifts) & 0xFF
    return (u.reshape(packed.shape[0], -1)[:, :k] - 128).to(torch.int8)


def compressed_tensors_config(ignore: list[str]) -> dict:
    """The `quantization_config` of an llm-compressor W8A16 (int8 per-channel symmetric, weight-only) model."""
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "quantization_status": "compressed",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {
                    "num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel",
                    "group_size": None, "dynamic": False, "actorder": None, "block_structure": None,
                    "observer": "minmax", "observer_kwargs": {},
                },
                "input_activations": None,
                "output_activations": None,
                "format": "pack-quantized",
            }
        },
        "ignore": ignore,
        "kv_cache_scheme": None,
        "sparsity_config": {},
    }


def _model_dtype(model) -> torch.dtype:
    name = str(getattr(model.config, "torch_dtype", "bfloat16")).replace("torch.", "")
    return {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(name, torch.bfloat16)


def export_compressed_tensors(model, path, tokenizer_from=None) -> Path:
    """Write `model` in HF layout with a compressed-tensors W8A16 config (format: this module's docstring).

    Linears not yet quantized are quantized on the fly (the model is left as it was). Fused weights are
    split back into their `parts`; a linear without parts keeps its own name.
    """
    dtype = _model_dtype(model)
    tied = _is_tied(model)
    tensors: dict[str, torch.Tensor] = {}
    lm_head = None
    for name, lin in model.named_linears():
        if name == "lm_head" or name.endswith(".lm_head"):
            lm_head = lin
            continue
        q = lin if lin.is_quantized else quantize_linear(lin)
        qweight, scale = _cpu(q.qweight), _cpu(q.scale.float())
        row = 0
        for part, rows in q.parts or ((name, q.out_features),):
            qp = qweight[row:row + rows]
            tensors[f"{part}.weight_packed"] = pack_int8_to_int32(qp).contiguous()
            tensors[f"{part}.weight_scale"] = scale[row:row + rows].to(dtype).reshape(rows, 1).contiguous()
            tensors[f"{part}.weight_shape"] = torch.tensor([rows, q.in_features], dtype=torch.int64)
            row += rows
    have_embed = False
    for name, t in model.named_tensors():
        tensors[name] = _cpu(t)
        have_embed |= _embed_name(name)
    if lm_head is not None:
        head = _cpu(lm_head.dequantized(dtype))
        if not tied:
            tensors["lm_head.weight"] = head
        elif not have_embed:
            tensors["model.embed_tokens.weight"] = head
    config = {**_config_dict(model), "quantization_config": compressed_tensors_config(["lm_head"])}
    config["torch_dtype"] = str(dtype).replace("torch.", "")

    def write(tmp: Path) -> None:
        save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        _copy_side_files(tokenizer_from, tmp)

    return _write_dir(path, write)
