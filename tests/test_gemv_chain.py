"""The persistent decoder chain against its reference: phases on odd shapes (the interpreter runs one a
launch), bf16 and int8 weights, the grid barrier on a GPU (one launch, in a CUDA graph, repeated), the tiling
and bad input."""

import pytest
import torch

from tileinfer.ops.gemv_chain import barrier_stalled, block_k, gemv_chain, gemv_chain_ref, tile_rows


def chain(device, layers, h, nq, ko, i, seed=0, int8=False):
    """x, the four stacked weights, g1, g2 and the scales (None for bf16) of a random chain that keeps its
    scale (weights ~ 1/√K)."""
    g = torch.Generator().manual_seed(seed)
    dims = [(nq, h), (h, ko), (2 * i, h), (h, i)]
    if int8:
        weights = [torch.randint(-127, 128, (layers, n, k), generator=g, dtype=torch.int8).to(device) for n, k in dims]
        scales = [(torch.rand(layers, n, generator=g) + 0.5).div(73.0 * k**0.5).to(device) for n, k in dims]
    else:
        weights = [(torch.randn(layers, n, k, generator=g) / k**0.5).to(torch.bfloat16).to(device) for n, k in dims]
        scales = None
    norms = [(1.0 + 0.1 * torch.randn(layers, h, generator=g)).to(torch.bfloat16).to(device) for _ in range(2)]
    x = torch.randn(h, generator=g).to(torch.bfloat16).to(device)
    return x, weights, norms, scales


def relative_error(out, ref):
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


SHAPES = [(1, 64, 96, 64, 64), (2, 96, 160, 65, 100), (3, 40, 48, 17, 45)]


@pytest.mark.parametrize("int8", [False, True], ids=["bf16", "int8"])
@pytest.mark.parametrize("layers, h, nq, ko, i", SHAPES)
def test_chain_matches_reference(device, layers, h, nq, ko, i, int8):
    x, weights, (g1, g2), scales = chain(device, layers, h, nq, ko, i, int8=int8)
    ref = gemv_chain_ref(x, *weights, g1, g2, scales=scales)
    out = gemv_chain(x.clone(), *weights, g1, g2, scales=scales)
    assert out.shape == (h,) and out.dtype == torch.bfloat16
    # each phase rounds to bf16 (the interpreter truncates): ~0.4 % of error a phase at most
    assert relative_error(out, ref) < 5e-3 * 4 * layers, relative_error(out, ref)


def test_the_residual_stream_carries_through(device):
    """With o and down zero, each layer leaves x as it was: the adds keep the stream bit for bit."""
    x, (wq, wo, wg, wd), (g1, g2), _ = chain(device, 2, 64, 96, 64, 80)
    out = gemv_chain(x.clone(), wq, torch.zeros_like(wo), wg, torch.zeros_like(wd), g1, g2)
    assert torch.equal(out, x)


def test_tiles_balance_the_busiest_program():
    assert tile_rows(2560, 132) == 4    # 640 tiles: 20 rows for the busiest, the least any tiling gives
    assert tile_rows(4096, 132) == 16   # 256 tiles, 32 rows against 32
    assert tile_rows(6144, 132) == 16   # 48 rows against 47: within the slack, four times fewer tiles
    assert tile_rows(10, 132) == 1
    assert all(tile_rows(n, p) in (1, 2, 4, 8, 16) for n in (1, 7, 1000, 19456) for p in (1, 4, 132))
    assert block_k(2560, 4) == 2048 and block_k(2560, 16) == 512 and block_k(40, 16) == 128
    assert block_k(2560, 4, weight_bytes=1) == 4096 and block_k(9728, 16, weight_bytes=1) == 1024


def test_refuses_bad_input(device):
    x, (wq, wo, wg, wd), (g1, g2), _ = chain(device, 2, 64, 96, 64, 64)
    with pytest.raises(ValueError, match="w_o"):
        gemv_chain(x.clone(), wq, wo[:1], wg, wd, g1, g2)
    with pytest.raises(ValueError, match="g1 and g2"):
        gemv_chain(x.clone(), wq, wo, wg, wd, g1[:, :32], g2)
    with pytest.raises(ValueError, match="too many"):
        gemv_chain(x.clone(), wq, torch.zeros(2, 64, 97, dtype=torch.bfloat16, device=device), wg, wd, g1, g2)
    with pytest.raises(ValueError, match="contiguous"):
        gemv_chain(x[:32].clone(), wq, wo, wg, wd, g1, g2)
    with pytest.raises(ValueError, match="int8 weights take `scales`"):
        gemv_chain(x.clone(), wq, wo, wg, wd, g1, g2, scales=[torch.ones(2, 96, device=device)] * 4)
    x8, w8, (h1, h2), s8 = chain(device, 2, 64, 96, 64, 64, int8=True)
    with pytest.raises(ValueError, match="int8 weights take `scales`"):
        gemv_chain(x8.clone(), *w8, h1, h2)
    with pytest.raises(ValueError, match=r"fp32 \[L, N\]"):
        gemv_chain(x8.clone(), *w8, h1, h2, scales=[s.double() for s in s8])


@pytest.mark.gpu
@pytest.mark.parametrize("int8", [False, True], ids=["bf16", "int8"])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_barriers_in_one_launch_and_a_graph(prefetch, int8):
    """On a GPU the whole chain is one launch with a grid barrier between phases: the result is the
    reference's, the same on every call (the barrier's generation moves on, its count returns to 0), and
    the same again replayed from a CUDA graph; no barrier gives up waiting."""
    x, weights, (g1, g2), scales = chain("cuda", 4, 1024, 4096, 2048, 3072, int8=int8)
    ref = gemv_chain_ref(x, *weights, g1, g2, scales=scales)
    barrier_stalled("cuda")
    first = gemv_chain(x.clone(), *weights, g1, g2, scales=scales, prefetch=prefetch)
    assert not barrier_stalled("cuda")
    assert relative_error(first, ref) < 2e-2
    assert torch.equal(gemv_chain(x.clone(), *weights, g1, g2, scales=scales, prefetch=prefetch), first)
    assert relative_error(gemv_chain(x.clone(), *weights, g1, g2, scales=scales, prefetch=prefetch, programs=7),
                          ref) < 2e-2
    y = x.clone()
    scratch = (y.new_empty(4096), y.new_empty(3072))
    gemv_chain(y, *weights, g1, g2, scales=scales, prefetch=prefetch, scratch=scratch)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gemv_chain(y, *weights, g1, g2, scales=scales, prefetch=prefetch, scratch=scratch)
    for _ in range(3):
        y.copy_(x)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, first)
    assert not barrier_stalled("cuda")
