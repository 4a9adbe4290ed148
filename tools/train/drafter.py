"""The DFlash drafter, trained with the reference package's own model class (`dflash.model`).

Per training row: the frozen target runs once with its hidden states; for anchors a the block is
[token a, mask × (block_size − 1)] at positions a … a + block_size − 1, the context is the target's
features of positions [0, a), and the labels are the target's greedy next tokens at a + 1 … (what the
target will say, not the data). All blocks of a row share one drafter pass: each sees its own context
prefix and its own block (non-causal), through a boolean attention mask.
"""

import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import Qwen3Config

from dflash.model import DFlashDraftModel, build_target_layer_ids, dflash_generate, extract_context_feature

from tools.train.rows import BASE_SEQ_LEN
from tools.train.target import budgeted_steps

QWEN3_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                "head_dim", "hidden_act", "rms_norm_eps", "attention_bias", "attention_dropout",
                "max_position_embeddings", "rope_theta", "rope_scaling", "rope_parameters",
                "tie_word_embeddings", "use_sliding_window", "sliding_window", "initializer_range",
                "bos_token_id", "eos_token_id", "pad_token_id", "dtype")


def drafter_config(target_config, mask_token_id, num_layers=2, block_size=16):
    """config.json of the drafter as z-lab writes it: Qwen3 fields + block_size + dflash_config."""
    num_target_layers = target_config["num_hidden_layers"]
    return {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
        **{k: target_config[k] for k in QWEN3_FIELDS},
        "num_hidden_layers": num_layers, "max_window_layers": num_layers, "use_cache": True,
        "block_size": block_size, "num_target_layers": num_target_layers,
        "dflash_config": {"mask_token_id": mask_token_id,
                          "target_layer_ids": build_target_layer_ids(num_target_layers, num_layers)},
    }


def build_drafter(config):
    hf = Qwen3Config(**{k: v for k, v in config.items() if k not in ("architectures", "model_type")})
    hf._attn_implementation = "sdpa"
    return DFlashDraftModel(hf)


def position_weights(block_size, decay=7.0):
    """Loss weight of block position k = 1 … block_size − 1: exp(−(k − 1) / decay)."""
    return torch.exp(-torch.arange(block_size - 1, dtype=torch.float32) / decay)


def sample_anchors(lengths, spans, n, rng, reply_share=0.75):
    """[len(lengths), n] anchor positions: most inside replies (where drafting happens), the rest anywhere."""
    out = np.empty((len(lengths), n), dtype=np.int64)
    for i, (length, row_spans) in enumerate(zip(lengths.tolist(), spans)):
        anywhere = rng.integers(1, max(2, length - 1), size=n)
        reply = [np.arange(s, e - 1) for s, e in row_spans if e - 1 > s]
        if reply:
            reply = np.concatenate(reply)
            k = int(n * reply_share)
            anywhere[:k] = rng.choice(reply, size=k)
        out[i] = anywhere
    return out


def block_mask(anchors, ctx_len, block_size):
    """[B, 1, n·bs, ctx_len + n·bs] bool: block j sees context positions < a_j and all of block j."""
    B, n = anchors.shape
    q_block = torch.arange(n * block_size, device=anchors.device) // block_size
    ctx = torch.arange(ctx_len, device=anchors.device)[None, None] < anchors.repeat_interleave(block_size, 1)[..., None]
    same = (q_block[:, None] == q_block[None, :]).expand(B, -1, -1)
    return torch.cat([ctx, same], dim=-1)[:, None]


def drafter_loss(drafter, target, x, lengths, anchors, weights):
    """Weighted cross-entropy of the drafter's block predictions against the target's greedy tokens."""
    B, S = x.shape
    bs = drafter.block_size
    with torch.no_grad():
        out = target(input_ids=x, output_hidden_states=True)
        features = extract_context_feature(out.hidden_states, drafter.target_layer_ids)
        greedy = out.logits.argmax(-1)
    offsets = torch.arange(bs, device=x.device)
    block_pos = anchors[..., None] + offsets  # [B, n, bs]
    block_ids = torch.full_like(block_pos, drafter.mask_token_id)
    block_ids[..., 0] = x.gather(1, anchors)
    label_pos = block_pos[..., 1:]
    labels = greedy.gather(1, (label_pos - 1).clamp(max=S - 1).flatten(1)).view_as(label_pos)
    valid = label_pos < lengths[:, None, None]
    noise = F.embedding(block_ids.flatten(1), target.get_input_embeddings().weight)
    position_ids = torch.cat([torch.arange(S, device=x.device).expand(B, S), block_pos.flatten(1)], dim=1)
    hidden = drafter(target_hidden=features, noise_embedding=noise, position_ids=position_ids,
                     attention_mask=block_mask(anchors, S, bs), past_key_values=None, use_cache=False)
    logits = target.lm_head(hidden.view(B, -1, bs, hidden.shape[-1])[:, :, 1:]).float()
    ce = F.cross_entropy(logits.flatten(0, 2), labels.flatten(), reduction="none").view_as(labels)
    w = weights.to(x.device) * valid
    with torch.no_grad():
        hit = (logits.argmax(-1) == labels) & valid
        # expected tokens per step if these blocks were verified: 1 + length of the all-correct prefix
        accepted = hit.int().cumprod(-1).sum(-1).float().mean() + 1
    return (ce * w).sum() / w.sum(), accepted


def train_drafter(drafter, target, data, seconds, batch_size=16, anchors_per_row=64, lr=1e-3, warmup=50,
                  max_steps=10**9, device="cuda", log_every=25, seed=0, log=print):
    target.to(device).eval().requires_grad_(False)
    drafter.to(device).train()
    opt = torch.optim.AdamW(drafter.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01,
                            fused=device == "cuda")
    weights = position_weights(drafter.block_size)
    gen, rng = torch.Generator().manual_seed(seed), np.random.default_rng(seed)
    history = []
    for step, elapsed, progress in budgeted_steps(opt, lr, warmup, seconds, max_steps):
        b = data.batch(batch_size, gen, device, progress)
        x, lengths = b.x, b.lengths
        n = max(1, anchors_per_row * x.shape[1] // BASE_SEQ_LEN)  # the same number of blocks per step
        anchors = torch.from_numpy(sample_anchors(lengths.cpu(), b.spans, n, rng)).to(device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss, accepted = drafter_loss(drafter, target, x, lengths, anchors, weights)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        if step % log_every == 0:
            row = {"step": step, "seconds": round(elapsed, 1), "seq_len": x.shape[1], "loss": round(loss.item(), 4),
                   "train_tokens_per_step": round(accepted.item(), 3), "lr": opt.param_groups[0]["lr"]}
            history.append(row)
            log(f"drafter {row}")
    return history


def save_drafter(drafter, config, out_dir):
    """model.safetensors in bf16 (`layers.N…`, `fc`, `hidden_norm`, `norm`; no embedding or LM head)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in drafter.state_dict().items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return sum(v.numel() for v in state.values())


def load_drafter_weights(drafter, in_dir):
    """Continue from a saved drafter (`save_drafter`'s file): every tensor must match, none may be left out."""
    state = load_file(str(Path(in_dir) / "model.safetensors"))
    drafter.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    return drafter


def measure_acceptance(drafter, target, prompts, eos_id, max_new_tokens=128, check_greedy=True):
    """Run the reference `dflash_generate` (greedy, the drafter's block) on each prompt: tokens per step.

    With `check_greedy`, also decode plainly (block 1) and report whether the outputs are identical.
    """
    import dflash.model as reference
    if not torch.cuda.is_available():  # its timers synchronize CUDA
        reference._cuda_time = time.perf_counter
    device = next(target.parameters()).device
    drafter.eval()
    target.eval()
    rows = []
    for p in prompts:
        ids = torch.tensor([p["ids"]], device=device)
        t0 = time.perf_counter()
        res = dflash_generate(drafter, target, ids, max_new_tokens, [eos_id], return_stats=True)
        seconds = time.perf_counter() - t0
        new = res.output_ids[0, ids.shape[1]:].tolist()
        acc = res.acceptance_lengths
        row = {**{k: v for k, v in p.items() if k != "ids"}, "prompt_tokens": ids.shape[1], "new_tokens": len(new),
               "steps": len(acc), "tokens_per_step": round(sum(acc) / max(len(acc), 1), 3),
               "acceptance_lengths": acc, "seconds": round(seconds, 3), "output_ids": new}
        if check_greedy:
            plain = dflash_generate(drafter, target, ids, max_new_tokens, [eos_id], block_size=1)
            row["same_as_greedy"] = plain[0, ids.shape[1]:].tolist() == new
        rows.append(row)
    return rows
