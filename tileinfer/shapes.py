"""The shapes of Qwen3 dense models and of DFlash drafters: the sizes that set weight, KV-cache and
activation bytes. Every Qwen3 size the project names is defined here; the rest imports it.

    from tileinfer.shapes import QWEN3, QWEN3_4B, ModelShape
    ModelShape.of(engine.config).kv_heads
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tileinfer.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ModelShape:
    """A Qwen3 stack of decoder layers with its embedding and LM head (`tied`: one tensor for both)."""
    hidden: int
    intermediate: int
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool = True

    @classmethod
    def of(cls, config) -> ModelShape:
        """From a ModelShape, a Qwen3Config (a DFlashConfig's `.layers`), or a dict of Hugging Face fields."""
        if isinstance(config, cls):
            return config
        if isinstance(config, dict):
            def get(name, default=None):
                value = config.get(name)
                value = default if value is None else value
                if value is None:
                    raise ConfigError(f"the config lacks {name!r}; give a Qwen3 config (Hugging Face field names)")
                return value
        else:
            def get(name, default=None):
                return getattr(config, name)
        heads = get("num_attention_heads")
        hidden = get("hidden_size")
        return cls(hidden=hidden, intermediate=get("intermediate_size"), layers=get("num_hidden_layers"),
                   q_heads=heads, kv_heads=get("num_key_value_heads", heads),
                   head_dim=get("head_dim", hidden // heads), vocab=get("vocab_size"),
                   tied=bool(get("tie_word_embeddings", False)))

    def hf_fields(self) -> dict:
        """The shape as Hugging Face config.json fields."""
        return dict(hidden_size=self.hidden, intermediate_size=self.intermediate, num_hidden_layers=self.layers,
                    num_attention_heads=self.q_heads, num_key_value_heads=self.kv_heads, head_dim=self.head_dim,
                    vocab_size=self.vocab, tie_word_embeddings=self.tied)

    @property
    def qkv_rows(self) -> int:
        return (self.q_heads + 2 * self.kv_heads) * self.head_dim

    def linears(self) -> list[tuple[str, int, int]]:
        """(name, N, K) of one layer's linears as TileInfer fuses them: qkv, o, gate_up, down."""
        h, i = self.hidden, self.intermediate
        return [("qkv", self.qkv_rows, h), ("o", h, self.q_heads * self.head_dim), ("gate_up", 2 * i, h),
                ("down", h, i)]


@dataclass(frozen=True, slots=True)
class DrafterShape:
    """A DFlash drafter: Qwen3 layers over the target's hidden states at `target_layer_ids`, drafting
    `block_size` positions per pass with the target's embedding and LM head."""
    layers: ModelShape
    block_size: int
    target_layer_ids: tuple[int, ...]

    @classmethod
    def of(cls, config) -> DrafterShape:
        """From a DrafterShape, a DFlashConfig, or a dict of Hugging Face fields (DFlash's own at the top
        level or under `dflash_config`)."""
        if isinstance(config, cls):
            return config
        if isinstance(config, dict):
            dflash = config.get("dflash_config") or {}
            ids = dflash.get("target_layer_ids", config.get("target_layer_ids"))
            if not ids:
                raise ConfigError("the drafter config lacks target_layer_ids (top level or under dflash_config)")
            block = dflash.get("block_size", config.get("block_size", 16))
            return cls(ModelShape.of(config), int(block), tuple(ids))
        return cls(ModelShape.of(config.layers), config.block_size, tuple(config.target_layer_ids))

    @property
    def fc(self) -> tuple[int, int]:
        """(N, K) of the projection of the tapped hidden states into the drafter's width."""
        return self.layers.hidden, len(self.target_layer_ids) * self.layers.hidden


# The Hugging Face configs of Qwen/Qwen3-{0.6B,1.7B,4B,8B,14B}.
QWEN3 = {
    "0.6b": ModelShape(hidden=1024, intermediate=3072, layers=28, q_heads=16, kv_heads=8, head_dim=128,
                       vocab=151936, tied=True),
    "1.7b": ModelShape(hidden=2048, intermediate=6144, layers=28, q_heads=16, kv_heads=8, head_dim=128,
                       vocab=151936, tied=True),
    "4b": ModelShape(hidden=2560, intermediate=9728, layers=36, q_heads=32, kv_heads=8, head_dim=128,
                     vocab=151936, tied=True),
    "8b": ModelShape(hidden=4096, intermediate=12288, layers=36, q_heads=32, kv_heads=8, head_dim=128,
                     vocab=151936, tied=False),
    "14b": ModelShape(hidden=5120, intermediate=17408, layers=40, q_heads=40, kv_heads=8, head_dim=128,
                      vocab=151936, tied=False),
}
QWEN3_4B = QWEN3["4b"]
# z-lab/Qwen3-4B-DFlash-b16: five layers tapping the target evenly (config.build_target_layer_ids(36, 5)).
QWEN3_4B_DFLASH = DrafterShape(replace(QWEN3_4B, layers=5), block_size=16, target_layer_ids=(1, 9, 17, 25, 33))
