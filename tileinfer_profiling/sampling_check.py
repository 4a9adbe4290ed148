"""Whether sampled tokens follow the target's distribution: the exact distribution of a model's first
tokens, enumerated from its own logits, and Pearson's chi-square test of sample counts against it."""

import math
from collections import Counter
from dataclasses import dataclass

import torch


def reference_probs(logits: torch.Tensor, temperature: float, top_k=None, top_p=None) -> torch.Tensor:
    """The filtered distribution [V] in float64, written plainly: logits / temperature; top-k keeps the
    tokens at least as likely as the k-th; top-p keeps each token whose strictly more likely tokens hold
    less than p of the mass (vLLM's semantics; tied tokens stay or go together)."""
    x = logits.double() / temperature
    keep = torch.ones_like(x, dtype=torch.bool)
    if top_k is not None and top_k < x.numel():
        keep &= x >= x.sort(descending=True).values[top_k - 1]
    probs = torch.softmax(x.masked_fill(~keep, -math.inf), dim=-1)
    if top_p is not None and top_p < 1:
        values, group = x.unique(return_inverse=True)
        mass = torch.zeros_like(values).index_add_(0, group, probs)
        above = mass.flip(0).cumsum(0).flip(0) - mass  # the mass of the larger values
        keep &= above[group] < top_p
        probs = torch.softmax(x.masked_fill(~keep, -math.inf), dim=-1)
    return probs


class Conditionals:
    """The target's logits after `prompt + prefix` for any prefix, from prompt_logits (one prefill gives
    every position's row), cached by prefix."""

    def __init__(self, engine, prompt):
        self.engine, self.prompt = engine, list(prompt)
        self.rows: dict[tuple, torch.Tensor] = {}

    def fill(self, sequence) -> None:
        """Rows for every prefix of `sequence` (a tuple of generated tokens) in one prefill."""
        sequence = tuple(sequence)
        if sequence in self.rows:
            return
        logits = self.engine.prompt_logits(self.prompt + list(sequence)).cpu()
        n = len(self.prompt)
        for j in range(len(sequence) + 1):
            self.rows.setdefault(sequence[:j], logits[n - 1 + j])

    def __call__(self, prefix) -> torch.Tensor:
        prefix = tuple(prefix)
        if prefix not in self.rows:
            self.fill(prefix)
        return self.rows[prefix]


def exact_distribution(next_probs, depth: int, floor: float = 0.0) -> dict[tuple, float]:
    """Probabilities of the token sequences of length `depth` (next_probs(prefix) -> [V] float64), as a
    partition: a prefix whose probability is below `floor` is one entry for all its continuations.
    Sequences of probability 0 are in no entry."""
    out, frontier = {}, [((), 1.0)]
    while frontier:
        prefix, mass = frontier.pop()
        if len(prefix) == depth or mass < floor:
            out[prefix] = mass
            continue
        probs = next_probs(prefix)
        for token in torch.nonzero(probs > 0).flatten().tolist():
            frontier.append((prefix + (token,), mass * probs[token].item()))
    return out


def chi2_sf(stat: float, dof: int) -> float:
    """P(X ≥ stat) for a chi-square variable with `dof` degrees of freedom."""
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


@dataclass
class ChiSquare:
    stat: float
    dof: int
    p_value: float
    samples: int
    cells: int        # categories after pooling the rare ones
    unlisted: int     # samples of probability 0 (under no entry of the partition)

    def __str__(self):
        return (f"chi2 {self.stat:.1f} on {self.dof} dof, p = {self.p_value:.4g} ({self.samples} samples, "
                f"{self.cells} cells)")


def chi_square(samples, probs: dict[tuple, float], min_expected: float = 5.0) -> ChiSquare:
    """Pearson's test of `samples` (token tuples) against `probs` (a partition by prefixes, as
    exact_distribution gives). A cell expected fewer than `min_expected` times joins its parent prefix,
    level by level, so rare continuations still count for the tokens before them; a last pool still below
    it joins the smallest cell. Samples under no entry have probability 0: they make the statistic inf."""
    observed, expected, unlisted = Counter(), Counter(), 0
    for key, p in probs.items():
        expected[key] += len(samples) * p
    for s in samples:
        s = tuple(s)
        key = next((s[:j] for j in range(len(s), -1, -1) if s[:j] in probs), None)
        if key is None:
            unlisted += 1
        else:
            observed[key] += 1
    for level in range(max(map(len, expected), default=0), 0, -1):
        for key in [k for k in expected if len(k) == level and expected[k] < min_expected]:
            expected[key[:-1]] += expected.pop(key)
            observed[key[:-1]] += observed.pop(key, 0)
    cells = sorted(expected, key=lambda k: expected[k])
    if len(cells) > 1 and expected[cells[0]] < min_expected:
        expected[cells[1]] += expected.pop(cells[0])
        observed[cells[1]] += observed.pop(cells[0], 0)
    stat = sum((observed[k] - e) ** 2 / e for k, e in expected.items() if e > 0) if not unlisted else math.inf
    dof = max(len(expected) - 1, 1)
    return ChiSquare(stat, dof, 0.0 if math.isinf(stat) else chi2_sf(stat, dof), len(samples), len(expected),
                     unlisted)
