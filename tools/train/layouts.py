"""Prompt layouts built from parts: the instruction before or after the code, a role or label marker
before it, a delimiter around the code (fences, tags, BEGIN/END lines, quotes, indentation or none),
an optional header over the code and a response marker at the end.

`layout(rng, where, lang)` returns a template with the placeholders {instruction} and {code} (or
{indented_code}: the code indented by four spaces). No drawn layout holds a marker of a held-out
layout (`tileinfer_profiling.prompts.heldout.LAYOUTS`, case ignored): such draws are redrawn.
"""

import re

from tileinfer_profiling.prompts.heldout import LAYOUTS as HELDOUT_LAYOUTS

LABELS = ("", "", "", "User: ", "Q: ", "Input: ", "Prompt: ", "[INST] ", "Human: ", "### Question\n",
          "### Instruction\n", "### Task: ", "Task - ", "Task: ", "Instruction: ", "Query: ", "Ask: ",
          "Command: ", "# ", "// ", "-- ", ";; ", "> ", ">> ", "$ ", "* ", "Me: ", "Todo: ", "Question:\n")
RESPONSES = ("", "", "Answer:", "Output:", "Reply:", "Assistant:", "A:", "Result:", "### Response",
             "### Answer", "### Output", "### Reply:", "=>", "->", "Bot:", "AI:", "Model:", "Solution:",
             "Here it is:", "Completion:")
FENCES = {"python": ("python", "py", "python3"), "julia": ("julia", "jl"), "c": ("c", "h", "C"),
          "shell": ("sh", "bash", "shell")}
DELIMITERS = (("```{fence}\n", "```"), ("```\n", "```"), ("~~~{fence}\n", "~~~"), ("~~~\n", "~~~"),
              ("<src>\n", "</src>"), ("<source>\n", "</source>"), ("<file>\n", "</file>"),
              ("<snippet>\n", "</snippet>"), ("<pre>\n", "</pre>"), ("<program>\n", "</program>"),
              ("[code]\n", "[/code]"), ("BEGIN CODE\n", "END CODE"), ("BEGIN {LANG}\n", "END {LANG}"),
              ("--- begin ---\n", "--- end ---"), ("=== start of file ===\n", "=== end of file ==="),
              ("-----\n", "-----"), ('"""\n', '"""'), ("'''\n", "'''"), ("<<EOF\n", "EOF"),
              ("", ""), ("", ""), ("", ""), ("", ""), ("indent", ""))
HEADERS = ("Code:\n", "Source:\n", "File:\n", "### Input\n", "### Code\n", "Here is the code:\n", "Input:\n",
           "{Lang} code:\n", "Listing:\n", "The file:\n")


def _markers(template):
    return re.sub(r"\{\w+\}", " ", template).split()


HELDOUT_MARKERS = {m.lower() for t in HELDOUT_LAYOUTS for m in _markers(t)}


def has_heldout_marker(template):
    """Whether `template` (its placeholders left out) holds a held-out layout's marker, case ignored."""
    text = re.sub(r"\{\w+\}", " ", template).lower()
    return any(m in text for m in HELDOUT_MARKERS)


def _vary(rng, marker):
    r = rng.random()
    return marker.lower() if r < 0.08 else marker.upper() if r < 0.14 else marker


def _draw(rng, where, lang, indent_ok):
    label = _vary(rng, rng.choice(LABELS))
    response = "[/INST]" if label == "[INST] " and rng.random() < 0.7 else _vary(rng, rng.choice(RESPONSES))
    delims = DELIMITERS if indent_ok else DELIMITERS[:-1]
    open_, close = rng.choice(delims)
    fence = rng.choice(FENCES[lang])
    open_ = open_.replace("{fence}", fence).replace("{LANG}", lang.upper())
    close = close.replace("{LANG}", lang.upper())
    code = "{indented_code}" if open_ == "indent" else "{code}"
    open_ = "" if open_ == "indent" else open_
    header = rng.choice(HEADERS).replace("{Lang}", lang.capitalize()) if rng.random() < 0.2 else ""
    block = header + open_ + code + (close + "\n" if close else "")
    reply = response + "\n" if response else ""
    if where == "before":
        sep = rng.choice(("\n", "\n\n"))
        gap = "\n" if not (close or reply) else rng.choice(("", "", "\n"))
        return label + "{instruction}" + sep + block + gap + reply
    gap = rng.choice(("", "\n", "\n", "\n\n"))
    return block + gap + label + "{instruction}\n" + reply


def layout(rng, where, lang, indent_ok=True):
    """A prompt template with the instruction `where` ("before" or "after") the code of `lang`;
    `indent_ok=False` keeps the code unindented (for tasks whose reply depends on its indentation)."""
    while True:
        template = _draw(rng, where, lang, indent_ok)
        if not has_heldout_marker(template):
            return template
