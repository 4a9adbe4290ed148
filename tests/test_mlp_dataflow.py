"""bench/mlp_dataflow.py: gate_up and down_proj joined chunk by chunk compute torch's residual + W_down ·
SwiGLU on odd shapes, for several chunks, in one launch or two, leave their counters and ticket zeroed for
the next launch, and name shapes that do not fit."""

import pytest
import torch

from bench import mlp_dataflow as md


def _case(device, hidden=40, inter=70, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(torch.bfloat16).to(device)
    return (randn(1, hidden), randn(2 * inter, hidden, scale=hidden ** -0.5), randn(hidden, inter, scale=inter ** -0.5),
            randn(1, hidden))


@pytest.mark.parametrize("chunk,launches", [(16, 1), (32, 1), (128, 1), (32, 2)])
def test_matches_torch_and_resets_its_state(device, chunk, launches):
    x, w_gu, w_d, res = _case(device)
    state = md.state_for(70, chunk, device)
    want = md.reference(x, w_gu, w_d, res).float()
    for _ in range(2):  # the second launch finds the state the first left
        got = md.mlp(x, w_gu, w_d, res, state, chunk, launches=launches, block_k=16, stages=1,
                     num_warps=1 if device == "cpu" else 4).float()
        assert torch.allclose(got, want, rtol=2e-2, atol=2e-2), (got - want).abs().max()
        assert int(state.abs().sum()) == 0


def test_reference_is_swiglu_then_down():
    x, w_gu, w_d, res = _case("cpu", hidden=8, inter=4)
    gu = (w_gu.float() @ x.float()[0]).bfloat16().float()
    h = torch.nn.functional.silu(gu[:4]).mul(gu[4:]).bfloat16().float()
    assert torch.equal(md.reference(x, w_gu, w_d, res)[0], (w_d.float() @ h + res.float()[0]).bfloat16())


def test_shapes_that_do_not_fit_are_named(device):
    x, w_gu, w_d, res = _case(device)
    with pytest.raises(ValueError, match="do not make one MLP"):
        md.mlp(x, w_gu[:-1], w_d, res, md.state_for(70, 32, device), 32)
    with pytest.raises(ValueError, match="chunk 24 must be a power of two"):
        md.mlp(x, w_gu, w_d, res, md.state_for(70, 24, device), 24)
    with pytest.raises(ValueError, match="launches is 1 or 2"):
        md.mlp(x, w_gu, w_d, res, md.state_for(70, 32, device), 32, launches=0)


def test_measure_checks_every_variant_against_torch(device):
    rows = md.measure(40, 70, [16, 32], device, lambda fn: (fn(), 1.0)[1], 1.0, copies=2)
    assert [(r["variant"], r["chunk"]) for r in rows] == [
        ("launches", ""), ("flow", ""), *((v, c) for c in (16, 32) for v in md.VARIANTS)]
    assert all(float(r["rel_err"]) < 2e-2 for r in rows)
    assert rows[0]["floor_us"] == pytest.approx(3 * 40 * 70 * 2 / 1e3, abs=0.01)


def test_bad_arguments_are_named(capsys):
    with pytest.raises(SystemExit):
        md.main(["--out", "unused", "--chunks", "100"])
    assert "--chunks takes powers of two" in capsys.readouterr().err
