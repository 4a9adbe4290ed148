"""`ops.sample.sample_block` against its reference, `sampling.speculative_sample(sampling.log_probs(...))`:
the same accepted drafts and tokens for the same uniforms, on odd vocabularies, tied logits, BF16, FP16
and FP32 logits. Under the interpreter a few cases; on a GPU the Qwen3 vocabulary and many more."""

import itertools

import pytest
import torch

from tileinfer import sampling
from tileinfer.ops.sample import chunk_size, row_filters, sample_block

GPU = torch.cuda.is_available()
DEV = "cuda" if GPU else "cpu"
FILTERS = [(None, None), (50, 0.95), (None, 0.9), (7, None), (1, None), (300, 0.5)]
if GPU:  # every chunk size and key width the Qwen3 vocabulary gets, and an odd vocabulary
    CASES = [*itertools.product([torch.bfloat16], [1, 16], [151_936], FILTERS, [1.0, 0.6]),
             *itertools.product([torch.bfloat16], [6], [1537], FILTERS, [1.0]),
             *itertools.product([torch.float32], [1, 16], [151_936], FILTERS[:3], [1.0]),
             (torch.float16, 16, 151_936, (50, 0.95), 0.8)]
else:
    CASES = [(torch.bfloat16, 1, 1537, (50, 0.95), 1.0), (torch.bfloat16, 6, 1537, (None, 0.9), 0.6),
             (torch.float32, 5, 1537, (7, None), 1.0), (torch.float16, 3, 1537, (None, None), 0.7),
             (torch.bfloat16, 2, 5000, (20, 0.9), 1.0),  # five chunks a row, most of them left out after a pass
             (torch.bfloat16, 2, 1537, (300, 0.5), 1.0)]  # more top-k survivors than are gathered: top-p's passes


def reference(logits, drafts, u, temperature, top_k, top_p):
    vocab = logits.shape[-1]
    params = sampling.SamplingParams(temperature, top_k, top_p)
    t, k, p = tensors(temperature, top_k, top_p, vocab, logits.device)
    logp = sampling.log_probs(logits, t, k, p, params.filtered(vocab), params.candidates(vocab))
    return sampling.speculative_sample(logp, drafts, u)


def tensors(temperature, top_k, top_p, vocab, device):
    return (torch.tensor([temperature], device=device), torch.tensor([top_k or vocab], device=device),
            torch.tensor([top_p or 1.0], device=device))


def ours(logits, drafts, u, temperature, top_k, top_p):
    vocab = logits.shape[-1]
    filtered = sampling.SamplingParams(temperature, top_k, top_p).filtered(vocab)
    return sample_block(logits, drafts, u, *tensors(temperature, top_k, top_p, vocab, logits.device), filtered)


def block(n, vocab, dtype, gen, scale=3.0, ties=False):
    """Logits of n rows and n - 1 drafts, the first half of them each row's argmax (accepted often)."""
    if ties:  # few distinct values: top-k and top-p edges fall inside groups of equal logits
        logits = torch.randint(-4, 3, (n, vocab), generator=gen).to(dtype)
    else:
        logits = (scale * torch.randn(n, vocab, generator=gen)).to(dtype)
    drafts = torch.randint(0, vocab, (n - 1,), generator=gen)
    drafts[: n // 2] = logits[: n // 2].float().argmax(-1)
    return logits.to(DEV), drafts.to(DEV)


def same(a, b):
    (ra, rt), (oa, ot) = a, b
    return torch.equal(ra, oa) and torch.equal(rt[: int(ra) + 1], ot[: int(ra) + 1])


@pytest.mark.parametrize("dtype, n, vocab, filters, temperature", CASES)
def test_sample_block_matches_the_reference(dtype, n, vocab, filters, temperature):
    gen = torch.Generator().manual_seed(n * 1000 + vocab)
    logits, drafts = block(n, vocab, dtype, gen)
    for _ in range(3 if GPU else 1):
        u = torch.rand(n, generator=gen, dtype=torch.float64).to(DEV)
        args = (logits, drafts, u, temperature, *filters)
        assert same(reference(*args), ours(*args)), (dtype, n, vocab, filters, temperature, u.tolist())


def keys(logits):
    """The kernels' order-preserving integer keys of logits, in PyTorch."""
    bits, width = (logits.view(torch.int32), 32) if logits.dtype == torch.float32 else (logits.view(torch.int16), 16)
    b = torch.where(logits == 0, 0, bits.long())
    return (b ^ ((b >> (width - 1)) & ((1 << (width - 1)) - 1))) + (1 << (width - 1))


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("dtype, n, vocab, filters, temperature", CASES)
def test_row_filters_keep_what_the_reference_keeps(dtype, n, vocab, filters, temperature, ties):
    """The threshold key keeps exactly the logits the reference keeps, and their mass."""
    gen = torch.Generator().manual_seed(n * 1000 + vocab + 1)
    logits, _ = block(n, vocab, dtype, gen, ties=ties)
    params = sampling.SamplingParams(temperature, *filters)
    t, k, p = tensors(temperature, *filters, vocab, logits.device)
    final = row_filters(logits, t, k, p, params.filtered(vocab))
    logp = sampling.log_probs(logits, t, k, p, params.filtered(vocab), params.candidates(vocab))
    kept = keys(logits) >= final[:, 1:2].long()
    assert torch.equal(kept, torch.isfinite(logp)), (kept.sum(-1).tolist(), torch.isfinite(logp).sum(-1).tolist())
    mass = torch.where(kept, torch.exp(logits.double() / temperature - final[:, :1]), 0.0).sum(-1)
    torch.testing.assert_close(final[:, 2], mass, rtol=1e-5, atol=0)


@pytest.mark.parametrize("filters", [(3, None), (None, 0.5), (40, 0.8)] if GPU else [(None, 0.5)])
def test_tied_logits_are_kept_or_removed_together(filters):
    gen = torch.Generator().manual_seed(7)
    logits, drafts = block(4, 999, torch.bfloat16, gen, ties=True)
    for _ in range(8 if GPU else 2):
        u = torch.rand(4, generator=gen, dtype=torch.float64).to(DEV)
        args = (logits, drafts, u, 1.0, *filters)
        assert same(reference(*args), ours(*args)), (filters, u.tolist())


@pytest.mark.skipif(not GPU, reason="hundreds of draws: a GPU's")
@pytest.mark.parametrize("filters", [(None, None), (50, 0.95), (None, 0.9)])
def test_every_uniform_draws_the_reference_token(filters):
    """One row drawn with u across [0, 1): the inverse CDF walks the row's chunks as the reference's."""
    gen = torch.Generator().manual_seed(3)
    logits, drafts = block(1, 151_936, torch.bfloat16, gen, scale=1.0)
    for u0 in torch.linspace(0, 1, 402, dtype=torch.float64)[:-1]:
        u = u0.view(1).to(DEV)
        args = (logits, drafts, u, 1.0, *filters)
        assert same(reference(*args), ours(*args)), (filters, float(u0))


def test_chunks_fill_the_gpu_and_stay_bounded():
    assert chunk_size(1, 151_936) == 1024 and chunk_size(16, 151_936) == 4096
    assert chunk_size(16, 1537) == 1024


def test_bad_logits_are_refused():
    with pytest.raises(AssertionError, match="int64"):
        sample_block(torch.zeros(2, 8, dtype=torch.int64), torch.zeros(1, dtype=torch.int64),
                     torch.zeros(2, dtype=torch.float64), *tensors(1.0, None, None, 8, "cpu"), False)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("top_k, top_p", [(3, None), (20, 0.8), (31, 0.5)])
def test_a_top_k_counts_only_keys_from_a_lower_bound_of_its_kth(top_k, top_p, ties):
    """The histogram leaves out the keys below a bound taken from each chunk's largest keys, and keeps
    what the reference keeps (eight chunks a row: four largest distinct keys each, 32 logits at least)."""
    gen = torch.Generator().manual_seed(top_k)
    logits, _ = block(2, 8 * 1024, torch.bfloat16, gen, ties=ties)
    params = sampling.SamplingParams(1.0, top_k, top_p)
    t, k, p = tensors(1.0, top_k, top_p, logits.shape[-1], logits.device)
    from tileinfer.ops.sample import buffers
    buf = {name: torch.empty(shape, dtype=dtype, device=logits.device)
           for name, (shape, dtype) in buffers(2, logits.shape[-1], logits.dtype, True).items()}
    final = row_filters(logits, t, k, p, True, buf)
    logp = sampling.log_probs(logits, t, k, p, True, params.candidates(logits.shape[-1]))
    kept = keys(logits) >= final[:, 1:2].long()
    assert torch.equal(kept, torch.isfinite(logp))
    counted = buf["hist"].sum(-1)
    at_or_above_kth = (keys(logits) >= keys(logits).sort(-1, descending=True).values[:, top_k - 1:top_k]).sum(-1)
    assert (counted >= at_or_above_kth).all() and (counted < logits.shape[-1]).all(), counted.tolist()
