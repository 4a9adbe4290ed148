"""python -m tools.train data|train … (see tools/train/README.md)."""

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path


def cmd_data(args):
    from tileinfer_profiling.prompts import generate_module
    from tools.train import data, tokenizer

    t0 = time.perf_counter()
    out = Path(args.out)
    sources = tokenizer.python_sources(seed=args.seed, limit=args.files)
    texts, n = [], 0
    for _, text in sources:
        texts.append(text)
        n += len(text)
        if n > args.tokenizer_mb * 1e6:
            break
    if args.tokenizer:  # keep an earlier tokenizer, so a target trained on it can continue
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(str(Path(args.tokenizer) / "tokenizer.json"))
        julia = []
    else:
        julia = [generate_module(data.TRAIN_SEED0 + i).source(12) for i in range(args.tokenizer_julia)]
        tok = tokenizer.train_tokenizer(texts + julia, args.vocab_size)
    tokenizer.save_tokenizer(tok, out / "tokenizer", args.max_positions)
    print(f"tokenizer: {tok.get_vocab_size()} ids from {len(texts)} files + {len(julia)} modules, "
          f"{time.perf_counter() - t0:.0f} s")
    tokens, lengths, replies, counts = data.build_dataset(tok, sources, args.num_tokens, args.seq_len, args.seed)
    prompts = data.eval_prompts(tok, range(args.eval_seeds), args.eval_tokens)
    meta = {"rows": len(tokens), "seq_len": args.seq_len, "tokens": int(lengths.sum()),
            "padding": round(1 - lengths.sum() / tokens.size, 4), "python_files": len(sources),
            "kinds": counts, "seed": args.seed}
    data.save_dataset(out, tokens, lengths, replies, meta)
    (out / "eval_prompts.json").write_text(json.dumps(prompts) + "\n")
    print(json.dumps(meta, indent=2))
    print(f"data: {tokens.nbytes / 2**20:.1f} MiB in {time.perf_counter() - t0:.0f} s")


def ship(pair, out, split_mib):
    """pair/ as out/pair.tar, split into parts of `split_mib` MiB (pair.tar.00, …) when split_mib > 0."""
    for old in out.glob("pair.tar*"):
        old.unlink()
    with tarfile.open(out / "pair.tar", "w") as tar:
        tar.add(pair, arcname="pair")
    if split_mib:
        subprocess.run(["split", "-b", f"{split_mib}M", "-d", str(out / "pair.tar"), str(out / "pair.tar.")],
                       check=True)
        os.remove(out / "pair.tar")


def cmd_train(args):
    import torch
    from tools.train import drafter as dr, target as tg
    from tools.train.data import TrainData

    torch.backends.cuda.matmul.allow_tf32 = True
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    out, pair = Path(args.out), Path(args.pair_dir)
    out.mkdir(parents=True, exist_ok=True)
    log_file = open(out / "log.txt", "w")

    def log(msg):
        print(msg, flush=True)
        log_file.write(msg + "\n")

    data = TrainData(args.data)
    tok_dir = Path(args.data) / "tokenizer"
    tok_cfg = json.loads((tok_dir / "tokenizer.json").read_text())
    vocab_size = len(tok_cfg["model"]["vocab"]) + sum(
        t["content"] not in tok_cfg["model"]["vocab"] for t in tok_cfg["added_tokens"])
    ids = {t["content"]: t["id"] for t in tok_cfg["added_tokens"]}
    eos_id, mask_id = ids["<|endoftext|>"], ids["<|mask|>"]
    shape = tg.TINY if args.tiny else {}
    t_cfg = tg.target_config(vocab_size, eos_id, max_position_embeddings=args.max_positions, **shape)
    results = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
               "torch": torch.__version__, "args": vars(args)}

    target = tg.build_target(t_cfg)
    if args.init_target:
        from safetensors.torch import load_file
        state = load_file(str(Path(args.init_target) / "model.safetensors"))
        target.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
        target.tie_weights()
        log(f"target initialised from {args.init_target}")
    t0 = time.perf_counter()
    hist_t = tg.train_target(target, data, args.target_seconds, args.batch_size, args.lr,
                             max_steps=args.target_steps, device=device, log=log) if args.target_seconds > 0 else []
    results["target_train_seconds"] = round(time.perf_counter() - t0, 1)
    target.to(torch.bfloat16)  # the drafter learns from, and is measured on, the weights we ship
    results["target_eval"] = tg.evaluate_target(target, data, device)
    log(f"target eval {results['target_eval']}")
    results["target_params"] = tg.save_target(target, t_cfg, tok_dir, pair / "target")
    ship(pair, out, args.split_mib)  # the target comes back even if a later stage fails

    d_cfg = dr.drafter_config(t_cfg, mask_id, args.drafter_layers, args.block_size)
    torch.manual_seed(args.seed)
    drafter = dr.build_drafter(d_cfg)
    t0 = time.perf_counter()
    hist_d = dr.train_drafter(drafter, target, data, args.drafter_seconds, args.drafter_batch_size,
                              args.anchors, args.drafter_lr, max_steps=args.drafter_steps, device=device, log=log)
    results["drafter_train_seconds"] = round(time.perf_counter() - t0, 1)
    drafter.to(torch.bfloat16)
    results["drafter_params"] = dr.save_drafter(drafter, d_cfg, pair / "drafter")

    prompts = json.loads((Path(args.data) / "eval_prompts.json").read_text())
    if args.eval_prompts:
        prompts = [p for p in prompts if p["seed"] < args.eval_prompts]
    t0 = time.perf_counter()
    rows = dr.measure_acceptance(drafter, target, prompts, eos_id, args.max_new_tokens)
    results["eval_seconds"] = round(time.perf_counter() - t0, 1)
    results["acceptance"] = rows
    summary = {}
    for task in sorted({r["task"] for r in rows}):
        rs = [r for r in rows if r["task"] == task]
        summary[task] = {"prompts": len(rs),
                         "mean_tokens_per_step": round(sum(r["tokens_per_step"] for r in rs) / len(rs), 3),
                         "seed0_tokens_per_step": next((r["tokens_per_step"] for r in rs if r["seed"] == 0), None),
                         "mean_new_tokens": round(sum(r["new_tokens"] for r in rs) / len(rs), 1),
                         "same_as_greedy": sum(r.get("same_as_greedy", False) for r in rs)}
    results["summary"] = summary
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "history.json").write_text(json.dumps({"target": hist_t, "drafter": hist_d}) + "\n")
    ship(pair, out, args.split_mib)
    log_file.close()
    print(f"\n{'task':8} {'prompts':>7} {'tok/step':>8} {'seed0':>6} {'new':>6} {'=greedy':>7}")
    for task, s in summary.items():
        print(f"{task:8} {s['prompts']:7} {s['mean_tokens_per_step']:8.3f} {s['seed0_tokens_per_step']!s:>6} "
              f"{s['mean_new_tokens']:6.1f} {s['same_as_greedy']:7}")
    print(f"target {results['target_params'] / 1e6:.2f} M params, {results['target_train_seconds']} s, "
          f"{results['target_eval']}; drafter {results['drafter_params'] / 1e6:.2f} M, {results['drafter_train_seconds']} s")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tools.train")
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data", help="tokenizer + packed training tokens + eval prompts (CPU)")
    d.add_argument("--out", default=".train_data")
    d.add_argument("--files", type=int, default=8000, help="Python files to draw from")
    d.add_argument("--tokenizer", default=None, help="reuse the tokenizer.json in this directory")
    d.add_argument("--tokenizer-mb", type=float, default=25.0)
    d.add_argument("--tokenizer-julia", type=int, default=300)
    d.add_argument("--vocab-size", type=int, default=4096)
    d.add_argument("--num-tokens", type=int, default=18_000_000)
    d.add_argument("--seq-len", type=int, default=2048)
    d.add_argument("--max-positions", type=int, default=16384)
    d.add_argument("--eval-seeds", type=int, default=8)
    d.add_argument("--eval-tokens", type=int, default=1024, help="prompt length of the eval prompts")
    d.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("train", help="target + drafter + acceptance (GPU)")
    t.add_argument("--data", default=".train_data")
    t.add_argument("--out", default=os.environ.get("OUT", "train_out"))
    t.add_argument("--pair-dir", default="/tmp/tileinfer_pair")
    t.add_argument("--device", default=None)
    t.add_argument("--tiny", action="store_true", help="tiny shapes for the CPU smoke test")
    t.add_argument("--init-target", default=None, help="start from this target directory")
    t.add_argument("--max-positions", type=int, default=16384)
    t.add_argument("--target-seconds", type=float, default=200)
    t.add_argument("--target-steps", type=int, default=10**9)
    t.add_argument("--batch-size", type=int, default=32)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--drafter-layers", type=int, default=2)
    t.add_argument("--block-size", type=int, default=16)
    t.add_argument("--drafter-seconds", type=float, default=120)
    t.add_argument("--drafter-steps", type=int, default=10**9)
    t.add_argument("--drafter-batch-size", type=int, default=16)
    t.add_argument("--anchors", type=int, default=64, help="blocks per row per step")
    t.add_argument("--drafter-lr", type=float, default=1e-3)
    t.add_argument("--eval-prompts", type=int, default=0, help="only seeds below this (0: all)")
    t.add_argument("--max-new-tokens", type=int, default=128)
    t.add_argument("--split-mib", type=int, default=15, help="split pair.tar into parts (0: keep whole)")
    t.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    {"data": cmd_data, "train": cmd_train}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
