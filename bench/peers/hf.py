"""Hugging Face transformers as most people run it, and its fastest plain-PyTorch path.

- `eager`: `model.generate` with the dynamic cache, SDPA attention, no compilation.
- `static-compile`: the gpt-fast recipe inside transformers: a static KV cache and the decode step
  compiled with `torch.compile(mode="reduce-overhead")` (CUDA graphs); `generate` compiles only the
  decode call (`cache_implementation="static"` + `compile_config`), the prefill stays eager.
  If that fails, the same recipe written out (`static-compile-loop`: a static-cache decode loop whose
  step is compiled with mode="reduce-overhead", `torch.compiler.cudagraph_mark_step_begin()` per step,
  its output cloned before the next replay); if that fails too, the static cache without compilation
  (`static`). The mode that ran and why are in `mode` and `note`.

Greedy; for random weights the replies never stop at EOS (the generation config's EOS is cleared).
"""

from dataclasses import dataclass, field

import torch

ENGINE = "transformers"
MODES = ("eager", "static-compile")


@dataclass
class Reply:
    """What one request gave: the new token ids (on the host), the decode steps that made them."""

    tokens: list
    steps: int
    tokens_per_step: float = 1.0
    acceptance: list = field(default_factory=list)


def version():
    import transformers
    return transformers.__version__


def load_model(path, device, dtype=torch.bfloat16):
    """The checkpoint as `AutoModelForCausalLM`, SDPA attention, on `device`, in eval mode."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, attn_implementation="sdpa")
    return model.to(device).eval()


def set_stop_ids(model, stop_ids):
    """`stop_ids=[]`: never stop at EOS (random weights); None: the checkpoint's own EOS."""
    if stop_ids is not None:
        model.generation_config.eos_token_id = list(stop_ids) or None
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = 0  # one sequence, no padding; silences the warning


def generate_kwargs(mode, new_tokens, compile=True):
    """Keyword arguments of `model.generate` for one request of `new_tokens` greedy tokens in `mode`
    ("eager" or "static"; `compile` only matters for "static")."""
    kw = dict(max_new_tokens=new_tokens, do_sample=False, num_beams=1)
    if mode == "eager":
        return kw
    if mode != "static":
        raise ValueError(f"generate_kwargs: mode {mode!r} is not 'eager' or 'static'")
    from transformers import CompileConfig
    kw["cache_implementation"] = "static"
    if compile:
        kw["compile_config"] = CompileConfig(mode="reduce-overhead")
    else:
        kw["disable_compile"] = True
    return kw


def _new_tokens(output, prompt_len):
    return output[0, prompt_len:].tolist()  # on the host: the device is done


class Generate:
    """`model.generate` in one mode; `compiled` says whether transformers compiled its decode step."""

    def __init__(self, model, mode, compile=True):
        self.model, self.mode, self.compile = model, mode, compile

    @torch.inference_mode()
    def __call__(self, ids, new_tokens):
        x = torch.tensor([ids], device=self.model.device)
        out = self.model.generate(x, **generate_kwargs(self.mode, new_tokens, self.compile))
        tokens = _new_tokens(out, len(ids))
        return Reply(tokens, steps=max(len(tokens) - 1, 0))

    @property
    def compiled(self):
        """Whether `generate` compiled its decode call: the model keeps it (`_compiled_call`), or Dynamo
        counted a graph."""
        if getattr(self.model, "_compiled_call", None) is not None:
            return True
        from torch._dynamo.utils import counters
        return bool(counters["stats"].get("unique_graphs"))


class CompiledLoop:
    """The gpt-fast loop on a transformers model: prefill eagerly into a `StaticCache`, then one compiled
    decode step per token (CUDA graphs on a GPU). `compile=False` runs the same loop uncompiled."""

    def __init__(self, model, compile=True):
        self.model, self.cache, self.max_len = model, None, 0
        self.compiled = compile and model.device.type == "cuda"
        self.step = torch.compile(self._step, mode="reduce-overhead", fullgraph=True) if self.compiled else self._step

    def _step(self, token, cache_position):
        logits = self.model(token, cache_position=cache_position, past_key_values=self.cache, use_cache=True,
                            return_dict=False)[0]
        return torch.argmax(logits[:, -1], dim=-1)[:, None]

    def _cache_for(self, length):
        from transformers import StaticCache
        if self.cache is None or self.max_len < length:
            self.cache, self.max_len = StaticCache(config=self.model.config, max_cache_len=length), length
        else:
            self.cache.reset()
        return self.cache

    @torch.inference_mode()
    def __call__(self, ids, new_tokens):
        device = self.model.device
        cache = self._cache_for(len(ids) + new_tokens)
        position = torch.arange(len(ids), device=device)
        logits = self.model(torch.tensor([ids], device=device), cache_position=position, past_key_values=cache,
                            use_cache=True, logits_to_keep=1, return_dict=False)[0]
        token = torch.argmax(logits[:, -1], dim=-1)[:, None]
        tokens = [token]
        position = torch.tensor([len(ids)], device=device)
        stop = self.model.generation_config.eos_token_id
        stop = set([stop] if isinstance(stop, int) else stop or [])
        for _ in range(new_tokens - 1):
            if stop and int(token) in stop:
                break
            if self.compiled:
                torch.compiler.cudagraph_mark_step_begin()
            token = self.step(token, position).clone()  # the next replay overwrites the graph's output
            tokens.append(token)
            position += 1
        out = torch.cat(tokens, dim=1)[0].tolist()
        if stop:  # stop at the first EOS, as generate does
            out = next((out[:i + 1] for i, t in enumerate(out) if t in stop), out)
        return Reply(out, steps=max(len(out) - 1, 0))


class HFRunner:
    """One transformers model in one mode (`eager` or `static-compile`), with static-compile's fallbacks.

    `prepare(ids, n)` runs the first replies, where a compiled recipe that fails moves to the next one
    (the `note` says why); `mode` is the recipe that then gives every measured reply.
    """

    engine = ENGINE
    dflash = False
    block_size = 1
    PREPARE_CALLS = 3  # CUDA graph trees record on the second or third call of a shape

    def __init__(self, model, mode, recipes=None):
        if mode not in MODES:
            raise ValueError(f"transformers mode {mode!r} is not one of {', '.join(MODES)}")
        self.model, self.version, self.notes = model, version(), []
        if recipes is not None:
            self.recipes = list(recipes)
        elif mode == "eager":
            self.recipes = [("eager", Generate(model, "eager"))]
        else:
            self.recipes = [("static-compile", Generate(model, "static")),
                            ("static-compile-loop", CompiledLoop(model)),
                            ("static", Generate(model, "static", compile=False))]
        self.mode, self.run = self.recipes[0]
        self.prepared = len(self.recipes) == 1

    @property
    def note(self):
        return "; ".join(self.notes)

    def prepare(self, ids, new_tokens):
        """Warm the recipe up on this prompt; on a failure fall back to the next recipe and start again."""
        while not self.prepared:
            try:
                for _ in range(self.PREPARE_CALLS):
                    self.run(ids, new_tokens)
                    self.run(ids, 1)
            except Exception as e:  # a compiled recipe that fails falls back, with a note
                i = [r for _, r in self.recipes].index(self.run)
                if i + 1 == len(self.recipes):
                    raise
                self.notes.append(f"{self.mode} failed ({type(e).__name__}: {str(e).splitlines()[0][:160]})")
                self.mode, self.run = self.recipes[i + 1]
                torch._dynamo.reset()
                continue
            self.prepared = True
            if self.mode.startswith("static-compile") and not self.run.compiled:
                self.notes.append(f"not compiled on {self.model.device.type}: "
                                  "transformers compiles the decode step on GPUs only")
                self.mode = "static"

    def reply(self, ids, new_tokens):
        return self.run(ids, new_tokens)

    def pass_times(self, ids, new_tokens):
        """(drafter, verify) ms per step: not timed apart for plain decoding."""
        return None, None
