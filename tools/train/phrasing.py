"""Task instructions built from parts: a frame per task (verb, object, qualifier, tail) with varied
politeness, casing and ending, so a small model learns what an instruction asks rather than a few
fixed sentences.

`instruction(rng, kind, where)` draws one; `where` is "before" or "after" (the instruction's place
relative to the code), so "the code above/below" points the right way. The placeholders {old},
{new}, {width}, {a} and {b} are left for the caller. No drawn frame shares five consecutive words
with a held-out instruction (`tileinfer_profiling.prompts.heldout.INSTRUCTIONS`): such draws are
redrawn.
"""

import re

from tileinfer_profiling.prompts.heldout import INSTRUCTIONS as HELDOUT_INSTRUCTIONS

OBJECTS = ("the code", "this code", "this file", "the file", "the source", "this source code", "the program",
           "this program", "the snippet", "this snippet", "the listing", "the script", "this script",
           "the module", "this module", "the text", "the input", "it")
OBJECTS_BY_PLACE = {"before": ("the code below", "the following code", "what follows", "the file below",
                               "the snippet below", "the next block"),
                    "after": ("the code above", "what is above", "the file above", "the preceding code",
                              "the snippet above", "the block above")}
SCOPE = ("throughout", "everywhere", "throughout the code", "in the whole file", "across the file",
         "in all places", "wherever it appears", "at every use", "in every occurrence", "")
WHOLE = ("and reply with the whole updated file", "and show the full file", "and give the complete code",
         "and output all of the code", "then print the whole program", "and write out the full result",
         "and return the updated code", "and show every line", "then give back the entire file", "")

COPY = {"verb": ("repeat", "copy", "reproduce", "echo", "return", "output", "print", "write out", "give back",
                 "duplicate", "retype", "restate", "send back", "reprint", "type out", "emit", "mirror"),
        "qual": ("verbatim", "unchanged", "exactly", "as is", "character for character", "without edits",
                 "with no changes", "word for word", "line by line", "without modification", "exactly as given",
                 "without altering anything", "in full", "byte for byte", "untouched", "with nothing changed",
                 "as it stands", "precisely", "faithfully", "")}
RENAME = ("rename {old} to {new}", "rename {old} as {new}", "rename the {noun} {old} to {new}",
          "change {old} to {new}", "change every {old} into {new}", "replace {old} with {new}",
          "replace the {noun} {old} by {new}", "refactor {old} into {new}", "switch {old} to {new}",
          "substitute {new} for {old}", "turn {old} into {new}", "{old} becomes {new}", "{old} -> {new}",
          "make {old} read {new}", "call the {noun} {new} rather than {old}", "the {noun} {old} should be named {new}")
RENAME_NOUNS = ("identifier", "name", "symbol", "type", "variable", "definition")
REINDENT = ("re-indent {obj} with {width} spaces per level", "use {width}-space indentation",
            "indent {obj} with {width} spaces", "change the indentation to {width} spaces",
            "reformat {obj} to {width}-space indents", "make every indent level {width} spaces wide",
            "switch {obj} to an indent of {width} spaces", "convert the indentation to {width} spaces per level",
            "indent by {width} spaces instead", "set the indent width to {width}")
LITERAL = ("change the value {old} to {new}", "replace the number {old} with {new}", "set every {old} to {new}",
           "turn the constant {old} into {new}", "update the literal {old} to {new}", "{old} should become {new}",
           "change {old} into {new}", "bump {old} to {new}", "use {new} where {obj} has {old}",
           "rewrite the literal {old} as {new}")
REORDER = ("swap {a} and {b}", "swap the definitions of {a} and {b}", "exchange {a} and {b}",
           "put {b} where {a} is and {a} where {b} is", "switch the order of {a} and {b}",
           "{a} and {b} should trade places", "exchange the positions of {a} and {b}",
           "move {b} into the place of {a}, and {a} into the place of {b}")
REORDER_TAIL = ("and keep everything else as it is", "leaving the rest unchanged", "and show the full file",
                "and change nothing else", "")
CONTINUE = ("continue {obj}", "complete {obj}", "finish {obj}", "write what comes next", "keep going",
            "carry on writing {obj}", "write the rest of {obj}", "extend {obj} to the end", "go on with {obj}",
            "fill in the rest", "add the remaining lines", "resume {obj} where it stops")
EXPLAIN = ("explain {obj}", "describe {obj}", "summarize {obj}", "summarise {obj}", "outline {obj}",
           "walk me through {obj}", "give a summary of {obj}", "give an explanation of {obj}",
           "write a description of {obj}", "tell me about {obj}", "say what {obj} does",
           "explain what {obj} does", "describe what {obj} defines", "report what {obj} is made of")
EXPLAIN_QUAL = ("briefly", "in plain words", "in two or three sentences", "in short", "concisely", "")
EXPLAIN_QUESTIONS = ("what does {obj} do?", "what is {obj} for?", "what does {obj} define?",
                     "which functions and types does {obj} define?", "how is {obj} organised?",
                     "what is in {obj}?")
OPENERS = ("please ", "", "", "", "i want you to ", "now ", "just ", "your task: ", "kindly ", "")
ENDINGS = (".", ".", "", "!", " please.", " thanks.")


def _words(text):
    return re.findall(r"[\w{}]+", text.lower())


def _grams(words, n=5):
    return {tuple(words[i: i + n]) for i in range(len(words) - n + 1)}


HELDOUT_GRAMS = {g for kind in HELDOUT_INSTRUCTIONS.values() for s in kind for g in _grams(_words(s))}


def near_heldout(text):
    """Whether `text` shares five consecutive words (case and punctuation ignored) with a held-out instruction."""
    return bool(_grams(_words(text)) & HELDOUT_GRAMS)


def _obj(rng, where):
    return rng.choice(OBJECTS_BY_PLACE[where]) if rng.random() < 0.3 else rng.choice(OBJECTS)


def _join(*parts):
    return " ".join(p for p in parts if p)


def _core(rng, kind, where):
    """The task's clause, lower case, without opener or ending."""
    obj = _obj(rng, where)
    if kind == "copy":
        core = _join(rng.choice(COPY["verb"]), obj, rng.choice(COPY["qual"]))
        return core + (" and nothing else" if rng.random() < 0.1 else "")
    if kind == "rename":
        core = rng.choice(RENAME).replace("{noun}", rng.choice(RENAME_NOUNS))
        return _join(core, rng.choice(SCOPE), rng.choice(WHOLE))
    if kind == "reindent":
        return _join(rng.choice(REINDENT).replace("{obj}", obj), rng.choice(WHOLE))
    if kind == "literal":
        return _join(rng.choice(LITERAL).replace("{obj}", obj), rng.choice(SCOPE), rng.choice(WHOLE))
    if kind == "reorder":
        return _join(rng.choice(REORDER), rng.choice(REORDER_TAIL))
    if kind == "continue":
        return rng.choice(CONTINUE).replace("{obj}", obj)
    if kind == "explain":
        if rng.random() < 0.25:
            return rng.choice(EXPLAIN_QUESTIONS).replace("{obj}", obj)
        return _join(rng.choice(EXPLAIN).replace("{obj}", obj), rng.choice(EXPLAIN_QUAL))
    raise ValueError(f"unknown task kind {kind!r}")


def _case(rng, text):
    """Sentence case mostly, else all lower or (rarely) all upper; placeholders keep their case."""
    r = rng.random()
    if r < 0.05:
        return "".join(p if p.startswith("{") else p.upper() for p in re.split(r"(\{\w+\})", text))
    if r < 0.3:
        return text
    return text[:1].upper() + text[1:]


def instruction(rng, kind, where="before"):
    """One instruction for `kind` ("copy", "rename", …, "explain"), its placeholders unfilled."""
    while True:
        core = _core(rng, kind, where)
        if core.endswith("?"):
            text = core
        elif rng.random() < 0.12:
            text = rng.choice(("can you ", "could you ", "would you ")) + core + "?"
        else:
            text = rng.choice(OPENERS) + core + rng.choice(ENDINGS)
        text = _case(rng, text)
        if not near_heldout(text):
            return text
