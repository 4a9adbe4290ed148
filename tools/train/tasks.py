"""The training tasks: phrasings and prompt layouts, and the edits whose replies are computed from the code.

A task example is (prompt, reply). Kinds: copy (repeat the code unchanged), rename (an identifier
throughout), reindent, literal (change a number everywhere), reorder (swap two top-level
definitions), continue (the rest of a file) and explain (a summary, `tools/train/explain.py`).
The held-out phrasings and layouts (`tileinfer_profiling.prompts.heldout`) are never used here;
`tests/test_train_data.py` checks that.
"""

import re

from tileinfer_profiling.prompts import EDIT as BENCH_EDIT, EXPLAIN as BENCH_EXPLAIN
from tileinfer_profiling.prompts.source import python_blocks  # noqa: F401 (tests use it)

LAYOUTS = (
    "{code}\n\n### Task: {instruction}\n### Reply:\n",  # the benchmark's
    "{instruction}\n\n```{lang}\n{code}```\n",
    "{instruction}\n\n{code}\n\nAnswer:\n",
    "User: {instruction}\n\n{code}\nAssistant:\n",
    "{code}\n\n# {instruction}\n",
    "### Instruction\n{instruction}\n\n### Input\n{code}\n### Output\n",
)
INSTRUCTIONS = {
    "copy": (
        "repeat the code above exactly as it is.",
        "Repeat this source unchanged.",
        "Copy the following code verbatim.",
        "Reply with the same file, unchanged.",
        "Echo the program back without any modification.",
        "Output this code again, character for character.",
        "Please reproduce the code exactly.",
        "Return the file as is.",
    ),
    "rename": (
        "rename the type {old} to {new} throughout the code above and reply with the whole updated file.",
        "Rename {old} to {new} throughout the code and reply with the whole updated file.",
        "Change every {old} into {new}.",
        "Replace the identifier {old} with {new} everywhere.",
        "Refactor: {old} should be called {new}. Show the full file.",
        "Please rename {old} as {new} and give the complete code.",
    ),
    "reindent": (
        "Re-indent the code with {width} spaces per level.",
        "Use {width}-space indentation throughout.",
        "Change the indentation to {width} spaces and reply with the whole file.",
    ),
    "literal": (
        "Change the value {old} to {new} everywhere in the code.",
        "Replace the number {old} with {new}.",
        "Set every occurrence of the literal {old} to {new} and show the full code.",
    ),
    "reorder": (
        "Swap the definitions of {a} and {b}.",
        "Put {b} before {a} and keep everything else as it is.",
        "Reorder the code so that {b} comes where {a} is, and {a} where {b} is.",
    ),
    "continue": (
        "Continue the code.",
        "Complete the rest of this file.",
        "Finish writing this code.",
        "Write what comes next.",
    ),
    "explain": (
        "explain what the code above does.",
        "Describe this code briefly.",
        "Summarize what the code defines.",
        "What does this code do?",
        "Explain the following code.",
    ),
}
assert LAYOUTS[0].format(code="{code}", instruction=INSTRUCTIONS["rename"][0]) == BENCH_EDIT
assert LAYOUTS[0].format(code="{code}", instruction=INSTRUCTIONS["explain"][0]) == BENCH_EXPLAIN
EDIT_KINDS = ("rename", "reindent", "literal", "reorder")


def prompt(rng, kind, code, lang, **fields):
    """The prompt of `kind` for `code` in a randomly drawn layout and phrasing."""
    layout = rng.choice(LAYOUTS)
    instruction = rng.choice(INSTRUCTIONS[kind]).format(**fields)
    if "```" in layout and not code.endswith("\n"):
        code += "\n"
    return layout.format(code=code, instruction=instruction, lang=lang)


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
