"""Benchmark prompts of an exact token count: a generated Julia module inside the edit or explain template.

The code part is sized for one tokenizer: whole parts of the module are added while the prompt
fits, then a comment paragraph is cut to the character so the encoded prompt has exactly
`n_tokens` tokens.
"""

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from tileinfer_profiling.prompts.julia import TYPE_NAMES, filler_comment, generate_module

# The embedded model was trained on exactly these templates.
EDIT = ("{code}\n\n### Task: rename the type {old} to {new} throughout the code above and reply "
        "with the whole updated file.\n### Reply:\n")
EXPLAIN = "{code}\n\n### Task: explain what the code above does.\n### Reply:\n"
TEMPLATES = {"edit": EDIT, "explain": EXPLAIN}
TASKS = tuple(TEMPLATES)
DATA = Path(__file__).parent / "data"


@dataclass(frozen=True)
class Point:
    name: str
    prompt_tokens: int
    new_tokens: int
    processes: int  # fresh processes per configuration whose results must agree


POINTS = {"1k": Point("1k", 1024, 128, 3), "8k": Point("8k", 8192, 2048, 2)}


class ByteTokenizer:
    """UTF-8 bytes shifted past three special ids: for checkpoints without a tokenizer (random weights)."""

    pad_token_id, bos_token_id, eos_token_id = 0, 1, 2
    offset = 3
    vocab_size = 259
    name = "byte"

    def encode(self, text):
        return [b + self.offset for b in text.encode("utf-8")]

    def decode(self, ids):
        return bytes(i - self.offset for i in ids if i >= self.offset).decode("utf-8", "replace")


def encode_ids(tokenizer, text):
    """Token ids of `text`, no special tokens added, for a `tokenizers.Tokenizer` or any `encode(text)`."""
    try:
        import tokenizers
        if isinstance(tokenizer, tokenizers.Tokenizer):
            return tokenizer.encode(text, add_special_tokens=False).ids
    except ImportError:
        pass
    out = tokenizer.encode(text)
    return list(getattr(out, "ids", out))


@dataclass
class Prompt:
    task: str
    n_tokens: int
    seed: int
    old: str
    new: str
    text: str
    ids: list
    tokenizer: str = ""


def rename_pair(seed=0):
    """(old, new): the module's main type and a name not used in it."""
    module = generate_module(seed)
    new = random.Random(seed + 7919).choice([t for t in TYPE_NAMES if t != module.type_name])
    return module.type_name, new


def build_prompt(task, n_tokens, tokenizer, seed=0):
    """The `Prompt` of `task` whose encoding has exactly `n_tokens` ids."""
    if task not in TEMPLATES:
        raise ValueError(f"unknown task {task!r}: use one of {', '.join(TASKS)}")
    module = generate_module(seed)
    old, new = rename_pair(seed)

    def prompt(code):
        return TEMPLATES[task].format(code=code, old=old, new=new)

    def count(k, filler=""):
        return len(encode_ids(tokenizer, prompt(module.source(k, filler))))

    if count(0) > n_tokens:
        raise ValueError(f"{n_tokens} tokens cannot hold even an empty module ({count(0)} tokens)")
    k = last_fitting(lambda k: count(k) <= n_tokens)
    for k_try in range(k, max(k - 3, -1), -1):
        for attempt in range(4):
            filler = _fit_filler(lambda f: count(k_try, f), n_tokens, seed * 1009 + attempt)
            if filler is not None:
                text = prompt(module.source(k_try, filler))
                ids = list(encode_ids(tokenizer, text))
                assert len(ids) == n_tokens
                return Prompt(task, n_tokens, seed, old, new, text, ids,
                              getattr(tokenizer, "name", "") or "")
    raise ValueError(f"could not render {task} at exactly {n_tokens} tokens with this tokenizer")


def render_prompt(task, n_tokens, tokenizer, seed=0):
    """(text, ids) of the `task` prompt ("edit" | "explain") with exactly `n_tokens` tokens."""
    p = build_prompt(task, n_tokens, tokenizer, seed)
    return p.text, p.ids


def last_fitting(fits):
    """Largest k with fits(k), given fits(0) and fits monotone: gallop, then bisect."""
    hi = 1
    while fits(hi):
        hi *= 2
    lo = hi // 2 if hi > 1 else 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _fit_filler(count, n_tokens, seed):
    """A filler (comment prefix + blank line, or "") for which count(filler) == n_tokens, else None."""
    gap = n_tokens - count("")
    if gap == 0:
        return ""
    assert gap > 0
    text = filler_comment(seed, 6 * gap + 100)

    def f(c):
        return count(text[:c] + "\n\n")

    while f(len(text)) < n_tokens:
        text = text + "\n" + filler_comment(seed + 1, len(text))
    lo, hi = 0, len(text)  # smallest c with f(c) >= n_tokens, BPE counts being near-monotone in c
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if f(mid) < n_tokens else (lo, mid)
    for c in sorted(range(max(1, hi - 40), min(len(text), hi + 40) + 1), key=lambda c: abs(c - hi)):
        if f(c) == n_tokens:
            return text[:c] + "\n\n"
    return None


def tokenizer_from_path(path):
    """"byte" -> ByteTokenizer; a tokenizer.json, or a directory holding one -> tokenizers.Tokenizer."""
    if str(path) == "byte":
        return ByteTokenizer()
    import tokenizers
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise FileNotFoundError(f"no tokenizer.json at {path}: pass the file, its directory, or 'byte'")
    return tokenizers.Tokenizer.from_file(str(p))


def prompt_path(name, task, point):
    return DATA / name / f"{task}-{point}.json"


def store_prompt(prompt, name, point):
    """Write data/<name>/<task>-<point>.json (text and exact ids)."""
    path = prompt_path(name, prompt.task, point)
    path.parent.mkdir(parents=True, exist_ok=True)
    row = asdict(prompt) | {"tokenizer": name, "point": point}
    path.write_text(json.dumps(row, separators=(",", ":")) + "\n")
    return path


def load_prompt(task, point, tokenizer=None, name=None, seed=0):
    """The stored prompt of `name` when it still encodes to its ids with `tokenizer`, else rendered now."""
    tokenizer = tokenizer or ByteTokenizer()
    name = name or getattr(tokenizer, "name", None)
    n_tokens = POINTS[point].prompt_tokens
    if name and prompt_path(name, task, point).is_file():
        row = json.loads(prompt_path(name, task, point).read_text())
        if row["seed"] == seed and list(encode_ids(tokenizer, row["text"])) == row["ids"]:
            row.pop("point")
            return Prompt(**row)
    return build_prompt(task, n_tokens, tokenizer, seed)


EXAMPLE_POINT = "1k"


def example_text(task, point=EXAMPLE_POINT):
    """The text of the benchmark's `task` prompt as stored for the embedded pair's tokenizer (exactly
    POINTS[point].prompt_tokens of its tokens): what `tileinfer generate --example` sends."""
    return json.loads(prompt_path("default", task, point).read_text())["text"]
