"""What one generate() call returns: tokens, text and per-phase statistics."""

from collections import Counter
from dataclasses import asdict, dataclass, field


@dataclass(slots=True)
class GenerationStats:
    prompt_tokens: int
    new_tokens: int = 0
    prefill_ms: float = 0.0
    decode_ms: float = 0.0
    steps: int = 0
    tokens_per_step: list[int] = field(default_factory=list)
    block_size: int = 1
    drafter_ms: float | None = None
    verify_ms: float | None = None
    accept_ms: float | None = None
    stop_reason: str = "length"
    exact: bool = False  # exact mode (greedy DFlash = greedy decoding, bit for bit)

    @property
    def mean_tokens_per_step(self) -> float:
        return sum(self.tokens_per_step) / len(self.tokens_per_step) if self.tokens_per_step else 0.0

    @property
    def histogram(self) -> dict[int, int]:
        """How many steps committed 1, 2, … tokens."""
        return dict(sorted(Counter(self.tokens_per_step).items()))

    @property
    def decode_tok_s(self) -> float:
        """Tokens after the first (which prefill produces) per second of decoding."""
        return (self.new_tokens - 1) / (self.decode_ms / 1e3) if self.decode_ms > 0 and self.new_tokens > 1 else 0.0

    def as_dict(self) -> dict:
        return asdict(self) | {"mean_tokens_per_step": self.mean_tokens_per_step,
                               "decode_tok_s": self.decode_tok_s, "histogram": self.histogram}


@dataclass(slots=True)
class Generation:
    tokens: list[int]
    text: str | None
    stats: GenerationStats
