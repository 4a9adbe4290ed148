"""A layer's chain of column flows (`tileinfer.ops.flow`): the o projection feeding the gate_up across the
folded norm, the gate_up the down projection, the down projection the next layer's qkv. Each launch is a
consumer and a producer at once; the chain has the bits of its launches without flows, every counter
ends zeroed, and counts a producer left unconsumed are cleared before the next producer counts."""

import pytest
import torch

from tests.helpers import assert_settings_decode_alike, gemm_operands
from tileinfer.ops import flow as flow_module
from tileinfer.ops import skinny_gemm as sg
from tileinfer.ops.gemm_configs import GemmConfig

HIDDEN, INTER, HEADS_DIM, QKV = 600, 1100, 256, 384  # the stream two flow chunks, the SwiGLU three (both short)
CONSUMERS = {"tile": GemmConfig(block_n=32, block_k=128), "split": GemmConfig(block_n=32, block_k=128, split_k=3),
             "stream": GemmConfig(block_n=32, block_k=128, stream_k=2)}


def _layer(m, quantized, device, seed):
    """Weights of o, gate_up, down and the next qkv, the attention output and the residual stream."""
    _, o, att, _, res = gemm_operands(HIDDEN, HEADS_DIM, m, quantized, seed, device)
    _, gate_up, _, g, _ = gemm_operands(2 * INTER, HIDDEN, m, quantized, seed + 1, device)
    _, down, _, _, _ = gemm_operands(HIDDEN, INTER, m, quantized, seed + 2, device)
    _, qkv, _, _, _ = gemm_operands(QKV, HIDDEN, m, quantized, seed + 3, device)
    return o, gate_up, down, qkv, att, res, g


def _chain(weights, m, norm, cfg, flows):
    """o (+ residual) → gate_up (norm, SwiGLU) → down (+ residual) → qkv (norm), with or without the flows."""
    o, gate_up, down, qkv, att, res, g = weights
    producer = GemmConfig(block_n=32, block_k=64, split_k=2)  # the o's last arrival stores and counts a tile
    sums_out = norm == "sums"

    def norm_args(out):
        if norm == "sums":
            return out[0], dict(norm_sums=out[1])
        return out, dict(unit_norm=True) if norm == "folded" else dict(norm=g)

    def pair(name):
        return name if flows else None

    stream, kw = norm_args(sg.skinny_gemm(att, *o, config=producer, residual=res.clone(), row_sums=sums_out,
                                          flow_out=pair("gate_up")))
    act = sg.skinny_gemm(stream, *gate_up, config=cfg, swiglu=True, flow_in=pair("gate_up"), flow_out=pair("mlp"),
                         **kw)
    stream, kw = norm_args(sg.skinny_gemm(act, *down, config=cfg, residual=stream, row_sums=sums_out,
                                          flow_in=pair("mlp"), flow_out=pair("qkv")))
    return act, stream, sg.skinny_gemm(stream, *qkv, config=cfg, flow_in=pair("qkv"), **kw)


@pytest.mark.parametrize("m,quantized,norm,consumer", [
    (1, False, "folded", "tile"), (1, True, "folded", "split"), (1, True, "weight", "stream"),
    (1, False, "weight", "split"), (3, False, "sums", "split"), (3, True, "sums", "stream"),
    (3, False, "folded", "tile"), (3, True, "weight", "split")])
def test_chain_has_the_bits_of_its_launches(device, m, quantized, norm, consumer, monkeypatch):
    monkeypatch.setattr(sg, "_num_sms", lambda d: 3)
    weights = _layer(m, quantized, device, 5 * m + quantized)
    want = _chain(weights, m, norm, CONSUMERS[consumer], flows=False)
    got = _chain(weights, m, norm, CONSUMERS[consumer], flows=True)
    for name, w, g in zip(("SwiGLU", "stream", "qkv"), want, got):
        assert torch.equal(g, w), name
    for pair, columns in (("gate_up", HIDDEN), ("mlp", INTER), ("qkv", HIDDEN)):
        assert not flow_module.flow_counters(device, columns, pair).any(), f"{pair}: counters left"
    assert not set(flow_module.unconsumed(device)) & {"gate_up", "mlp", "qkv"}


def test_counts_left_unconsumed_are_cleared_before_the_next_producer(device):
    """A producer whose consumer never ran (an exception between them) leaves full counters: the next
    producer of the pair zeroes them first, so its consumer reads its own counts only."""
    o, gate_up, _, _, att, res, _ = _layer(1, False, device, 2)
    sets = flow_module.flow_counters(device, HIDDEN, "gate_up")
    sg.skinny_gemm(att, *o, residual=res.clone(), flow_out="gate_up")
    assert "gate_up" in flow_module.unconsumed(device)
    assert sets.sum().item() == HIDDEN, "each stored column counted once"
    stream = sg.skinny_gemm(att, *o, residual=res.clone(), flow_out="gate_up")
    assert sets.sum().item() == HIDDEN, "the stale counts were cleared first"
    got = sg.skinny_gemm(stream, *gate_up, swiglu=True, unit_norm=True, flow_in="gate_up")
    assert torch.equal(got, sg.skinny_gemm(stream, *gate_up, swiglu=True, unit_norm=True))
    assert not sets.any() and "gate_up" not in flow_module.unconsumed(device)


def test_each_producer_counts_into_the_next_set_of_its_ring(device):
    """Back-to-back pairs on one stream: a consumer may start while the one before it still runs, so each
    producer counts into a set of its own (the ring's next, wrapping after RING), and its consumer reads that
    set; a consumer with no producer waiting is an error, not a wait that never ends."""
    sets = flow_module.flow_counters(device, HIDDEN, "gate_up")
    taken = [flow_module.produced(device, "gate_up", HIDDEN) for _ in range(flow_module.RING + 1)]
    assert taken[0].data_ptr() == taken[-1].data_ptr() != taken[1].data_ptr()
    assert len({t.data_ptr() for t in taken}) == flow_module.RING
    assert flow_module.consumer_counters(device, "gate_up", HIDDEN).data_ptr() == taken[-1].data_ptr()
    flow_module.consumed(device, "gate_up")
    with pytest.raises(ValueError, match="'gate_up' flow consumer is launched right after its producer"):
        flow_module.consumer_counters(device, "gate_up", HIDDEN)
    with pytest.raises(ValueError, match="a flow carries at most 523776 columns, got 600000"):
        flow_module.produced(device, "gate_up", 600_000)
    assert not sets.any()


def test_residual_flow_modes(monkeypatch):
    setting = flow_module.RES_FLOW
    monkeypatch.setattr(setting, "mode", "int8")
    assert (setting.flows(False), setting.flows(True)) == (False, True)
    with pytest.raises(ValueError, match="residual flow is one of off, on, int8, got 'all'"):
        setting.set("all")


def test_engine_decodes_the_same_tokens_with_the_chain(tmp_path, monkeypatch):
    """Plain greedy and greedy DFlash (exact mode), fused layers: every flow on at once (the attention's, the
    MLP's and both residual pairs, the down projection feeding the next layer's qkv) decodes the tokens of
    none, and no pair is left unconsumed."""
    from tileinfer.ops import decode_attention

    pairs = set()
    for module in (sg, decode_attention):
        monkeypatch.setattr(module, "produced", lambda device, pair, columns, produced=module.produced: (
            pairs.add(pair), produced(device, pair, columns))[1])

    def flows(on):
        monkeypatch.setattr(flow_module.MLP_FLOW, "mode", "on" if on else "off")
        monkeypatch.setattr(flow_module.RES_FLOW, "mode", "on" if on else "off")
        monkeypatch.setattr(flow_module.O_FLOW, "on", on)
    before = set(flow_module.unconsumed(torch.device("cpu")))
    assert_settings_decode_alike(tmp_path, monkeypatch, [lambda: flows(False), lambda: flows(True)], seed=9)
    assert pairs == set(flow_module.PAIRS), f"pairs produced: {sorted(pairs)}"
    assert set(flow_module.unconsumed(torch.device("cpu"))) <= before


def test_int8_gemvs_decode_the_same_tokens_with_their_residual_flows(tmp_path, monkeypatch):
    """INT8 weights outside exact mode, fused layers: plain greedy decoding with the residual flows for INT8
    GEMVs (the gate_up and the next qkv each a consumer, their norms summed from x as it comes) gives the
    tokens of decoding without them."""
    import tileinfer
    from tests.helpers import tiny_target

    monkeypatch.setenv("TILEINFER_FUSE_NORMS", "1")
    target = tiny_target(tmp_path, dtype=torch.bfloat16, num_hidden_layers=3)
    ids = torch.randint(0, 150, (21,), generator=torch.Generator().manual_seed(4)).tolist()
    runs, pairs = [], set()
    produced = sg.produced
    monkeypatch.setattr(sg, "produced", lambda device, pair, columns: (pairs.add(pair), produced(device, pair,
                                                                                                  columns))[1])
    for mode in ("off", "int8"):
        monkeypatch.setattr(flow_module.RES_FLOW, "mode", mode)
        engine = tileinfer.load(target, weights="int8", backend="triton", exact=False)
        runs.append(engine.generate(ids, 10, stop_ids=[]).tokens)
        assert ({"gate_up", "qkv"} <= pairs) == (mode == "int8"), f"{mode}: pairs produced {sorted(pairs)}"
    assert runs[0] == runs[1]


@pytest.mark.gpu
@pytest.mark.parametrize("quantized", [False, True])
@pytest.mark.parametrize("m", [1, 16])
def test_qwen3_chain_in_a_graph(m, quantized):
    """Qwen3-4B's o → gate_up → down → qkv with the tuned configs, PDL on, captured in a CUDA graph and
    replayed: each launch's programs run beside the one before it here, and every replay has the bits of
    the chain without flows, its counters zero after."""
    from tests.test_flow import _replays_hold

    device = torch.device("cuda")
    _, o, att, _, res = gemm_operands(2560, 4096, m, quantized, m, device)
    _, gate_up, _, _, _ = gemm_operands(2 * 9728, 2560, m, quantized, m + 1, device)
    _, down, _, _, _ = gemm_operands(2560, 9728, m, quantized, m + 2, device)
    _, qkv, _, _, _ = gemm_operands(6144, 2560, m, quantized, m + 3, device)
    sums_out = m > 1
    residual = res.clone()
    out = torch.empty(m, 6144, device=device, dtype=torch.bfloat16)

    def step(flows):
        pair = (lambda name: name) if flows else (lambda name: None)
        residual.copy_(res)
        got = sg.skinny_gemm(att, *o, residual=residual, row_sums=sums_out, flow_out=pair("gate_up"))
        kw = dict(norm_sums=got[1]) if sums_out else dict(unit_norm=True)
        act = sg.skinny_gemm(residual, *gate_up, swiglu=True, flow_in=pair("gate_up"), flow_out=pair("mlp"), **kw)
        got = sg.skinny_gemm(act, *down, residual=residual, row_sums=sums_out, flow_in=pair("mlp"),
                             flow_out=pair("qkv"))
        kw = dict(norm_sums=got[1]) if sums_out else dict(unit_norm=True)
        out.copy_(sg.skinny_gemm(residual, *qkv, flow_in=pair("qkv"), **kw))

    step(False)
    want = torch.cat([residual, out], dim=1).clone()
    both = torch.empty_like(want)

    def flowed():
        step(True)
        both.copy_(torch.cat([residual, out], dim=1))
    _replays_hold(flowed, both, want)
    for pair, columns in (("gate_up", 2560), ("mlp", 9728), ("qkv", 2560)):
        assert not flow_module.flow_counters(device, columns, pair).any(), pair
