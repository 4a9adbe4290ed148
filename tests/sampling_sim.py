"""A reference of the engine's sampling loop, run over a batch of independent requests at once.

It follows Engine.generate step for step (block of min(block, tokens left + 1), uniform row k for the k-th
step, lane 0 for the sampled token, lane i for draft i, at most the tokens left committed), but takes the
target's rows from prompt_logits and the drafts from a given function, so that (1) with exact rows it
shows the sampling math lossless over many requests, and (2) fed the engine's own drafts it must
reproduce the engine's tokens seed for seed.
"""

import pytest
import torch

from tileinfer import sampling
from tileinfer.random_weights import write_dflash_drafter, write_qwen3
from tileinfer_profiling.sampling_check import reference_probs

VOCAB = 16


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: a second thread only contends (ten times slower on a loaded two-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_sampling_pair(root, seed=0):
    """A one-layer target with 16 token ids (entropy ≈ 1.5 nats per token at T = 1) and its drafter."""
    target = write_qwen3(root / "target", "tiny", seed=seed, dtype=torch.float32, std=0.5, vocab_size=VOCAB,
                         hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=16, eos_token_id=0, max_position_embeddings=128)
    drafter = write_dflash_drafter(root / "drafter", target, num_layers=1, block_size=16, seed=seed + 1,
                                   dtype=torch.float32, std=0.5)
    return target, drafter


class Target:
    """A target's filtered distribution after any prefix: float32 log-probs as the engine computes them,
    and float64 reference probabilities for the exact distribution."""

    def __init__(self, logits, temperature=1.0, top_k=None, top_p=None):
        self.logits = logits  # prefix -> the target's logits after it (a Conditionals)
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        vocab = logits(()).numel()
        self.filtered = sampling.SamplingParams(temperature, top_k, top_p).filtered(vocab)
        self._k = torch.tensor([min(top_k or vocab, vocab)])
        self._p = torch.tensor([1.0 if top_p is None else top_p])
        self._logp, self._probs = {}, {}

    def logp(self, prefix) -> torch.Tensor:
        prefix = tuple(prefix)
        if prefix not in self._logp:
            row = self.logits(prefix)[None]
            self._logp[prefix] = sampling.log_probs(row, torch.tensor([self.temperature]), self._k, self._p,
                                                    self.filtered)[0]
        return self._logp[prefix]

    def prefetch(self, sequence) -> None:
        """Rows after every prefix of `sequence`, in one prefill when the logits come from an engine."""
        if hasattr(self.logits, "fill"):
            self.logits.fill(tuple(sequence))

    def probs(self, prefix) -> torch.Tensor:
        prefix = tuple(prefix)
        if prefix not in self._probs:
            self._probs[prefix] = reference_probs(self.logits(prefix), self.temperature, self.top_k, self.top_p)
        return self._probs[prefix]


def chain(target, pick, depth):
    """A deterministic drafter: each draft is pick(probs) of the target's distribution after the
    prefix and the drafts before it (argmax: an oracle; argmin: an adversary); drafts past `depth`
    tokens, which decide nothing before it, are 0."""
    memo = {}

    def drafter(run, step, prefix, n):
        key = (prefix, n)
        if key not in memo:
            drafts = []
            for _ in range(n - 1):
                path = prefix + tuple(drafts)
                drafts.append(int(pick(target.probs(path))) if len(path) < depth else 0)
            memo[key] = tuple(drafts)
        return memo[key]
    return drafter


def runner_up(probs):
    return probs.argsort(descending=True)[1]


def simulate(target, drafter, block, max_new, u, depth=None, step=sampling.speculative_sample):
    """Tokens of len(u) requests (u: [runs, rows, lanes], each run's uniform table), stopping a run at
    `depth` tokens (default: max_new); rows after a prefix of `depth` tokens or more only decide tokens
    past it, so they are filled with any row. Returns the tokens of each run, and per run and step the
    drafts accepted and the tokens committed."""
    depth = depth or max_new
    runs = u.shape[0]
    pad = target.logp(())
    first = torch.stack([pad] * runs)[:, None]
    _, tokens = step(first, torch.zeros(runs, 0, dtype=torch.int64), u[:, 0])
    out = [[t] for t in tokens[:, 0].tolist()]
    accepted_log = [[] for _ in range(runs)]
    committed_log = [[] for _ in range(runs)]
    k = 1
    while True:
        active = [i for i in range(runs) if len(out[i]) < min(depth, max_new)]
        if not active:
            return [o[:depth] for o in out], accepted_log, committed_log
        groups = {}
        for i in active:
            groups.setdefault(min(block, max_new - len(out[i]) + 1), []).append(i)
        for n, idx in groups.items():
            drafts = [drafter(i, k, tuple(out[i]), n) if n > 1 else () for i in idx]
            q = None
            if n > 1 and getattr(drafter, "with_probs", False):  # drafts sampled from q: (drafts, q rows)
                q = torch.stack([qi for _, qi in drafts])
                drafts = [d for d, _ in drafts]
            rows = []
            for i, d in zip(idx, drafts):
                path = tuple(out[i]) + d
                target.prefetch(path[:depth - 1])
                rows += [target.logp(path[:len(out[i]) + j]) if len(out[i]) + j < depth else pad for j in range(n)]
            logp = torch.stack(rows).view(len(idx), n, -1)
            drafts_t = torch.tensor(drafts, dtype=torch.int64).view(len(idx), n - 1)
            a, tok = step(logp, drafts_t, u[idx, k]) if q is None else step(logp, drafts_t, u[idx, k], q)
            for i, ai, ti in zip(idx, a[:, 0].tolist(), tok.tolist()):
                produced = min(ai + 1, max_new - len(out[i]))
                out[i] += ti[:produced]
                accepted_log[i].append(ai)
                committed_log[i].append(produced)
        k += 1


def tables(seeds, rows, lanes):
    """Each seed's uniform table, as the engine builds it."""
    return torch.stack([sampling.uniforms(s, rows, lanes) for s in seeds])


def batch_tables(seed, runs, rows, lanes):
    """`runs` independent tables cut from one long stream (cheaper than one seed per run)."""
    return sampling.uniforms(seed, runs * rows, lanes).view(runs, rows, lanes)
