"""python -m tools.train data|train|blend … (see tools/train/README.md)."""

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path


def parse_shares(text, flag, key=str):
    """"a:0.5,b:0.5" -> {a: 0.5, b: 0.5}, keys made by `key`; the shares must sum to 1."""
    try:
        out = {key(n): float(w) for n, w in (item.split(":") for item in text.split(","))}
    except ValueError:
        raise SystemExit(f"{flag} {text!r}: write names and shares as name:0.5,other:0.5")
    if abs(sum(out.values()) - 1) > 1e-6:
        raise SystemExit(f"{flag} {text!r}: the shares must sum to 1")
    return out


def parse_seq_lens(text):
    """"2048:0.5,4096:0.25,8192:0.25" -> {2048: 0.5, 4096: 0.25, 8192: 0.25} (shares of the tokens)."""
    out = parse_shares(text, "--seq-lens", int)
    if sorted(out) != list(out):
        raise SystemExit(f"--seq-lens {text!r}: row lengths must rise")
    return out


def parse_mix(text):
    """"copy:0.2,...,bench:0.3" -> the share of the tokens per kind of example (tools.train.data.KINDS)."""
    from tools.train.data import KINDS
    out = parse_shares(text, "--mix")
    unknown = sorted(set(out) - set(KINDS))
    if unknown:
        raise SystemExit(f"--mix {text!r}: unknown kinds {', '.join(unknown)} (known: {', '.join(KINDS)})")
    return out


def cmd_data(args):
    from tileinfer_profiling.prompts import generate_module
    from tools.train import budget, corpus, data, tokenizer

    t0 = time.perf_counter()
    out = Path(args.out)
    seq_lens = parse_seq_lens(args.seq_lens)
    mix = parse_mix(args.mix) if args.mix else data.MIX
    sources = {"python": corpus.collect("python", seed=args.seed, limit=args.files),
               "c": corpus.collect("c", seed=args.seed, limit=args.c_files),
               "shell": corpus.collect("shell", seed=args.seed, limit=args.shell_files)}
    texts, n = [], 0
    for lang in ("python", "c", "shell"):
        for _, text in sources[lang]:
            texts.append(text)
            n += len(text)
            if n > args.tokenizer_mb * 1e6 * (1.0 if lang == "python" else 1.25):
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
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    buckets, counts = data.build_dataset(tok, sources, args.num_tokens, seq_lens, args.seed, mix)
    prompts = data.eval_prompts(tok, range(args.eval_seeds), args.heldout_prompts)
    real = sum(int(b[1].sum()) for b in buckets.values())
    size = sum(b[0].size for b in buckets.values())
    meta = {"seed": args.seed, "tokens": real, "padding": round(1 - real / size, 4),
            "rows": {n: len(b[0]) for n, b in buckets.items()}, "seq_lens": seq_lens, "mix": mix, "kinds": counts,
            "julia_seeds": f">= {data.TRAIN_SEED0}",
            "files": {lang: [p for p, _ in src] for lang, src in sources.items()}}
    data.save_dataset(out, buckets, meta)
    (out / "eval_prompts.json").write_text(json.dumps(prompts) + "\n")
    print(json.dumps({k: v for k, v in meta.items() if k != "files"}, indent=1))
    print(f"files: " + ", ".join(f"{len(v)} {k}" for k, v in meta["files"].items()))
    mib = sum(b[0].nbytes for b in buckets.values()) / 2**20
    print(f"data: {mib:.1f} MiB in {time.perf_counter() - t0:.0f} s")
    est = budget.estimate(args.target_seconds, args.drafter_seconds, seq_lens, real,
                          [len(p["ids"]) for p in prompts])
    print(budget.report(est))


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


def summarize(rows):
    """Mean tokens per step, new tokens and lossless count per (set, task, point)."""
    summary = {}
    for key in dict.fromkeys((r["set"], r["task"], r["point"]) for r in rows):
        rs = [r for r in rows if (r["set"], r["task"], r["point"]) == key]
        summary["/".join(key)] = {
            "set": key[0], "task": key[1], "point": key[2], "prompts": len(rs),
            "mean_tokens_per_step": round(sum(r["tokens_per_step"] for r in rs) / len(rs), 3),
            "min_tokens_per_step": min(r["tokens_per_step"] for r in rs),
            "mean_new_tokens": round(sum(r["new_tokens"] for r in rs) / len(rs), 1),
            "same_as_greedy": sum(r.get("same_as_greedy", False) for r in rs)}
    return summary


def cmd_train(args):
    import torch
    from tools.train import drafter as dr, target as tg
    from tools.train.rows import TrainData

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
    target.to(device=device, dtype=torch.bfloat16)  # the drafter learns from, and is measured on, the weights we ship
    results["target_eval"] = tg.evaluate_target(target, data, device)
    log(f"target eval {results['target_eval']}")
    results["target_params"] = tg.save_target(target, t_cfg, tok_dir, pair / "target")
    ship(pair, out, args.split_mib)  # the target comes back even if a later stage fails

    d_cfg = dr.drafter_config(t_cfg, mask_id, args.drafter_layers, args.block_size)
    torch.manual_seed(args.seed)
    drafter = dr.build_drafter(d_cfg)
    if args.init_drafter:
        dr.load_drafter_weights(drafter, args.init_drafter)
        log(f"drafter initialised from {args.init_drafter}")
    t0 = time.perf_counter()
    hist_d = dr.train_drafter(drafter, target, data, args.drafter_seconds, args.drafter_batch_size,
                              args.anchors, args.drafter_lr, max_steps=args.drafter_steps, device=device, log=log)
    results["drafter_train_seconds"] = round(time.perf_counter() - t0, 1)
    drafter.to(torch.bfloat16)
    results["drafter_params"] = dr.save_drafter(drafter, d_cfg, pair / "drafter")

    prompts = json.loads((Path(args.data) / "eval_prompts.json").read_text())
    if args.eval_prompts:
        prompts = [p for p in prompts if p["seed"] < args.eval_prompts]
    if args.eval_max_tokens:
        prompts = [p for p in prompts if len(p["ids"]) <= args.eval_max_tokens]
    t0 = time.perf_counter()
    rows = dr.measure_acceptance(drafter, target, prompts, eos_id, args.max_new_tokens)
    results["eval_seconds"] = round(time.perf_counter() - t0, 1)
    results["acceptance"] = rows
    summary = summarize(rows)
    results["summary"] = summary
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    manifest = {"data": {k: v for k, v in json.loads((Path(args.data) / "data.json").read_text()).items()
                         if k != "files"},
                "train": {k: results[k] for k in ("device", "torch", "target_train_seconds", "target_eval",
                                                  "drafter_train_seconds")},
                "args": vars(args),
                "benchmark": {k: v for k, v in summary.items() if v["set"] == "benchmark"},
                "heldout": {k: v for k, v in summary.items() if v["set"] == "heldout"}}
    (pair / "training.json").write_text(json.dumps(manifest, indent=1) + "\n")
    (out / "history.json").write_text(json.dumps({"target": hist_t, "drafter": hist_d}) + "\n")
    ship(pair, out, args.split_mib)
    log_file.close()
    print(f"\n{'set':9} {'task':8} {'point':5} {'prompts':>7} {'tok/step':>8} {'new':>6} {'=greedy':>7}")
    for key, r in summary.items():
        print(f"{r['set']:9} {r['task']:8} {r['point']:5} {r['prompts']:7} {r['mean_tokens_per_step']:8.3f} "
              f"{r['mean_new_tokens']:6.1f} {r['same_as_greedy']:7}")
    print(f"target {results['target_params'] / 1e6:.2f} M params, {results['target_train_seconds']} s, "
          f"{results['target_eval']}; drafter {results['drafter_params'] / 1e6:.2f} M, {results['drafter_train_seconds']} s")


def cmd_blend(args):
    """Two drafters of one shape averaged weight by weight: (1 - weight) · a + weight · b, in fp32, stored in
    bf16 beside a's config.json (e.g. a drafter continued on new data, blended back toward the one it
    started from)."""
    import torch
    from safetensors.torch import load_file, save_file

    if not 0.0 <= args.weight <= 1.0:
        raise SystemExit(f"--weight {args.weight}: the share of --b must lie in [0, 1]")
    dirs = {"--a": Path(args.a), "--b": Path(args.b)}
    for flag, d in dirs.items():
        if not (d / "model.safetensors").is_file() or not (d / "config.json").is_file():
            raise SystemExit(f"{flag} {d}: not a drafter directory (model.safetensors and config.json)")
    configs = {flag: json.loads((d / "config.json").read_text()) for flag, d in dirs.items()}
    if configs["--a"] != configs["--b"]:
        differ = sorted(k for k in configs["--a"].keys() | configs["--b"].keys()
                        if configs["--a"].get(k) != configs["--b"].get(k))
        raise SystemExit(f"--a and --b are drafters of different configs ({', '.join(differ)} differ)")
    a, b = (load_file(str(d / "model.safetensors")) for d in dirs.values())
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in a):
        names = sorted(k for k in a.keys() | b.keys() if k not in a or k not in b or a[k].shape != b[k].shape)
        raise SystemExit(f"--a and --b hold different tensors: {', '.join(names[:5])}")
    blended = {k: ((1.0 - args.weight) * a[k].float() + args.weight * b[k].float()).to(torch.bfloat16).contiguous()
               for k in a}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    save_file(blended, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text((dirs["--a"] / "config.json").read_text())
    print(f"{out}: {1 - args.weight:g} × {args.a} + {args.weight:g} × {args.b}, {len(blended)} tensors")


def main(argv=None):
    from tools.train.data import SEQ_LENS

    ap = argparse.ArgumentParser(prog="python -m tools.train")
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data", help="tokenizer + packed training tokens + eval prompts (CPU)")
    d.add_argument("--out", default=".train_data")
    d.add_argument("--files", type=int, default=8000, help="Python files to draw from")
    d.add_argument("--c-files", type=int, default=3000, help="C headers to draw from")
    d.add_argument("--shell-files", type=int, default=1000, help="shell scripts to draw from")
    d.add_argument("--tokenizer", default=None, help="reuse the tokenizer.json in this directory")
    d.add_argument("--tokenizer-mb", type=float, default=25.0)
    d.add_argument("--tokenizer-julia", type=int, default=300)
    d.add_argument("--vocab-size", type=int, default=4096)
    d.add_argument("--num-tokens", type=int, default=24_000_000,
                   help="real tokens in all; the rows must stay under the GPU call's 64 MiB carry")
    d.add_argument("--seq-lens", default=",".join(f"{n}:{w}" for n, w in SEQ_LENS.items()),
                   help="row lengths and their token shares")
    d.add_argument("--mix", default=None, help="token shares per kind of example, e.g. copy:0.2,edit:0.2,"
                   "continue:0.1,explain:0.1,code:0.1,bench:0.3 (default: tools.train.data.MIX; bench_explain: "
                   "the benchmark's explain template alone)")
    d.add_argument("--max-positions", type=int, default=16384)
    d.add_argument("--eval-seeds", type=int, default=8)
    d.add_argument("--heldout-prompts", type=int, default=4, help="held-out prompts per task and length")
    d.add_argument("--target-seconds", type=float, default=235, help="for the printed time budget")
    d.add_argument("--drafter-seconds", type=float, default=150, help="for the printed time budget")
    d.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("train", help="target + drafter + acceptance (GPU)")
    t.add_argument("--data", default=".train_data")
    t.add_argument("--out", default=os.environ.get("OUT", "train_out"))
    t.add_argument("--pair-dir", default="/tmp/tileinfer_pair")
    t.add_argument("--device", default=None)
    t.add_argument("--tiny", action="store_true", help="tiny shapes for the CPU smoke test")
    t.add_argument("--init-target", default=None, help="start from this target directory")
    t.add_argument("--init-drafter", default=None,
                   help="continue from this drafter directory (same target, tokenizer and drafter shape)")
    t.add_argument("--max-positions", type=int, default=16384)
    t.add_argument("--target-seconds", type=float, default=235)
    t.add_argument("--target-steps", type=int, default=10**9)
    t.add_argument("--batch-size", type=int, default=32)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--drafter-layers", type=int, default=2)
    t.add_argument("--block-size", type=int, default=16)
    t.add_argument("--drafter-seconds", type=float, default=150)
    t.add_argument("--drafter-steps", type=int, default=10**9)
    t.add_argument("--drafter-batch-size", type=int, default=16)
    t.add_argument("--anchors", type=int, default=64, help="blocks per row per step")
    t.add_argument("--drafter-lr", type=float, default=1.5e-3)
    t.add_argument("--eval-prompts", type=int, default=0, help="only seeds below this (0: all)")
    t.add_argument("--eval-max-tokens", type=int, default=0, help="only prompts this long at most (0: all)")
    t.add_argument("--max-new-tokens", type=int, default=128)
    t.add_argument("--split-mib", type=int, default=15, help="split pair.tar into parts (0: keep whole)")
    t.add_argument("--seed", type=int, default=0)
    b = sub.add_parser("blend", help="two drafters averaged weight by weight (CPU)")
    b.add_argument("--a", required=True, help="a drafter directory")
    b.add_argument("--b", required=True, help="another drafter of the same config")
    b.add_argument("--weight", type=float, default=0.5, help="the share of --b")
    b.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    {"data": cmd_data, "train": cmd_train, "blend": cmd_blend}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
