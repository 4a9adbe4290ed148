"""Training data for the default pair: Python code plus edit/explain examples in the benchmark's templates.

Examples are whole (a prompt, its reply, `<|endoftext|>`) and packed into rows of `seq_len` tokens;
rows are padded with `<|endoftext|>` past their `lengths`. `replies` lists the (row, start, end)
spans of every reply, where the drafter's anchors are drawn most often.
"""

import ast
import json
import random
import re
from pathlib import Path

import numpy as np
import torch

from tileinfer_profiling.prompts import EDIT as BENCH_EDIT, EXPLAIN as BENCH_EXPLAIN, build_prompt, generate_module
from tileinfer_profiling.prompts.julia import TYPE_NAMES, filler_comment

EDIT = "{code}\n\n### Task: rename the type {old} to {new} throughout the code above and reply with the whole updated file.\n### Reply:\n"
EXPLAIN = "{code}\n\n### Task: explain what the code above does.\n### Reply:\n"
assert (EDIT, EXPLAIN) == (BENCH_EDIT, BENCH_EXPLAIN)

# Share of the token budget per kind of example.
MIX = {"julia_edit": 0.34, "python_edit": 0.16, "julia_explain": 0.10, "python_explain": 0.10,
       "julia_code": 0.04, "python_code": 0.26}
EXTRA_NAMES = ["Record", "Entry", "Handler", "Builder", "Context", "Manager", "Resolver", "Channel",
               "Payload", "Snapshot", "Cursor", "Document", "Profile", "Session", "Widget", "Matrix"]
TRAIN_SEED0 = 1000  # benchmark modules with seeds below this are never trained on


def rename(code, old, new):
    return re.sub(rf"\b{re.escape(old)}\b", new, code)


def listing(names, limit=6):
    names = list(names)
    if len(names) > limit:
        names = names[:limit] + [f"{len(names) - limit} more"]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def plural(n, word):
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def explain_python(code):
    """A short summary from the syntax tree: imports, classes with their methods, functions."""
    tree = ast.parse(code)
    imports, classes, functions = [], [], []
    for node in tree.body:
        if isinstance(node, ast.Import):
            imports += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            imports.append(node.module)
        elif isinstance(node, ast.ClassDef):
            methods = [n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            classes.append((node.name, methods))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.append(node.name)
    lines = [f"The code defines {plural(len(classes), 'class').replace('classs', 'classes')} "
             f"and {plural(len(functions), 'function')}."]
    if imports:
        lines.append(f"It imports {listing(dict.fromkeys(imports), 5)}.")
    for name, methods in classes[:4]:
        lines.append(f"The class {name} has the methods {listing(methods)}." if methods
                     else f"The class {name} has no methods.")
    if functions:
        lines.append(f"The functions are {listing(functions)}.")
    return "\n".join(lines) + "\n"


def explain_julia(code):
    """A short summary of a Julia module: its types, functions, Base extensions, the type used most."""
    module = re.search(r"^module (\w+)", code, re.M)
    types = re.findall(r"^(?:mutable struct|struct|abstract type) (\w+)", code, re.M)
    defs = re.findall(r"^(?:function )?([\w.!]+)\(.*?\)(?:\s*=|\s*$)", code, re.M)
    functions = [d for d in dict.fromkeys(defs) if "." not in d and d not in types]
    extends = [d for d in dict.fromkeys(defs) if d.startswith("Base.")]
    lines = [f"The code defines the module {module.group(1) if module else 'Main'} with "
             f"{plural(len(types), 'type')} and {plural(len(functions), 'function')}."]
    if types:
        lines.append(f"The types are {listing(types)}.")
    if functions:
        lines.append(f"The functions are {listing(functions)}.")
    if extends:
        lines.append(f"It extends {listing(extends)}.")
    if types:
        main = max(types, key=lambda t: len(re.findall(rf"\b{t}\b", code)))
        lines.append(f"The type {main} is used throughout the code.")
    return "\n".join(lines) + "\n"


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


def julia_code(rng, enc, max_tokens):
    """A benchmark-style module whose code has at most `max_tokens` tokens (parts, then filler)."""
    module = generate_module(rng.randrange(TRAIN_SEED0, 10**9))
    k = 1
    while len(enc(module.source(k + 1))) <= max_tokens and k < 60:
        k += 1
    code = module.source(k)
    if rng.random() < 0.5:
        room = max_tokens - len(enc(code))
        if room > 20:
            filler = filler_comment(rng.randrange(10**9), rng.randrange(room * 2, room * 4))
            while filler and len(enc(module.source(k, filler + "\n\n"))) > max_tokens:
                filler = filler[: int(len(filler) * 0.8)].rstrip()
            code = module.source(k, filler + "\n\n" if filler else "")
    return module, code


def python_chunk(rng, enc, text, max_tokens):
    """A run of whole top-level statements of `text` with at most `max_tokens` tokens, or None."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    lines = text.split("\n")
    spans = []
    for node in tree.body:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        spans.append((first - 1, node.end_lineno))
    if not spans:
        return None
    i = rng.randrange(len(spans)) if rng.random() < 0.7 else 0
    start = 0 if i == 0 else spans[i][0]
    end, n = None, 0
    for a, b in spans[i:]:
        n += len(enc("\n".join(lines[a:b]))) + 1
        if n > max_tokens:
            break
        end = b
    if end is None:
        return None
    code = "\n".join(lines[start:end]).strip("\n") + "\n"
    return code if len(enc(code)) <= max_tokens else None


def code_budget(rng, room):
    """Tokens for the code part: often near the benchmark's ~1k, sometimes much shorter."""
    return rng.randint(room * 7 // 10, room) if rng.random() < 0.6 else rng.randint(min(150, room // 2), room)


def new_name(rng, code):
    while True:
        pool = TYPE_NAMES if rng.random() < 0.6 else EXTRA_NAMES
        name = rng.choice(pool)
        if rng.random() < 0.2:
            name = rng.choice(["Base", "Fast", "Simple", "Sparse", "Local", "Cached"]) + name
        if not re.search(rf"\b{name}\b", code):
            return name


def make_example(kind, rng, enc, sources, seq_len):
    """(ids, reply_start) of one example of `kind`, or None when the drawn source does not fit."""
    room = (seq_len - 48) // 2
    if kind == "julia_edit":
        module, code = julia_code(rng, enc, code_budget(rng, room))
        names = re.findall(r"^(?:mutable struct|struct) (\w+)", code, re.M)
        old = module.type_name if rng.random() < 0.8 or not names else rng.choice(names)
        new = new_name(rng, code)
        return enc.example(EDIT.format(code=code, old=old, new=new), rename(code, old, new))
    if kind == "julia_explain":
        _, code = julia_code(rng, enc, code_budget(rng, seq_len - 200))
        return enc.example(EXPLAIN.format(code=code), explain_julia(code))
    if kind == "julia_code":
        _, code = julia_code(rng, enc, rng.randint(200, seq_len - 1))
        return enc(code) + [enc.eos], None
    text = rng.choice(sources)
    if kind == "python_code":
        ids = enc(text)[: seq_len - 1]
        return ids + [enc.eos], None
    budget = code_budget(rng, room if kind == "python_edit" else seq_len - 200)
    code = python_chunk(rng, enc, text, budget)
    if code is None:
        return None
    if kind == "python_explain":
        return enc.example(EXPLAIN.format(code=code), explain_python(code))
    classes = [c for c in re.findall(r"^\s*class (\w+)", code, re.M)
               if len(re.findall(rf"\b{c}\b", code)) >= 2]
    if not classes:
        return None
    old = rng.choice(classes)
    new = new_name(rng, code)
    return enc.example(EDIT.format(code=code, old=old, new=new), rename(code, old, new))


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


def build_dataset(tok, sources, num_tokens, seq_len=2048, seed=0, mix=MIX):
    """Draw examples until each kind has its share of `num_tokens`, shuffle, pack."""
    rng = random.Random(seed)
    enc = Encoder(tok)
    texts = [text for _, text in sources]
    examples, counts = [], {}
    for kind, share in mix.items():
        budget, n, k, misses = int(share * num_tokens), 0, 0, 0
        while n < budget and misses < 1000:
            ex = make_example(kind, rng, enc, texts, seq_len)
            if ex is None or len(ex[0]) > seq_len:
                misses += 1
                continue
            examples.append(ex)
            n, k = n + len(ex[0]), k + 1
        counts[kind] = {"examples": k, "tokens": n}
    rng.shuffle(examples)
    tokens, lengths, replies = pack(examples, seq_len, enc.eos)
    return tokens, lengths, replies, counts


def eval_prompts(tok, seeds=range(8), n_tokens=1024):
    """The benchmark's edit and explain prompts (seed 0 is the benchmark's own) as token ids."""
    return [{"task": task, "seed": s, "ids": build_prompt(task, n_tokens, tok, s).ids}
            for task in ("edit", "explain") for s in seeds]


def save_dataset(out_dir, tokens, lengths, replies, meta):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "tokens.npy", tokens)
    np.save(out / "lengths.npy", lengths)
    np.save(out / "replies.npy", replies)
    (out / "data.json").write_text(json.dumps(meta, indent=2) + "\n")


class TrainData:
    """The packed rows on the training machine: random batches, reply spans, a held-out tail."""

    def __init__(self, data_dir, held_out_rows=64):
        d = Path(data_dir)
        self.tokens = np.load(d / "tokens.npy")
        self.lengths = np.load(d / "lengths.npy")
        replies = np.load(d / "replies.npy")
        self.spans = [[] for _ in range(len(self.tokens))]
        for r, s, e in replies:
            self.spans[r].append((int(s), int(e)))
        self.num_train = max(1, len(self.tokens) - min(held_out_rows, len(self.tokens) // 10))

    def rows(self, idx, device):
        x = torch.from_numpy(self.tokens[idx].astype(np.int64)).to(device, non_blocking=True)
        lengths = torch.from_numpy(self.lengths[idx].astype(np.int64)).to(device)
        return x, lengths

    def batch(self, batch_size, gen, device, with_rows=False):
        idx = torch.randint(0, self.num_train, (batch_size,), generator=gen).numpy()
        x, lengths = self.rows(idx, device)
        return (x, lengths, idx) if with_rows else (x, lengths)

    def held_out(self, batch_size, device):
        for i in range(self.num_train, len(self.tokens), batch_size):
            idx = np.arange(i, min(i + batch_size, len(self.tokens)))
            x, lengths = self.rows(idx, device)
            yield x, lengths, [(j, s, e) for j, r in enumerate(idx) for s, e in self.spans[r]]
