"""tileinfer profile (python -m tileinfer_profiling): sweeps, step profiles, ceilings, the reference
comparison and compiled kernels as CSV + HTML.

    tileinfer profile sweep attention [--kv-lens 1024,8192] [--q-lens 1,16] [--num-splits 1,2,4,8,16] --out DIR
    tileinfer profile sweep gemm [--ms 1,16] [--weights bf16,int8] [--impls ours,cublas] --out DIR
    tileinfer profile sweep drafter-attention [--kv-lens ...] [--num-splits ...] --out DIR
    tileinfer profile step --model PATH --draft PATH --prompt-tokens 8192 --new-tokens 256 --weights bf16 --out DIR
    tileinfer profile ceilings [--refresh]
    tileinfer profile compare --reference REFERENCE.csv [--ours ROWS.jsonl ...] --out DIR
    tileinfer profile compiled [--arch 90] [--gpu "NVIDIA H200"] [--ops linear] --out DIR

Without a GPU the sweeps default to tiny shapes (Triton under the interpreter) and every row says "cpu".
A sweep exits with status 1 when every row of an implementation failed.

`tileinfer_main` is the `tileinfer` command: the engine's own subcommands, and `profile` for these.
"""

import argparse
import json
import sys
from pathlib import Path

import torch


def _ints(text):
    return [int(v) for v in text.split(",") if v]


def _strs(text):
    return [v for v in text.split(",") if v]


def _write(out, name, df, figures):
    """CSV, and each figure as an HTML page that loads plotly.min.js from beside it (one copy per directory,
    written with the first page: the pages stay small and need no network)."""
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / f"{name}.csv", index=False)
    written = [out / f"{name}.csv"]
    for suffix, fig in figures.items():
        path = out / (f"{name}.html" if not suffix else f"{name}-{suffix}.html")
        fig.write_html(path, include_plotlyjs="directory")
        written.append(path)
    for path in written:
        print(path)


def _ceilings(device):
    from tileinfer_profiling import ceilings
    if device.type == "cuda":
        return ceilings.measure(device)
    return None


def _sweep(args):
    from tileinfer_profiling import plots, sweeps
    from tileinfer_profiling.run_info import resolve_device

    device = resolve_device(args.device)
    tiny = device.type != "cuda"
    if tiny:
        print("no GPU: tiny shapes on the CPU, wall-clock timers, rows labelled 'cpu'", file=sys.stderr)
    heads = dict(num_q_heads=4, num_kv_heads=2, head_dim=16) if tiny else {}
    if args.heads:
        heads["num_q_heads"], heads["num_kv_heads"] = _ints(args.heads)
    if args.head_dim:
        heads["head_dim"] = args.head_dim
    ceil = _ceilings(device)
    out = Path(args.out)
    if args.kind == "attention":
        df = sweeps.attention_sweep(_ints(args.kv_lens or ("64,128" if tiny else "1024,8192,32768")),
                                    _ints(args.q_lens or ("1,4" if tiny else "1,16")),
                                    _ints(args.num_splits or ("1,2" if tiny else "1,2,4,8,16,32")),
                                    device=device, ceilings=ceil, progress=True, **heads)
        _write(out, "attention", df, {"": plots.split_curves_figure(df)})
        return _failed(df)
    elif args.kind == "drafter-attention":
        df = sweeps.drafter_attention_sweep(_ints(args.kv_lens or ("64,128" if tiny else "1024,8192,32768")),
                                            _ints(args.num_splits or ("1,2" if tiny else "1,2,4,8,16,32")),
                                            block_size=args.block_size or (4 if tiny else 16),
                                            device=device, ceilings=ceil, progress=True, **heads)
        _write(out, "drafter-attention", df,
               {"": plots.split_curves_figure(df, title="Drafter attention (non-causal block) against the split count")})
        return _failed(df)
    else:
        shapes = {"tiny_qkv": (64, 32), "tiny_down": (32, 128)} if tiny else None
        df = sweeps.gemm_sweep(shapes, _ints(args.ms or ("1,4" if tiny else "1,16")), _strs(args.weights),
                               _strs(args.impls), device=device, ceilings=ceil, progress=True)
        _write(out, "gemm", df, {"": plots.gemm_bandwidth_figure(df, ceil)})
        return _failed(df)


def _failed(df):
    """1 when every row of an implementation failed (its first error printed), else 0."""
    status = 0
    for impl, rows in df.groupby("impl"):
        if (rows["error"] != "").all():
            print(f"every '{impl}' row failed; the first: {rows['error'].iloc[0]}", file=sys.stderr)
            status = 1
    return status


def _prompt_ids(args, vocab_size):
    if args.prompt_ids:
        return [int(t) for t in json.loads(Path(args.prompt_ids).read_text())]
    g = torch.Generator().manual_seed(args.seed)
    return torch.randint(0, vocab_size, (args.prompt_tokens,), generator=g).tolist()


def _accept_profile(text):
    if text is None:
        return None
    values = [float(v) for v in text.split(",") if v]
    return values[0] if len(values) == 1 else [int(v) for v in values]


def _step(args):
    import tileinfer
    from tileinfer_profiling.step import profile_step

    # Only the options given: the engine's load() grows options over time.
    extra = {k: v for k, v in (("max_positions", args.max_positions), ("linear", args.linear)) if v is not None}
    engine = tileinfer.load(args.model, draft=args.draft, weights=args.weights, device=args.device,
                            backend=args.backend, **extra)
    prompt = _prompt_ids(args, engine.config.vocab_size)
    block_size = args.block_size or (16 if engine.drafter is not None else 1)
    runs = 1 + (not args.no_graphs and engine.device.type == "cuda")
    print(f"profiling {args.new_tokens} tokens after a {len(prompt)}-token prompt, block {block_size}: "
          f"{args.warmup} untimed warm-up and one traced run, {runs} time(s) (eager, then CUDA graphs) …",
          file=sys.stderr, flush=True)
    prof = profile_step(engine, prompt, block_size=block_size, max_new_tokens=args.new_tokens,
                        warmup=args.warmup, graphs=False if args.no_graphs else None,
                        accept_profile=_accept_profile(args.accept_profile))
    out = Path(args.out)
    summary = prof.summary.assign(weights=args.weights, model=str(args.model or "embedded default"),
                                  draft=str(args.draft or ("embedded default" if engine.drafter else None)),
                                  block_size=block_size)
    _write(out, "summary", summary, {})
    _write(out, "kernels", prof.kernels, {})
    if prof.graph_kernels is not None:
        _write(out, "kernels-graphs", prof.graph_kernels, {})
    breakdown = prof.gemm_vs_attention()
    if args.csv_only:  # no plotly needed (a GPU image may lack it)
        figures = {"per_layer": {}, "gemm_vs_attention": {}, "tokens_per_step": {}}
    else:
        from tileinfer_profiling import plots
        figures = {"per_layer": {"": plots.per_layer_figure(prof.per_layer())},
                   "gemm_vs_attention": {"": plots.step_breakdown_figure(breakdown)},
                   "tokens_per_step": {"": plots.tokens_per_step_figure(prof.tokens_per_step)}}
    _write(out, "per_layer", prof.per_layer(), figures["per_layer"])
    _write(out, "gemm_vs_attention", breakdown.reset_index(), figures["gemm_vs_attention"])
    _write(out, "tokens_per_step", _tps_frame(prof.tokens_per_step), figures["tokens_per_step"])
    try:
        _write(out, "launches", prof.launch_table(engine.config, len(prompt) + args.new_tokens // 2, args.weights), {})
    except ValueError as e:  # e.g. a reply of one token has no decoding step
        print(f"no launch table: {e}", file=sys.stderr)
    _write(out, "idle_gaps", prof.idle_gaps(), {})
    print(prof.summary.T.to_string())


def _tps_frame(tokens_per_step):
    import pandas as pd
    return pd.DataFrame({"step": range(len(tokens_per_step)), "tokens": tokens_per_step})


def _ceilings_cmd(args):
    from tileinfer_profiling import ceilings
    c = ceilings.measure(args.device, refresh=args.refresh)
    print(json.dumps(c.as_dict(), indent=1))


def _compare(args):
    import pandas as pd
    from tileinfer_profiling import plots
    from tileinfer_profiling.compare import bandwidth_comparison, load_reference, read_rows

    reference = load_reference(args.reference)
    files = args.ours or []
    jsonl = [f for f in files if str(f).endswith(".jsonl")]
    frames = [read_rows(jsonl)] if jsonl else []
    frames += [pd.read_csv(f, keep_default_na=False) for f in files if f not in jsonl]
    ours = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    fractions = bandwidth_comparison(reference, ours, bandwidth=args.bandwidth)
    _write(Path(args.out), "comparison", fractions,
           {"": plots.reference_figure(fractions, bandwidth=args.bandwidth)})


def _compiled(args):
    from tileinfer_profiling import plots
    from tileinfer_profiling.compiled import compile_cases
    from tileinfer_profiling.run_info import relative
    print(f"compiling every launch site of a {args.preset} step for sm_{args.arch} in a worker process "
          "(minutes on a CPU; nothing is printed until it ends) …", file=sys.stderr, flush=True)
    table, opcodes = compile_cases(args.preset, args.arch, args.gpu, args.num_sms, _strs(args.ops or ""))
    ops = f" --ops '{args.ops}'" if args.ops else ""
    table["command"] = (f"tileinfer profile compiled --preset {args.preset} --arch {args.arch} --gpu '{args.gpu}'"
                        f" --num-sms {args.num_sms}{ops} --out {relative(args.out)}")
    out = Path(args.out)
    _write(out, "compiled", table, {"": plots.compiled_figure(table)})
    _write(out, "compiled_opcodes", opcodes, {})
    cols = ["op", "shape", "m", "kind", "kernel", "num_warps", "regs", "local_bytes", "shared_bytes", "blocks_per_sm",
            "tensor_cores", "loop_instructions", "binding_pipe", "instruction_over_floor"]
    print(table[[c for c in cols if c in table]].round(2).to_string(index=False))


def build_parser(prog="python -m tileinfer_profiling"):
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("sweep", help="kernel sweeps to CSV + HTML")
    s.add_argument("kind", choices=["attention", "gemm", "drafter-attention"])
    s.add_argument("--kv-lens", help="comma list (drafter-attention: context lengths)")
    s.add_argument("--q-lens", help="comma list (attention)")
    s.add_argument("--num-splits", help="comma list")
    s.add_argument("--block-size", type=int, help="drafter block (default 16)")
    s.add_argument("--heads", help="num_q_heads,num_kv_heads (default 32,8)")
    s.add_argument("--head-dim", type=int)
    s.add_argument("--ms", help="comma list of M (gemm)")
    s.add_argument("--weights", default="bf16,int8")
    s.add_argument("--impls", default="ours,cublas")
    s.add_argument("--device")
    s.add_argument("--out", required=True)
    s.set_defaults(fn=_sweep)

    t = sub.add_parser("step", help="profile a short generation: kernels per phase and layer, launches, idle gaps, busy %%")
    t.add_argument("--model", help="checkpoint directory or cached hub id (default: the embedded pair)")
    t.add_argument("--draft", help="DFlash drafter (default: the embedded pair's drafter with the embedded target)")
    t.add_argument("--weights", default="bf16", choices=["bf16", "fp16", "fp32", "int8"])
    t.add_argument("--prompt-tokens", type=int, default=8192, help="random prompt of this length")
    t.add_argument("--prompt-ids", help="JSON file with the prompt's token ids (instead of a random prompt)")
    t.add_argument("--new-tokens", "--max-new-tokens", dest="new_tokens", type=int, default=256)
    t.add_argument("--block-size", type=int, help="default: 16 with a drafter, else 1")
    t.add_argument("--accept-profile", help="mean tokens per step, or a comma list of per-step counts")
    t.add_argument("--warmup", type=int, default=1)
    t.add_argument("--no-graphs", action="store_true", help="skip the CUDA-graph run")
    t.add_argument("--backend", choices=["triton", "torch"])
    t.add_argument("--device")
    t.add_argument("--max-positions", type=int)
    t.add_argument("--linear", choices=["ours", "cublas"], help="the engine's linear implementation")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--csv-only", action="store_true", help="write the tables only, no HTML figures")
    t.add_argument("--out", required=True)
    t.set_defaults(fn=_step)

    c = sub.add_parser("ceilings", help="measure (or read the cached) read/copy bandwidth and bf16 matmul rate")
    c.add_argument("--device")
    c.add_argument("--refresh", action="store_true")
    c.set_defaults(fn=_ceilings_cmd)

    k = sub.add_parser("compiled", help="every kernel compiled for a GPU target (no GPU needed): registers, "
                       "spills, shared memory, blocks per SM, SASS opcodes")
    k.add_argument("--preset", default="qwen3-4b", help="model shapes (tileinfer.random_weights presets)")
    k.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 90 for H100/H200")
    k.add_argument("--gpu", default="NVIDIA H200", help="whose tuned GEMM configs (tileinfer/ops/configs)")
    k.add_argument("--num-sms", type=int, default=132)
    k.add_argument("--ops", help="comma list of op prefixes, e.g. 'linear,decode attention'")
    k.add_argument("--out", required=True)
    k.set_defaults(fn=_compiled)

    r = sub.add_parser("compare", help="the reference comparison as fractions of each GPU's bandwidth")
    r.add_argument("--reference", required=True, help="the comparison's figures: one per row (engine, gpu, "
                   "gpu_bandwidth_gbs, point, task, weights, metric, value, ...)")
    r.add_argument("--ours", nargs="+", help="our bench rows: JSON-lines row files (comparison_1k_h200.jsonl ...) "
                   "or CSVs (engine, gpu, gpu_bandwidth_gbs, point, task, weights, dflash, ...)")
    r.add_argument("--bandwidth", choices=["datasheet", "recorded"], default="datasheet",
                   help="divide by each GPU's datasheet bandwidth (as the reference's figures are) or by the rows' own")
    r.add_argument("--out", required=True)
    r.set_defaults(fn=_compare)
    return p


def main(argv=None, prog="python -m tileinfer_profiling"):
    args = build_parser(prog).parse_args(argv)
    return args.fn(args) or 0


def tileinfer_main(argv=None):
    """The `tileinfer` console script: `tileinfer generate ...` (the engine's) and `tileinfer profile ...`."""
    from tileinfer.cli import main as engine_main

    profile = ("kernel sweeps, step profiles, ceilings, the reference comparison, compiled kernels",
               lambda rest: main(rest, prog="tileinfer profile"))
    return engine_main(argv, commands={"profile": profile}, examples=examples())


def examples():
    """Prompts for `tileinfer generate --example NAME`: the benchmark's 1k prompts, on which the embedded
    pair was trained (its acceptance shows there), {name: (description, text())}."""
    from tileinfer_profiling.prompts import EXAMPLE_POINT, example_text

    return {task: (f"the benchmark's {EXAMPLE_POINT} {task} prompt: {what}", lambda task=task: example_text(task))
            for task, what in (("edit", "rename a type in a Julia module and reply with the whole file"),
                               ("explain", "explain a Julia module"))}
