"""The persistent GEMV chain against its reference: phases on odd shapes (the interpreter runs one a
launch), the grid barrier on a GPU (one launch, in a CUDA graph, repeated), the tiling and bad input."""

import pytest
import torch

from tileinfer.ops.gemv_chain import barrier_stalled, block_k, gemv_chain, gemv_chain_ref, tile_rows


def chain(device, layers, h, nq, ko, ng, kd, seed=0):
    g = torch.Generator().manual_seed(seed)

    def w(n, k):
        return (torch.randn(layers, n, k, generator=g) / k**0.5).to(torch.bfloat16).to(device)
    x = torch.randn(h, generator=g).to(torch.bfloat16).to(device)
    return x, [w(nq, h), w(h, ko), w(ng, h), w(h, kd)]


def relative_error(out, ref):
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


@pytest.mark.parametrize("layers, h, nq, ko, ng, kd", [(1, 64, 96, 64, 128, 64), (2, 96, 160, 65, 200, 100),
                                                       (3, 40, 48, 17, 90, 33)])
def test_chain_matches_reference(device, layers, h, nq, ko, ng, kd):
    x, weights = chain(device, layers, h, nq, ko, ng, kd)
    ref = gemv_chain_ref(x, *weights)
    out = gemv_chain(x.clone(), *weights)
    assert out.shape == (h,) and out.dtype == torch.bfloat16
    # each phase rounds to bf16 (the interpreter truncates): ~0.4 % of error a phase at most
    assert relative_error(out, ref) < 5e-3 * 4 * layers, relative_error(out, ref)


def int8_chain(device, layers, h, nq, ko, ng, kd, seed=0):
    """Random int8 weights and per-row fp32 scales that keep the chain's scale."""
    g = torch.Generator().manual_seed(seed)
    dims = [(nq, h), (h, ko), (ng, h), (h, kd)]
    weights = [torch.randint(-127, 128, (layers, n, k), generator=g, dtype=torch.int8).to(device) for n, k in dims]
    scales = [(torch.rand(layers, n, generator=g) + 0.5).div(73.0 * k**0.5).to(device) for n, k in dims]
    return torch.randn(h, generator=g).to(torch.bfloat16).to(device), weights, scales


@pytest.mark.parametrize("layers, h, nq, ko, ng, kd", [(1, 64, 96, 64, 128, 64), (2, 96, 160, 65, 200, 100)])
def test_int8_chain_matches_reference(device, layers, h, nq, ko, ng, kd):
    x, weights, scales = int8_chain(device, layers, h, nq, ko, ng, kd)
    ref = gemv_chain_ref(x, *weights, scales=scales)
    out = gemv_chain(x.clone(), *weights, scales=scales)
    assert relative_error(out, ref) < 5e-3 * 4 * layers, relative_error(out, ref)


def test_one_phase_is_the_rounded_product(device):
    """One layer whose o, gate_up and down are identities: the output is qkv's product rounded once."""
    x, (wq, _, _, _) = chain(device, 1, 64, 64, 64, 64, 64)
    eye = torch.eye(64, dtype=torch.bfloat16, device=device)[None]
    out = gemv_chain(x.clone(), wq, eye, eye.clone(), eye.clone())
    want = (wq[0].float() @ x.float()).to(torch.bfloat16)
    assert torch.allclose(out.float(), want.float(), rtol=1e-2, atol=1e-2)


def test_tiles_balance_the_busiest_program():
    assert tile_rows(2560, 132) == 4    # 640 tiles: 20 rows for the busiest, the least any tiling gives
    assert tile_rows(4096, 132) == 16   # 256 tiles, 32 rows against 32
    assert tile_rows(6144, 132) == 16   # 48 rows against 47: within the slack, four times fewer tiles
    assert tile_rows(10, 132) == 1
    assert all(tile_rows(n, p) in (1, 2, 4, 8, 16) for n in (1, 7, 1000, 19456) for p in (1, 4, 132))
    assert block_k(2560, 4) == 2048 and block_k(2560, 16) == 512 and block_k(40, 16) == 128
    assert block_k(2560, 4, weight_bytes=1) == 4096 and block_k(9728, 16, weight_bytes=1) == 1024


def test_refuses_mismatched_weights(device):
    x, (wq, wo, wg, wd) = chain(device, 2, 64, 96, 64, 128, 64)
    with pytest.raises(ValueError, match="w_o"):
        gemv_chain(x.clone(), wq, wo[:1], wg, wd)
    with pytest.raises(ValueError, match="too many"):
        gemv_chain(x.clone(), wq, torch.zeros(2, 64, 97, dtype=torch.bfloat16, device=device), wg, wd)
    with pytest.raises(ValueError, match="contiguous"):
        gemv_chain(x[:32].clone(), wq, wo, wg, wd)
    with pytest.raises(ValueError, match="int8 weights take `scales`"):
        gemv_chain(x.clone(), wq, wo, wg, wd, scales=[torch.ones(2, 96, device=device)] * 4)
    x8, w8, s8 = int8_chain(device, 2, 64, 96, 64, 128, 64)
    with pytest.raises(ValueError, match="int8 weights take `scales`"):
        gemv_chain(x8.clone(), *w8)
    with pytest.raises(ValueError, match="fp32 \\[L, N\\]"):
        gemv_chain(x8.clone(), *w8, scales=[s.double() for s in s8])


@pytest.mark.gpu
@pytest.mark.parametrize("prefetch", [0, 2])
def test_barriers_in_one_launch_and_a_graph(prefetch):
    """On a GPU the whole chain is one launch with a grid barrier between phases: the result is the
    reference's, the same on every call (the barrier's generation moves on, its count returns to 0), and
    the same again replayed from a CUDA graph."""
    x, weights = chain("cuda", 4, 1024, 4096, 2048, 6144, 3072)
    ref = gemv_chain_ref(x, *weights)
    barrier_stalled("cuda")
    first = gemv_chain(x.clone(), *weights, prefetch=prefetch)
    assert not barrier_stalled("cuda")
    assert relative_error(first, ref) < 2e-2
    assert torch.equal(gemv_chain(x.clone(), *weights, prefetch=prefetch), first)
    assert relative_error(gemv_chain(x.clone(), *weights, prefetch=prefetch, programs=7), ref) < 2e-2
    y = x.clone()
    scratch = (y.new_empty(4096), y.new_empty(1024), y.new_empty(6144))
    gemv_chain(y, *weights, prefetch=prefetch, scratch=scratch)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gemv_chain(y, *weights, prefetch=prefetch, scratch=scratch)
    for _ in range(3):
        y.copy_(x)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, first)
    assert not barrier_stalled("cuda")


@pytest.mark.gpu
def test_int8_barriers_in_one_launch():
    x, weights, scales = int8_chain("cuda", 3, 1024, 4096, 2048, 6144, 3072)
    barrier_stalled("cuda")
    out = gemv_chain(x.clone(), *weights, scales=scales, prefetch=2)
    assert not barrier_stalled("cuda")
    assert relative_error(out, gemv_chain_ref(x, *weights, scales=scales)) < 2e-2
