"""Every dense Qwen3 size on the GPU, checked against Hugging Face transformers on random weights.

Per size: a random checkpoint of the real shape written to disk (BF16), loaded by TileInfer in fp32 and
in BF16 and by transformers' Qwen3ForCausalLM in fp32, whose prompt logits are the truth both are held
to: fp32 tightly, BF16 as close as transformers' own BF16 gets (or the fixed bound, whichever is looser);
greedy tokens against transformers' greedy in the same dtype; a DFlash run with a random drafter against
TileInfer's own greedy decoding, both in exact mode (identical tokens). One CSV row per size × dtype,
written after each size so that a run cut short keeps what it checked; `check_s` is the row's wall time
(the first row of a size also runs transformers, and on a fresh machine compiles the kernels).
`--sizes tiny` runs the test preset (any device).

    python bench/sizes_check.py --sizes 0.6b,1.7b,4b,8b --out bench/results
"""

import argparse
import gc
import os
import shutil
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tileinfer  # noqa: E402
from bench.ref.metric import environment, gpu_tag, write_rows  # noqa: E402
from tileinfer.random_weights import PRESETS, write_dflash_drafter, write_qwen3  # noqa: E402
from tileinfer_profiling.run_info import command_line  # noqa: E402

# max |ours − transformers fp32| over max |transformers fp32| on the prompt's logits. BF16 passes within
# BF16_SLACK × transformers' own BF16 error (random weights can put that above the fixed bound).
TOLERANCE = {"fp32": 1e-4, "bf16": 5e-2}
BF16_SLACK = 1.25


def hf_model(path, dtype, device):
    from transformers import Qwen3ForCausalLM
    return Qwen3ForCausalLM.from_pretrained(str(path), torch_dtype=dtype, attn_implementation="sdpa").to(device).eval()


def rel_err(got, want) -> float:
    return ((got.float() - want).abs().max() / want.abs().max()).item()


def free(device):
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def transformers_reference(target, ids, new_tokens, device) -> dict:
    """fp32 logits, and per dtype transformers' greedy tokens and (BF16) its own logits' error."""
    hf = hf_model(target, torch.float32, device)
    prompt = torch.tensor([ids], device=device)
    ref = {}
    with torch.no_grad():
        for weights, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            hf = hf.to(dtype)
            logits = hf(prompt).logits[0].float()
            if weights == "fp32":
                ref["logits"] = logits
            ref[weights] = dict(err=rel_err(logits, ref["logits"]), tokens=hf.generate(
                prompt, max_new_tokens=new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist())
    del hf
    free(device)
    return ref


def check(size: str, root: Path, prompt_len: int, new_tokens: int) -> list[dict]:
    t0 = time.perf_counter()
    model = "tiny" if size == "tiny" else f"qwen3-{size}"
    target = write_qwen3(root / model, model, seed=1, dtype=torch.bfloat16, std=0.02)
    drafter = write_dflash_drafter(root / f"{model}-drafter", target, num_layers=2, seed=2)
    written_s = time.perf_counter() - t0
    rows, ref = [], None
    for weights in ("fp32", "bf16"):
        tic = time.perf_counter()
        engine = tileinfer.load(target, draft=drafter, weights=weights)
        if ref is None:
            ids = torch.randint(0, engine.config.vocab_size, (prompt_len,),
                                generator=torch.Generator().manual_seed(3)).tolist()
            ref = transformers_reference(target, ids, new_tokens, engine.device)
        err = rel_err(engine.prompt_logits(ids).to(engine.device), ref["logits"])
        bound = TOLERANCE[weights] if weights == "fp32" else max(TOLERANCE[weights], BF16_SLACK * ref["bf16"]["err"])
        engine.generate(ids, 4, stop_ids=[], block_size=1)  # compiled kernels and graphs, before the timed run
        plain = engine.generate(ids, new_tokens, stop_ids=[], block_size=1)
        exact_plain = engine.generate(ids, new_tokens, stop_ids=[], block_size=1, exact=True)
        spec = engine.generate(ids, new_tokens, stop_ids=[], exact=True)
        hf_tokens = ref[weights]["tokens"]
        agree = next((i for i, (a, b) in enumerate(zip(plain.tokens, hf_tokens)) if a != b), len(hf_tokens))
        rows.append(dict(
            model=model, weights=weights, prompt_tokens=prompt_len, new_tokens=new_tokens,
            logits_rel_err=err, transformers_bf16_rel_err=ref["bf16"]["err"], tolerance=bound, logits_ok=err <= bound,
            greedy_tokens_agree_with_transformers=agree, dflash_equals_greedy=spec.tokens == exact_plain.tokens,
            plain_tok_s=plain.stats.decode_tok_s, dflash_tokens_per_step=spec.stats.mean_tokens_per_step,
            checkpoint_write_s=written_s, check_s=time.perf_counter() - tic, weights_kind="random"))
        print({k: (round(v, 6) if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
        del engine
        free(ref["logits"].device)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0.6b,1.7b,4b,8b")
    parser.add_argument("--prompt-tokens", type=int, default=200)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--root", default=os.environ.get("TILEINFER_BENCH_ROOT", "/tmp/tileinfer-bench") + "/sizes")
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args(argv)
    known = ["tiny"] + [name.removeprefix("qwen3-") for name in PRESETS if name.startswith("qwen3-")]
    unknown = [size for size in args.sizes.split(",") if size not in known]
    if unknown:
        parser.error(f"--sizes: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    env = environment(measure_bandwidth=False)
    base = {k: env[k] for k in ("gpu", "torch", "triton", "git_rev")} | {"command": command_line()}
    import transformers
    base["transformers"] = transformers.__version__
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for size in args.sizes.split(","):
        rows += check(size, Path(args.root), args.prompt_tokens, args.new_tokens)
        path = write_rows([r | base for r in rows], out / f"sizes_check_{gpu_tag(base['gpu'])}.csv", last=tuple(base))
        for d in Path(args.root).glob(f"{rows[-1]['model']}*"):  # free the disk for the next size
            shutil.rmtree(d, ignore_errors=True)
    print(f"\n{base['gpu']}, torch {base['torch']}, triton {base['triton']}, transformers {base['transformers']}, "
          f"rev {base['git_rev']}; random weights; rows in {path}")
    print(f"{'model':11} {'weights':7} {'logits err':>10} {'bound':>9} {'ok':>3} {'greedy=HF':>9} {'dflash=greedy':>13} "
          f"{'tok/s':>7}")
    for r in rows:
        print(f"{r['model']:11} {r['weights']:7} {r['logits_rel_err']:10.2e} {r['tolerance']:9.2e} "
              f"{'yes' if r['logits_ok'] else 'NO':>3} "
              f"{r['greedy_tokens_agree_with_transformers']:>6}/{r['new_tokens']:<2} "
              f"{'yes' if r['dflash_equals_greedy'] else 'NO':>13} {r['plain_tok_s']:7.0f}")
    bad = [r for r in rows if not (r["logits_ok"] and r["dflash_equals_greedy"])]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
