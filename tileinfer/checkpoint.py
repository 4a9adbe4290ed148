"""Finding and reading Hugging Face checkpoints: config.json, safetensors (single or sharded), tokenizer."""

import json
import os
from pathlib import Path

import torch
from safetensors import safe_open

from tileinfer.errors import CheckpointError


def hf_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    return home / "hub"


def resolve(model: str | os.PathLike) -> Path:
    """A checkpoint directory, or a hub id whose snapshot of `main` is in the local Hugging Face cache
    (never downloaded)."""
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise CheckpointError(f"{path} has no config.json: not a Hugging Face checkpoint directory")
        return path
    text = str(model)
    if path.exists():
        raise CheckpointError(f"{path} is a file; give the checkpoint's directory")
    if text.count("/") != 1 or text.startswith((".", "/", "~")):
        raise CheckpointError(f"{text} does not exist (not a directory, and not a hub id such as 'Qwen/Qwen3-4B')")
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import HFValidationError, LocalEntryNotFoundError

    try:
        snapshot = Path(snapshot_download(text, cache_dir=hf_cache_dir(), local_files_only=True))
    except HFValidationError as e:
        raise CheckpointError(f"{text} is not a directory nor a valid hub id: {e}") from None
    except LocalEntryNotFoundError:
        raise CheckpointError(
            f"{text} is not in the local Hugging Face cache ({hf_cache_dir()}); TileInfer never downloads: "
            f"fetch it with `hf download {text}` (huggingface_hub's command) on a connected machine, "
            "or pass a directory") from None
    if not (snapshot / "config.json").is_file():
        raise CheckpointError(f"the cached snapshot of {text} ({snapshot}) has no config.json")
    return snapshot


def safetensors_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as e:
            raise CheckpointError(f"{index} is not a safetensors index ({e})") from None
        files = sorted({path / name for name in weight_map.values()})
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise CheckpointError(f"{path} is missing shards named in its index: {', '.join(missing)}")
        return files
    single = path / "model.safetensors"
    if single.is_file():
        return [single]
    others = sorted(path.glob("*.safetensors"))
    if others:
        return others
    raise CheckpointError(f"{path} has no safetensors weights (model.safetensors or an index)")


def read_tensors(path: Path, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    tensors = {}
    for file in safetensors_files(path):
        try:
            with safe_open(file, framework="pt", device=str(device)) as f:
                for name in f.keys():
                    if name in tensors:
                        raise CheckpointError(f"tensor {name} appears in more than one shard of {path}")
                    tensors[name] = f.get_tensor(name)
        except CheckpointError:
            raise
        except Exception as e:  # safetensors raises its own types for truncated or corrupt files
            raise CheckpointError(f"cannot read {file}: {e}") from None
    return tensors


def load_tokenizer(path: Path):
    """The checkpoint's own tokenizer (tokenizer.json), or None when it has none."""
    file = path / "tokenizer.json"
    if not file.is_file():
        return None
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(file))


def eos_ids(path: Path, config_eos: list[int], tokenizer) -> list[int]:
    ids = list(config_eos)
    gen = path / "generation_config.json"
    if gen.is_file():
        eos = json.loads(gen.read_text()).get("eos_token_id")
        ids += [eos] if isinstance(eos, int) else list(eos or [])
    tok_config = path / "tokenizer_config.json"
    if tokenizer is not None and tok_config.is_file():
        token = json.loads(tok_config.read_text()).get("eos_token")
        token = token.get("content") if isinstance(token, dict) else token
        if token is not None and tokenizer.token_to_id(token) is not None:
            ids.append(tokenizer.token_to_id(token))
    return sorted(set(ids))
