"""Byte-level BPE tokenizer trained on the Python sources installed on this machine (stdlib + site-packages)."""

import hashlib
import json
import random
import site
import sysconfig
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

EOS = "<|endoftext|>"  # end of text, also the pad token
MASK = "<|mask|>"  # the DFlash mask token; always the last id
VOCAB_SIZE = 4096


def default_roots():
    roots = [sysconfig.get_paths()["stdlib"], *site.getsitepackages()]
    return [r for r in dict.fromkeys(roots) if Path(r).is_dir()]


def read_source(path, max_bytes=200_000, max_line=300):
    """The text of a Python file, or None for binary-ish, huge or generated-looking files."""
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return None
    if not 256 <= len(raw) <= max_bytes:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = text.splitlines()
    if max(map(len, lines), default=0) > max_line or sum(c > "\x7f" for c in text) > len(text) // 50:
        return None
    return text.replace("\r\n", "\n").replace("\t", "    ")


def python_sources(roots=None, seed=0, limit=None):
    """Distinct readable .py files under `roots`, shuffled by `seed`: a list of (path, text)."""
    paths = sorted(p for root in (roots or default_roots()) for p in Path(root).rglob("*.py"))
    random.Random(seed).shuffle(paths)
    seen, out = set(), []
    for path in paths:
        text = read_source(path)
        if text is None:
            continue
        digest = hashlib.sha1(text.encode()).digest()
        if digest in seen:
            continue
        seen.add(digest)
        out.append((str(path), text))
        if limit and len(out) >= limit:
            break
    return out


def train_tokenizer(texts, vocab_size=VOCAB_SIZE):
    """BPE over bytes: `<|endoftext|>` is id 0 and `<|mask|>` the last id."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - 1, special_tokens=[EOS], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens([MASK])
    assert tok.token_to_id(EOS) == 0 and tok.token_to_id(MASK) == tok.get_vocab_size() - 1
    return tok


def save_tokenizer(tok, out_dir, model_max_length):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOS, "pad_token": EOS,
        "mask_token": MASK, "model_max_length": model_max_length, "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
