"""tileinfer generate [MODEL] ["prompt" | --example edit] --max-new-tokens N [--draft PATH] …

The reply is printed as the engine commits it (token by token with plain decoding, a block at a time with
DFlash); what runs and the timings go to stderr."""

import argparse
import sys

from tileinfer.errors import RequestError, TileInferError


def _status(text):
    print(text, file=sys.stderr, flush=True)


def _prompt(args, examples):
    """The prompt text or ids, and a line saying what it is when it is an example."""
    if args.example is None:
        if args.prompt is None:
            raise RequestError("give a prompt (tileinfer generate \"def fib(n):\") or an example "
                               "(tileinfer generate --example edit)")
        return ([int(t) for t in args.prompt.split(",")] if args.ids else args.prompt), None
    if args.prompt is not None:
        raise RequestError("give either a prompt or --example, not both")
    if args.example not in examples:
        known = ", ".join(sorted(examples)) or "none: examples come with the `tileinfer` command"
        raise RequestError(f"unknown example {args.example!r}; examples: {known}")
    description, text = examples[args.example]
    return text(), description


def _generate(args, examples) -> int:
    import tileinfer
    from tileinfer.streaming import TextStream, watch

    if args.prompt is None and args.model is not None and args.example is None:
        args.model, args.prompt = None, args.model  # one positional argument: the prompt
    prompt, description = _prompt(args, examples)
    _status(f"loading {args.model or 'the embedded pair (tileinfer/assets/default)'} …")
    engine = tileinfer.load(args.model, draft=args.draft, weights=args.weights, device=args.device,
                            backend=args.backend)
    where = f"{engine.device.type}, {engine.backend} backend, {engine.weights}"
    _status(f"[{where}] {description + '; ' if description else ''}generating up to {args.max_new_tokens} tokens …")

    def write(text):
        sys.stdout.write(text)
        sys.stdout.flush()

    ids_shown = []
    if engine.tokenizer is not None:
        stream = TextStream(engine.tokenizer, write)
    else:  # token ids, comma-separated as they come
        def stream(ids):
            write(("," if ids_shown else "") + ",".join(map(str, ids)))
            ids_shown.extend(ids)
    with watch(engine, stream):
        out = engine.generate(prompt, args.max_new_tokens, block_size=args.block_size, eager=args.eager,
                              temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)
    if isinstance(stream, TextStream) and out.text is not None:
        stream.finish(out.text)
    elif ids_shown != out.tokens:
        write("\n" + ",".join(map(str, out.tokens)))
    write("\n")
    s = out.stats
    spec = f", {s.mean_tokens_per_step:.2f} tokens per step over {s.steps} steps (block {s.block_size})" if s.block_size > 1 else ""
    _status(f"\n[{where}] prompt {s.prompt_tokens} tokens, prefill {s.prefill_ms:.1f} ms; "
            f"{s.new_tokens} new tokens, decode {s.decode_tok_s:.1f} tok/s{spec}; stopped by {s.stop_reason}")
    return 0


def main(argv=None, commands=None, examples=None) -> int:
    """`commands`: more subcommands, {name: (help, run)}; `run(args)` gets every argument after the name
    (its own --help included) and returns the exit status. `examples`: prompts for `--example`,
    {name: (description, text())}."""
    commands, examples = commands or {}, examples or {}
    parser = argparse.ArgumentParser(prog="tileinfer", description="Qwen3 + DFlash inference on Triton kernels")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="generation from a prompt (greedy unless --temperature > 0), printed as it comes")
    gen.add_argument("model", nargs="?", default=None, help="checkpoint directory or cached hub id (default: the embedded pair)")
    gen.add_argument("prompt", nargs="?", default=None, help="prompt text (or comma-separated token ids with --ids)")
    gen.add_argument("--example", default=None, metavar="NAME",
                     help="a prompt the embedded pair was trained for instead of PROMPT: "
                          + (", ".join(f"{k} ({d})" for k, (d, _) in sorted(examples.items())) or "none here"))
    gen.add_argument("--draft", default=None, help="DFlash drafter checkpoint")
    gen.add_argument("--max-new-tokens", type=int, default=128)
    gen.add_argument("--block-size", type=int, default=None, help="DFlash block (1 = plain decoding)")
    gen.add_argument("--weights", default="bf16", choices=["bf16", "fp16", "fp32", "int8"])
    gen.add_argument("--device", default=None)
    gen.add_argument("--backend", default=None, choices=["triton", "torch"])
    gen.add_argument("--eager", action="store_true", help="no CUDA graphs")
    gen.add_argument("--ids", action="store_true", help="the prompt is comma-separated token ids")
    gen.add_argument("--temperature", type=float, default=0.0, help="0 (default): greedy; > 0: sampling")
    gen.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens")
    gen.add_argument("--top-p", type=float, default=None, help="sample within the top tokens of mass p")
    gen.add_argument("--seed", type=int, default=None, help="the same seed repeats a sampled run")
    for name, (help_text, _) in commands.items():
        sub.add_parser(name, help=help_text, add_help=False)
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] and argv[0] in commands:
            return commands[argv[0]][1](argv[1:])
        return _generate(parser.parse_args(argv), examples)
    except TileInferError as e:
        print(f"tileinfer: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
