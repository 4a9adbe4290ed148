"""RMSNorm folded into the projection after it and the residual add into the projection before it
(`norm_linear`, `linear_add`, `Ops.fuse_norms`): against the unfused ops, rows independent of M in exact
mode, fused one-token layers against unfused ones, and greedy DFlash still equal to greedy decoding with
the norms' weights folded into the projections."""

import pytest
import torch

import tileinfer
from tests.conftest import assert_close
from tests.helpers import assert_settings_decode_alike, tiny_pair
from tests.test_exact import assert_dflash_equals_greedy, assert_rows_equal, fuzz_cases, rows_alone
from tileinfer.errors import ConfigError
from tileinfer.ops import decode_attention as decode_attention_module
from tileinfer.ops.backend import AttentionContext, Ops
from tileinfer.ops.gemm_configs import GemmConfig
from tileinfer.ops.linear import Linear, fold_norm_weight, linear, linear_add, norm_linear, quantize_linear
from tileinfer.ops import skinny_gemm as skinny_gemm_module
from tileinfer.ops.skinny_gemm import skinny_gemm, skinny_gemm_ref

EPS = 1e-6


def _inputs(device, m, n, k, seed, dtype=torch.bfloat16, quantized=False):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, k, generator=g) * 3).to(device, dtype)  # an un-normed residual stream
    w = (torch.rand(k, generator=g) + 0.5).to(device, dtype)
    lin = Linear(weight=(torch.randn(n, k, generator=g) / k**0.5).to(device, dtype))
    return x, w, quantize_linear(lin) if quantized else lin


def _unfused(x, w, lin, swiglu=False):
    """rms_norm then the projection (then SwiGLU) in float64: the definition, without roundings."""
    xd = x.double()
    xn = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + EPS) * w.double()
    y = xn @ lin.dequantized(torch.float64).T
    if swiglu:
        gate, up = y.chunk(2, dim=-1)
        y = torch.nn.functional.silu(gate) * up
    return y


@pytest.mark.parametrize("quantized", [False, True])
@pytest.mark.parametrize("swiglu", [False, True])
@pytest.mark.parametrize("m", [1, 3, 16, 40])
def test_norm_linear_equals_rms_norm_then_linear(device, m, swiglu, quantized):
    x, w, lin = _inputs(device, m, 74, 130, seed=m, quantized=quantized)
    y = norm_linear(x, w, EPS, lin, swiglu=swiglu)
    ref = _unfused(x, w, lin, swiglu)
    assert y.shape == ref.shape and y.dtype == x.dtype
    # bf16 outputs, and SwiGLU's gate and up rounded to bf16 before their product: the unfused kernels'
    # error (under the interpreter, whose bf16 casts truncate, ~1.7 % of the largest output with SwiGLU)
    assert_close(y, ref, atol=(2.5e-2 if swiglu else 1.6e-2) * ref.abs().max().item(), rtol=0, what=f"norm_linear M={m} swiglu={swiglu}")


@pytest.mark.parametrize("split_k", [2, 3])
@pytest.mark.parametrize("m", [1, 5])
def test_norm_statistics_add_up_over_split_k(device, m, split_k):
    """Each K split sums the squares of its own slice; the last program adds them before the 1/RMS."""
    x, w, lin = _inputs(device, m, 40, 320, seed=10 + split_k)
    cfg = GemmConfig(block_n=16, block_k=64, split_k=split_k, num_warps=4, num_stages=2)
    for swiglu in (False, True):
        y = skinny_gemm(x, lin.weight, config=cfg, swiglu=swiglu, norm=w, eps=EPS)
        ref = _unfused(x, w, lin, swiglu)
        assert_close(y, ref, atol=2.5e-2 * ref.abs().max().item(), rtol=0, what=f"split_k={split_k} swiglu={swiglu}")


@pytest.mark.parametrize("quantized", [False, True])
@pytest.mark.parametrize("m", [1, 4, 16, 33])
def test_linear_add_updates_the_residual_in_place(device, m, quantized):
    x, _, lin = _inputs(device, m, 48, 96, seed=20 + m, quantized=quantized)
    residual = torch.randn(m, 48, generator=torch.Generator().manual_seed(m)).to(device, torch.bfloat16)
    expected = (linear(x, lin).float() + residual.float()).to(torch.bfloat16)  # the same product, added apart
    out = linear_add(x, lin, residual)
    assert out is residual
    # one bf16 step at most: the interpreter rounds exact ties of the sum the other way (a GPU rounds as torch)
    assert_close(out, expected, atol=0, rtol=2**-7, what=f"linear_add M={m}")


@pytest.mark.parametrize("quantized", [False, True])
def test_fused_rows_do_not_depend_on_m(device, quantized):
    x, w, lin = _inputs(device, 16, 64, 200, seed=3, quantized=quantized)
    for swiglu in (False, True):
        alone = rows_alone(lambda r: norm_linear(r, w, EPS, lin, exact=True, swiglu=swiglu), x)
        for m in (2, 9, 16):
            assert_rows_equal(norm_linear(x[:m], w, EPS, lin, exact=True, swiglu=swiglu), alone[:m],
                              f"norm_linear swiglu={swiglu} M={m}")
    residual = torch.randn(16, 64, generator=torch.Generator().manual_seed(4)).to(device, torch.bfloat16)
    alone = torch.cat([linear_add(x[i:i + 1], lin, residual[i:i + 1].clone(), exact=True) for i in range(16)])
    assert_rows_equal(linear_add(x, lin, residual.clone(), exact=True), alone, "linear_add")


@pytest.mark.parametrize("n,k", [(192, 64), (74, 130)])
def test_folded_rows_do_not_depend_on_m(device, n, k):
    """A norm whose weight is folded into W (x goes to the tensor cores as it is): on the H200 the 192x64
    gate_up's M = 16 rows once differed from the same rows computed alone."""
    x, w, lin = _inputs(device, 16, n, k, seed=n)
    folded = fold_norm_weight(lin, w)
    ones = torch.ones_like(w)
    for swiglu in (False, True):
        alone = rows_alone(lambda r: norm_linear(r, ones, EPS, folded, exact=True, swiglu=swiglu, folded=True), x)
        for m in (2, 13, 16):
            assert_rows_equal(norm_linear(x[:m], ones, EPS, folded, exact=True, swiglu=swiglu, folded=True),
                              alone[:m], f"folded norm_linear {n}x{k} swiglu={swiglu} M={m}")


def test_fuse_norms_setting():
    assert Ops("torch", fuse_norms=True).fuse_norms and not Ops("torch", fuse_norms=False).fuse_norms


def test_fuse_norms_environment(monkeypatch):
    monkeypatch.delenv("TILEINFER_FUSE_NORMS", raising=False)
    assert Ops("torch").fuse_norms
    monkeypatch.setenv("TILEINFER_FUSE_NORMS", "0")
    assert not Ops("torch").fuse_norms
    monkeypatch.setenv("TILEINFER_FUSE_NORMS", "yes")
    with pytest.raises(ConfigError, match="TILEINFER_FUSE_NORMS must be 1 or 0"):
        Ops("torch")


def test_step_kv_setting(monkeypatch):
    monkeypatch.delenv("TILEINFER_STEP_KV", raising=False)
    ops = Ops("triton", fuse_norms=True)
    assert not ops.step_kv and ops.step_kv_decode and ops.step_kv_label == "decode", \
        "one-token steps by default (measured slower per DFlash step)"
    assert Ops("triton", fuse_norms=True, step_kv=True).step_kv_label == "on"
    assert Ops("triton", fuse_norms=True, step_kv=False).step_kv_label == "off"
    assert Ops("triton", fuse_norms=False, step_kv=True).step_kv, "unfused layers take it too"
    assert Ops("torch", fuse_norms=True, step_kv=True).step_kv_label == "off", "the reference backend keeps two ops"
    assert Ops("torch", fuse_norms=True).step_kv_label == "off"
    for env, label in (("1", "on"), ("0", "off"), ("decode", "decode")):
        monkeypatch.setenv("TILEINFER_STEP_KV", env)
        assert Ops("triton", fuse_norms=True).step_kv_label == label
    monkeypatch.setenv("TILEINFER_STEP_KV", "on")
    with pytest.raises(ConfigError, match="TILEINFER_STEP_KV must be 1, 0 or decode"):
        Ops("triton", fuse_norms=True)


@pytest.mark.parametrize("mode,t,exact,fused", [
    ("decode", 1, False, True), ("decode", 16, False, False), ("decode", 1, True, False),
    ("on", 16, True, True), ("off", 1, False, False)])
def test_step_kv_mode_picks_the_launch(monkeypatch, mode, t, exact, fused):
    """`decode` takes the norms, RoPE and KV write into the attention's launch for one-token steps outside
    exact mode only; `on` for every step, `off` for none."""
    monkeypatch.setenv("TILEINFER_STEP_KV", {"on": "1", "off": "0"}.get(mode, mode))
    ops = Ops("triton", fuse_norms=True, exact=exact)
    calls, ahead = [], torch.zeros(8, 16)

    def decode(*a, step_kv=None, l2_ahead=None, **kw):
        assert l2_ahead is ahead, "the next projection's weight reaches the attention's launch"
        calls.append("fused" if step_kv is not None else "attention")

    ops._decode = decode
    ops.qk_norm_rope = lambda q, *a, **kw: (calls.append("norm_rope"), (q, None))[1]
    q = torch.zeros(t, 4, 16)
    k = torch.zeros(t, 2, 16)
    ctx = AttentionContext(40, torch.tensor([40]), causal=True)
    ops.step_attention(q, k, k, torch.ones(16), torch.ones(16), torch.zeros(64, 16), torch.arange(t), 1e-6,
                       torch.zeros(64, 2, 16), torch.zeros(64, 2, 16), ctx, ahead=ahead)
    assert calls == (["fused"] if fused else ["norm_rope", "attention"])


def test_step_kv_decodes_as_two_launches_do(tmp_path, monkeypatch):
    """Greedy DFlash in exact mode with the Q/K norms, RoPE and KV write inside the attention's launch
    and with them in their own: the same tokens, and K/V caches that agree."""
    monkeypatch.setenv("TILEINFER_FUSE_NORMS", "1")
    target, draft = tiny_pair(tmp_path, dtype=torch.bfloat16, num_layers=1, num_hidden_layers=2)
    ids = torch.randint(0, 150, (21,), generator=torch.Generator().manual_seed(3)).tolist()
    runs = {}
    for step_kv in ("0", "1"):
        monkeypatch.setenv("TILEINFER_STEP_KV", step_kv)
        engine = tileinfer.load(target, draft=draft, weights="bf16", backend="triton", exact=True)
        assert engine.ops.step_kv == (step_kv == "1")
        tokens = engine.generate(ids, 12, stop_ids=[]).tokens
        n = len(ids) + len(tokens) - 1
        runs[step_kv] = tokens, engine.cache.k[:, :n].float(), engine.cache.v[:, :n].float()
    assert runs["1"][0] == runs["0"][0]
    assert_close(runs["1"][1], runs["0"][1], atol=2e-2, rtol=2e-2, what="K cache")
    assert torch.equal(runs["1"][2], runs["0"][2]), "V goes into the cache as projected"


def test_fused_layers_for_steps_of_up_to_16_tokens():
    ops = Ops("triton", fuse_norms=True)
    assert ops.fused_layer(1) and ops.fused_layer(16) and not ops.fused_layer(17)
    assert ops.gemv(1) and not ops.gemv(2)
    ops.exact = True
    assert ops.fused_layer(1) and not ops.gemv(1), "exact mode runs every step on the tensor-core path"
    assert not Ops("triton", fuse_norms=False).fused_layer(1)


@torch.inference_mode()
def _token_by_token_logits(engine, ids):
    """Logits of each position, the prompt fed one token per forward: every layer runs on a single token."""
    engine._ensure_caches(len(ids) + 2 * engine.block_max)
    rows = []
    for i, token in enumerate(ids):
        tokens = torch.tensor([token], dtype=torch.int64, device=engine.device)
        positions = torch.tensor([i], dtype=torch.int64, device=engine.device)
        h, residual = engine.target.forward(tokens, positions, engine.cache, AttentionContext(i + 1, None))
        rows.append(engine.target.logits(engine.target.final_norm(h, residual)).float())
    return torch.cat(rows)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_fused_layers_match_unfused_logits(tmp_path, monkeypatch, backend):
    """Fused one-token layers, and the folded norms' weights in a whole-prompt prefill, against unfused."""
    target, draft = tiny_pair(tmp_path, dtype=torch.bfloat16, num_layers=1, num_hidden_layers=2)
    ids = torch.randint(0, 150, (9,), generator=torch.Generator().manual_seed(1)).tolist()
    logits = {}
    for fuse in ("0", "1"):
        monkeypatch.setenv("TILEINFER_FUSE_NORMS", fuse)
        engine = tileinfer.load(target, draft=draft, weights="bf16", backend=backend, exact=False)
        assert engine.ops.fused_layer(1) == (fuse == "1")
        logits[fuse] = engine.prompt_logits(ids), _token_by_token_logits(engine, ids)
    for i, what in enumerate(("prefill", "token by token")):
        scale = logits["0"][i].abs().max().item()
        assert_close(logits["1"][i], logits["0"][i], atol=5e-2 * scale, rtol=0,
                     what=f"{backend} {what}: fused vs unfused logits")


def test_l2_ahead_decodes_the_same_tokens(tmp_path, monkeypatch):
    """Greedy DFlash (exact mode) and plain greedy decoding with each decode attention asking L2 for its
    layer's o_proj weight (`set_l2_ahead`; bulk requests on an sm_90 GPU, none elsewhere): the same tokens
    as without, and DFlash the same as plain."""
    assert_settings_decode_alike(tmp_path, monkeypatch, [
        lambda on=on: monkeypatch.setattr(decode_attention_module.L2_AHEAD, "on", on) for on in (False, True)], seed=5)


@pytest.mark.parametrize("weights", ["bf16", "int8"])
def test_fused_layers_dflash_equals_greedy(tmp_path, monkeypatch, weights):
    monkeypatch.setenv("TILEINFER_FUSE_NORMS", "1")
    target, draft = tiny_pair(tmp_path, dtype=torch.bfloat16, num_layers=1, num_hidden_layers=2)
    engine = tileinfer.load(target, draft=draft, weights=weights, backend="triton", exact=True)
    assert engine.ops.fuse_norms
    cases = list(fuzz_cases(31, 2 if engine.device.type == "cpu" else 30, 150, 24, 14, 16))
    assert_dflash_equals_greedy(engine, cases, f"fused triton {weights}")


@pytest.mark.gpu
@pytest.mark.parametrize("weights", ["bf16", "int8"])
@pytest.mark.parametrize("name,n,k", [("qkv", 6144, 2560), ("o", 2560, 4096), ("gate_up", 19456, 2560),
                                      ("down", 2560, 9728)])
def test_fused_qwen3_shapes(weights, name, n, k):
    """Qwen3-4B's linears with their tuned configs (split-K on o and down), folded as the fused layer runs
    them (the norm's weight applied in the loop, or carried by W): against the definition, and rows
    independent of M in exact mode."""
    g = torch.Generator(device="cuda").manual_seed(n + k)
    base = Linear(weight=(torch.randn(n, k, generator=g, device="cuda") * 0.02).bfloat16())
    lin = quantize_linear(base) if weights == "int8" else base
    x = (torch.randn(16, k, generator=g, device="cuda") * 3).bfloat16()
    if name in ("qkv", "gate_up"):
        w = (torch.rand(k, generator=g, device="cuda") + 0.5).bfloat16()
        folded = fold_norm_weight(base, w)
        folded = quantize_linear(folded) if weights == "int8" else folded
        ones = torch.ones_like(w)
        swiglu = name == "gate_up"
        ref = _unfused(x, w, lin, swiglu)
        tol = 2.5e-2 if swiglu else 1.6e-2
        for norm, weight, fold in ((w, lin, False), (ones, folded, True)):
            for m in (1, 16):
                assert_close(norm_linear(x[:m], norm, EPS, weight, swiglu=swiglu, folded=fold), ref[:m],
                             atol=(tol + 0.5e-2 * fold) * ref.abs().max().item(), rtol=0,
                             what=f"{weights} {name} M={m} folded={fold}")
            alone = rows_alone(lambda r: norm_linear(r, norm, EPS, weight, exact=True, swiglu=swiglu, folded=fold), x)
            assert_rows_equal(norm_linear(x, norm, EPS, weight, exact=True, swiglu=swiglu, folded=fold), alone,
                              f"{weights} {name} folded={fold}")
    else:
        residual = torch.randn(16, n, generator=g, device="cuda").bfloat16()
        for exact in (False, True):
            expected = (linear(x, lin, exact=exact).float() + residual.float()).bfloat16()
            assert torch.equal(linear_add(x, lin, residual.clone(), exact=exact), expected), f"{weights} {name}"
        alone = torch.cat([linear_add(x[i:i + 1], lin, residual[i:i + 1].clone(), exact=True) for i in range(16)])
        assert_rows_equal(linear_add(x, lin, residual.clone(), exact=True), alone, f"{weights} {name} linear_add")


@pytest.mark.parametrize("quantized", [False, True])
@pytest.mark.parametrize("swiglu", [False, True])
@pytest.mark.parametrize("m", [1, 16, 40])
def test_folded_norm_weight_equals_rms_norm_then_linear(device, m, swiglu, quantized):
    """The norm's weight carried by W's columns: x reaches the tensor cores as it is, only 1/RMS is applied."""
    x, w, lin = _inputs(device, m, 74, 130, seed=50 + m)
    folded = fold_norm_weight(lin, w)
    if quantized:
        lin, folded = quantize_linear(lin), quantize_linear(folded)
    ones = torch.ones_like(w)
    y = norm_linear(x, ones, EPS, folded, swiglu=swiglu, folded=True)
    ref = _unfused(x, w, lin, swiglu)
    assert_close(y, ref, atol=(3e-2 if swiglu else 2e-2) * ref.abs().max().item(), rtol=0,
                 what=f"folded norm_linear M={m} swiglu={swiglu}")
    alone = rows_alone(lambda r: norm_linear(r, ones, EPS, folded, exact=True, swiglu=swiglu, folded=True), x[:16])
    assert_rows_equal(norm_linear(x[:16], ones, EPS, folded, exact=True, swiglu=swiglu, folded=True), alone,
                      f"folded rows M={min(m, 16)}")


def test_fold_rejects_what_it_cannot_fold():
    x, w, lin = _inputs("cpu", 1, 8, 16, seed=0)
    with pytest.raises(ValueError, match="before quantizing"):
        fold_norm_weight(quantize_linear(lin), w)
    with pytest.raises(ValueError, match="does not match 16 input features"):
        fold_norm_weight(lin, w[:8])


def test_fused_engine_folds_the_norms_the_drafter_keeps_its_input_norm(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEINFER_FUSE_NORMS", "1")
    target, draft = tiny_pair(tmp_path, dtype=torch.bfloat16, num_layers=1, num_hidden_layers=2)
    engine = tileinfer.load(target, draft=draft, weights="bf16", backend="triton")
    for layer in engine.target.layers:
        assert layer.input_norm_folded and layer.post_norm_folded
        assert torch.equal(layer.input_layernorm, torch.ones_like(layer.input_layernorm))
    for layer in engine.drafter.layers:  # its K/V rows of qkv also project the context, under another norm
        assert not layer.input_norm_folded and layer.post_norm_folded
    monkeypatch.setenv("TILEINFER_FUSE_NORMS", "0")
    plain = tileinfer.load(target, draft=draft, weights="bf16", backend="triton")
    assert not any(layer.input_norm_folded or layer.post_norm_folded for layer in plain.target.layers)


@pytest.mark.parametrize("m", [1, 5, 16])
@pytest.mark.parametrize("split_k", [1, 3])
@pytest.mark.parametrize("swiglu", [False, True])
def test_sums_read_early_give_the_same_bits(device, m, split_k, swiglu, monkeypatch):
    """A norm from another kernel's row sums read right after the wait (`set_early_epilogue`) gives the bits
    it gives read after the K loop: over 700 tiles of sums (several chunks), at M = 1, a few rows and 16,
    with and without split-K and SwiGLU, in both modes."""
    g = torch.Generator().manual_seed(7 * m + split_k)
    n, k, tiles = 48, 96, 700
    x = torch.randn(m, k, generator=g).to(device, torch.bfloat16)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(device, torch.bfloat16)
    sums = (torch.rand(tiles, 16, generator=g) * k / tiles * 2).to(device)
    cfg = GemmConfig(block_n=16, block_k=32, split_k=split_k, num_warps=4, num_stages=2)
    for exact in (False, True):
        outs = []
        for early in (False, True):
            monkeypatch.setattr(skinny_gemm_module.EARLY_EPILOGUE, "on", early)
            outs.append(skinny_gemm(x, w, norm_sums=sums, config=cfg, exact=exact, eps=EPS, swiglu=swiglu))
        assert torch.equal(outs[0], outs[1]), f"M={m} split {split_k} exact={exact}"
        rows = torch.rsqrt(sums.sum(0)[:m] / k + EPS)
        product = x.float() @ w.float().T
        if swiglu:
            gate, up = (product * rows[:, None]).to(torch.bfloat16).float().chunk(2, dim=-1)
            ref = (torch.nn.functional.silu(gate) * up).to(torch.bfloat16)
        else:
            ref = (product * rows[:, None]).to(torch.bfloat16)
        assert_close(outs[1], ref, atol=2e-2 * ref.abs().max().item(), rtol=0, what=f"sums read early M={m}")


@pytest.mark.parametrize("m", [1, 5, 16])
@pytest.mark.parametrize("split_k", [1, 3])
@pytest.mark.parametrize("int8", [False, True], ids=["bf16", "int8"])
def test_residual_read_early_gives_the_same_bits(device, m, split_k, int8, monkeypatch):
    """The residual stream's rows read right after the wait (`set_early_epilogue`): the same new stream and
    row sums as read after the K loop, with split-K (every split reads them, the last one adds), int8
    weights (the GEMV's words path at M = 1) and in both modes."""
    g = torch.Generator().manual_seed(11 * m + split_k)
    n, k = 72, 96
    x = torch.randn(m, k, generator=g).to(device, torch.bfloat16)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(device, torch.bfloat16)
    scale = None
    if int8:
        lin = quantize_linear(Linear(weight=w))
        w, scale = lin.qweight, lin.scale
    residual = (torch.randn(m, n, generator=g) * 3).to(device, torch.bfloat16)
    cfg = GemmConfig(block_n=16, block_k=32, split_k=split_k, num_warps=4, num_stages=2)
    for exact in (False, True):
        outs = []
        for early in (False, True):
            monkeypatch.setattr(skinny_gemm_module.EARLY_EPILOGUE, "on", early)
            outs.append(skinny_gemm(x, w, scale, residual=residual.clone(), config=cfg, exact=exact, row_sums=True))
        # the sums' columns past the rows (all but the first in a GEMV) are never written
        assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1][:, :m], outs[1][1][:, :m]), \
            f"M={m} split {split_k} exact={exact}"
        ref = (skinny_gemm_ref(x, w, scale).float() + residual.float()).to(torch.bfloat16)
        assert_close(outs[1][0], ref, atol=2e-2 * ref.abs().max().item(), rtol=0, what=f"early residual M={m}")


@pytest.mark.parametrize("m", [1, 5, 16])
@pytest.mark.parametrize("split_k", [1, 3])
def test_residual_gemm_writes_the_next_norms_sums(device, m, split_k):
    """o_proj / down_proj with the residual add write each tile's Σ of the new stream's squares; a folded
    norm after them reads those sums instead of summing x² itself: rms_norm(stream) @ W.T."""
    g = torch.Generator().manual_seed(m + split_k)
    n, k = 72, 96
    x = torch.randn(m, k, generator=g).to(device, torch.bfloat16)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(device, torch.bfloat16)
    residual = (torch.randn(m, n, generator=g) * 3).to(device, torch.bfloat16)
    cfg = GemmConfig(block_n=16, block_k=32, split_k=split_k, num_warps=4, num_stages=2)
    for exact in (False, True):
        stream, sums = skinny_gemm(x, w, residual=residual.clone(), config=cfg, exact=exact, row_sums=True)
        assert sums.shape == (n // 16 + (n % 16 > 0), 16)
        assert torch.equal(stream, skinny_gemm(x, w, residual=residual.clone(), config=cfg, exact=exact))
        rows = 16 if exact or m > 1 else 1
        assert_close(sums[:, :min(m, rows)].sum(0), stream.float().pow(2).sum(1)[:rows], atol=1e-3, rtol=1e-5,
                     what=f"row sums M={m} split {split_k} exact={exact}")
        norm_w = (torch.rand(n, generator=g) + 0.5).to(device, torch.bfloat16)
        lin = Linear(weight=(torch.randn(40, n, generator=g) / n**0.5).to(device, torch.bfloat16))
        folded = fold_norm_weight(lin, norm_w)
        y = skinny_gemm(stream, folded.weight, norm_sums=sums, exact=exact, eps=EPS)
        ref = _unfused(stream, norm_w, lin)
        assert_close(y, ref, atol=2e-2 * ref.abs().max().item(), rtol=0, what=f"norm from sums M={m}")
        ours = skinny_gemm(stream, folded.weight, unit_norm=True, exact=exact, eps=EPS)
        assert_close(y, ours, atol=1e-2 * ref.abs().max().item(), rtol=0, what="sums against the loop's Σx²")
