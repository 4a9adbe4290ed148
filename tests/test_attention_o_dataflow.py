"""bench/attention_o_dataflow.py: the attention and o_proj joined head by head compute torch's residual +
W_o · attention on odd shapes, for every split count and o_proj row block, in one launch or two, leave
their counters, flags and ticket zeroed for the next launch, and name shapes that do not fit."""

import pytest
import torch

from bench import attention_o_dataflow as ao


def _case(device, kv_len=77, length=83, hq=6, hk=2, d=16, n_rows=37, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(torch.bfloat16).to(device)
    q = randn(1, hq, d)
    k, v = randn(length, hk, d), randn(length, hk, d)
    w_o = randn(n_rows, hq * d, scale=(hq * d) ** -0.5)
    res = randn(1, n_rows)
    return q, k, v, w_o, res, torch.tensor([kv_len], dtype=torch.int32, device=device)


@pytest.mark.parametrize("splits,o_block_n,launches", [(1, 16, 1), (3, 8, 1), (5, 32, 1), (3, 8, 2)])
def test_matches_torch_and_resets_its_state(device, splits, o_block_n, launches):
    q, k, v, w_o, res, kv_len = _case(device)
    state = ao.state_for(k.shape[1], device)
    want = ao.reference(q, k, v, 77, w_o, res).float()
    for _ in range(2):  # the second launch finds the state the first left
        got = ao.attention_o(q, k, v, kv_len, w_o, res, state, splits, o_block_n=o_block_n, block_n=16,
                             num_warps=1 if device == "cpu" else 4, num_stages=1, launches=launches).float()
        assert torch.allclose(got, want, rtol=2e-2, atol=2e-2), (got - want).abs().max()
        assert int(state.abs().sum()) == 0
    # positions past kv_len are not read: changing them changes nothing
    k[77:] = 100.0
    got = ao.attention_o(q, k, v, kv_len, w_o, res, state, splits, o_block_n=o_block_n, block_n=16,
                         num_warps=1 if device == "cpu" else 4, num_stages=1).float()
    assert torch.allclose(got, want, rtol=2e-2, atol=2e-2)


def test_reference_is_attention_then_projection():
    q, k, v, w_o, res, _ = _case("cpu", kv_len=5, length=5, hq=2, hk=1, d=4, n_rows=3)
    s = (q[0].float() @ k[:, 0].float().T) / 2.0
    o = (s.softmax(-1) @ v[:, 0].float()).bfloat16().float().reshape(-1)
    want = (w_o.float() @ o + res.float()[0]).bfloat16()
    assert torch.equal(ao.reference(q, k, v, 5, w_o, res)[0], want)


def test_shapes_that_do_not_fit_are_named(device):
    q, k, v, w_o, res, kv_len = _case(device)
    with pytest.raises(ValueError, match="do not fit"):
        ao.attention_o(q, k, v, kv_len, w_o[:, :-1], res, ao.state_for(2, device), 2)
    with pytest.raises(ValueError, match="launches is 1 or 2"):
        ao.attention_o(q, k, v, kv_len, w_o, res, ao.state_for(2, device), 2, launches=3)
    with pytest.raises(ValueError, match="state 5"):
        ao.attention_o(q, k, v, kv_len, w_o, res, torch.zeros(5, dtype=torch.int32, device=device), 2)


def test_measure_checks_every_variant_against_torch(device):
    """The bench's rows on tiny heads: every variant but the attention alone agrees with torch, and each
    carries its floor (the attention alone reads no o_proj weight)."""
    rows = ao.measure(80, (4, 2, 16, 24), [8, 16], device, lambda fn: (fn(), 1.0)[1], 1.0, copies=2)
    assert [(r["variant"], r["o_block_n"]) for r in rows] == [
        ("launches", ""), ("flow", ""), ("qkv_attention", ""), *((v, b) for b in (8, 16) for v in ao.VARIANTS)]
    assert all(float(r["rel_err"]) < 2e-2 for r in rows if r["variant"] != "qkv_attention")
    by = {r["variant"]: r["floor_us"] for r in rows}
    assert by["launches"] - by["qkv_attention"] == pytest.approx(24 * 64 * 2 / 1e3, abs=0.01)


def test_bad_arguments_are_named(capsys):
    with pytest.raises(SystemExit):
        ao.main(["--out", "unused", "--o-block-n", "12"])
    assert "--o-block-n powers of two" in capsys.readouterr().err
