"""The target: a small Qwen3 (q/k norm, GQA, SwiGLU, RoPE, tied embeddings) trained on code and the
benchmark's edit/explain templates with bf16 autocast, AdamW and a cosine schedule."""

import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import Qwen3Config, Qwen3ForCausalLM

SHAPE = dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=6, num_attention_heads=6,
             num_key_value_heads=2, head_dim=64)
TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=6, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16)


def target_config(vocab_size, eos_id, max_position_embeddings=16384, rope_theta=1e6, **shape):
    """config.json of the target, in Hugging Face's Qwen3 field names."""
    shape = {**SHAPE, **shape}
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": vocab_size, **shape,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "attention_bias": False, "attention_dropout": 0.0,
        "max_position_embeddings": max_position_embeddings, "rope_theta": rope_theta,
        "rope_scaling": None, "rope_parameters": {"rope_type": "default", "rope_theta": rope_theta},
        "tie_word_embeddings": True, "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": shape["num_hidden_layers"], "initializer_range": 0.02, "use_cache": True,
        "bos_token_id": eos_id, "eos_token_id": eos_id, "pad_token_id": eos_id, "dtype": "bfloat16",
    }


def build_target(config):
    hf = Qwen3Config(**{k: v for k, v in config.items() if k not in ("architectures", "model_type")})
    hf._attn_implementation = "sdpa"
    return Qwen3ForCausalLM(hf)


def lm_loss(model, x, lengths):
    """Mean next-token cross-entropy over the real (unpadded) positions of the rows."""
    hidden = model.model(input_ids=x).last_hidden_state
    logits = model.lm_head(hidden[:, :-1]).float()
    loss = F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten(), reduction="none").view_as(x[:, 1:])
    valid = torch.arange(1, x.shape[1], device=x.device)[None] < lengths[:, None]
    return (loss * valid).sum() / valid.sum()


def cosine_lr(lr, step, warmup, frac, floor=0.1):
    return lr * min(1.0, (step + 1) / warmup) * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))


def budgeted_steps(opt, lr, warmup, seconds, max_steps):
    """Step numbers until `seconds` or `max_steps`, setting the learning rate of each: warm-up, then a
    cosine over whichever budget runs out first. Yields (step, seconds since the start, share of the
    budget used)."""
    start, step = time.perf_counter(), 0
    while step < max_steps:
        frac = max(step / max_steps, (time.perf_counter() - start) / seconds)
        if frac >= 1:
            return
        for group in opt.param_groups:
            group["lr"] = cosine_lr(lr, step, warmup, frac)
        yield step, time.perf_counter() - start, frac
        step += 1


def train_target(model, data, seconds, batch_size=32, lr=2e-3, warmup=100, max_steps=10**9,
                 device="cuda", log_every=25, seed=0, log=print):
    """Train until `seconds` or `max_steps`; the cosine runs over whichever comes first."""
    model.to(device).train()
    decay = [p for n, p in model.named_parameters() if p.ndim == 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), fused=device == "cuda")
    gen = torch.Generator().manual_seed(seed)
    history, tokens = [], 0
    for step, elapsed, progress in budgeted_steps(opt, lr, warmup, seconds, max_steps):
        b = data.batch(batch_size, gen, device, progress)
        x, lengths = b.x, b.lengths
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = lm_loss(model, x, lengths)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        tokens += int(lengths.sum())
        if step % log_every == 0:
            row = {"step": step, "seconds": round(elapsed, 1), "seq_len": x.shape[1], "loss": round(loss.item(), 4),
                   "lr": opt.param_groups[0]["lr"], "tokens": tokens}
            history.append(row)
            log(f"target {row}")
    return history


@torch.no_grad()
def evaluate_target(model, data, device, batch_size=8):
    """Held-out loss, and greedy next-token accuracy inside replies (how well it does the tasks)."""
    model.eval()
    losses, hits, total = [], 0, 0
    for b in data.held_out(batch_size, device):
        x = b.x
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
            losses.append(lm_loss(model, x, b.lengths).item())
            pred = model(input_ids=x).logits.argmax(-1)
        for r, s, e in ((r, s, e) for r, spans in enumerate(b.spans) for s, e in spans):
            hits += int((pred[r, s - 1:e - 1] == x[r, s:e]).sum())
            total += e - s
    return {"held_out_loss": round(sum(losses) / max(len(losses), 1), 4),
            "reply_token_accuracy": round(hits / max(total, 1), 4)}


def save_target(model, config, tokenizer_dir, out_dir):
    """model.safetensors in bf16 (tied: no lm_head.weight), config.json, tokenizer and generation config."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(torch.bfloat16).contiguous().cpu()
             for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    eos = config["eos_token_id"]
    gen = {"bos_token_id": eos, "eos_token_id": eos, "pad_token_id": eos, "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (out / name).write_bytes((Path(tokenizer_dir) / name).read_bytes())
    return sum(v.numel() for v in state.values())
