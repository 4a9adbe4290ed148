"""Model configs read from Hugging Face config.json files, checked before anything is allocated."""

import json
from dataclasses import dataclass, field
from pathlib import Path


from tileinfer.errors import ConfigError, DrafterMismatchError



def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist: a checkpoint directory needs a config.json") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON ({e})") from None


def _require(raw: dict, name: str, where: str):
    if name not in raw:
        raise ConfigError(f"{where} lacks the field {name!r}")
    return raw[name]


@dataclass(slots=True)
class Qwen3Config:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    tie_word_embeddings: bool = False
    torch_dtype: str = "bfloat16"
    eos_token_id: list[int] = field(default_factory=list)
    raw: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        for name in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings"):
            if getattr(self, name) < 1:
                raise ConfigError(f"config field {name} must be positive, got {getattr(self, name)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})")
        if self.head_dim & (self.head_dim - 1) or self.head_dim < 16:
            raise ConfigError(f"head_dim must be a power of two ≥ 16 for the attention kernels, got {self.head_dim}")

    @classmethod
    def from_dict(cls, raw: dict, where: str = "config.json") -> "Qwen3Config":
        model_type = raw.get("model_type")
        if model_type != "qwen3":
            raise ConfigError(f"{where} describes model_type {model_type!r}; TileInfer runs Qwen3 checkpoints (model_type 'qwen3')")
        if raw.get("attention_bias"):
            raise ConfigError(f"{where} sets attention_bias; Qwen3 as TileInfer runs it has no biases")
        rope_theta = raw.get("rope_theta")
        rope_parameters = raw.get("rope_parameters") or {}
        rope_scaling = raw.get("rope_scaling") or {}
        if rope_theta is None:
            rope_theta = rope_parameters.get("rope_theta", 1_000_000.0)
        rope_type = rope_scaling.get("rope_type", rope_scaling.get("type", rope_parameters.get("rope_type", "default")))
        if rope_type not in ("default", None):
            raise ConfigError(f"{where} asks for RoPE scaling {rope_type!r}, which TileInfer does not implement")
        heads = _require(raw, "num_attention_heads", where)
        hidden = _require(raw, "hidden_size", where)
        eos = raw.get("eos_token_id")
        eos = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        return cls(
            hidden_size=hidden,
            intermediate_size=_require(raw, "intermediate_size", where),
            num_hidden_layers=_require(raw, "num_hidden_layers", where),
            num_attention_heads=heads,
            num_key_value_heads=raw.get("num_key_value_heads", heads),
            head_dim=raw.get("head_dim") or hidden // heads,
            vocab_size=_require(raw, "vocab_size", where),
            max_position_embeddings=raw.get("max_position_embeddings", 40960),
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            rope_theta=float(rope_theta),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            torch_dtype=raw.get("torch_dtype") or raw.get("dtype") or "bfloat16",
            eos_token_id=eos,
            raw=raw,
        )


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """The DFlash rule: one drafter layer taps the middle; otherwise evenly from 1 to L - 3."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    return [round(start + i * (end - start) / (num_draft_layers - 1)) for i in range(num_draft_layers)]


@dataclass(slots=True)
class DFlashConfig:
    """A DFlash drafter: Qwen3 layers over [context features ; block], sharing the target's embedding and head."""
    layers: Qwen3Config
    block_size: int
    mask_token_id: int
    target_layer_ids: list[int]
    num_target_layers: int

    @classmethod
    def from_dict(cls, raw: dict, where: str = "drafter config.json") -> "DFlashConfig":
        dflash = raw.get("dflash_config") or {}
        unsupported = [k for k in ("conv_kernel_size", "selector_rank") if k in dflash or k in raw]
        if unsupported:
            raise ConfigError(f"{where} is a DFlash-2 drafter ({', '.join(unsupported)}); TileInfer runs DFlash drafters")
        for name in ("input_embedding_scale", "output_multiplier"):
            value = dflash.get(name, raw.get(name, 1.0))
            if float(value) != 1.0:
                raise ConfigError(f"{where} sets {name} = {value}; TileInfer supports only 1.0")
        layers = Qwen3Config.from_dict({**raw, "model_type": "qwen3"}, where)
        if raw.get("is_causal"):
            raise ConfigError(f"{where} sets is_causal; DFlash drafters attend to the whole block")

        def value(name, default=None):
            return dflash.get(name, raw.get(name, default))

        mask = value("mask_token_id")
        if mask is None:
            raise ConfigError(f"{where} lacks mask_token_id (top level or under dflash_config)")
        num_target_layers = value("num_target_layers")
        ids = value("target_layer_ids")
        if ids is None:
            if num_target_layers is None:
                raise ConfigError(f"{where} has neither target_layer_ids nor num_target_layers")
            ids = build_target_layer_ids(num_target_layers, layers.num_hidden_layers)
        return cls(layers=layers, block_size=int(value("block_size", 16)), mask_token_id=int(mask),
                   target_layer_ids=[int(i) for i in ids], num_target_layers=num_target_layers)

    def check_fits(self, target: Qwen3Config) -> None:
        """Raise DrafterMismatchError unless this drafter can run on `target`."""
        d = self.layers
        problems = []
        if d.hidden_size != target.hidden_size:
            problems.append(f"hidden size {d.hidden_size} ≠ target's {target.hidden_size}")
        if d.vocab_size != target.vocab_size:
            problems.append(f"vocab size {d.vocab_size} ≠ target's {target.vocab_size}")
        bad = [i for i in self.target_layer_ids if not 0 <= i < target.num_hidden_layers]
        if bad:
            problems.append(f"target_layer_ids {bad} outside the target's {target.num_hidden_layers} layers")
        if self.num_target_layers is not None and self.num_target_layers != target.num_hidden_layers:
            problems.append(f"num_target_layers {self.num_target_layers} ≠ target's {target.num_hidden_layers}")
        if not 0 <= self.mask_token_id < target.vocab_size:
            problems.append(f"mask_token_id {self.mask_token_id} outside the vocabulary (size {target.vocab_size})")
        if not 1 <= self.block_size <= 64:
            problems.append(f"block_size {self.block_size} outside 1 … 64")
        if problems:
            raise DrafterMismatchError("the drafter does not fit the target: " + "; ".join(problems))
