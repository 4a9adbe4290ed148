"""Text in and out through the checkpoint's own tokenizer, and the command line."""

import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, decoders

import tileinfer
from tests.helpers import tiny_target
from tileinfer.cli import main
from tileinfer_profiling.cli import tileinfer_main


def write_tokenizer(path, vocab_size=160):
    words = ["<eos>", "<unk>"] + [f"w{i}" for i in range(vocab_size - 2)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins tokens with spaces
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<eos>"}))


def test_text_in_and_out(tmp_path):
    path = tiny_target(tmp_path)
    write_tokenizer(path)
    engine = tileinfer.load(path, weights="fp32")
    assert 0 in engine.eos_token_ids
    out = engine.generate("w1 w2 w3 w4", 12, stop_ids=[])
    assert engine.tokenizer.encode("w1 w2 w3 w4").ids == [3, 4, 5, 6]
    ids = engine.generate([3, 4, 5, 6], 12, stop_ids=[]).tokens
    assert out.tokens == ids
    assert out.text == engine.tokenizer.decode(ids) and out.text.startswith("w")


def test_cli_generate(tmp_path, capsys):
    path = tiny_target(tmp_path)
    assert main(["generate", str(path), "1,2,3", "--ids", "--max-new-tokens", "6", "--weights", "fp32"]) == 0
    out, err = capsys.readouterr()
    assert len(out.strip().split(",")) == 6 and "tok/s" in err and "prefill" in err


def test_cli_reports_errors(tmp_path, capsys):
    assert main(["generate", str(tmp_path / "missing"), "hello"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_tileinfer_command_forwards_profile_to_the_workbench(capsys):
    with pytest.raises(SystemExit) as done:
        tileinfer_main(["profile", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: tileinfer profile") and "sweep" in out and "ceilings" in out


def test_tileinfer_command_runs_the_engine_s_generate(tmp_path, capsys):
    path = tiny_target(tmp_path)
    assert tileinfer_main(["generate", str(path), "1,2", "--ids", "--max-new-tokens", "2", "--weights", "fp32"]) == 0
    assert len(capsys.readouterr().out.strip().split(",")) == 2


def test_the_engine_cli_alone_knows_only_its_own_commands(capsys):
    with pytest.raises(SystemExit):
        main(["profile", "--help"])
    assert "invalid choice: 'profile'" in capsys.readouterr().err
