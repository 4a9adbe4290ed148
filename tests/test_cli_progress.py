"""`tileinfer generate` prints the reply as the engine commits it, takes `--example`, and says what runs."""

import json
from types import SimpleNamespace

import pytest

import tileinfer
from tests.helpers import tiny_target
from tests.test_text_and_cli import write_tokenizer
from tileinfer.cli import main
from tileinfer.streaming import TextStream, watch


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    from tileinfer_profiling.pair import write_stand_in
    return write_stand_in(tmp_path_factory.mktemp("pair"))


@pytest.mark.parametrize("block_size", [1, None])
def test_watched_tokens_are_the_generation_s(stand_in, block_size):
    engine = tileinfer.load(stand_in[0], draft=stand_in[1], weights="fp32")
    seen = []
    with watch(engine, lambda ids: seen.append(list(ids))):
        out = engine.generate([5, 6, 7, 8], 12, block_size=block_size, stop_ids=[])
    assert sum(seen, []) == out.tokens and len(seen) == out.stats.steps + 1  # prefill's token, then each step's
    assert "_committed" not in vars(engine)  # the engine is as it was
    assert engine.generate([5, 6, 7, 8], 12, block_size=block_size, stop_ids=[]).tokens == out.tokens


def test_text_is_held_back_until_a_character_is_whole():
    pieces = {(1,): "a", (1, 2): "a\ufffd", (1, 2, 3): "aé", (1, 2, 3, 4): "aé b"}
    written = []
    stream = TextStream(SimpleNamespace(decode=lambda ids: pieces[tuple(ids)]), written.append)
    for i in (1, 2, 3, 4):
        stream([i])
    assert written == ["a", "é", " b"]
    stream.finish("aé b!")
    assert "".join(written) == "aé b!"


def test_generate_streams_text_and_takes_an_example(tmp_path, capsys):
    path = tiny_target(tmp_path)
    write_tokenizer(path)
    examples = {"demo": ("a demo prompt", lambda: "w1 w2 w3 w4")}
    assert main(["generate", str(path), "--example", "demo", "--max-new-tokens", "6", "--weights", "fp32"],
                examples=examples) == 0
    out, err = capsys.readouterr()
    expected = tileinfer.load(path, weights="fp32").generate("w1 w2 w3 w4", 6).text
    assert out == expected + "\n"
    assert err.index("loading") < err.index("a demo prompt; generating up to 6 tokens") < err.index("tok/s")


def test_prompt_and_example_errors(tmp_path, capsys):
    assert main(["generate"]) == 2 and "give a prompt" in capsys.readouterr().err
    examples = {"demo": ("a demo", lambda: "w1")}
    assert main(["generate", "x", "hello", "--example", "demo"], examples=examples) == 2
    assert "either a prompt or --example" in capsys.readouterr().err
    assert main(["generate", "--example", "nope"], examples=examples) == 2
    assert "unknown example 'nope'; examples: demo" in capsys.readouterr().err


def test_the_examples_are_the_benchmark_prompts_for_the_embedded_pair():
    from tileinfer.loading import default_model
    from tileinfer_profiling.cli import examples
    from tileinfer_profiling.prompts import tokenizer_from_path

    found = examples()
    assert set(found) == {"edit", "explain"} and "1k edit" in found["edit"][0]
    tokenizer = tokenizer_from_path(default_model())
    assert len(tokenizer.encode(found["edit"][1]()).ids) == 1024
    assert found["explain"][1]().rstrip().endswith("### Reply:")
