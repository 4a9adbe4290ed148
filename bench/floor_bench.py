"""Every Qwen3 shape against its byte floor, in one run: plain decode and DFlash steps, BF16 and INT8, at
the benchmark's points, with the launches per layer and the fixed cost per layer beyond the floor.

    python bench/floor_bench.py --out bench/results [--models qwen3-0.6b,qwen3-1.7b,qwen3-4b,qwen3-8b]
                                [--weights bf16,int8] [--points 1k,8k] [--bandwidth-gbs X]

Checkpoints have random weights (written once, loaded through tileinfer.load): DFlash steps replay the
comparison's tokens per step (7.1 and 2.9 at 1k, 1.87 at 8k). The floor is the bytes a step must read
(tileinfer_profiling.roofline) over the read bandwidth measured in the same run; a step's cost beyond it,
per layer, is the fixed cost the fused kernels are to remove. cuBLAS linears (plain decode, BF16) are the
in-run baseline. Launches per layer count the target's kernels inside its layers in one decode step
(an eager profiled run: the graphs replay the same launches). `--pdl off,on` measures everything with
and without Programmatic Dependent Launch (tileinfer.ops.pdl; `pdl` says which, as the kernels got it);
`--fuse-norms off,on` without and with the RMSNorms and residual adds folded into the GEMMs
(TILEINFER_FUSE_NORMS; the cuBLAS baseline runs once, unfused); `--prefetch-k 0,4` without and with each
skinny GEMM program asking L2 for its first 4 weight K-blocks before PDL's wait (TILEINFER_PREFETCH_K);
`--prefetch-ahead 0,8` without and with each K-loop iteration also asking L2 for the weight K-block 8 ahead,
for every GEMM whose tuned config sets none (TILEINFER_PREFETCH_AHEAD); `--stream-k 0,1` without and with every
skinny GEMM but the argmax LM head as stream-K, equal shares of all its K-blocks for one program an SM
(TILEINFER_STREAM_K);
`--kv-prefetch off,on` without and with each attention split asking L2 for its K/V before that wait;
`--step-kv off,on` without and with the Q/K norms, RoPE and KV write inside the attention's launch
(TILEINFER_STEP_KV, fused layers only); `--early-kv off,on,after` without and with the target's attention
loading each split's first K/V block before that wait (`decode_attention.set_early_kv`), and with every
attention loading it right after the wait (`set_kv_first`); `--early-epilogue off,on`
without and with the GEMMs reading their epilogue's inputs from the kernel before (a folded norm's row sums, the
residual rows) right after that wait, not after their K loop (`skinny_gemm.set_early_epilogue`); `--l2-ahead off,on`
without and with each decode attention asking L2 for the o projection's weight right after that wait, in bulk
requests shared by its programs (`decode_attention.set_l2_ahead`); `--mlp-flow off,on,int8` without and with
each MLP's down projection reading the gate_up's columns as they are stored, and with it for INT8 GEMVs
only (`flow.set_mlp_flow`); `--o-flow off,on` without and with each o projection reading the decode
attention's columns as its merges store them (`flow.set_o_flow`); `--res-flow off,on,int8` without and with
each gate_up and the next layer's qkv reading the residual stream's columns as the o and down projections
store them, and with it where that consumer is an INT8 GEMV (`flow.set_res_flow`); `--num-splits
auto,16,24` with the engine's split count for the decode attention and with each count given;
`--block-sizes 4,8,16` DFlash steps of those blocks (anchor + drafts; the rows' `block`), each replay in the
blocks that hold its steps (1.87 tokens a step in blocks of 2 and more, 7.1 in blocks of 8 and more);
`--override JSON` with some of the GPU's tuned values replaced (bench/tuned_override.py; the rows' `override`
column), e.g. the o projection asking L2 for its whole weight share while the attention runs:
`--override '{"skinny_gemm": {"2560x4096": {"m1": {"bf16": {"prefetch_k": 64}}}}}'`; `--configs installed,before.json`
with the GPU's installed configs file and with another file of the same GPU in its place (a tune's A/B before
or after installing it; `heuristic`: no tuned entries at all; the rows' `configs`).

Writes floor_<gpu>.csv: one row per model × weights × mode × point × accept × block × linears. `drafter_ms` and
`verify_ms` are a step's phases on the GPU (CUDA events), `gpu_idle_ms` the rest of its wall time: the GPU
waiting on the host between steps. `--launches` also writes floor_launches_<gpu>.csv: every launch of a
plain and a DFlash step (tileinfer_profiling.launches), its own and whole time inside the step's graph (on
a GPU; the eager run's elsewhere) beside the bytes its role must read (a target layer's four GEMMs and
attention, the LM head) over the same bandwidth, and floor_gaps_<gpu>.csv: where the GPU idled between a
step's kernels in its CUDA graphs, per pair of kernels around the gaps, µs per step (`StepProfile.idle_gaps`).
"""

import argparse
import gc
import itertools
import math
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tileinfer  # noqa: E402
from bench import tuned_override  # noqa: E402
from bench.engine_bench import POINTS, checkpoints, replayed, timed  # noqa: E402
from bench.ref.metric import environment, gpu_tag, write_rows  # noqa: E402
from bench.ref.tileinfer_spec import BENCH_ROOT  # noqa: E402
from tileinfer_profiling.roofline import dflash_step_bytes, step_bytes  # noqa: E402
from tileinfer_profiling.run_info import command_line  # noqa: E402
from tileinfer.ops import decode_attention, flow, gemm_configs, pdl, skinny_gemm, tuning  # noqa: E402
from tileinfer.config import DFlashConfig, read_json  # noqa: E402
from tileinfer_profiling.step import profile_step  # noqa: E402

MODELS = ("qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b")
PROFILE_TOKENS = 24


def launches(engine, ids, block_size, accept_profile, graphs=False):
    """((target launches per layer, launches per step) in the decoding steps of a short profiled run, the
    profile); `graphs`: the same run also traced from its CUDA graphs (on a GPU)."""
    prof = profile_step(engine, ids, block_size=block_size, max_new_tokens=PROFILE_TOKENS,
                        graphs=graphs and torch.cuda.is_available(), accept_profile=accept_profile)
    steps = max(1, prof.stats.get("steps") or 1)
    k = prof.kernels[prof.kernels["phase"] != "prefill"]
    in_layers = k[(k["model"] == "target") & k["layer"].notna()]
    return (len(in_layers) / steps / engine.config.num_hidden_layers, len(k) / steps), prof


def site_rows(prof, config, kv_len, weights, bandwidth):
    """One row per launch of a decoding step (`StepProfile.launch_table`): where it runs, its own and whole
    time inside the step's graph, the bytes its role must read and their time at `bandwidth`."""
    try:
        sites = prof.launch_table(config, kv_len, weights)
    except ValueError as e:  # the step timings stand without them
        print(f"no launch table for this step: {e}", flush=True)
        return []
    return sites.assign(floor_us=sites["floor_bytes"] / bandwidth * 1e6).to_dict("records")


def _is_rows(text):
    """A --kv-prefetch row count: -1 (each whole share) or a positive integer."""
    try:
        return int(text) == -1 or int(text) > 0
    except ValueError:
        return False


def pdl_label(device):
    return "on" if pdl.enabled_for(device) else "off"


def floor_row(model, weights, mode, point, accept, linears, r, floor_ms, layers, counts, device, block=1):
    per_layer = (r["step_ms"] - floor_ms) * 1e3 / layers
    return dict(model=model, weights=weights, mode=mode, point=point, accept=accept, linears=linears, block=block,
                tok_s=r["decode_tok_s"], step_ms=r["step_ms"], floor_ms=floor_ms,
                fraction_of_floor=floor_ms / r["step_ms"], launches_per_layer=counts[0], launches_per_step=counts[1],
                us_per_layer_over_floor=per_layer, pdl=pdl_label(device),
                prefetch_k=gemm_configs.prefetch_k(), prefetch_ahead=gemm_configs.prefetch_ahead(),
                stream_k=gemm_configs.stream_k(), kv_prefetch=decode_attention.kv_prefetch_label(device),
                early_kv=decode_attention.early_kv_label(), early_epilogue=skinny_gemm.early_epilogue_label(),
                l2_ahead=decode_attention.l2_ahead_label(), mlp_flow=flow.mlp_flow_label(),
                o_flow=flow.o_flow_label(), res_flow=flow.res_flow_label(), tokens_per_step=r["tokens_per_step"], prefill_ms=r["prefill_ms"],
                drafter_ms=r["drafter_ms"], verify_ms=r["verify_ms"],
                gpu_idle_ms=r["step_ms"] - r["drafter_ms"] - r["verify_ms"])


def measure_model(model, args, bandwidth, record, cublas=True, record_sites=None, num_splits="auto"):
    splits = {} if num_splits == "auto" else {"num_splits": int(num_splits)}
    target, drafter = checkpoints(model, Path(args.root))
    g = torch.Generator().manual_seed(0)
    for weights in args.weights:
        engine = tileinfer.load(target, draft=drafter, weights=weights)
        fused = {"fuse_norms": "on" if engine.ops.fuse_norms else "off", "step_kv": engine.ops.step_kv_label,
                 "early_kv": decode_attention.early_kv_label(), "early_epilogue": skinny_gemm.early_epilogue_label(),
                 "l2_ahead": decode_attention.l2_ahead_label(), "mlp_flow": flow.mlp_flow_label(),
                 "o_flow": flow.o_flow_label(), "res_flow": flow.res_flow_label(),
                 "num_splits": num_splits,
                 "prefetch_k": gemm_configs.prefetch_k(), "prefetch_ahead": gemm_configs.prefetch_ahead(),
                 "stream_k": gemm_configs.stream_k()}
        cfg, layers = engine.config, engine.config.num_hidden_layers
        for point in args.points:
            ids = torch.randint(0, cfg.vocab_size, (POINTS[point],), generator=g).tolist()
            kv = len(ids) + args.new_tokens // 2
            plain_floor = step_bytes(cfg, kv, 1, weights) / bandwidth * 1e3
            counts, prof = launches(engine, ids, 1, None, graphs=record_sites is not None)
            if record_sites:
                record_sites(site_rows(prof, cfg, kv, weights, bandwidth), prof.idle_gaps(), model=model, weights=weights, mode="plain",
                             point=point, accept="-", block=1, pdl=pdl_label(engine.device), **fused)
            r = timed(engine, ids, args.new_tokens, args.repeats, block_size=1, **splits)
            record(floor_row(model, weights, "plain", point, "-", "triton", r, plain_floor, layers, counts,
                             engine.device) | fused)
            dflash_floor = dflash_step_bytes(cfg, engine.drafter.config, kv, weights) / bandwidth * 1e3
            for block in args.block_sizes or [engine.block_max]:
                # a replay needs blocks that hold its largest step (7.1 tokens a step commits 7 or 8)
                tps_fit = [tps for tps in replayed(point) if math.ceil(tps) <= block]
                if not tps_fit:
                    print(f"{model} {point}: no replay fits blocks of {block} ({', '.join(map(str, replayed(point)))} "
                          "tokens a step)", flush=True)
                    continue
                counts, prof = launches(engine, ids, block, tps_fit[0], graphs=record_sites is not None)
                if record_sites:
                    record_sites(site_rows(prof, cfg, kv, weights, bandwidth), prof.idle_gaps(), model=model, weights=weights,
                                 mode="dflash", point=point, accept=f"replay:{tps_fit[0]}", block=block,
                                 pdl=pdl_label(engine.device), **fused)
                for tps in tps_fit:
                    r = timed(engine, ids, args.new_tokens, args.repeats, accept_profile=tps, block_size=block, **splits)
                    record(floor_row(model, weights, "dflash", point, f"replay:{tps}", "triton", r, dflash_floor, layers,
                                     counts, engine.device, block=block) | fused)
        del engine
        gc.collect()
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
    if "bf16" in args.weights and cublas and not args.no_cublas:
        engine = tileinfer.load(target, weights="bf16", linear="cublas")
        cfg, layers = engine.config, engine.config.num_hidden_layers
        for point in args.points:
            ids = torch.randint(0, cfg.vocab_size, (POINTS[point],), generator=g).tolist()
            floor = step_bytes(cfg, len(ids) + args.new_tokens // 2, 1, "bf16") / bandwidth * 1e3
            counts, _ = launches(engine, ids, 1, None)
            r = timed(engine, ids, args.new_tokens, args.repeats, block_size=1, **splits)
            record(floor_row(model, "bf16", "plain", point, "-", "cublas", r, floor, layers, counts, engine.device)
                   | {"fuse_norms": "off", "step_kv": "off", "prefetch_k": 0, "prefetch_ahead": 0, "stream_k": 0,
                      "num_splits": num_splits})
        del engine
        gc.collect()


@contextmanager
def switches_env(**on):
    """TILEINFER_<NAME> set for each switch (True 1, False 0, a string as it is), for the engines loaded inside."""
    names = {f"TILEINFER_{name.upper()}": value for name, value in on.items()}
    was = {name: os.environ.get(name) for name in names}
    os.environ.update({name: value if isinstance(value, str) else "1" if value else "0"
                       for name, value in names.items()})
    try:
        yield
    finally:
        for name, value in was.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--models", default=",".join(MODELS), help="random-weight presets, comma-separated")
    parser.add_argument("--weights", default="bf16,int8")
    parser.add_argument("--points", default="1k,8k")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bandwidth-gbs", type=float, default=None,
                        help="read bandwidth for the floors instead of measuring it (GB/s)")
    parser.add_argument("--no-cublas", action="store_true", help="leave out the cuBLAS-linears baseline")
    parser.add_argument("--pdl", default="off,on", help="off, on or off,on: Programmatic Dependent Launch")
    parser.add_argument("--fuse-norms", default="on", help="off, on or off,on: RMSNorms and residual adds in the GEMMs")
    parser.add_argument("--prefetch-k", default="0",
                        help="comma-separated weight K-blocks each GEMM program prefetches into L2 (0: as tuned)")
    parser.add_argument("--prefetch-ahead", default="0",
                        help="comma-separated K-blocks ahead of its loop each GEMM iteration asks L2 for (0: as tuned)")
    parser.add_argument("--stream-k", default="0",
                        help="comma-separated stream-K programs per SM of the skinny GEMMs (0: as tuned)")
    parser.add_argument("--kv-prefetch", default="on",
                        help="off, on, or positions of each share (-1 all), comma-separated: attention K/V asked of L2 before PDL's wait")
    parser.add_argument("--step-kv", default="decode",
                        help="off, on, decode (one-token steps, the default) or several, comma-separated: Q/K norms, "
                             "RoPE, KV write in the attention")
    parser.add_argument("--early-kv", default="off",
                        help="off, on, after, comma-separated: first K/V block read before PDL's wait (on) or "
                             "right after it (after)")
    parser.add_argument("--early-epilogue", default="off",
                        help="off, on or off,on: the GEMMs' row sums and residual rows read right after PDL's wait")
    parser.add_argument("--l2-ahead", default="off",
                        help="off, on or off,on: the decode attention asks L2 for o_proj's weight after PDL's wait")
    parser.add_argument("--mlp-flow", default=None,
                        help="off, on, int8 (INT8 GEMVs only), comma-separated: each MLP's down projection reads the "
                             "gate_up's columns as they are stored (default: as TILEINFER_MLP_FLOW says)")
    parser.add_argument("--o-flow", default=None,
                        help="off, on or off,on: each o projection reads the decode attention's columns as its "
                             "merges store them (default: as TILEINFER_O_FLOW says)")
    parser.add_argument("--res-flow", default=None,
                        help="off, on, int8 (INT8 GEMV consumers only), comma-separated: each gate_up and the next "
                             "layer's qkv read the residual stream's columns as the o and down projections store "
                             "them (default: as TILEINFER_RES_FLOW says)")
    parser.add_argument("--block-sizes", default="",
                        help="comma-separated DFlash blocks (anchor + drafts) to measure, each replay in those that "
                             "hold it (default: the drafter's own)")
    parser.add_argument("--num-splits", default="auto",
                        help="the decode attention's split count: auto (the engine's choice) or counts, comma-separated")
    parser.add_argument("--launches", action="store_true",
                        help="also each launch of a decoding step timed inside its graph, beside its bytes' floor "
                             "(floor_launches_<gpu>.csv)")
    parser.add_argument("--root", default=str(BENCH_ROOT), help="where the random checkpoints are kept")
    parser.add_argument("--configs", default="installed",
                        help="installed, heuristic (no tuned entries) or configs files of this GPU (.json), "
                             "comma-separated: each measured in place of the installed file")
    tuned_override.add_argument(parser)
    args = parser.parse_args(argv)
    for name in ("prefetch_k", "prefetch_ahead", "stream_k"):
        try:
            setattr(args, name, [int(v) for v in getattr(args, name).split(",")])
            assert all(v >= 0 for v in getattr(args, name))
        except (ValueError, AssertionError):
            parser.error(f"--{name.replace('_', '-')} takes non-negative integers, got {getattr(args, name)!r}")
    args.models, args.weights, args.points = (s.split(",") for s in (args.models, args.weights, args.points))
    args.mlp_flow = args.mlp_flow or flow.mlp_flow_label()
    args.o_flow = args.o_flow or flow.o_flow_label()
    args.res_flow = args.res_flow or flow.res_flow_label()
    (args.pdl, args.fuse_norms, args.kv_prefetch, args.step_kv, args.early_kv, args.early_epilogue, args.l2_ahead,
     args.mlp_flow, args.o_flow, args.res_flow, args.num_splits) = (s.split(",") for s in (
        args.pdl, args.fuse_norms, args.kv_prefetch, args.step_kv, args.early_kv, args.early_epilogue, args.l2_ahead,
        args.mlp_flow, args.o_flow, args.res_flow, args.num_splits))
    blocks = [x for x in args.block_sizes.split(",") if x]
    bad_blocks = [x for x in blocks if not (x.isdigit() and int(x) >= 2)]
    if bad_blocks:
        parser.error(f"--block-sizes takes blocks of 2 tokens or more, got {', '.join(bad_blocks)}")
    args.block_sizes = [int(x) for x in blocks]
    bad_splits = [x for x in args.num_splits if x != "auto" and not (x.isdigit() and int(x) >= 1)]
    if bad_splits:
        parser.error(f"--num-splits takes auto or counts >= 1, got {', '.join(bad_splits)}")
    for name, given, known in (("--points", args.points, POINTS), ("--weights", args.weights, ("bf16", "int8")),
                               ("--pdl", args.pdl, ("off", "on")), ("--fuse-norms", args.fuse_norms, ("off", "on")),
                               ("--kv-prefetch", args.kv_prefetch, ("off", "on")), ("--step-kv", args.step_kv, ("off", "on", "decode")),
                               ("--early-kv", args.early_kv, ("off", "on", "after")), ("--early-epilogue", args.early_epilogue, ("off", "on")),
                               ("--l2-ahead", args.l2_ahead, ("off", "on")), ("--mlp-flow", args.mlp_flow, flow.MLP_FLOW_MODES),
                               ("--o-flow", args.o_flow, ("off", "on")),
                               ("--res-flow", args.res_flow, flow.MLP_FLOW_MODES)):
        unknown = [x for x in given if x not in known and not (name == "--kv-prefetch" and _is_rows(x))]
        if unknown:
            parser.error(f"{name}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    for model in args.models if args.block_sizes else ():
        drafter = checkpoints(model, Path(args.root))[1]
        block_max = DFlashConfig.from_dict(read_json(drafter / "config.json")).block_size
        past = [b for b in args.block_sizes if b > block_max]
        if past:
            parser.error(f"--block-sizes: {', '.join(map(str, past))} past {model}'s drafter block of {block_max}")
    patch = tuned_override.from_args(parser, args)
    args.configs = _configs_files(parser, args.configs.split(","), patch)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment(measure_bandwidth=args.bandwidth_gbs is None and torch.cuda.is_available())
    if args.bandwidth_gbs is not None:
        env |= {"gpu_bandwidth_gbs": args.bandwidth_gbs, "gpu_bandwidth_source": "given"}
    bandwidth = env["gpu_bandwidth_gbs"] * 1e9
    if math.isnan(bandwidth):
        parser.error("no read bandwidth: measure it on a GPU or give --bandwidth-gbs")
    base = {**env, "command": command_line(), "weights_kind": "random", "override": tuned_override.label(patch)}
    rows, site_table, gap_table = [], [], []
    configs_label = args.configs[0][0]

    def record(row):
        rows.append({**row, "configs": configs_label, **base})
        print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)

    def record_sites(sites, gaps, **key):  # a launch's own "model" (target or drafter) is its network here
        site_table.extend({**key, **{"network" if k == "model" else k: v for k, v in site.items()},
                           "configs": configs_label, **base} for site in sites)
        gap_table.extend({**key, **gap, "configs": configs_label, **base} for gap in gaps.to_dict("records"))

    tic = time.perf_counter()
    early_before = decode_attention.early_kv_label()
    epilogue_before = skinny_gemm.early_epilogue_label() == "on"
    ahead_before = decode_attention.l2_ahead_label() == "on"
    flow_before = flow.mlp_flow_label()
    o_flow_before = flow.o_flow_label() == "on"
    res_flow_before = flow.res_flow_label()
    for configs_label, configs in args.configs:
        with tuned_override.replaced(configs), tuned_override.overridden(patch):  # read by the engines loaded inside
            for setting in args.pdl:
                pdl.set_enabled(setting == "on")  # engines loaded from here capture their graphs with it
                for model in args.models:
                    for (fuse, blocks, in_loop, streams, kv, step_kv, early, sums, ahead, flows, o_flows, res_flows,
                         splits) in itertools.product(
                            args.fuse_norms, args.prefetch_k, args.prefetch_ahead, args.stream_k, args.kv_prefetch,
                            args.step_kv, args.early_kv, args.early_epilogue, args.l2_ahead, args.mlp_flow, args.o_flow,
                            args.res_flow, args.num_splits):
                        if fuse == "off" and step_kv != "off" and "off" in args.step_kv:
                            continue  # unfused layers have no step_kv: measured once, as "off"
                        gemm_configs.set_prefetch_k(blocks)
                        gemm_configs.set_prefetch_ahead(in_loop)
                        gemm_configs.set_stream_k(streams)
                        decode_attention.set_kv_prefetch(kv != "off", rows=None if kv in ("off", "on") else int(kv))
                        decode_attention.set_early_kv(early == "on")
                        decode_attention.set_kv_first(early == "after")
                        skinny_gemm.set_early_epilogue(sums == "on")
                        decode_attention.set_l2_ahead(ahead == "on")
                        flow.set_mlp_flow(flows)
                        flow.set_o_flow(o_flows == "on")
                        flow.set_res_flow(res_flows)
                        with switches_env(fuse_norms=fuse == "on", step_kv={"on": "1", "off": "0"}.get(step_kv, step_kv)):  # read by the engines loaded inside
                            first = (fuse, blocks, in_loop, streams, kv, step_kv, early, sums, ahead, flows, o_flows,
                                     res_flows, splits) == (
                                args.fuse_norms[0], args.prefetch_k[0], args.prefetch_ahead[0], args.stream_k[0],
                                args.kv_prefetch[0], args.step_kv[0], args.early_kv[0], args.early_epilogue[0],
                                args.l2_ahead[0], args.mlp_flow[0], args.o_flow[0], args.res_flow[0], args.num_splits[0])
                            measure_model(model, args, bandwidth, record, cublas=first,
                                          record_sites=record_sites if args.launches else None, num_splits=splits)
                        # written after each model, so a run cut short keeps what it measured
                        path = write_rows(rows, out / f"floor_{gpu_tag(env['gpu'])}.csv", last=tuple(base))
                        if site_table:
                            write_rows(site_table, out / f"floor_launches_{gpu_tag(env['gpu'])}.csv", last=tuple(base))
                        if gap_table:
                            write_rows(gap_table, out / f"floor_gaps_{gpu_tag(env['gpu'])}.csv", last=tuple(base))
                        print(f"{model}, configs {configs_label}, PDL {setting}, fused norms {fuse}, prefetch {blocks}, ahead {in_loop}, stream-K {streams}, K/V prefetch {kv}, "
                              f"step K/V {step_kv}, early K/V {early}, early epilogue {sums}, L2 ahead {ahead}, MLP flow {flows}, o flow {o_flows}, residual flow {res_flows}, "
                              f"splits {splits}: done at "
                              f"{time.perf_counter() - tic:.0f} s", flush=True)
    gemm_configs.set_prefetch_k(0)
    gemm_configs.set_prefetch_ahead(0)
    gemm_configs.set_stream_k(0)
    decode_attention.set_kv_prefetch(True)
    decode_attention.set_early_kv(early_before == "on")
    decode_attention.set_kv_first(early_before == "after")
    skinny_gemm.set_early_epilogue(epilogue_before)
    decode_attention.set_l2_ahead(ahead_before)
    flow.set_mlp_flow(flow_before)
    flow.set_o_flow(o_flow_before)
    flow.set_res_flow(res_flow_before)
    print(f"\n{env['gpu']}, torch {env['torch']}, triton {env['triton']}, rev {env['git_rev']}, read bandwidth "
          f"{env['gpu_bandwidth_gbs']} GB/s ({env['gpu_bandwidth_source']}); random weights; rows in {path}")
    print(f"{'model':11} {'w':5} {'mode':6} {'pt':4} {'accept':12} {'blk':>3} {'lin':6} {'tok/s':>8} {'step ms':>8} "
          f"{'floor':>7} {'of floor':>8} {'idle ms':>7} {'launch/L':>8} {'us/L over':>9} {'pdl':>4} {'fuse':>4} {'pf':>3} {'pfa':>3} {'sk':>2} {'kv':>3} "
          f"{'skv':>3} {'ekv':>5} {'esm':>3} {'l2a':>3} {'flow':>4} {'oflw':>4} {'rflw':>4} {'splits':>6}"
          + ("  configs" if len(args.configs) > 1 else ""))
    for r in rows:
        print(f"{r['model']:11} {r['weights']:5} {r['mode']:6} {r['point']:4} {r['accept']:12} {r['block']:3} {r['linears']:6} "
              f"{r['tok_s']:8.1f} {r['step_ms']:8.3f} {r['floor_ms']:7.3f} {r['fraction_of_floor']:8.2f} "
              f"{r['gpu_idle_ms']:7.3f} {r['launches_per_layer']:8.1f} {r['us_per_layer_over_floor']:9.1f} {r['pdl']:>4} {r['fuse_norms']:>4} {r['prefetch_k']:3} {r['prefetch_ahead']:3} {r['stream_k']:2} {r['kv_prefetch']:>3} "
              f"{r['step_kv']:>3} {r['early_kv']:>5} {r['early_epilogue']:>3} {r['l2_ahead']:>3} {r['mlp_flow']:>4} "
              f"{r['o_flow']:>4} {r['res_flow']:>4} {r['num_splits']:>6}"
              + (f"  {r['configs']}" if len(args.configs) > 1 else ""))
    if site_table:
        print_over_floor(site_table)
    if gap_table:
        print_gaps(gap_table)
    return rows


def _configs_files(parser, given, patch) -> list[tuple[str, dict | None]]:
    """(label, configs) for each --configs entry: "installed" (None: the GPU's own file), "heuristic" (no
    tuned entries) or a file of this machine's GPU, read up front; one that cannot apply ends the run as the
    parser's error."""
    gpu = tuning.gpu_of(torch.device("cuda")) if torch.cuda.is_available() else "cpu"
    out = []
    for name in given:
        if name in ("installed", "heuristic"):  # the heuristic: a file with no entries
            out.append((name, None if name == "installed" else {"gpu": gpu}))
            continue
        try:
            configs = tuned_override.read_configs(name, gpu)
            tuned_override.merged(configs, patch)
        except (ValueError, KeyError) as e:
            parser.error(f"--configs: {e.args[0]}")
        out.append((name, configs))
    return out


SWITCHES = ("point", "block", "configs", "pdl", "fuse_norms", "prefetch_k", "prefetch_ahead", "stream_k", "step_kv", "early_kv", "early_epilogue",
            "l2_ahead", "mlp_flow", "o_flow", "res_flow", "num_splits")


def by_setting(df, keys):
    """df in groups by `keys` and by each of SWITCHES the run varied: (the keys' values, the settings as a
    label, the group)."""
    varied = [c for c in SWITCHES if c not in keys and c in df and (df.groupby(keys)[c].nunique() > 1).any()]
    for key, g in df.groupby([*keys, *varied], sort=False, dropna=False):
        yield key[:len(keys)], "".join(f"{c} {v}, " for c, v in zip(varied, key[len(keys):])), g


def print_over_floor(site_table):
    """Per model, weights and mode (and each setting the run varied): what each role of the target spends
    beyond its bytes' floor, µs per step (own times inside the step's graph), most first."""
    sites = pd.DataFrame(site_table)
    sites = sites[(sites["network"] == "target") & sites["floor_us"].notna()]
    print("\nµs per step beyond the floor, by role of the target (own time - floor)")
    for (model, weights, mode), where, g in by_setting(sites, ["model", "weights", "mode"]):
        over = (g["own_us"] - g["floor_us"]).groupby(g["role"]).sum().sort_values(ascending=False)
        print(f"{model:11} {weights:5} {mode:6} {where}" + ", ".join(f"{role} {us:.0f}" for role, us in over.items()))


def print_gaps(gap_table, top=3):
    """Per model, weights, mode and point (and each setting the run varied): the GPU's idle µs per step
    between the step's kernels and the `top` pairs of kernels around it."""
    gaps = pd.DataFrame(gap_table)
    print("\nidle µs per step between kernels (CUDA graphs), most first: before → after")
    for (model, weights, mode, point), where, g in by_setting(gaps, ["model", "weights", "mode", "point"]):
        pairs = "; ".join(f"{r.before[:28]} → {r.after[:28]} {r.us_per_step:.1f}" for r in g.head(top).itertuples())
        print(f"{model:11} {weights:5} {mode:6} {point:4} {where}{g['us_per_step'].sum():.1f}: {pairs}")


if __name__ == "__main__":
    main()
