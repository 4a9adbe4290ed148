"""The MLP's column flow (`tileinfer.ops.flow`): the down projection reading the gate_up's SwiGLU columns as
they are stored has the bits of the two launches without it, whatever the consumer's launch (per tile,
split-K, stream-K; the GEMV, its int8 words and tl.dot), leaves its counters zeroed, and the engine decodes
the same tokens with it."""

import pytest
import torch

from tileinfer.errors import ConfigError
from tests.helpers import assert_settings_decode_alike, gemm_operands
from tileinfer.ops import flow as flow_module
from tileinfer.ops import skinny_gemm as sg
from tileinfer.ops.gemm_configs import GemmConfig
from tileinfer.ops.linear import (Linear, fold_norm_weight, linear_add, linear_swiglu, mlp_add, norm_linear,
                                  quantize_linear)

HIDDEN, INTER = 200, 1100  # three flow chunks of 512 SwiGLU columns, the last short
CONSUMERS = {"tile": GemmConfig(block_n=32, block_k=128), "split": GemmConfig(block_n=32, block_k=128, split_k=3),
             "stream": GemmConfig(block_n=32, block_k=128, stream_k=2)}


def _mlp(m, quantized, device, seed):
    _, gate_up, x, g, _ = gemm_operands(2 * INTER, HIDDEN, m, quantized, seed, device)
    _, down, _, _, res = gemm_operands(HIDDEN, INTER, m, quantized, seed + 1, device)
    return gate_up, down, x, g, res


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
@pytest.mark.parametrize("quantized", [False, True])
@pytest.mark.parametrize("m", [1, 3])
def test_flowed_pair_has_the_bits_of_two_launches(device, m, quantized, consumer, monkeypatch):
    monkeypatch.setattr(sg, "_num_sms", lambda d: 3)
    gate_up, down, x, g, res = _mlp(m, quantized, device, 7 * m + quantized)
    producer = GemmConfig(block_n=32, block_k=64, split_k=2)  # its last arrival stores and counts a tile
    cfg = CONSUMERS[consumer]
    want_act = sg.skinny_gemm(x, *gate_up, config=producer, swiglu=True, norm=g)
    want, want_sums = sg.skinny_gemm(want_act, *down, config=cfg, residual=res.clone(), row_sums=True)
    act = sg.skinny_gemm(x, *gate_up, config=producer, swiglu=True, norm=g, flow_out="mlp")
    got, sums = sg.skinny_gemm(act, *down, config=cfg, residual=res.clone(), row_sums=True, flow_in="mlp")
    assert torch.equal(act, want_act) and torch.equal(got, want)
    assert torch.equal(sums[:, :m], want_sums[:, :m])
    assert not flow_module.flow_counters(device, INTER, "mlp").any(), "the consumer leaves the counters zeroed"


@pytest.mark.parametrize("quantized", [False, True])
def test_mlp_add_flows_with_the_bits_of_its_two_calls(device, quantized, monkeypatch):
    """`mlp_add` with the flow on and off, the norm folded into the gate_up (Σx² from the row sums a residual
    GEMM left, or summed in the GEMV) or not, against `norm_linear` then `linear_add`."""
    gen = torch.Generator().manual_seed(3)
    norm = (1 + 0.1 * torch.randn(HIDDEN, generator=gen)).to(device, torch.bfloat16)
    gate_up = Linear(weight=(torch.randn(2 * INTER, HIDDEN, generator=gen) * HIDDEN ** -0.5).to(device, torch.bfloat16))
    down = Linear(weight=(torch.randn(HIDDEN, INTER, generator=gen) * INTER ** -0.5).to(device, torch.bfloat16))
    folded = False
    if quantized:
        gate_up, down = quantize_linear(gate_up), quantize_linear(down)
    else:
        gate_up, folded = fold_norm_weight(gate_up, norm), True
        norm = torch.ones_like(norm)
    for m in (1, 16):
        stream = (torch.randn(m, HIDDEN, generator=gen) * 3).to(device, torch.bfloat16)
        sums = linear_add(torch.randn(m, INTER, generator=gen).to(device, torch.bfloat16), down,
                          torch.zeros_like(stream), row_sums=True)[1] if m > 1 and folded else None
        want = stream.clone()
        want, want_sums = linear_add(norm_linear(want, norm, 1e-6, gate_up, swiglu=True, folded=folded, sums=sums),
                                     down, want, row_sums=True)
        normed = (stream.float() * torch.rsqrt(stream.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(stream.dtype)
        plain = linear_add(linear_swiglu(normed, gate_up), down, stream.clone())
        for on in (False, True):
            monkeypatch.setattr(flow_module.MLP_FLOW, "mode", "on" if on else "off")
            residual = stream.clone()
            got, got_sums = mlp_add(residual, gate_up, down, residual, row_sums=True, norm=norm, eps=1e-6,
                                    folded=folded, sums=sums)
            assert torch.equal(got, want), f"m={m} flow={on}"
            assert torch.equal(got_sums[:, :m], want_sums[:, :m]), f"m={m} flow={on}: row sums"
            residual = stream.clone()
            assert torch.equal(mlp_add(normed, gate_up, down, residual), plain), f"m={m} flow={on}: no norm"


def test_flow_misuse_is_named(device):
    gate_up, down, x, g, res = _mlp(1, False, device, 1)
    with pytest.raises(AssertionError, match="argmax"):
        sg.skinny_gemm(x, *gate_up, argmax=True, flow_out="mlp")
    with pytest.raises(ValueError, match="a flow's pair is one of mlp, o, gate_up, qkv, got 'up'"):
        sg.skinny_gemm(x, *gate_up, swiglu=True, flow_out="up")
    with pytest.raises(AssertionError, match="two pairs, got 'mlp' twice"):
        sg.skinny_gemm(x, *gate_up, swiglu=True, flow_in="mlp", flow_out="mlp")
    act = sg.skinny_gemm(x, *gate_up, swiglu=True, flow_out="mlp")
    sg.skinny_gemm(act, *down, residual=res.clone(), flow_in="mlp")
    with pytest.raises(ValueError, match="'mlp' flow consumer is launched right after its producer, and none"):
        sg.skinny_gemm(act, *down, residual=res.clone(), flow_in="mlp")


def test_flow_modes(monkeypatch):
    """"int8" flows INT8 GEMVs only; a mode not known is named, from the environment or set."""
    setting = flow_module.MLP_FLOW
    assert [setting.flows(g) for g in (False, True)] == [setting.mode == "on", setting.mode in ("on", "int8")]
    monkeypatch.setattr(setting, "mode", "int8")
    assert (setting.flows(False), setting.flows(True)) == (False, True)
    with pytest.raises(ValueError, match="one of off, on, int8"):
        setting.set("bf16")
    assert setting.label() == "int8"
    monkeypatch.setenv("TILEINFER_MLP_FLOW", "yes")
    with pytest.raises(ConfigError, match="TILEINFER_MLP_FLOW must be one of off, on, int8, got 'yes'"):
        type(setting)("TILEINFER_MLP_FLOW", "int8", "MLP flow")


def test_engine_decodes_the_same_tokens_with_the_flows(tmp_path, monkeypatch):
    """Plain greedy and greedy DFlash (exact mode), fused layers: the same tokens with the MLP's and the
    attention's flows as without, and DFlash the same as plain."""
    def flows(mlp, o):
        monkeypatch.setattr(flow_module.MLP_FLOW, "mode", mlp)
        monkeypatch.setattr(flow_module.O_FLOW, "on", o)
    assert_settings_decode_alike(tmp_path, monkeypatch, [
        lambda: flows("off", False), lambda: flows("on", False), lambda: flows("off", True),
        lambda: flows("on", True)], seed=8)


def test_a_flow_end_that_is_not_ours_is_refused():
    x = torch.ones(20, 8, dtype=torch.bfloat16)  # 20 rows: not a skinny GEMM
    lin = Linear(weight=torch.ones(4, 8, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="linear_add: a flow's ends must be our skinny GEMMs"):
        linear_add(x, lin, torch.zeros(20, 4, dtype=torch.bfloat16), flow_in="o")
    with pytest.raises(ValueError, match="linear_add: a flow's ends must be our skinny GEMMs"):
        linear_add(x, lin, torch.zeros(20, 4, dtype=torch.bfloat16), flow_out="gate_up")
    with pytest.raises(ValueError, match="norm_linear: a flow's ends must be our skinny GEMMs"):
        norm_linear(torch.ones(20, 4, dtype=torch.bfloat16), torch.ones(4, dtype=torch.bfloat16), 1e-6,
                    Linear(weight=torch.ones(8, 4, dtype=torch.bfloat16)), flow_in="qkv")


@pytest.mark.gpu
@pytest.mark.parametrize("quantized", [False, True])
@pytest.mark.parametrize("m", [1, 16])
def test_qwen3_mlp_flows_in_a_graph(m, quantized):
    """Qwen3-4B's MLP (2560 → 2 × 9728 → 2560) with the tuned configs, PDL on, captured in a CUDA graph and
    replayed: every replay has the bits of the pair without the flow (the consumer's programs really run
    beside the producer's here, and the counters must be zero again for the next replay)."""
    device = torch.device("cuda")
    _, gate_up, x, g, _ = gemm_operands(2 * 9728, 2560, m, quantized, m, device)
    _, down, _, _, res = gemm_operands(2560, 9728, m, quantized, m + 1, device)
    want_act = sg.skinny_gemm(x, *gate_up, swiglu=True, norm=g)
    want = sg.skinny_gemm(want_act, *down, residual=res.clone())
    residual = res.clone()

    def step():
        residual.copy_(res)
        act = sg.skinny_gemm(x, *gate_up, swiglu=True, norm=g, flow_out="mlp")
        sg.skinny_gemm(act, *down, residual=residual, flow_in="mlp")
    _replays_hold(step, residual, want)
    assert not flow_module.flow_counters(device, 9728, "mlp").any()


@pytest.mark.gpu
@pytest.mark.parametrize("quantized", [False, True])
def test_back_to_back_pairs_in_a_graph_read_their_own_counts(quantized):
    """Eight small MLPs, each a flowed pair, back to back in one CUDA graph (PDL on): a consumer starts once its
    producer's programs have, when the consumer before it may not have cleared its counters yet, and must
    still read only its own producer's counts, replay after replay."""
    device = torch.device("cuda")
    mlps = [_mlp(1, quantized, device, 40 + 2 * i) for i in range(8)]
    want = torch.cat([sg.skinny_gemm(sg.skinny_gemm(x, *gate_up, swiglu=True), *down, residual=res.clone())
                      for gate_up, down, x, _, res in mlps])
    start = torch.cat([res for *_, res in mlps])
    streams = start.clone()

    def step():
        for (gate_up, down, x, _, _), stream in zip(mlps, streams.split(1)):
            act = sg.skinny_gemm(x, *gate_up, swiglu=True, flow_out="mlp")
            sg.skinny_gemm(act, *down, residual=stream, flow_in="mlp")
    step()  # compiles
    assert torch.equal(streams, want)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for replay in range(50):
        streams.copy_(start)
        graph.replay()
        torch.cuda.synchronize()
        wrong = sorted(set((streams != want).nonzero()[:, 0].tolist()))
        assert not wrong, f"replay {replay}: pairs {wrong} read another producer's counts"
    assert not flow_module.flow_counters(device, INTER, "mlp").any()


@pytest.mark.parametrize("t,tokens_per_program", [(1, None), (5, 2), (16, 4)])
def test_attention_flows_into_the_o_projection(device, t, tokens_per_program, monkeypatch):
    """The decode attention counting its merged heads' columns (row blocks count their rows), the o
    projection reading them as they come: the bits of the two launches without, counters left zeroed."""
    from tileinfer.ops.decode_attention import decode_attention

    heads, hd = 8, 64
    q, k_cache, v_cache, kv_len, gen = _attention_inputs(t, heads, 2, hd, 300, device)
    o_proj = Linear(weight=(torch.randn(96, heads * hd, generator=gen) * (heads * hd) ** -0.5).to(device, torch.bfloat16))
    res = torch.randn(t, 96, generator=gen).to(device, torch.bfloat16)
    want_out = decode_attention(q, k_cache, v_cache, kv_len, num_splits=3, tokens_per_program=tokens_per_program)
    want = linear_add(want_out.view(t, heads * hd), o_proj, res.clone())
    out = decode_attention(q, k_cache, v_cache, kv_len, num_splits=3, tokens_per_program=tokens_per_program, flow=True)
    got = linear_add(out.view(t, heads * hd), o_proj, res.clone(), flow_in="o")
    assert torch.equal(out, want_out) and torch.equal(got, want)
    assert not flow_module.flow_counters(device, heads * hd, "o").any(), "the o projection leaves the counters zeroed"



@pytest.mark.gpu
@pytest.mark.parametrize("t", [1, 16])
def test_qwen3_attention_flows_into_o_in_a_graph(t):
    """Qwen3-4B's heads at 1k and its o projection (2560 × 4096) with the tuned configs, PDL on, the attention
    counting its merges for the o projection, captured in a CUDA graph and replayed: the bits of the two
    launches without the flow every time, the counters zero after."""
    from tileinfer.ops.attention import SplitPolicy
    from tileinfer.ops.decode_attention import decode_attention
    from tileinfer.ops.tuning import section

    device = torch.device("cuda")
    heads, hd, context = 32, 128, 1024
    q, k_cache, v_cache, kv_len, _ = _attention_inputs(t, heads, 8, hd, context, device)
    policy = SplitPolicy.from_section(section(device, "decode_attention"))
    kw = dict(num_splits=policy.num_splits(context + t, t), tokens_per_program=policy.per_program(context + t, t))
    _, o_w, _, _, res = gemm_operands(2560, heads * hd, t, False, t, device)
    o_proj = Linear(weight=o_w[0])
    want = linear_add(decode_attention(q, k_cache, v_cache, kv_len, **kw).view(t, -1), o_proj, res.clone())
    residual = res.clone()

    def step():
        residual.copy_(res)
        out = decode_attention(q, k_cache, v_cache, kv_len, flow=True, **kw)
        linear_add(out.view(t, -1), o_proj, residual, flow_in="o")
    _replays_hold(step, residual, want)
    assert not flow_module.flow_counters(device, heads * hd, "o").any()


def _attention_inputs(t, heads, kv_heads, hd, context, device):
    """A step's q [t, heads, hd] over K/V caches of context + t positions (BF16), its KV length on the device,
    and the generator they came from (seeded by t)."""
    gen = torch.Generator().manual_seed(t)
    q = torch.randn(t, heads, hd, generator=gen).to(device, torch.bfloat16)
    k_cache, v_cache = (torch.randn(context + t, kv_heads, hd, generator=gen).to(device, torch.bfloat16)
                        for _ in range(2))
    return q, k_cache, v_cache, torch.tensor([context + t], dtype=torch.int32, device=device), gen


def _replays_hold(step, residual, want, replays=20):
    """`step` eagerly, then captured in a CUDA graph and replayed: `residual` equals `want` every time."""
    step()  # compiles
    assert torch.equal(residual, want)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for replay in range(replays):
        residual.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(residual, want), f"replay {replay}"
