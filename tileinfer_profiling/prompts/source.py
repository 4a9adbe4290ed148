"""Source files cut into whole blocks, so a prompt can hold as much of a file as fits without
splitting a definition: Python by top-level statement (decorators included), other languages by
paragraphs separated by blank lines."""

import ast


def python_blocks(text):
    """The top-level statements of `text` as strings (each with the comments that follow it), or None
    when it does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    lines = text.split("\n")
    starts = [min([n.lineno] + [d.lineno for d in getattr(n, "decorator_list", [])]) - 1 for n in tree.body]
    if not starts:
        return None
    starts[0] = 0
    ends = starts[1:] + [len(lines)]
    return ["\n".join(lines[a:b]).rstrip("\n") + "\n" for a, b in zip(starts, ends)]


def paragraph_blocks(text):
    """Runs of lines separated by blank lines."""
    out, cur = [], []
    for line in text.split("\n"):
        if line.strip() or not cur:
            cur.append(line)
            continue
        out.append("\n".join(cur).rstrip("\n") + "\n")
        cur = []
    if "".join(cur).strip():
        out.append("\n".join(cur).rstrip("\n") + "\n")
    return [b for b in out if b.strip()]


def blocks(text, language):
    return python_blocks(text) if language == "python" else paragraph_blocks(text)


def join_blocks(parts):
    return "\n".join(parts)


def fitting_prefix(parts, start, fits):
    """The longest run parts[start:end] whose joined text `fits`, as text, or None if even one block
    does not."""
    lo, hi = start, len(parts)  # fits() is monotone in the number of blocks taken: bisect
    if not fits(join_blocks(parts[start:start + 1])):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(join_blocks(parts[start:mid])) else (lo, mid - 1)
    return join_blocks(parts[start:lo])
