"""Held-out prompts for measuring how a pair generalises: task phrasings, prompt layouts and source
files that the default pair's training never sees, at any prompt length.

Sources alternate between standard-library Python files (present wherever Python is) and Julia
modules of seeds 100–199 (the benchmark uses 0–7, training ≥ 1000). Each prompt is as much of its
source, in whole paragraphs, as fits `n_tokens`.
"""

import random
import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tileinfer_profiling.prompts.julia import TYPE_NAMES, generate_module
from tileinfer_profiling.prompts.render import encode_ids, last_fitting
from tileinfer_profiling.prompts.source import fitting_prefix, paragraph_blocks

LAYOUTS = (
    "Request: {instruction}\n<code>\n{code}</code>\nResponse:\n",
    "{code}\n\n>>> {instruction}\n",
)
INSTRUCTIONS = {
    "copy": (
        "Write out this code once more without changing anything.",
        "Give me back the identical source text.",
        "Duplicate the listing exactly, keeping every line as it is.",
    ),
    "edit": (
        "Use the name {new} instead of {old} in this code and print all of it.",
        "Swap the name {old} for {new} in every place it occurs; return the complete source.",
    ),
    "explain": (
        "Give a short overview of this source.",
        "In a few sentences, tell me what this file contains.",
    ),
}
TASKS = tuple(INSTRUCTIONS)
# Standard-library modules in every Python from 3.10 on; the long ones fill 8k prompts.
FILES = ("difflib.py", "statistics.py", "configparser.py", "argparse.py", "ftplib.py", "fractions.py",
         "pprint.py", "textwrap.py", "calendar.py", "heapq.py", "shlex.py", "cmd.py")
JULIA_SEEDS = range(100, 200)


@dataclass
class HeldoutPrompt:
    task: str
    index: int
    source: str  # "python:difflib.py" or "julia:seed=103"
    instruction: str
    text: str
    ids: list


def heldout_files(stdlib=None):
    """Paths of the held-out standard-library files (those missing from this Python are left out)."""
    root = Path(stdlib or sysconfig.get_paths()["stdlib"])
    return [root / name for name in FILES if (root / name).is_file()]


def _python_rename(code, rng):
    """(old, new): a top-level function or class used at least twice, and a name the code lacks."""
    names = re.findall(r"^\s*(?:def|class) (\w+)", code, re.M)
    names = [n for n in dict.fromkeys(names) if len(re.findall(rf"\b{n}\b", code)) >= 2] or names
    old = rng.choice(names or re.findall(r"\b[a-z_]\w{3,}\b", code))
    new = ("Primary" + old) if old[:1].isupper() else (old + "_impl")
    return old, new


def heldout_prompt(task, n_tokens, tokenizer, index=0):
    """The held-out `task` prompt number `index` with at most `n_tokens` tokens, filled close to it."""
    if task not in INSTRUCTIONS:
        raise ValueError(f"unknown held-out task {task!r}: use one of {', '.join(TASKS)}")
    rng = random.Random(index * 7 + len(task))
    layout = LAYOUTS[index % len(LAYOUTS)]
    instruction = INSTRUCTIONS[task][(index // len(LAYOUTS)) % len(INSTRUCTIONS[task])]
    names = {"old": "x" * 12, "new": "y" * 16}  # room for the real names, chosen once the code is cut

    def fits(code, names):
        text = layout.format(code=code, instruction=instruction.format(**names))
        return len(encode_ids(tokenizer, text)) <= n_tokens

    if index % 2 == 0:
        files = heldout_files()
        if not files:
            raise FileNotFoundError("none of the held-out standard-library files exist in this Python")
        path = files[(index // 2) % len(files)]
        parts = paragraph_blocks(path.read_text(encoding="utf-8"))
        code = fitting_prefix(parts, 0, lambda c: fits(c, names))
        if code is None:
            raise ValueError(f"{n_tokens} tokens cannot hold the first block of {path.name}")
        if task == "edit":
            names = dict(zip(("old", "new"), _python_rename(code, rng)))
            code = fitting_prefix(parts, 0, lambda c: fits(c, names))
        source = f"python:{path.name}"
    else:
        seed = JULIA_SEEDS[(index // 2) % len(JULIA_SEEDS)]
        module = generate_module(seed)
        if task == "edit":
            new = rng.choice([t for t in TYPE_NAMES if t != module.type_name])
            names = {"old": module.type_name, "new": new}
        k = last_fitting(lambda k: fits(module.source(k), names))
        code = module.source(k)
        source = f"julia:seed={seed}"
    text = layout.format(code=code, instruction=instruction.format(**names))
    ids = list(encode_ids(tokenizer, text))
    assert len(ids) <= n_tokens
    return HeldoutPrompt(task, index, source, instruction, text, ids)
