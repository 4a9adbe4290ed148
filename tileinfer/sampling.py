"""Sampling on the device: the target's filtered distribution and the speculative-sampling step.

The filtered distribution follows vLLM: logits / temperature, then top-k (ties with the k-th value kept),
then top-p over what top-k left (the smallest set of largest probabilities whose mass reaches p; a group
of tied logits at its edge is kept whole). Both come down to one threshold per row: a top-k of at most
TOP_K_CANDIDATES finds it among each row's largest logits, anything else sorts the whole row. A
speculative step accepts draft i with probability min(1, p(x)/q(x)) (p(x) for a deterministic drafter,
whose q is a point mass), samples the first rejected position from the normalized residual
max(0, p - q) and a full acceptance's bonus token from p, so its tokens are distributed as the target's.

On a GPU the Triton backend runs a whole step as `tileinfer.ops.sample.sample_block` (the thresholds
from a histogram of the logits' keys, rows spread over many programs); the functions here are its
reference, and run on the CPU and on the torch backend.

Every function has fixed shapes and reads its parameters and random numbers from device tensors: the
same code runs eagerly on a CPU and inside CUDA graphs, with any temperature in one graph. Randomness
is counter based: uniforms are a hash of (seed, step, lane) computed on the device, so a seed gives the
same numbers on every device and in every mode.
"""

import math
import numbers
import secrets
from dataclasses import dataclass

import torch

from tileinfer.errors import RequestError

_M32 = 0xFFFFFFFF
UNIFORM_GRANULE = 1024  # rows of the uniform table grow in steps of this many (a regrowth invalidates graphs)
TOP_K_CANDIDATES = 1024  # a top-k up to this reads each row's largest logits instead of sorting the row
CANDIDATE_MIN_ROWS = 11  # fewer rows sort: CUDA's topk sorts up to 10 rows of 100,000+ itself, and a
                         # plain step's row cut into pieces for topk cost more than its sort on the H200


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 0.0       # 0: greedy
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def filtered(self, vocab_size: int) -> bool:
        """Whether top-k or top-p removes anything (the sort they need is skipped otherwise)."""
        return not self.greedy and ((self.top_k is not None and self.top_k < vocab_size)
                                    or (self.top_p is not None and self.top_p < 1))

    def candidates(self, vocab_size: int) -> int:
        """Logits per row that top-k / top-p read: TOP_K_CANDIDATES where the top-k is at most that (only
        ties with the k-th value can lie beyond, and those are counted), else 0 (the whole row is sorted)."""
        if self.filtered(vocab_size) and self.top_k is not None and self.top_k <= TOP_K_CANDIDATES < vocab_size:
            return TOP_K_CANDIDATES
        return 0


def check_params(temperature=0.0, top_k=None, top_p=None, seed=None) -> SamplingParams:
    """SamplingParams from a request's arguments; RequestError for values no sampler takes."""
    if (isinstance(temperature, bool) or not isinstance(temperature, numbers.Real)
            or not math.isfinite(temperature) or temperature < 0):
        raise RequestError(f"temperature must be a finite number ≥ 0 (0 decodes greedily), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1):
        raise RequestError(f"top_k must be an integer ≥ 1 or None, got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, numbers.Real)
                              or not 0 < top_p <= 1):
        raise RequestError(f"top_p must be in (0, 1] or None, got {top_p!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
        raise RequestError(f"seed must be an integer or None, got {seed!r}")
    return SamplingParams(float(temperature), None if top_k is None else int(top_k),
                          None if top_p is None else float(top_p), None if seed is None else int(seed))


def random_seed() -> int:
    """A seed for a request that gave none (recorded in its stats, so the run can be repeated)."""
    return secrets.randbits(63)


# ---------------------------------------------------------------------------------------------------
# Counter-based uniforms: PCG's output hash on 32-bit words held in int64, every product below 2**63.

def pcg_hash(x):
    """A bijection of [0, 2**32) (int64 tensors or Python ints)."""
    x = (x * 747796405 + 2891336453) & _M32
    x = (((x >> ((x >> 28) + 4)) ^ x) * 277803737) & _M32
    return (x >> 22) ^ x


def uniforms(seed: int, rows: int, lanes: int, device=None) -> torch.Tensor:
    """[rows, lanes] float64 uniforms in [0, 1), 53 random bits each, a pure function of (seed, row, lane)."""
    k = seed & (2 ** 64 - 1)
    k0, k1 = k & _M32, k >> 32
    i = torch.arange(rows * lanes, dtype=torch.int64, device=device)
    hi = pcg_hash(pcg_hash((i + pcg_hash(k0)) & _M32) ^ k1)
    lo = pcg_hash(pcg_hash((i + pcg_hash(k1 ^ 0x9E3779B9)) & _M32) ^ k0)
    return (((hi << 21) | (lo >> 11)).double() * 2.0 ** -53).view(rows, lanes)


class SamplerState:
    """Device buffers the step graphs read: the request's parameters, its uniform table (one row per
    step: lane 0 samples the committed token, lane i tests draft i) and the row the next step reads."""

    def __init__(self, lanes: int, device):
        self.lanes, self.device = lanes, device
        self.temperature = torch.ones(1, dtype=torch.float32, device=device)
        self.top_k = torch.ones(1, dtype=torch.int64, device=device)
        self.top_p = torch.ones(1, dtype=torch.float32, device=device)
        self.row = torch.zeros(1, dtype=torch.int64, device=device)
        self.table = torch.zeros(0, lanes, dtype=torch.float64, device=device)

    def start(self, params: SamplingParams, seed: int, rows: int, vocab_size: int) -> bool:
        """Load a request; True when the table was reallocated (captured graphs then read a stale one)."""
        grew = rows > self.table.shape[0]
        if grew:
            capacity = -(-rows // UNIFORM_GRANULE) * UNIFORM_GRANULE
            self.table = torch.zeros(capacity, self.lanes, dtype=torch.float64, device=self.device)
        self.table[:rows].copy_(uniforms(seed, rows, self.lanes, self.device))
        self.row.zero_()
        self.temperature.fill_(params.temperature)
        self.top_k.fill_(min(params.top_k or vocab_size, vocab_size))
        self.top_p.fill_(1.0 if params.top_p is None else params.top_p)
        return grew

    def next_uniforms(self) -> torch.Tensor:
        """This step's row of uniforms [lanes]; advances the row (inside the graph, no host round trip)."""
        u = self.table.index_select(0, self.row)[0]
        self.row.add_(1)
        return u


# ---------------------------------------------------------------------------------------------------

def _threshold_from_candidates(logits, top_k, top_p, candidates: int) -> torch.Tensor:
    """The lowest logit [R, 1] that top-k then top-p keep, from each row's `candidates` largest logits
    (top_k ≤ candidates). Ties with the k-th value beyond the candidates count towards the mass."""
    vals = logits.topk(candidates, dim=-1).values
    kth = vals.gather(-1, (top_k - 1).clamp(0, candidates - 1).expand(vals.shape[0], 1))
    beyond = ((logits == kth).sum(dim=-1, keepdim=True, dtype=torch.int32)  # int32: a 4-byte cast, not 8
              - (vals == kth).sum(dim=-1, keepdim=True, dtype=torch.int32))
    in_top_k = vals >= kth
    weight = (vals - vals[:, :1]).exp().masked_fill(~in_top_k, 0.0)
    total = weight.sum(dim=-1, keepdim=True) + beyond * (kth - vals[:, :1]).exp()
    before = (weight.cumsum(dim=-1) - weight) / total   # the mass of the more likely candidates
    keep = in_top_k & ((before < top_p) | (top_p >= 1))
    return vals.gather(-1, keep.sum(dim=-1, keepdim=True) - 1)


def _threshold_from_sort(logits, top_k, top_p) -> torch.Tensor:
    """The same threshold from the whole row sorted."""
    vocab = logits.shape[-1]
    ascending = logits.sort(dim=-1).values
    kth = ascending.gather(-1, (vocab - top_k).clamp(0, vocab - 1).expand(*logits.shape[:-1], 1))
    below = ascending.masked_fill(ascending < kth, -math.inf).softmax(dim=-1).cumsum(dim=-1) <= 1 - top_p
    first = below.sum(dim=-1, keepdim=True).clamp_max(vocab - 1)  # the most likely token always stays
    return ascending.gather(-1, first)


def reads_candidates(rows: int, candidates: int) -> bool:
    """Whether top-k / top-p here on `rows` rows read each row's largest logits (else the rows are sorted)."""
    return bool(candidates) and rows >= CANDIDATE_MIN_ROWS


def fused_step(backend: str, cuda: bool) -> bool:
    """Whether a sampling step runs `tileinfer.ops.sample.sample_block` rather than the functions here: on
    the Triton backend on a GPU (the interpreter would take seconds a step)."""
    return backend == "triton" and cuda


def filter_logits(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, candidates: int = 0) -> torch.Tensor:
    """vLLM's top-k then top-p on [R, V] (tempered) logits: what they remove becomes -inf. One threshold per
    row, so a group of tied logits is kept or removed whole. top_k: int64 [1] in 1 … V (V keeps
    everything); top_p: float [1] in (0, 1]; candidates: SamplingParams.candidates (0: sort the rows;
    fewer than CANDIDATE_MIN_ROWS rows sort anyway)."""
    rows = logits.reshape(-1, logits.shape[-1])
    if reads_candidates(rows.shape[0], candidates):
        threshold = _threshold_from_candidates(rows, top_k, top_p, candidates)
    else:
        threshold = _threshold_from_sort(rows, top_k, top_p)
    return rows.masked_fill(rows < threshold, -math.inf).view(logits.shape)


def log_probs(logits: torch.Tensor, temperature, top_k, top_p, filtered: bool, candidates: int = 0) -> torch.Tensor:
    """Log-probabilities [..., V] (float32) of the filtered distribution; -inf where filtered out.
    temperature: a float32 [1] tensor (BF16 logits are promoted: one kernel divides in float32)."""
    scaled = logits / temperature
    if filtered:
        scaled = filter_logits(scaled, top_k, top_p, candidates)
    return scaled.log_softmax(dim=-1)


def sample_from(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One index per row of unnormalized probabilities [..., V] (float64) by inverse CDF with u [..., 1]
    in [0, 1): index j has probability probs[j] / sum, and a zero entry is never returned."""
    cdf = probs.cumsum(dim=-1)  # non-decreasing: binary searches count its entries below a value
    total = cdf[..., -1:].contiguous()
    index = torch.searchsorted(cdf, (u * total).contiguous(), right=True)  # entries <= u * total
    last = torch.searchsorted(cdf, total)  # the last positive entry (u * total may round up to total)
    return torch.minimum(index, last)


def speculative_sample(logp: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor,
                       draft_probs: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One verify step of speculative sampling over a block of n positions.

    logp: [..., n, V] the target's filtered log-probabilities (row i: the token after block position i).
    drafts: [..., n-1] drafted tokens of block positions 1 … n-1 (draft i is tested against row i-1).
    u: [..., ≥n] float64 uniforms in [0, 1): u[0] samples the committed token, u[i] tests draft i.
    draft_probs: [..., n-1, V] the (filtered) distributions the drafts were sampled from; None for a
    deterministic drafter (q a point mass on each draft).
    Returns (accepted [..., 1], tokens [..., n]): drafts 1 … accepted are kept, tokens[:accepted] are
    those drafts and tokens[accepted] the sampled token; the entries after it are not meaningful.
    """
    n, vocab = logp.shape[-2], logp.shape[-1]
    batch = logp.shape[:-2]
    if n > 1:
        p = logp[..., :-1, :].gather(-1, drafts.unsqueeze(-1)).squeeze(-1).double().exp()
        if draft_probs is None:
            ok = u[..., 1:n] < p
        else:
            q = draft_probs.gather(-1, drafts.unsqueeze(-1)).squeeze(-1).double()
            ok = u[..., 1:n] * q < p
        accepted = ok.to(torch.int64).cumprod(dim=-1).sum(dim=-1, keepdim=True)
    else:
        accepted = torch.zeros(*batch, 1, dtype=torch.int64, device=logp.device)
    row = logp.gather(-2, accepted.unsqueeze(-1).expand(*batch, 1, vocab)).squeeze(-2)
    probs = row.double().exp()
    padded = torch.cat([drafts, torch.zeros_like(accepted)], dim=-1)      # [..., n]: the bonus row has no draft
    rejected = accepted < n - 1
    if draft_probs is None:
        x = padded.gather(-1, accepted)
        probs.scatter_(-1, x, torch.where(rejected, 0.0, probs.gather(-1, x)))
    else:
        q_rows = torch.cat([draft_probs.double(), torch.zeros_like(probs).unsqueeze(-2)], dim=-2)
        q = q_rows.gather(-2, accepted.unsqueeze(-1).expand(*batch, 1, vocab)).squeeze(-2)
        residual = (probs - q).clamp_min(0)
        # p == q leaves nothing (and is never rejected but for rounding): p itself then
        probs = torch.where(residual.sum(dim=-1, keepdim=True) > 0, residual, probs)
    token = sample_from(probs, u[..., :1])
    return accepted, padded.scatter_(-1, accepted, token)
