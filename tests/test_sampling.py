"""Sampling math: vLLM's filters, the counter-based uniforms, and speculative sampling lossless in
distribution: the first 2 and first 4 tokens of many runs against the exact target distribution."""

import bisect
import math

import pytest
import torch

import tileinfer
from tests.sampling_sim import (Target, batch_tables, chain, one_thread, runner_up, simulate,  # noqa: F401
                                tiny_sampling_pair)
from tileinfer import sampling
from tileinfer.errors import RequestError
from tileinfer_profiling.sampling_check import (Conditionals, chi2_sf, chi_square, exact_distribution,
                                                reference_probs)

RUNS = 60_000      # per configuration: a 2 % shift of the first token is detected (test_biased_samplers_…)
ALPHA = 1e-3
LANES = 16


def check(samples, next_probs, depth, min_expected=50.0):
    """Chi-square of the first `depth` tokens of each run against the exact distribution (cells expected
    fewer than 50 times pooled with their prefix's: fewer cells, more power, an accurate chi-square)."""
    probs = exact_distribution(next_probs, depth, floor=min_expected / len(samples))
    return chi_square([tuple(s[:depth]) for s in samples], probs, min_expected)


# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(temperature=-0.5), "temperature"), (dict(temperature=float("nan")), "temperature"),
    (dict(temperature="1"), "temperature"), (dict(temperature=True), "temperature"),
    (dict(temperature=1.0, top_k=0), "top_k"), (dict(temperature=1.0, top_k=2.5), "top_k"),
    (dict(temperature=1.0, top_p=0.0), "top_p"), (dict(temperature=1.0, top_p=1.5), "top_p"),
    (dict(temperature=1.0, seed="7"), "seed"), (dict(temperature=1.0, seed=1.0), "seed"),
])
def test_bad_parameters_raise_request_errors(kwargs, message):
    with pytest.raises(RequestError, match=message):
        sampling.check_params(**kwargs)


@pytest.mark.parametrize("candidates", [0, 8])
def test_filter_matches_reference(candidates):
    """From a sort and from each row's 8 largest logits (a top-k of at most 8 then reads only those)."""
    g = torch.Generator().manual_seed(0)
    for vocab in (16, 50, 200):
        logits = torch.randn(sampling.CANDIDATE_MIN_ROWS, vocab, generator=g, dtype=torch.float64) * 3
        for temperature in (0.5, 1.0, 2.0):
            for top_k in (None, 1, 3, 8, vocab - 1, vocab, vocab + 5):
                for top_p in (None, 0.05, 0.5, 0.9, 1.0):
                    params = sampling.SamplingParams(temperature, top_k, top_p)
                    k = torch.tensor([min(top_k or vocab, vocab)])
                    p = torch.tensor([1.0 if top_p is None else top_p])
                    c = candidates if top_k is not None and top_k <= candidates < vocab else 0
                    ours = sampling.log_probs(logits, torch.tensor([temperature]), k, p,
                                              params.filtered(vocab), c).exp().double()
                    ref = torch.stack([reference_probs(row, temperature, top_k, top_p) for row in logits])
                    what = (vocab, temperature, top_k, top_p, c)
                    assert torch.equal(ours > 0, ref > 0), what
                    assert torch.allclose(ours, ref, atol=1e-6), what


def test_filter_keeps_ties_with_the_kth_value_as_vllm_does():
    logits = torch.tensor([[1.0, 3.0, 2.0, 2.0, 0.0]])
    for candidates in (0, 2, 3):
        kept = sampling.filter_logits(logits, torch.tensor([2]), torch.tensor([1.0]), candidates) > -math.inf
        assert kept.tolist() == [[False, True, True, True, False]], candidates


@pytest.mark.parametrize("candidates", [0, 4, 6])
def test_ties_beyond_the_candidates_count_and_a_tied_group_stays_whole(candidates):
    """Seven tokens tie with the 2nd largest logit: those the candidates miss still hold their mass (top-p
    0.5 then keeps the whole group), and top-p never splits a group at its edge."""
    row = torch.tensor([3.0] + [1.0] * 7 + [0.0] * 9 + [-2.0] * 3, dtype=torch.float64)
    g = torch.Generator().manual_seed(3)
    logits = torch.stack([row[torch.randperm(row.numel(), generator=g)] for _ in range(sampling.CANDIDATE_MIN_ROWS)])
    for top_k, top_p in ((2, 0.5), (2, 0.9), (2, 0.45), (1, 0.9), (3, 1.0)):
        ours = sampling.filter_logits(logits, torch.tensor([top_k]), torch.tensor([top_p]), candidates)
        for got, x in zip(ours, logits):
            kept = (got > -math.inf).tolist()
            assert kept == (reference_probs(x, 1.0, top_k, top_p) > 0).tolist(), (top_k, top_p)
            groups = {value: {k for k, v in zip(kept, x.tolist()) if v == value} for value in row.tolist()}
            assert all(len(g) == 1 for g in groups.values()), (top_k, top_p)
    # the 3.0 holds 1/(1 + 7 e^-2) = 51 % of the top-k mass: top-p 0.45 keeps it alone, 0.6 takes the ties
    rows = len(logits)
    assert (sampling.filter_logits(logits, torch.tensor([2]), torch.tensor([0.45]), candidates) > -math.inf).sum() == rows
    assert (sampling.filter_logits(logits, torch.tensor([2]), torch.tensor([0.6]), candidates) > -math.inf).sum() == 8 * rows


def test_candidates_only_for_a_top_k_within_them():
    V = 151_936
    assert sampling.SamplingParams(1.0, 50, 0.95).candidates(V) == sampling.TOP_K_CANDIDATES == 1024
    assert sampling.SamplingParams(1.0, 1024).candidates(V) == 1024
    assert sampling.SamplingParams(1.0, 1025).candidates(V) == 0          # a sort
    assert sampling.SamplingParams(1.0, None, 0.9).candidates(V) == 0     # top-p alone: a sort
    assert sampling.SamplingParams(1.0, 50).candidates(1000) == 0         # a vocabulary within the candidates
    assert sampling.SamplingParams(0.0, 50).candidates(V) == 0            # greedy
    assert sampling.SamplingParams(1.0, V).candidates(V) == 0             # nothing filtered


def test_uniforms_are_reproducible_and_uniform():
    a = sampling.uniforms(123, 4096, LANES)
    assert torch.equal(a, sampling.uniforms(123, 4096, LANES))
    assert not torch.equal(a, sampling.uniforms(124, 4096, LANES))
    assert torch.equal(sampling.uniforms(-1, 8, 4), sampling.uniforms(2 ** 64 - 1, 8, 4))
    assert a.dtype == torch.float64 and 0 <= a.min() and a.max() < 1
    assert torch.equal(sampling.uniforms(5, 64, LANES), sampling.uniforms(5, 4096, LANES)[:64])
    bins = 20
    counts = torch.bincount((a.flatten() * bins).long(), minlength=bins).double()
    expected = a.numel() / bins
    assert chi2_sf(float(((counts - expected) ** 2 / expected).sum()), bins - 1) > ALPHA
    for x, y in ((a[:, :-1], a[:, 1:]), (a[:-1], a[1:])):  # neighbouring lanes and rows independent
        cells = torch.bincount(((x * 8).long() * 8 + (y * 8).long()).flatten(), minlength=64).double()
        expected = x.numel() / 64
        assert chi2_sf(float(((cells - expected) ** 2 / expected).sum()), 63) > ALPHA


def test_pcg_hash_is_a_bijection_and_stays_in_int64():
    x = torch.cat([torch.arange(1 << 20), torch.arange((1 << 32) - (1 << 20), 1 << 32)])
    h = sampling.pcg_hash(x)
    assert h.unique().numel() == x.numel() and 0 <= h.min() and h.max() < 2 ** 32
    assert [sampling.pcg_hash(int(v)) for v in x[:5]] == h[:5].tolist()


# ---------------------------------------------------------------------------------------------------
# A target whose distribution depends only on the position: any drafter q, deterministic or not.

def position_target(seed, vocab=12, positions=24, top_k=None):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(positions, vocab, generator=g) * 1.5
    return Target(lambda prefix: logits[min(len(prefix), positions - 1)], 1.0, top_k=top_k)


class SampledDrafts:
    """A drafter that samples each draft from its own distribution q (given per position)."""
    with_probs = True

    def __init__(self, q, seed):
        self.q = q
        self.cdf = [torch.cumsum(row.double(), 0).tolist() for row in q]
        self.g = torch.Generator().manual_seed(seed)

    def __call__(self, run, step, prefix, n):
        start = len(prefix)
        rows = [min(start + j, len(self.q) - 1) for j in range(n - 1)]
        u = torch.rand(n - 1, generator=self.g, dtype=torch.float64).tolist()
        drafts = tuple(min(bisect.bisect_right(self.cdf[r], ui * self.cdf[r][-1]), len(self.cdf[r]) - 1)
                       for r, ui in zip(rows, u))
        return drafts, self.q[rows] if rows else self.q[:0]


def q_rows(kind, target, positions=24, seed=1):
    p = torch.stack([target.probs((0,) * i) for i in range(positions)]).float()
    g = torch.Generator().manual_seed(seed)
    if kind == "random":
        q = torch.rand(p.shape, generator=g) ** 3
    elif kind == "adversarial":  # its mass where the target's is least (or nil)
        q = (p.max(dim=-1, keepdim=True).values - p) ** 4
    else:  # "target": q = p, every draft accepted
        q = p
    return q / q.sum(dim=-1, keepdim=True)


@pytest.mark.parametrize("block, drafter, top_k", [
    (2, "argmax", None), (4, "random", None), (4, "adversarial", 6), (16, "target", None), (16, "random", 4)])
def test_speculative_sampling_with_any_drafter_is_lossless(block, drafter, top_k):
    target = position_target(block, top_k=top_k)
    if drafter == "argmax":
        draft = chain(target, torch.argmax, depth=4)
    else:
        draft = SampledDrafts(q_rows(drafter, target), seed=block)
    runs = RUNS // 2
    out, accepted, _ = simulate(target, draft, block, 4, batch_tables(block, runs, 8, LANES))
    for depth in (2, 4):
        result = check(out, target.probs, depth)
        assert result.unlisted == 0, "tokens of probability 0 were drawn"
        assert result.p_value > ALPHA, (depth, str(result))


# ---------------------------------------------------------------------------------------------------
# The tiny Qwen3 target: its distribution after each prefix from its own logits.

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    target, drafter = tiny_sampling_pair(tmp_path_factory.mktemp("sampling"))
    other, _ = tiny_sampling_pair(tmp_path_factory.mktemp("other"), seed=7)
    engine = tileinfer.load(target, draft=drafter, weights="fp32", backend="torch")
    other_engine = tileinfer.load(other, weights="fp32", backend="torch")
    prompt = [3, 5]
    return Conditionals(engine, prompt), Conditionals(other_engine, prompt)


CONFIGS = {  # block, drafter, temperature, top_k, top_p, max_new_tokens
    "plain": (1, None, 1.0, None, None, 4),
    "oracle-2": (2, "argmax", 1.0, None, None, 4),
    "runner-up-4-filtered": (4, "runner-up", 0.7, 6, 0.9, 4),
    "adversary-4-top-k": (4, "argmin", 1.0, 5, None, 4),
    "other-model-16": (16, "other", 1.0, None, None, 16),
    "oracle-16-top-p": (16, "argmax", 0.6, None, 0.8, 16),
}


def drafter_for(name, target, other_logits, t, k, p):
    if name is None:
        return None
    if name == "other":
        return chain(Target(other_logits, t, k, p), torch.argmax, depth=4)
    return chain(target, {"argmax": torch.argmax, "argmin": torch.argmin, "runner-up": runner_up}[name], depth=4)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_tiny_model_first_tokens_follow_the_target(tiny, name):
    block, drafter, t, k, p, max_new = CONFIGS[name]
    logits, other = tiny
    target = Target(logits, t, k, p)
    draft = drafter_for(drafter, target, other, t, k, p)
    out, accepted, _ = simulate(target, draft, block, max_new, batch_tables(len(name), RUNS, 8, LANES), depth=4)
    for depth in (2, 4):
        result = check(out, target.probs, depth)
        assert result.unlisted == 0, "tokens of probability 0 were drawn"
        assert result.p_value > ALPHA, (name, depth, str(result))
    if drafter in ("argmax", "runner-up"):
        assert any(a for steps in accepted for a in steps), "the drafts were never accepted"


def resample_from_p(logp, drafts, u, draft_probs=None):
    """A classic bug: after a rejection, sample from p instead of the residual."""
    accepted, tokens = sampling.speculative_sample(logp, drafts, u)
    row = logp.gather(-2, accepted.unsqueeze(-1).expand(*logp.shape[:-2], 1, logp.shape[-1])).squeeze(-2)
    return accepted, tokens.scatter(-1, accepted, sampling.sample_from(row.double().exp(), u[..., :1]))


class ShiftedFirstToken(Target):
    """A sampler off by 2 % of the mass: the first token's second most likely value loses 0.02 to the
    most likely one (the tokens after it are sampled correctly)."""

    def logp(self, prefix):
        logp = super().logp(prefix)
        if prefix:
            return logp
        probs = logp.exp()
        top, second = probs.argsort(descending=True)[:2]
        probs[top] += 0.02
        probs[second] -= 0.02
        return probs.log()


def test_biased_samplers_are_rejected(tiny):
    """The statistic at the sample size used above rejects a sampler off by 2 % of the mass, and the
    classic residual bug."""
    logits, _ = tiny
    target = Target(logits, 1.0)
    u = batch_tables(99, RUNS, 8, LANES)
    out, _, _ = simulate(ShiftedFirstToken(logits, 1.0), None, 1, 4, u)
    for depth in (2, 4):
        assert check(out, target.probs, depth).p_value < ALPHA, depth
    out, _, _ = simulate(target, chain(target, runner_up, depth=4), 4, 4, u, step=resample_from_p)
    for depth in (2, 4):
        assert check(out, target.probs, depth).p_value < ALPHA, depth
