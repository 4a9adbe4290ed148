"""The training tasks: prompts drawn from compositional phrasings and layouts, and the edits whose
replies are computed from the code.

A task example is (prompt, reply). Kinds: copy (repeat the code unchanged; `scramble` makes code of
shuffled lines for some copies), rename (an identifier
throughout), reindent, literal (change a number everywhere), reorder (swap two top-level
definitions), continue (the rest of a file) and explain (a summary, `tools/train/explain.py`).
Instructions come from `tools/train/phrasing.py`, layouts from `tools/train/layouts.py`; neither can
produce a held-out phrasing or layout marker (`tileinfer_profiling.prompts.heldout`), which
`tests/test_train_data.py` checks. The benchmark's own two templates are `BENCH_LAYOUT` with
`BENCH_INSTRUCTIONS`, used as they are by the "bench" kind (`tools/train/data.py`).
"""

import re

from tileinfer_profiling.prompts import EDIT as BENCH_EDIT, EXPLAIN as BENCH_EXPLAIN
from tileinfer_profiling.prompts.source import python_blocks  # noqa: F401 (tests use it)
from tools.train import layouts, phrasing

BENCH_LAYOUT = "{code}\n\n### Task: {instruction}\n### Reply:\n"
BENCH_INSTRUCTIONS = {
    "rename": "rename the type {old} to {new} throughout the code above and reply with the whole updated file.",
    "explain": "explain what the code above does.",
}
assert BENCH_LAYOUT.format(code="{code}", instruction=BENCH_INSTRUCTIONS["rename"]) == BENCH_EDIT
assert BENCH_LAYOUT.format(code="{code}", instruction=BENCH_INSTRUCTIONS["explain"]) == BENCH_EXPLAIN
EDIT_KINDS = ("rename", "reindent", "literal", "reorder")
KINDS = ("copy",) + EDIT_KINDS + ("continue", "explain")


def scramble(rng, code, longest_run=4):
    """The lines of `code` in another order, moved in runs of 1 to `longest_run` lines: text that no
    recollection of the source reproduces, so only reading it back can (the copy kind's hard half)."""
    lines = code.split("\n")
    runs, i = [], 0
    while i < len(lines):
        k = rng.randint(1, longest_run)
        runs.append(lines[i:i + k])
        i += k
    if len(runs) > 1:
        order = list(range(len(runs)))
        while order == sorted(order):
            rng.shuffle(order)
        runs = [runs[j] for j in order]
    return "\n".join(line for run in runs for line in run)


def indent(code, spaces=4):
    return "".join(" " * spaces + line if line.strip() else line for line in code.splitlines(keepends=True))


def prompt(rng, kind, code, lang, **fields):
    """The prompt of `kind` for `code`: a drawn layout (instruction before or after the code) and a
    drawn instruction, its placeholders filled from `fields`."""
    where = "before" if rng.random() < 0.55 else "after"
    template = layouts.layout(rng, where, lang, indent_ok=kind not in ("reindent", "continue"))
    instruction = phrasing.instruction(rng, kind, where).format(**fields)
    if not code.endswith("\n"):
        code += "\n"
    indented = indent(code) if "{indented_code}" in template else ""
    return template.format(code=code, indented_code=indented, instruction=instruction)


def rename(code, old, new):
    return re.sub(rf"\b{re.escape(old)}\b", new, code)


def identifiers(code, lang):
    """Names defined in `code` and used at least twice: what a rename edit picks from."""
    if lang == "python":
        names = re.findall(r"^\s*(?:def|class) (\w+)", code, re.M) + re.findall(r"^\s*(\w+) = ", code, re.M)
    elif lang == "julia":
        names = re.findall(r"^(?:mutable struct|struct|function|abstract type) (\w+)", code, re.M)
    elif lang == "c":
        names = re.findall(r"#\s*define (\w+)", code) + re.findall(r"\b(?:struct|typedef \w+) (\w+)", code)
    else:
        names = re.findall(r"^(\w+)\(\) *\{", code, re.M) + re.findall(r"^\s*(\w+)=", code, re.M)
    return [n for n in dict.fromkeys(names) if len(n) > 2 and len(re.findall(rf"\b{n}\b", code)) >= 2]


def new_identifier(rng, old, code):
    """A name in the style of `old` (CamelCase, snake_case, UPPER) that `code` does not use."""
    words = ["record", "entry", "handler", "buffer", "context", "cursor", "payload", "widget", "matrix",
             "ledger", "beacon", "vector", "signal", "anchor", "socket", "parcel", "metric", "filter"]
    while True:
        parts = rng.sample(words, rng.choice([1, 2]))
        if old.isupper():
            new = "_".join(parts).upper()
        elif old[:1].isupper():
            new = "".join(p.capitalize() for p in parts)
        else:
            new = "_".join(parts)
        if new != old and not re.search(rf"\b{new}\b", code):
            return new


def reindent(code, width):
    """Leading spaces in units of the code's own indent step, rewritten as `width` per level."""
    leads = [len(line) - len(line.lstrip(" ")) for line in code.split("\n") if line.strip()]
    step = min((n for n in leads if n), default=0)
    if not step or step == width:
        return None
    out = []
    for line in code.split("\n"):
        n = len(line) - len(line.lstrip(" "))
        out.append(" " * (n // step * width + n % step) + line[n:])
    return "\n".join(out)


def edit_example(rng, kind, code, lang):
    """(prompt, reply) of an edit of `kind` on `code`, or None when the code offers no such edit."""
    if kind == "rename":
        names = identifiers(code, lang)
        if not names:
            return None
        old = rng.choice(names)
        new = new_identifier(rng, old, code)
        return prompt(rng, kind, code, lang, old=old, new=new), rename(code, old, new)
    if kind == "reindent":
        width = rng.choice([2, 3, 8]) if lang != "c" else rng.choice([2, 4])
        reply = reindent(code, width)
        return None if reply is None else (prompt(rng, kind, code, lang, width=width), reply)
    if kind == "literal":
        numbers = [n for n in dict.fromkeys(re.findall(r"(?<![\w.])(\d+)(?![\w.])", code)) if len(n) < 6]
        if not numbers:
            return None
        old = rng.choice(numbers)
        new = str(int(old) + rng.choice([1, 2, 10, 100, 7]))
        reply = re.sub(rf"(?<![\w.]){old}(?![\w.])", new, code)
        return prompt(rng, kind, code, lang, old=old, new=new), reply
    assert kind == "reorder"
    parts = python_blocks(code) if lang == "python" else None
    named = [(i, m.group(1)) for i, b in enumerate(parts or [])
             if (m := re.match(r"(?:@.*\n)*(?:async )?(?:def|class) (\w+)", b.lstrip("\n")))]
    if len(named) < 2:
        return None
    (i, a), (j, b) = sorted(rng.sample(named, 2))
    code = "\n".join(parts)  # blank lines between blocks made uniform, so the reply differs only by the swap
    parts[i], parts[j] = parts[j], parts[i]
    return prompt(rng, kind, code, lang, a=a, b=b), "\n".join(parts)
