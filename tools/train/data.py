"""Training rows for the default pair: copy, edit, continue and explain examples on code of several
languages, packed into a curriculum of row lengths.

Examples are whole (a prompt, its reply, `<|endoftext|>`); each is sized for one row length and
packed first-fit into rows of that length, padded with `<|endoftext|>` past their `lengths`.
`replies` lists the (row, start, end) spans where the drafter's anchors are drawn most often. The
prompts, layouts and files of `tileinfer_profiling.prompts.heldout` and the benchmark's modules
(seeds 0–7) are never drawn.
"""

import json
import random
from pathlib import Path

import numpy as np

from tileinfer_profiling.prompts import EDIT as BENCH_EDIT, EXPLAIN as BENCH_EXPLAIN, build_prompt, generate_module
from tileinfer_profiling.prompts.heldout import TASKS as HELDOUT_TASKS, heldout_prompt
from tileinfer_profiling.prompts.julia import TYPE_NAMES
from tileinfer_profiling.prompts.render import last_fitting
from tileinfer_profiling.prompts.source import blocks, paragraph_blocks
from tools.train import tasks
from tools.train.explain import EXPLAIN

# Share of the token budget per kind of example. With bench at 0.16 a pair trained from scratch fell on
# the benchmark's prompts (1k edit 15.9 -> 14.0, explain 14.2 -> 10.9 tokens per step) while it reached
# the held-out floors (bench/results/pair_training_v2_h200.json); the shipped pair had ~half its tokens there.
MIX = {"copy": 0.18, "edit": 0.22, "continue": 0.06, "explain": 0.10, "code": 0.12, "bench": 0.32}
# Every kind --mix may name: the default's, and the benchmark's explain template alone. In "bench" 70 % of the
# examples are edits whose replies repeat the module, so its explain replies (~90 tokens) are a few % of its
# tokens; "bench_explain" gives them a share of their own.
KINDS = (*MIX, "bench_explain")
BENCH_KINDS = ("bench", "bench_explain")
# Share of copy examples whose code has its lines shuffled in short runs (`tasks.scramble`): the shipped
# target paraphrased held-out Python docstrings it was asked to copy (pair_training_v3_h200.json), i.e.
# it recalled text like them rather than read them back; shuffled text can only be read back.
SCRAMBLED_COPY = 0.4
# Share of each kind's examples per language (only the languages with an explainer for "explain").
LANGS = {"python": 0.45, "julia": 0.25, "c": 0.20, "shell": 0.10}
# Share of the token budget per row length: the curriculum (`TrainData.sample_seq_len`).
SEQ_LENS = {2048: 0.4, 4096: 0.2, 8192: 0.2, 16384: 0.2}  # 16k rows: copies from ~8k tokens back, past position 8,192
TRAIN_SEED0 = 1000  # Julia modules with seeds below this are never trained on


class Encoder:
    def __init__(self, tok):
        self.tok = tok
        self.eos = tok.token_to_id("<|endoftext|>")

    def __call__(self, text):
        return self.tok.encode(text, add_special_tokens=False).ids

    def example(self, prompt, reply):
        """(ids, reply_start): prompt and reply encoded apart, as at inference, then EOS."""
        p = self(prompt)
        return p + self(reply) + [self.eos], len(p)


def cut(rng, enc, text, lang, budget):
    """A run of whole blocks of `text` (top-level statements for Python, else paragraphs) with about
    `budget` tokens at most, from a random block or the start; None when the first block is larger."""
    parts = blocks(text, lang) or paragraph_blocks(text)
    if not parts:
        return None
    start = rng.randrange(len(parts)) if rng.random() < 0.6 else 0
    end, n = start, 0
    while end < len(parts):
        k = len(enc(parts[end])) + 1
        if n + k > budget:
            break
        n, end = n + k, end + 1
    return "\n".join(parts[start:end]) if end > start else None


def julia_code(rng, enc, budget):
    """(module, code): a module of seed ≥ TRAIN_SEED0 with the most parts that fit `budget` tokens."""
    module = generate_module(rng.randrange(TRAIN_SEED0, 10**9))
    k = last_fitting(lambda k: k < 400 and len(enc(module.source(k))) <= budget)
    return module, module.source(k)


def code_budget(rng, seq_len, kind):
    """Tokens of code for an example of `kind` in a row of `seq_len`: copy and edit replies repeat the
    code, so they take half; short rows also get short examples."""
    room = (seq_len - 200) // 2 if kind in ("copy", "edit", "bench") else seq_len - 300
    low = 100 if seq_len == min(SEQ_LENS) else seq_len // 5
    return rng.randint(min(low, room), room)


def make_example(kind, lang, rng, enc, sources, seq_len):
    """(ids, reply_start) of one example, or None when the drawn source offers no such example."""
    budget = code_budget(rng, seq_len, kind)
    if kind in BENCH_KINDS:  # the benchmark's two templates, as the pair was first trained on
        module, code = julia_code(rng, enc, budget)
        if kind == "bench" and rng.random() < 0.7:
            new = rng.choice([t for t in TYPE_NAMES if t != module.type_name])
            return enc.example(BENCH_EDIT.format(code=code, old=module.type_name, new=new),
                               tasks.rename(code, module.type_name, new))
        return enc.example(BENCH_EXPLAIN.format(code=code), EXPLAIN["julia"](code))
    if lang == "julia":
        code = julia_code(rng, enc, budget)[1]
    else:
        code = cut(rng, enc, rng.choice(sources[lang])[1], lang, budget)
    if code is None:
        return None
    if kind == "code":
        ids = enc(code) + [enc.eos]
        return ids, min(16, len(ids) - 1)
    if kind == "copy":
        if rng.random() < SCRAMBLED_COPY:
            code = tasks.scramble(rng, code)
        return enc.example(tasks.prompt(rng, "copy", code, lang), code)
    if kind == "explain":
        reply = EXPLAIN[lang](code)
        return None if reply is None else enc.example(tasks.prompt(rng, "explain", code, lang), reply)
    if kind == "continue":
        lines = code.split("\n")
        if len(lines) < 8:
            return None
        k = rng.randint(len(lines) // 5, len(lines) * 3 // 5)
        head, rest = "\n".join(lines[:k]) + "\n", "\n".join(lines[k:])
        return enc.example(tasks.prompt(rng, "continue", head, lang), rest)
    assert kind == "edit"
    ex = tasks.edit_example(rng, rng.choice(tasks.EDIT_KINDS), code, lang)
    return None if ex is None else enc.example(*ex)


def pack(examples, seq_len, eos):
    """First-fit packing of whole examples into rows: (tokens [R, seq_len] uint16, lengths, replies)."""
    rows, fill, replies = [], [], []
    for ids, reply_start in examples:
        assert len(ids) <= seq_len
        for r in range(max(0, len(rows) - 16), len(rows)):
            if fill[r] + len(ids) <= seq_len:
                break
        else:
            rows.append(np.full(seq_len, eos, dtype=np.uint16))
            fill.append(0)
            r = len(rows) - 1
        rows[r][fill[r]: fill[r] + len(ids)] = ids
        if reply_start is not None:
            replies.append((r, fill[r] + reply_start, fill[r] + len(ids)))
        fill[r] += len(ids)
    return np.stack(rows), np.array(fill, dtype=np.int32), np.array(replies, dtype=np.int32).reshape(-1, 3)


def draw_lang(rng, kind, sources):
    langs = {lang: w for lang, w in LANGS.items() if lang == "julia" or sources.get(lang)}
    return rng.choices(list(langs), weights=list(langs.values()))[0]


def build_dataset(tok, sources, num_tokens, seq_lens=SEQ_LENS, seed=0, mix=MIX, max_misses=2000):
    """Per row length: draw examples until each kind has its share of the length's tokens, shuffle,
    pack. `sources` maps a language ("python", "c", "shell") to [(path, text)].
    Returns {seq_len: (tokens, lengths, replies)} and the counts per length, kind and language."""
    for kind in mix:
        if kind not in KINDS:
            raise ValueError(f"unknown example kind {kind!r}: use some of {', '.join(KINDS)}")
    rng = random.Random(seed)
    enc = Encoder(tok)
    out, counts = {}, {}
    for seq_len, len_share in seq_lens.items():
        examples, c = [], {}
        for kind, share in mix.items():
            budget, n, misses = int(share * len_share * num_tokens), 0, 0
            while n < budget and misses < max_misses:
                lang = "julia" if kind in BENCH_KINDS else draw_lang(rng, kind, sources)
                ex = make_example(kind, lang, rng, enc, sources, seq_len)
                if ex is None or len(ex[0]) > seq_len:
                    misses += 1
                    continue
                examples.append(ex)
                n += len(ex[0])
                key = f"{kind}/{lang}"
                c[key] = {"examples": c.get(key, {}).get("examples", 0) + 1,
                          "tokens": c.get(key, {}).get("tokens", 0) + len(ex[0])}
        if not examples:
            raise ValueError(f"no example fits rows of {seq_len} tokens: the sources are empty or too small")
        rng.shuffle(examples)
        out[seq_len] = pack(examples, seq_len, enc.eos)
        counts[seq_len] = c
    return out, counts


def eval_prompts(tok, seeds=range(8), heldout_per_task=4, points=(("1k", 1024), ("8k", 8192))):
    """The benchmark's 1k edit and explain prompts (seed 0 is the benchmark's own) and the held-out
    prompts at each point, as token ids."""
    rows = [{"set": "benchmark", "task": task, "point": "1k", "seed": s, "ids": build_prompt(task, 1024, tok, s).ids}
            for task in ("edit", "explain") for s in seeds]
    for point, n in points:
        for task in HELDOUT_TASKS:
            for i in range(heldout_per_task):
                p = heldout_prompt(task, n, tok, i)
                rows.append({"set": "heldout", "task": task, "point": point, "seed": i, "source": p.source,
                             "ids": p.ids})
    return rows


def save_dataset(out_dir, buckets, meta):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for seq_len, (tokens, lengths, replies) in buckets.items():
        np.save(out / f"tokens_{seq_len}.npy", tokens)
        np.save(out / f"lengths_{seq_len}.npy", lengths)
        np.save(out / f"replies_{seq_len}.npy", replies)
    (out / "data.json").write_text(json.dumps(meta, indent=2) + "\n")
