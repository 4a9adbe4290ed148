"""The code the training data is cut from: files of this machine (Python, C headers, shell scripts)
drawn by seed, none of them a held-out file (`tileinfer_profiling.prompts.heldout`), each kept once."""

import hashlib
import random
from pathlib import Path

from tileinfer_profiling.prompts.heldout import heldout_files
from tools.train.tokenizer import default_roots, read_source

C_ROOTS = ("/usr/include", "/usr/local/include")
SHELL_ROOTS = ("/usr/bin", "/usr/sbin", "/usr/lib", "/usr/share", "/etc")


def digest(text):
    return hashlib.sha1(text.encode()).hexdigest()


def heldout_digests():
    return {digest(p.read_text(encoding="utf-8")) for p in heldout_files()}


def is_shell(path):
    if path.suffix == ".sh":
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(32)
    except OSError:
        return False
    return head.startswith((b"#!/bin/sh", b"#!/bin/bash", b"#!/usr/bin/env bash", b"#!/usr/bin/env sh"))


def candidates(lang, roots):
    if lang == "python":
        return sorted(p for root in roots for p in Path(root).rglob("*.py"))
    if lang == "c":
        return sorted(p for root in roots for p in Path(root).rglob("*.h"))
    assert lang == "shell"
    out = []
    for root in roots:
        for p in Path(root).rglob("*"):
            if p.is_file() and not p.is_symlink() and p.stat().st_size < 200_000 and is_shell(p):
                out.append(p)
    return sorted(out)


def collect(lang, roots=None, seed=0, limit=None):
    """Distinct readable files of `lang` ("python", "c", "shell"), shuffled by `seed`: [(path, text)]."""
    if roots is None:
        roots = {"python": default_roots(), "c": C_ROOTS, "shell": SHELL_ROOTS}[lang]
    roots = [r for r in roots if Path(r).is_dir()]
    paths = candidates(lang, roots)
    random.Random(seed).shuffle(paths)
    seen, out = heldout_digests(), []
    for path in paths:
        text = read_source(path)
        if text is None or digest(text) in seen:
            continue
        seen.add(digest(text))
        out.append((str(path), text))
        if limit and len(out) >= limit:
            break
    return out
