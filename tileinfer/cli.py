"""tileinfer generate [MODEL] "prompt" --max-new-tokens N [--draft PATH] …"""

import argparse
import sys

from tileinfer.errors import TileInferError


def _generate(args) -> int:
    import tileinfer
    engine = tileinfer.load(args.model, draft=args.draft, weights=args.weights, device=args.device,
                            backend=args.backend)
    prompt = [int(t) for t in args.prompt.split(",")] if args.ids else args.prompt
    out = engine.generate(prompt, args.max_new_tokens, block_size=args.block_size, eager=args.eager,
                          temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)
    s = out.stats
    if out.text is not None:
        print(out.text)
    else:
        print(",".join(map(str, out.tokens)))
    where = f"{engine.device.type}, {engine.backend} backend, {engine.weights}"
    spec = f", {s.mean_tokens_per_step:.2f} tokens per step over {s.steps} steps (block {s.block_size})" if s.block_size > 1 else ""
    print(f"\n[{where}] prompt {s.prompt_tokens} tokens, prefill {s.prefill_ms:.1f} ms; "
          f"{s.new_tokens} new tokens, decode {s.decode_tok_s:.1f} tok/s{spec}; stopped by {s.stop_reason}",
          file=sys.stderr)
    return 0


def main(argv=None, commands=None) -> int:
    """`commands`: more subcommands, {name: (help, run)}; `run(args)` gets every argument after the name
    (its own --help included) and returns the exit status."""
    commands = commands or {}
    parser = argparse.ArgumentParser(prog="tileinfer", description="Qwen3 + DFlash inference on Triton kernels")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="generation from a prompt (greedy unless --temperature > 0)")
    gen.add_argument("model", nargs="?", default=None, help="checkpoint directory or cached hub id (default: the embedded pair)")
    gen.add_argument("prompt", help="prompt text (or comma-separated token ids with --ids)")
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
        return _generate(parser.parse_args(argv))
    except TileInferError as e:
        print(f"tileinfer: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
