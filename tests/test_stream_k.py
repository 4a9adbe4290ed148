"""The skinny GEMM's stream-K launch (`GemmConfig.stream_k`): equal shares of all tiles' K-blocks, shared tiles
finished by the last of their programs, against the per-tile launch and the fp64 product."""

import itertools

import pytest
import torch

from tests.conftest import assert_close
from tests.helpers import gemm_operands
from tileinfer.ops import skinny_gemm as sg
from tileinfer.ops.gemm_configs import GemmConfig
from tileinfer.ops.linear import Linear, fold_norm_weight, quantize_linear

N, K = 96, 1000  # three tiles of 32 rows (a gate_up: 48 gate + 48 up rows, two tiles); 8 K-blocks of 128, the last partial


def shares(tiles, k_blocks, programs):
    """Brute force: for each tile, the programs whose share of the units holds some of its K-blocks."""
    units = tiles * k_blocks
    owner = [next(p for p in range(programs) if p * units // programs <= u < (p + 1) * units // programs)
             for u in range(units)]
    return [sorted(set(owner[t * k_blocks:(t + 1) * k_blocks])) for t in range(tiles)]


@pytest.mark.parametrize("tiles,k_blocks,programs", [(3, 8, 2), (3, 8, 5), (3, 8, 24), (152, 40, 132),
                                                     (152, 40, 264), (40, 32, 132), (7, 3, 4), (1, 1, 1)])
def test_slots_are_the_most_programs_sharing_a_tile(tiles, k_blocks, programs):
    owners = shares(tiles, k_blocks, programs)
    assert all(o == list(range(o[0], o[-1] + 1)) for o in owners)  # contiguous: slot = program - first
    assert sg.stream_k_slots(tiles, k_blocks, programs) == max(len(o) for o in owners)


@pytest.mark.parametrize("sms", [2, 5])  # 6 or 15 programs on 24 K-blocks: tiles shared by 2 and by 3-4
@pytest.mark.parametrize("m", [1, 16])
@pytest.mark.parametrize("quantized", [False, True])
def test_stream_k_takes_the_products_of_the_per_tile_launch(device, m, quantized, sms, monkeypatch):
    """Plain, the RMSNorm on the way in, the SwiGLU and residual epilogues, the row sums a residual leaves and
    a norm from them, BF16 and INT8: the GEMV (int8 on int32 words too) and tl.dot paths, with 3 programs an
    SM."""
    monkeypatch.setattr(sg, "_num_sms", lambda device: sms)
    lin, w, x, g, res = gemm_operands(N, K, m, quantized, 3 * m + sms, device)
    gen = torch.Generator().manual_seed(m)
    tile = GemmConfig(block_n=32, block_k=128, num_warps=4, num_stages=3)
    shared = GemmConfig(**{**tile.as_dict(), "stream_k": 3})
    tol = dict(atol=2e-2, rtol=0)
    for what, kw in (("plain", {}), ("norm", {"norm": g}), ("swiglu", {"swiglu": True}),
                     ("swiglu + norm", {"swiglu": True, "norm": g})):
        y, y0 = (sg.skinny_gemm(x, *w, config=c, **kw) for c in (shared, tile))
        assert_close(y.double(), y0.double(), atol=tol["atol"] * y0.abs().max().item(), rtol=0, what=what)
    (y, sums), (y0, sums0) = (sg.skinny_gemm(x, *w, config=c, residual=res.clone(), row_sums=True)
                              for c in (shared, tile))
    assert_close(y.double(), y0.double(), atol=1e-2 * y0.abs().max().item(), rtol=0, what="residual")
    again = sg.skinny_gemm(x, *w, config=shared, residual=res.clone(), row_sums=True)[1]
    assert torch.equal(sums[:, :m], again[:, :m])  # the rows past M are not written
    total, total0 = sums[:, :m].sum(0), sums0[:, :m].sum(0)
    assert_close(total, total0, atol=1e-2 * total0.abs().max().item(), rtol=0, what="row sums")
    g2 = (1 + 0.1 * torch.randn(N, generator=gen)).to(device, torch.bfloat16)
    folded = fold_norm_weight(Linear(weight=(torch.randn(64, N, generator=gen) * N ** -0.5).to(device, torch.bfloat16)),
                              g2)
    fw = (quantize_linear(folded).qweight, quantize_linear(folded).scale) if quantized else (folded.weight,)
    small = GemmConfig(block_n=16, block_k=32, num_warps=4, num_stages=3)  # 4 tiles of 3 K-blocks
    y, y0 = (sg.skinny_gemm(y, *fw, config=c, norm_sums=sums) for c in (GemmConfig(**{**small.as_dict(), "stream_k": 3}),
                                                                         small))
    assert_close(y.double(), y0.double(), atol=2e-2 * y0.abs().max().item(), rtol=0, what="norm from sums")
    want = x.double() @ lin.dequantized(torch.float64).T
    assert_close(sg.skinny_gemm(x, *w, config=shared).double(), want, atol=1.6e-2 * want.abs().max().item(), rtol=0,
                 what="against fp64")


def test_stream_k_rows_do_not_depend_on_m(device, monkeypatch):
    """Exact mode: a row computed alone has the bits it has among 16 (the shares depend on N, K and the
    config only), so greedy DFlash still returns greedy decoding's tokens with a stream-K config."""
    monkeypatch.setattr(sg, "_num_sms", lambda device: 5)
    lin, _, x, _, _ = gemm_operands(N, K, 16, False, 9, device)
    cfg = GemmConfig(block_n=32, block_k=128, stream_k=2)
    for kw in ({}, {"swiglu": True}):
        rows = sg.skinny_gemm(x, lin.weight, config=cfg, exact=True, **kw)
        for m in (1, 7):
            assert torch.equal(sg.skinny_gemm(x[:m], lin.weight, config=cfg, exact=True, **kw), rows[:m])


def test_stream_k_leaves_the_argmax_head_per_tile(device, monkeypatch):
    """The LM head's argmax epilogue counts a tile per program: a stream-K config launches it per tile."""
    monkeypatch.setattr(sg, "_num_sms", lambda device: 2)
    lin, _, x, _, _ = gemm_operands(200, K, 3, False, 4, device)
    ids = [sg.skinny_gemm(x, lin.weight, argmax=True, config=GemmConfig(block_n=32, block_k=128, stream_k=s))
           for s in (0, 2)]
    assert torch.equal(ids[0], ids[1])
    assert torch.equal(ids[0], sg.skinny_gemm(x, lin.weight).argmax(dim=-1))


def test_every_unit_is_in_one_share():
    for units, programs in itertools.product((1, 7, 24, 6080), (1, 3, 132, 264)):
        bounds = [p * units // programs for p in range(programs + 1)]
        assert bounds[0] == 0 and bounds[-1] == units and bounds == sorted(bounds)


def test_memory_model_holds_the_shared_tiles_partials(monkeypatch):
    """The activation model's skinny-GEMM scratch follows the launch: fp32 partials in as many slots as
    programs share a tile under stream-K (a gate_up's tiles over its gate half), none for whole tiles."""
    from tileinfer.activations import ActivationModel
    from tileinfer.ops import gemm_configs
    from tileinfer.shapes import QWEN3_4B

    monkeypatch.setattr(sg, "_num_sms", lambda device: 132)
    model = ActivationModel(target=QWEN3_4B, drafter=None, block_size=1, num_taps=0, elem=2, int8=False,
                            backend="triton", exact=True, cuda=False, prefill_chunk=512)
    n, k = 2 * QWEN3_4B.intermediate, QWEN3_4B.hidden
    monkeypatch.setattr(gemm_configs, "get_config", lambda *a, **kw: GemmConfig(block_n=64, block_k=64))
    assert model._split_k_bytes(n, k, 16, swiglu=True) == 0
    monkeypatch.setattr(gemm_configs, "get_config", lambda *a, **kw: GemmConfig(block_n=64, block_k=64, stream_k=1))
    slots = sg.stream_k_slots(n // 2 // 64, k // 64, 132)  # 152 tiles of 40 K-blocks on 132 programs
    assert slots == 2 and model._split_k_bytes(n, k, 16, swiglu=True) == slots * 16 * n * 4


def test_stream_k_shares_are_written_where_no_tile_is_shared(monkeypatch):
    """Each tile whole in one program (slots = 1): the kernel still holds the shared-tile code, which a GPU
    compiles only on int32 counters and fp32 partials and sums (on y's bf16 it fails: `atomic_xchg does not
    support bf16`, the sums' type changing in a branch)."""
    launched = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **kw: launched.append((args, kw))
    monkeypatch.setattr(sg, "_skinny_gemm_kernel", Recorder())
    monkeypatch.setattr(sg, "_num_sms", lambda device: 2)
    x = torch.randn(1, 128).bfloat16()
    w = torch.randn(64, 128).bfloat16()
    cfg = GemmConfig(block_n=32, block_k=64, stream_k=1)  # 2 tiles of 2 K-blocks on 2 programs
    plan = sg.launch_plan(64, 128, cfg, x.device)
    assert plan.stream and plan.slots == 1
    sg.skinny_gemm(x, w, config=cfg, norm=torch.ones(128).bfloat16())
    (args, kw), = launched
    part, sums, counters = args[5:8]
    assert kw["STREAM_K"] and (part.dtype, sums.dtype, counters.dtype) == (torch.float32,) * 2 + (torch.int32,)


def test_one_k_block_a_tile_launches_per_tile():
    """Stream-K over tiles of one K-block each would share nothing (Triton 3.6 fails to compile that
    specialization for sm_90): the plan is the per-tile launch."""
    plan = sg.launch_plan(128, 64, GemmConfig(block_n=32, block_k=64, stream_k=2), torch.device("cpu"), sms=4)
    assert not plan.stream and plan.grid == (4, 1) and plan.slots == 1
