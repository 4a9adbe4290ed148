"""The one-launch commit of a step against its definition (`commit_ref`): the same tensors, the same values."""

import pytest
import torch

from tileinfer.ops.commit import commit, commit_ref

BLOCK = 16


def _state(device, size, drafts_right: int, seed: int):
    """A step of `size` tokens whose first `drafts_right` drafts equal the target's token before them."""
    g = torch.Generator().manual_seed(seed)
    posterior = torch.randint(0, 1000, (size,), generator=g)
    block_ids = torch.full((BLOCK,), 7, dtype=torch.int64)
    block_ids[0] = 3
    block_ids[1:size] = posterior[: size - 1] + 1000  # every draft wrong ...
    block_ids[1:1 + drafts_right] = posterior[:drafts_right]  # ... but the first drafts_right
    state = dict(block_ids=block_ids, posterior=posterior, result=torch.full((BLOCK + 1,), -1, dtype=torch.int64),
                 start_t=torch.tensor([1000 + seed]), ctx_start_t=torch.tensor([-5]))
    return {k: v.to(device) for k, v in state.items()}


def _run(fn, state, size, **kw):
    s = {k: v.clone() for k, v in state.items()}
    fn(s["block_ids"], s["posterior"], size, s["result"], s["start_t"], s["ctx_start_t"], **kw)
    return s


@pytest.mark.parametrize("size,right", [(1, 0), (2, 0), (2, 1), (7, 3), (16, 0), (16, 9), (16, 15)])
def test_greedy_matches_the_definition(device, size, right):
    state = _state(device, size, right, seed=size * 31 + right)
    got, want = _run(commit, state, size), _run(commit_ref, state, size)
    for k in want:
        assert torch.equal(got[k], want[k]), k
    assert int(want["result"][0]) == right and int(want["start_t"]) == int(state["start_t"]) + right + 1
    assert int(want["block_ids"][0]) == int(state["posterior"][right])


def test_a_later_match_after_a_miss_is_not_accepted(device):
    state = _state(device, 8, 2, seed=4)
    state["block_ids"][5] = state["posterior"][4]  # right again after the first miss
    got, want = _run(commit, state, 8), _run(commit_ref, state, 8)
    assert int(got["result"][0]) == int(want["result"][0]) == 2


@pytest.mark.parametrize("size,forced", [(16, 3), (16, 40), (4, 0)])
def test_forced_and_given_acceptance(device, size, forced):
    state = _state(device, size, 1, seed=9)
    cap = torch.tensor([forced], device=device)
    got, want = _run(commit, state, size, forced=cap), _run(commit_ref, state, size, forced=cap)
    for k in want:
        assert torch.equal(got[k], want[k]), k
    assert int(got["result"][0]) == min(forced, size - 1)
    given = torch.tensor([2 % size], device=device)
    got, want = _run(commit, state, size, accepted=given), _run(commit_ref, state, size, accepted=given)
    for k in want:
        assert torch.equal(got[k], want[k]), k


def test_bad_arguments_are_named(device):
    state = _state(device, 4, 0, seed=1)
    with pytest.raises(ValueError, match="1 to 16 tokens"):
        _run(commit, state, 17)
    state["posterior"] = state["posterior"].to(torch.int32)
    with pytest.raises(ValueError, match="posterior must be a contiguous int64"):
        _run(commit, state, 4)
