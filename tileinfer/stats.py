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
    temperature: float = 0.0  # 0: greedy
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None   # the seed a sampled run used (given or drawn): passing it again repeats the run
    drafts_offered: list[int] = field(default_factory=list)   # [i-1]: steps whose block had a draft i
    drafts_accepted: list[int] = field(default_factory=list)  # [i-1]: steps that accepted draft i

    def count_drafts(self, size: int, accepted: int) -> None:
        """Record a step of `size` tokens (drafts 1 … size-1) that accepted its first `accepted` drafts."""
        grow = size - 1 - len(self.drafts_offered)
        if grow > 0:
            self.drafts_offered += [0] * grow
            self.drafts_accepted += [0] * grow
        for i in range(size - 1):
            self.drafts_offered[i] += 1
            self.drafts_accepted[i] += i < accepted

    @property
    def acceptance_per_position(self) -> list[float]:
        """[i-1]: the fraction of steps offering draft i that accepted it (drafts 1 … i all accepted)."""
        return [a / o if o else 0.0 for a, o in zip(self.drafts_accepted, self.drafts_offered)]

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
                               "decode_tok_s": self.decode_tok_s, "histogram": self.histogram,
                               "acceptance_per_position": self.acceptance_per_position}


@dataclass(slots=True)
class Generation:
    tokens: list[int]
    text: str | None
    stats: GenerationStats
