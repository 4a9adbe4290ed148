"""bench/grid_barrier_bench.py: the persistent chain computes what the GEMVs one after another compute, its
barriers count every program's arrival and none spins out, and its layer shapes chain."""

import torch

from bench import grid_barrier_bench as gb
from tileinfer.shapes import QWEN3

SHAPES = [(48, 40), (40, 24), (70, 40), (40, 35)]  # odd sizes; gate_up's 70 rows feed down's 35 columns


def test_persistent_chain_matches_the_products(device):
    torch.manual_seed(0)
    chain = gb.Chain(SHAPES, 2, device=device)
    programs = 1 if device == "cpu" else 3  # the interpreter runs programs one after another
    got = chain.persistent(programs, block_n=16, block_k=16, stages=1, warps=1).float()
    want = chain.reference()
    assert torch.allclose(got[:want.numel()], want, rtol=2e-2, atol=2e-2), (got[:want.numel()] - want).abs().max()
    assert gb.close(got, want) and not gb.close(got + 1, want)
    assert int(chain.flag) == 0 and int(chain.bar) == programs * len(SHAPES) * 2


def test_layer_shapes_chain():
    shapes = gb.layer_shapes("qwen3-4b")
    s = QWEN3["4b"]
    assert shapes[0] == ((s.q_heads + 2 * s.kv_heads) * s.head_dim, s.hidden)
    assert [k for _, k in shapes[1:]] == [s.q_heads * s.head_dim, s.hidden, s.intermediate]
    assert shapes[2][0] == 2 * shapes[3][1]
