"""Kernels compiled for the H200 (sm_90) on a machine without a GPU: every launch site of a Qwen3-4B
decode step, DFlash step and prefill chunk, with the H200's tuned GEMM configs, compiles and fits."""

import json
from collections import Counter

import pandas as pd
import pytest

from tileinfer_profiling.cli import main
from tileinfer_profiling.compiled import (AT_1K, L2_AHEAD, STEP_KV, _SASS, cases, compile_cases, gemm_variants,
                                          main_loop, occupancy, wgmma_ring_depths)
from tileinfer.ops.gemm_configs import GemmConfig


def test_occupancy_follows_the_sm90_limits():
    assert occupancy(regs=32, shared=0, num_warps=4) == 16  # 64 warps per SM
    assert occupancy(regs=128, shared=0, num_warps=4) == 4  # 128 regs × 128 threads = 16k of 64k
    assert occupancy(regs=129, shared=0, num_warps=4) == 3  # rounded up to 136 per thread
    assert occupancy(regs=40, shared=114688, num_warps=4) == 2  # 112 KB + 1 KB reserved, twice in 228 KB
    assert occupancy(regs=40, shared=123904, num_warps=4) == 1
    assert occupancy(regs=40, shared=232449, num_warps=4) == 0  # over 227 KB: cannot launch
    assert occupancy(regs=16, shared=0, num_warps=1) == 32  # the block limit


def test_sass_opcodes_parse_with_predicates():
    sass = """
        /*0070*/                   LDG.E.128.CONSTANT R4, desc[UR6][R2.64] ;
        /*0080*/              @!P0 BRA 0x2b0 ;
        /*0090*/               @P1 HGMMA.64x16x16.F32.BF16 R24, gdesc[UR4], R24 ;
        /*00a0*/                   PRMT R7, R5, 0x7650, R7 ;
    """
    assert Counter(_SASS.findall(sass)) == Counter({"LDG": 1, "BRA": 1, "HGMMA": 1, "PRMT": 1})


def test_main_loop_is_the_longest_backward_branch():
    sass = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E R2, desc[UR4][R4.64] ;
        /*0020*/                   FFMA R3, R2, R2, R3 ;
        /*0030*/                   PRMT R7, R5, 0x7650, R7 ;
        /*0040*/               @P0 BRA 0x10 ;
        /*0050*/                   STG.E desc[UR4][R4.64], R3 ;
        /*0060*/                   BRA 0x60 ;
    """
    assert main_loop(sass) == Counter({"LDG": 1, "FFMA": 1, "PRMT": 1, "BRA": 1})
    assert main_loop("/*0000*/ EXIT ;") == Counter()


def test_wgmma_ring_depths_follow_the_operands_to_their_rings():
    ttgir = """
    %xt_36 = ttg.local_alloc : () -> !ttg.memdesc<5x128x16xbf16, #shared, #smem, mutable> loc(#loc1)
    %w_37 = ttg.local_alloc : () -> !ttg.memdesc<6x64x128xbf16, #shared1, #smem, mutable> loc(#loc2)
    %g_38 = ttg.local_alloc : () -> !ttg.memdesc<4x128xbf16, #shared, #smem, mutable> loc(#loc3)
    %xt_263 = ttg.memdesc_index %xt_36[%ss_261] : !ttg.memdesc<5x128x16xbf16, #shared, #smem, mutable>
    %w_268 = ttg.memdesc_index %w_37[%ss_258] : !ttg.memdesc<6x64x128xbf16, #shared1, #smem, mutable>
    %acc_270 = ttng.warp_group_dot %w_268, %xt_263, %arg19 {inputPrecision = 0 : i32, isAsync = true}
    """
    assert wgmma_ring_depths(ttgir) == [5, 6]
    assert wgmma_ring_depths(ttgir.replace("%xt_263, %arg19", "%x_regs, %arg19")) == [6]


@pytest.mark.slow
def test_every_launch_site_compiles_for_the_h200_and_fits():
    table, opcodes = compile_cases("qwen3-4b", arch=90, gpu="NVIDIA H200")
    launch_sites = {(c.op, c.shape, c.m, c.kind) for c in cases("qwen3-4b")}
    assert set(zip(table["op"], table["shape"], table["m"], table["kind"])) == launch_sites
    assert (table["regs"] > 0).all() and (table["regs"] <= 255).all()
    assert (table["blocks_per_sm"] >= 1).all(), table[table["blocks_per_sm"] < 1]
    assert (table["local_bytes"] == 0).all() and (table["stack_bytes"] == 0).all(), "a kernel spills"
    gemm = table[table["kernel"] == "_skinny_gemm_kernel"]
    # BF16 with M >= 4 on Hopper's wgmma where the tile gives it 64 rows of W (a tuned 32-row tile takes
    # mma.sync); INT8 weights converted in registers go through mma.sync
    bf16_dot = gemm[(gemm["kind"] == "bf16") & (gemm["m"] > 1)]
    wide = bf16_dot["config"].map(lambda c: json.loads(c)["block_n"] >= 64)
    assert set(bf16_dot[wide]["tensor_cores"]) == {"wgmma (HGMMA)"}
    assert set(bf16_dot[~wide]["tensor_cores"]) <= {"mma.sync (HMMA)"}
    assert set(gemm[(gemm["kind"] == "int8") & (gemm["m"] > 1)]["tensor_cores"]) == {"mma.sync (HMMA)"}
    assert set(gemm[gemm["m"] == 1]["tensor_cores"]) == {"none"}
    mains = table[table["kernel"].isin(["_skinny_gemm_kernel", "_w8a16_gemm_kernel"])]
    assert (mains["loop_instructions"] > 0).all() and (mains["byte_floor_us"] > 0).all()
    assert (mains["instruction_floor_us"] >= mains["issue_floor_us"]).all()
    attention = table[table["kernel"] == "_split_kv_attention_kernel"]
    # decode, verify and drafter blocks, each also with the step's Q/K norms, RoPE and KV write inside; the
    # verify and drafter blocks again at 1k, where the H200 splits a block's tokens over programs; a decode
    # and a verify asking L2 for o_proj's weight, in bulk requests (UBLKPF) that no other attention makes; a
    # decode and a verify counting their merges for the o projection (`flow`)
    assert len(attention) == 12 and (attention["instruction_floor_us"] > 0).all()
    assert attention["op"].str.contains(STEP_KV, regex=False).sum() == 5
    ahead = attention["op"].str.endswith(L2_AHEAD)
    bulk = opcodes[(opcodes["kernel"] == "_split_kv_attention_kernel") & (opcodes["opcode"] == "UBLKPF")
                   & (opcodes["where"] == "kernel")].groupby("op")["count"].sum()
    assert ahead.sum() == 2 and set(bulk.index) == set(attention[ahead]["op"]) and (bulk > 0).all()
    short = attention["op"].str.endswith(AT_1K)
    assert short.sum() == 2 and set(attention[short]["config"]) == {json.dumps({"tokens_per_program": 4})}
    assert set(attention[~short]["config"]) == {""}
    context = short.map({True: 1024, False: 8192})
    kv_bytes = 2 * (context + attention["m"]) * 8 * 128 * 2  # K and V of 8 KV heads over the cache + block
    assert (attention["byte_floor_us"] - kv_bytes / 4.19e6).abs().max() < 1e-6
    # BF16 decode GEMMs need well under their byte floor's time to issue their instructions
    bf16 = mains[(mains["m"] <= 16) & (mains["kind"] == "bf16")]
    assert (bf16["instruction_over_floor"] < 0.5).all(), bf16[["op", "m", "instruction_over_floor"]]
    int8_m1 = opcodes[(opcodes["kind"] == "int8") & (opcodes["m"] == 1) & (opcodes["kernel"] == "_skinny_gemm_kernel")
                      & (opcodes["where"] == "kernel")]
    assert not int8_m1[int8_m1["opcode"].isin(["I2F", "I2FP"])]["count"].sum(), "int8 -> float by cvt at M = 1"
    # A norm weight applied in the loop makes each x tile a register round trip into shared memory, fenced
    # before wgmma reads it; folded into W, the tiles go to the tensor cores as they were loaded
    loop = opcodes[(opcodes["where"] == "main loop") & (opcodes["kind"] == "bf16") & (opcodes["m"] == 16)
                   & (opcodes["kernel"] == "_skinny_gemm_kernel")]
    writes = loop[loop["opcode"].isin(["STS", "MEMBAR", "FENCE"])].groupby("op")["count"].sum()
    assert writes.get("linear qkv + norm", 0) > 0
    assert all(writes.get(f"linear {name} + {fold}", 0) == 0
               for name in ("qkv", "gate_up") for fold in ("folded norm", "norm from sums")), writes
    # the norm that reads its sums has the plain projection's main loop: no load of x of its own
    loads = loop[loop["opcode"].str.startswith("LDG")].groupby("op")["count"].sum()
    assert all(loads[f"linear {name} + norm from sums"] < loads[f"linear {name} + folded norm"]
               for name in ("qkv", "gate_up")), loads
    # every shared-memory ring of a wgmma GEMM as deep as the others (a shallower one was overwritten while
    # an asynchronous wgmma still read it: wrong rows on the H200 under load)
    rings = gemm["wgmma_rings"].fillna("").astype(str).str.split()
    uneven = gemm[rings.map(lambda d: len(set(d)) > 1)]
    assert uneven.empty, uneven[["op", "m", "config", "wgmma_rings"]]
    assert (rings[gemm["tensor_cores"] == "wgmma (HGMMA)"].map(len) > 0).all()
    # the split-KV attention asks L2 for its K and V before PDL's wait; a GEMM asks L2 for its first weight
    # blocks where its tuned config says so (prefetch_k)
    assert (attention["l2_prefetches"] == 2).all()
    asks = gemm["config"].map(lambda c: json.loads(c).get("prefetch_k", 0) > 0 if c else False)
    assert asks.any() and ((gemm["l2_prefetches"] > 0) == asks).all(), gemm[["op", "m", "config", "l2_prefetches"]]
    # the prefill attention with the H200's tuned tiles, which move by TMA: no load through registers
    prefill = table[table["op"] == "prefill attention"]
    assert json.loads(prefill["config"].iloc[0])["tma"] and (prefill["num_warps"] == 8).all()
    prefill_ops = opcodes[opcodes["op"] == "prefill attention"]
    assert not prefill_ops[prefill_ops["opcode"].str.startswith("LDG")]["count"].sum()
    assert prefill_ops[prefill_ops["opcode"].str.startswith("UTMALDG")]["count"].sum() > 0


@pytest.mark.slow
def test_cli_writes_the_table_and_figure(tmp_path, capsys):
    main(["compiled", "--ops", "rms_norm,silu_mul", "--out", str(tmp_path)])
    table = pd.read_csv(tmp_path / "compiled.csv")
    assert set(table["kernel"]) == {"_rms_norm_kernel", "_silu_mul_kernel"} and set(table["target"]) == {"sm_90"}
    assert "resident blocks per SM" in (tmp_path / "compiled.html").read_text()
    assert (tmp_path / "compiled_opcodes.csv").exists() and "_silu_mul_kernel" in capsys.readouterr().out


@pytest.mark.slow
def test_gemm_variants_rank_configs_by_their_instruction_floor():
    configs = [GemmConfig(32, 512, 4, 4, 4, False), GemmConfig(32, 512, 4, 2, 4, False)]
    table = gemm_variants("down", 16, "int8", configs)
    assert len(table) == 2 and table["instruction_floor_us"].is_monotonic_increasing
    # the 2 x 2 warp layout of 4 warps on a 32 x 16 tile converts each weight twice; 2 warps do it once
    four, two = (table[table["num_warps"] == w].iloc[0] for w in (4, 2))

    def conversions_per_weight(row):  # one PRMT builds a bf16 pair per thread
        return row["loop_PRMT"] * 2 * row["num_warps"] * 32 / (32 * 512)

    assert conversions_per_weight(four) == 2 and conversions_per_weight(two) == 1
    assert two["instruction_floor_us"] < four["instruction_floor_us"]


@pytest.mark.parametrize("name,m,kind,tile", [
    ("gate_up", 16, "int8", dict(block_n=32, block_k=64, num_warps=2, num_stages=6, fast_i8=False)),  # mma.sync
    ("gate_up", 16, "bf16", dict(block_n=64, block_k=64, num_warps=4, num_stages=8)),  # wgmma
    ("qkv", 1, "int8", dict(block_n=32, block_k=512, num_warps=4, num_stages=4)),  # the GEMV on int32 words
    ("down", 1, "bf16", dict(block_n=16, block_k=256, num_warps=4, num_stages=4)),  # the GEMV
])
def test_prefetch_ahead_asks_l2_inside_the_main_loop(name, m, kind, tile):
    """`prefetch_ahead` puts L2 prefetches (CCTL.E.PF2) in the K loop of every path, and only there."""
    table = gemm_variants(name, m, kind, [GemmConfig(**tile, prefetch_ahead=a) for a in (0, 8)])
    in_loop = {json.loads(r["config"])["prefetch_ahead"]: r["loop_CCTL"] for _, r in table.iterrows()}
    assert in_loop[0] == 0 and in_loop[8] >= 1
    assert (table["local_bytes"] == 0).all()


@pytest.mark.parametrize("name,m,kind,tile", [
    ("gate_up", 16, "int8", dict(block_n=32, block_k=64, num_warps=2, num_stages=6, fast_i8=False)),  # mma.sync
    ("gate_up", 16, "bf16", dict(block_n=64, block_k=64, num_warps=4, num_stages=6)),  # wgmma
    ("qkv", 1, "int8", dict(block_n=32, block_k=512, num_warps=4, num_stages=4)),  # the GEMV on int32 words
    ("down", 1, "bf16", dict(block_n=16, block_k=256, num_warps=4, num_stages=4, split_k=4)),  # the GEMV
])
def test_stream_k_compiles_for_the_h200_without_spills(name, m, kind, tile):
    """The tile loop around the K loop (`stream_k`) compiles for sm_90 and spills nothing; the tile's loop is
    then the kernel's longest, and the tensor cores' work of the tl.dot tiles is in it."""
    table = gemm_variants(name, m, kind, [GemmConfig(**tile, stream_k=s) for s in (0, 2)])
    assert (table["local_bytes"] == 0).all() and (table["blocks_per_sm"] >= 1).all()
    per_tile, shared = (table[table["config"].str.contains(f'"stream_k": {s}')].iloc[0] for s in (0, 2))
    assert shared["loop_instructions"] > per_tile["loop_instructions"]
    if m > 1:
        mma = "loop_HMMA" if kind == "int8" else "loop_HGMMA"
        assert shared[mma] >= per_tile[mma] > 0
