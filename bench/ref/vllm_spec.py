"""The comparison's workload on vLLM, set up as the comparison ran it, with the same rows as tileinfer_spec.

    python -m bench.ref.vllm_spec --model Qwen/Qwen3-4B --draft z-lab/Qwen3-4B-DFlash-b16

DFlash with k = 15 (`speculative_config={"method": "dflash", ...}`), CUDA graphs and torch.compile
on, one sequence at a time, prefix caching off. INT8 runs a W8A16 compressed-tensors copy of the
checkpoint written by `tileinfer.quant.export_compressed_tensors` (vLLM runs it on Marlin). The
prompts are the same token ids TileInfer gets. vLLM is imported only inside the worker.
"""

import argparse
import sys
from pathlib import Path

from bench.ref.metric import (
    Row, decode_tok_s, environment, measure, timestamp, validate_row,
)
from bench.ref.procs import add_run_arguments, check_pinned, cpus_argv, emit_row
from bench.ref.tileinfer_spec import BENCH_ROOT, coordinate, parse_points
from tileinfer_profiling.prompts import POINTS, load_prompt, tokenizer_from_path
from tileinfer_profiling.run_info import command_line

NUM_SPECULATIVE_TOKENS = 15
VLLM_COMPILE = 3  # CompilationMode.VLLM_COMPILE: torch.compile + CUDA graphs (vLLM's default, written out)
MODE = "compile+cuda-graphs"  # what the rows' `mode` says
SPEC_METRICS = {"vllm:spec_decode_num_drafts": "num_drafts",
                "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens"}


def build_parser():
    ap = argparse.ArgumentParser(prog="python -m bench.ref.vllm_spec", description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="target checkpoint directory (BF16)")
    ap.add_argument("--draft", help="DFlash drafter checkpoint")
    ap.add_argument("--int8-model", help="W8A16 compressed-tensors copy of --model "
                    "(default: exported once under $TILEINFER_BENCH_ROOT, ~/.cache/tileinfer-bench/)")
    ap.add_argument("--points", type=parse_points, default=parse_points("1k,8k"))
    ap.add_argument("--tasks", default="edit,explain")
    ap.add_argument("--weights", default="bf16,int8")
    ap.add_argument("--dflash", default="on")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    ap.add_argument("--attention-backend", default=None, help="e.g. TRITON_ATTN (default: vLLM's choice)")
    add_run_arguments(ap, "bench/runs/vllm-<time>.jsonl")
    return ap


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def build_llm_kwargs(args):
    """Keyword arguments of `vllm.LLM` for one worker's configuration (single point/weights/dflash)."""
    (point,) = args.points
    int8 = args.weights == "int8"
    if int8 and not args.int8_model:
        raise ValueError("int8 needs --int8-model (the coordinator exports one)")
    kw = dict(
        model=args.int8_model if int8 else args.model,
        tokenizer=args.model,
        dtype="bfloat16",
        max_num_seqs=1,
        enable_prefix_caching=False,
        max_model_len=point.prompt_tokens + point.new_tokens + 2 * (NUM_SPECULATIVE_TOKENS + 1),
        gpu_memory_utilization=args.gpu_memory_utilization,
        enforce_eager=False,
        compilation_config={"mode": VLLM_COMPILE},
        disable_log_stats=False,  # the speculative-decoding counters give the steps
        seed=0,
    )
    if args.dflash == "on":
        if not args.draft:
            raise ValueError("--dflash on needs --draft")
        kw["speculative_config"] = {"method": "dflash", "model": args.draft,
                                    "num_speculative_tokens": NUM_SPECULATIVE_TOKENS}
    if args.attention_backend:
        kw["attention_backend"] = args.attention_backend
    return kw


def build_sampling_params(max_tokens, sampling_params_cls=None):
    """Greedy, stopping at EOS, at most `max_tokens`; token ids only."""
    if sampling_params_cls is None:
        from vllm import SamplingParams as sampling_params_cls
    return sampling_params_cls(temperature=0.0, max_tokens=max_tokens, ignore_eos=False,
                               detokenize=False)


def spec_counts(metrics):
    """{'num_drafts', 'num_accepted_tokens'} from `LLM.get_metrics()` (counters named vllm:spec_decode_*)."""
    out = {v: 0 for v in SPEC_METRICS.values()}
    for m in metrics:
        if m.name in SPEC_METRICS:
            out[SPEC_METRICS[m.name]] += int(getattr(m, "value", 0))
    return out


def row_from_output(output, *, task, point, weights, dflash, timing, spec_delta, process, env,
                    command=None, version="", model=""):
    """The row of one prompt from a `RequestOutput`, its Timing and the spec counters' change over one reply."""
    new_tokens = len(output.outputs[0].token_ids)
    drafts = spec_delta.get("num_drafts", 0) if dflash else 0
    if drafts:
        steps, tokens_per_step = drafts, 1 + spec_delta["num_accepted_tokens"] / drafts
    else:
        steps, tokens_per_step = max(new_tokens - 1, 0), 1.0
    row = Row(
        engine="vllm", task=task, point=point, prompt_tokens=len(output.prompt_token_ids),
        new_tokens=new_tokens, weights=weights, dflash=dflash,
        block_size=NUM_SPECULATIVE_TOKENS + 1 if dflash else 1,
        latency_ms=timing.latency_ms, prefill_ms=timing.prefill_ms,
        decode_tok_s=decode_tok_s(new_tokens, timing.latency_ms, timing.prefill_ms),
        tokens_per_step=tokens_per_step, steps=steps, process=process, **env,
        command=command or command_line(), weights_kind="real", accept_mode="real",
        timestamp=timestamp(), latency_trials_ms=timing.latency_trials_ms,
        prefill_trials_ms=timing.prefill_trials_ms, model=model, version=version, mode=MODE,
    ).as_dict()
    return validate_row(row)


def run_worker(args, llm_cls=None, sampling_params_cls=None, emit=emit_row):
    if llm_cls is None:
        from vllm import LLM as llm_cls
    version = _vllm_version()
    (point,) = args.points
    dflash = args.dflash == "on"
    env = environment(measure_bandwidth=not args.datasheet_bandwidth)  # before vLLM reserves memory
    llm = llm_cls(**build_llm_kwargs(args))
    tokenizer = tokenizer_from_path(local_checkpoint(args.model))
    reply_params = build_sampling_params(point.new_tokens, sampling_params_cls)
    prefill_params = build_sampling_params(1, sampling_params_cls)
    rows = []
    for task in args.tasks.split(","):
        ids = load_prompt(task, point.name, tokenizer, name=Path(args.model).name).ids
        request = [{"prompt_token_ids": ids}]

        def run(params):
            return llm.generate(request, params, use_tqdm=False)[0]

        timing = measure(lambda: run(reply_params), lambda: run(prefill_params),
                         trials=args.trials, warmup_s=args.warmup_s)
        before = spec_counts(llm.get_metrics())
        output = run(reply_params)
        after = spec_counts(llm.get_metrics())
        delta = {k: after[k] - before[k] for k in after}
        row = row_from_output(output, task=task, point=point.name, weights=args.weights,
                              dflash=dflash, timing=timing, spec_delta=delta, process=args.process,
                              env=env, version=version, model=Path(args.model).name)
        emit(row)
        rows.append(row)
    return rows


def _vllm_version():
    try:
        import vllm
    except ImportError:
        return ""
    return getattr(vllm, "__version__", "")


def local_checkpoint(model):
    """A checkpoint directory, or the local Hugging Face cache's copy of a hub id."""
    if Path(model).is_dir():
        return Path(model)
    from tileinfer.checkpoint import resolve
    return resolve(model)


def export_int8(model):
    """A W8A16 compressed-tensors copy of `model` (quantized as TileInfer's quantize_int8), made once."""
    out = BENCH_ROOT / f"{Path(model).name}-w8a16"
    if not (out / "config.json").is_file():
        from tileinfer.quant import export_compressed_tensors
        export_compressed_tensors(model, out)
    return str(out)


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        check_pinned(args.cpus)
        run_worker(args)
        return
    try:
        import vllm  # noqa: F401
    except ImportError:
        raise SystemExit("vLLM is not installed here: skipping the vLLM half of the comparison")
    if "int8" in args.weights.split(",") and not args.int8_model:
        args.int8_model = export_int8(args.model)
    jobs = []
    for point in args.points:
        for weights in args.weights.split(","):
            for dflash in args.dflash.split(","):
                for process in range(args.processes or point.processes):
                    argv_w = [sys.executable, "-m", "bench.ref.vllm_spec", "--worker", "--process",
                              str(process), "--model", args.model, "--points",
                              point.name if point.name in POINTS else f"{point.prompt_tokens}/{point.new_tokens}",
                              "--weights", weights, "--dflash", dflash, "--tasks", args.tasks,
                              "--trials", str(args.trials), "--warmup-s", str(args.warmup_s),
                              "--gpu-memory-utilization", str(args.gpu_memory_utilization)]
                    for flag, value in (("--draft", args.draft), ("--int8-model", args.int8_model),
                                        ("--attention-backend", args.attention_backend)):
                        if value:
                            argv_w += [flag, value]
                    if args.datasheet_bandwidth:
                        argv_w.append("--datasheet-bandwidth")
                    argv_w += cpus_argv(args.cpus)
                    jobs.append((f"{point.name} {weights} dflash={dflash} #{process}", argv_w))
    coordinate(jobs, args.out, "vllm", args.timeout_s, cpus=args.cpus)


if __name__ == "__main__":
    main()
