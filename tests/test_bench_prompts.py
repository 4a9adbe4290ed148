import json

import pytest

from tileinfer_profiling.prompts import (
    POINTS, TASKS, ByteTokenizer, build_prompt, encode_ids, generate_module, load_prompt,
    render_prompt,
)
from tileinfer_profiling.prompts.__main__ import main as prompts_cli
from tileinfer_profiling.prompts.render import DATA


@pytest.fixture(scope="module")
def bpe():
    """A small byte-level BPE trained in well under a second on a few KB of generated Julia."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([generate_module(s).source(12) for s in (100, 101)], trainer)
    return tok


def test_module_is_deterministic_and_julia_shaped():
    a, b = generate_module(5), generate_module(5)
    assert a.source(20) == b.source(20)
    assert generate_module(6).source(20) != a.source(20)
    src, T = a.source(20), a.type_name
    assert src.startswith('"""') and f"module {a.name}" in src and src.rstrip().endswith(f"end # module {a.name}")
    for needle in (f"mutable struct {T}", f"x::{T}", "for x in items", "$(x.", "@testset", "@test "):
        assert needle in src
    assert src.count(T) > 20  # the edit renames a type used throughout


def test_module_grows_by_whole_parts():
    m = generate_module(0)
    sizes = [len(m.source(k)) for k in range(0, 30)]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
    assert m.source(40).count("\nfunction ") > m.source(20).count("\nfunction ")


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("n_tokens", [300, 1024, 1025, 8192])
def test_exact_token_count_bytes(task, n_tokens):
    tok = ByteTokenizer()
    text, ids = render_prompt(task, n_tokens, tok, seed=0)
    assert len(ids) == n_tokens and ids == tok.encode(text) and tok.decode(ids) == text
    assert max(ids) < tok.vocab_size


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("n_tokens", [1024, 1031, 8192])
@pytest.mark.parametrize("seed", [0, 1])
def test_exact_token_count_bpe(bpe, task, n_tokens, seed):
    text, ids = render_prompt(task, n_tokens, bpe, seed=seed)
    assert len(ids) == n_tokens == len(encode_ids(bpe, text))
    assert (text, ids) == render_prompt(task, n_tokens, bpe, seed=seed)


def test_templates_exact():
    p = build_prompt("edit", 1024, ByteTokenizer(), seed=0)
    assert p.old != p.new and p.new not in p.text.split("### Task")[0]
    assert p.text.endswith(
        f"\n\n### Task: rename the type {p.old} to {p.new} throughout the code above and reply "
        "with the whole updated file.\n### Reply:\n")
    e = build_prompt("explain", 1024, ByteTokenizer(), seed=0)
    assert e.text.endswith("\n\n### Task: explain what the code above does.\n### Reply:\n")
    with pytest.raises(ValueError):
        build_prompt("summarize", 1024, ByteTokenizer())
    with pytest.raises(ValueError):
        build_prompt("edit", 10, ByteTokenizer())


def test_points():
    assert (POINTS["1k"].prompt_tokens, POINTS["1k"].new_tokens, POINTS["1k"].processes) == (1024, 128, 3)
    assert (POINTS["8k"].prompt_tokens, POINTS["8k"].new_tokens, POINTS["8k"].processes) == (8192, 2048, 2)


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("point", list(POINTS))
def test_stored_byte_prompts_match_the_generator(task, point):
    path = DATA / "byte" / f"{task}-{point}.json"
    row = json.loads(path.read_text())
    assert path.stat().st_size < 100_000
    fresh = build_prompt(task, POINTS[point].prompt_tokens, ByteTokenizer(), seed=0)
    assert row["ids"] == fresh.ids and row["text"] == fresh.text
    assert (DATA / f"{task}-{point}.txt").read_text() == fresh.text
    assert load_prompt(task, point).ids == fresh.ids


def test_cli_and_load_for_another_tokenizer(bpe, tmp_path, monkeypatch):
    import tileinfer_profiling.prompts.render as render

    monkeypatch.setattr(render, "DATA", tmp_path)
    bpe.save(str(tmp_path / "tokenizer.json"))
    prompts_cli(["--tokenizer", str(tmp_path), "--name", "tiny-bpe", "--points", "1k"])
    stored = json.loads((tmp_path / "tiny-bpe" / "edit-1k.json").read_text())
    assert len(stored["ids"]) == 1024
    assert load_prompt("edit", "1k", bpe, name="tiny-bpe").ids == stored["ids"]
    # stored ids that another tokenizer would not produce are not trusted: rendered again
    assert len(load_prompt("edit", "1k", ByteTokenizer(), name="tiny-bpe").ids) == 1024
