"""The default pair's training data: every task kind and row length is built, the edits compute the
right replies, and nothing of the held-out set (phrasings, layouts, files, Julia seeds) is trained on."""

import random
import re
import shutil
import sysconfig
from pathlib import Path

import pytest

from tileinfer_profiling.prompts import EDIT as BENCH_EDIT, ByteTokenizer
from tileinfer_profiling.prompts import heldout
from tools.train import corpus, data, layouts, phrasing, tasks, tokenizer
from tools.train.explain import EXPLAIN

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def normal(text):
    return " ".join(text.lower().split())


def draws(n, seed=0):
    """(kind, where, instruction, layout) drawn `n` times per kind, as the prompts draw them."""
    rng = random.Random(seed)
    for kind in tasks.KINDS:
        for _ in range(n):
            where = rng.choice(("before", "after"))
            lang = rng.choice(list(layouts.FENCES))
            yield kind, where, phrasing.instruction(rng, kind, where), layouts.layout(rng, where, lang)


def test_heldout_phrasings_and_layouts_are_never_trained_on():
    held = [normal(i) for kind in heldout.INSTRUCTIONS.values() for i in kind]
    assert held and all(phrasing.near_heldout(i) for i in held)  # the guard knows every held-out phrasing
    assert {">>>", "request:", "response:", "<code>", "</code>"} <= layouts.HELDOUT_MARKERS
    assert all(layouts.has_heldout_marker(t) for t in heldout.LAYOUTS)
    held_layouts = {normal(t) for t in heldout.LAYOUTS}
    for seed in range(3):
        for kind, where, instruction, layout in draws(4000, seed):
            assert normal(instruction) not in held and not phrasing.near_heldout(instruction), instruction
            assert not layouts.has_heldout_marker(layout) and normal(layout) not in held_layouts, layout


def test_prompts_are_diverse_and_complete():
    seen = {}
    for kind, where, instruction, layout in draws(2000):
        seen.setdefault(kind, set()).add(instruction)
        seen.setdefault("layout", set()).add(layout)
        seen.setdefault("where", set()).add(layout.index("{instruction}") < layout.find("code}"))
    assert seen.pop("where") == {True, False}
    assert len(seen.pop("layout")) > 1500
    assert all(len(v) > 1000 for v in seen.values()), {k: len(v) for k, v in seen.items()}
    rng = random.Random(0)
    fields = {"old": "Sensor", "new": "Beacon", "width": 2, "a": "f", "b": "g"}
    for kind in tasks.KINDS * 200:
        p = tasks.prompt(rng, kind, "CODE LINE\nMORE", rng.choice(list(layouts.FENCES)), **fields)
        assert "CODE LINE\n" in p and "{" not in p and "}" not in p, p
        assert not any(h.format(**fields).lower() in p.lower() for i in heldout.INSTRUCTIONS.values() for h in i)
    assert tasks.BENCH_LAYOUT.format(code="{code}", instruction=tasks.BENCH_INSTRUCTIONS["rename"]) == BENCH_EDIT


def test_heldout_julia_seeds_are_neither_benchmark_nor_training():
    assert min(heldout.JULIA_SEEDS) > 7 and max(heldout.JULIA_SEEDS) < data.TRAIN_SEED0


def test_heldout_files_are_never_trained_on(tmp_path):
    files = heldout.heldout_files()
    assert len(files) >= 8
    shutil.copy(files[0], tmp_path / "copied_elsewhere.py")
    shutil.copy(STDLIB / "colorsys.py", tmp_path / "colorsys.py")
    for f in files[1:3]:
        shutil.copy(f, tmp_path / f.name)
    assert [Path(p).name for p, _ in corpus.collect("python", [tmp_path])] == ["colorsys.py"]


@pytest.mark.parametrize("n_tokens", [1024, 8192])
@pytest.mark.parametrize("task", heldout.TASKS)
def test_heldout_prompts_fill_their_length(task, n_tokens):
    tok = ByteTokenizer()
    for index in range(2):
        p = heldout.heldout_prompt(task, n_tokens, tok, index)
        assert 0.6 * n_tokens <= len(p.ids) <= n_tokens, (p.source, len(p.ids))  # whole parts and paragraphs
        assert p.instruction in heldout.INSTRUCTIONS[task]
        assert heldout.heldout_prompt(task, n_tokens, tok, index).ids == p.ids


def test_heldout_prompt_rejects_unknown_task():
    with pytest.raises(ValueError, match="unknown held-out task 'summarise'"):
        heldout.heldout_prompt("summarise", 1024, ByteTokenizer())


def test_edits_compute_their_replies():
    code = ("def area(w, h):\n    return w * h\n\n\n"
            "class Box:\n    size = 10\n\n    def fill(self):\n        return area(self.size, 10)\n")
    rng = random.Random(0)
    assert tasks.identifiers(code, "python") == ["area", "size"]  # defined and used twice or more
    prompt, reply = tasks.edit_example(rng, "rename", code, "python")
    (old,) = [n for n in ("area", "size") if not re.search(rf"\b{n}\b", reply)]
    (new,) = set(re.findall(r"\w+", reply)) - set(re.findall(r"\w+", code))
    assert reply == tasks.rename(code, old, new) and old in prompt and new in prompt
    assert tasks.reindent(code, 2).startswith("def area(w, h):\n  return w * h\n")
    assert "\n  def fill(self):\n    return area(self.size, 10)\n" in tasks.reindent(code, 2)
    prompt, reply = tasks.edit_example(random.Random(0), "literal", code, "python")
    new = reply.split("size = ")[1].split("\n")[0]
    assert new != "10" and reply == code.replace("10", new) and " 10 " in prompt and f" {new}" in prompt
    prompt, reply = tasks.edit_example(rng, "reorder", code, "python")
    assert reply.index("class Box") < reply.index("def area") and sorted(reply.split("\n")) == sorted(
        "\n".join(tasks.python_blocks(code)).split("\n"))
    assert tasks.edit_example(rng, "reorder", "x = 1\n", "python") is None


def test_scrambled_code_keeps_its_lines_in_another_order():
    code = "\n".join(f"line {i} = {i * i}" for i in range(40))
    for seed in range(20):
        shuffled = tasks.scramble(random.Random(seed), code)
        assert shuffled != code and sorted(shuffled.split("\n")) == sorted(code.split("\n"))
    assert tasks.scramble(random.Random(0), "one line") == "one line"


def test_some_copies_are_of_scrambled_code(monkeypatch):
    calls = []
    real = tasks.scramble
    monkeypatch.setattr(tasks, "scramble", lambda rng, code: calls.append(code) or real(rng, code))
    tok = tokenizer.train_tokenizer([data.generate_module(data.TRAIN_SEED0).source(6)], vocab_size=300)
    enc, rng = data.Encoder(tok), random.Random(5)
    made = [data.make_example("copy", "julia", rng, enc, {}, 512) for _ in range(60)]
    assert all(made) and 0.2 < len(calls) / len(made) < 0.6  # SCRAMBLED_COPY = 0.4 of them


def test_bench_explain_examples_are_the_benchmark_explain_template_only():
    from tileinfer_profiling.prompts import EXPLAIN as BENCH_EXPLAIN

    tok = tokenizer.train_tokenizer([data.generate_module(data.TRAIN_SEED0).source(6)], vocab_size=300)
    enc, rng = data.Encoder(tok), random.Random(3)
    task = BENCH_EXPLAIN.split("{code}")[1]  # the template's words after the code
    for kind, explains in (("bench_explain", 40), ("bench", None)):
        made = [data.make_example(kind, "julia", rng, enc, {}, 1024) for _ in range(40)]
        texts = [tok.decode(ids[:start]) for ids, start in made]
        n = sum(t.endswith(task) for t in texts)
        if explains is None:  # the mixed kind: mostly edits (0.7 of its examples)
            assert 0 < n < 25
        else:
            assert n == explains
            replies = [tok.decode(ids[start:]) for ids, start in made]
            assert all(r.startswith("The code defines the module") for r in replies)


def test_explainers_name_what_the_code_defines():
    assert "The functions are log_info." in EXPLAIN["shell"]("log_info() {\n  echo hi\n}\nLEVEL=3\n")
    header = "#define MAX_LEN 8\nstruct node {\n  int v;\n};\nint size(struct node *n);\n"
    assert "The macros are MAX_LEN." in EXPLAIN["c"](header) and "The functions are size." in EXPLAIN["c"](header)
    assert EXPLAIN["python"]("def f(:\n") is None


def test_builder_makes_every_kind_at_every_row_length():
    sources = {"python": corpus.collect("python", [STDLIB / "json", STDLIB / "email"], limit=20),
               "c": [("a.h", "#include <stddef.h>\n\n#define LIMIT 16\n\nstruct pair {\n    int a;\n    int b;\n};\n\n"
                             "int pair_sum(struct pair *p);\n\nint pair_max(struct pair *p);\n" * 3)],
               "shell": [("a.sh", "#!/bin/sh\n\nLEVEL=3\n\nlog_info() {\n    echo \"$LEVEL $1\"\n}\n\n"
                                  "log_info start\nlog_info stop\n" * 3)]}
    julia = [data.generate_module(data.TRAIN_SEED0 + i).source(6) for i in range(3)]
    tok = tokenizer.train_tokenizer([t for v in sources.values() for _, t in v] + julia, vocab_size=500)
    seq_lens = {512: 0.5, 1024: 0.5}
    buckets, counts = data.build_dataset(tok, sources, 80_000, seq_lens, seed=1, max_misses=300)
    assert list(buckets) == [512, 1024]
    for n, (tokens, lengths, replies) in buckets.items():
        assert tokens.shape[1] == n and (lengths <= n).all() and len(replies)
        kinds = {key.split("/")[0] for key in counts[n]}
        assert kinds == set(data.MIX), (n, kinds)
    langs = {key.split("/")[1] for c in counts.values() for key in c}
    assert langs == {"python", "julia", "c", "shell"}


def test_builder_rejects_unknown_kind():
    with pytest.raises(ValueError, match="unknown example kind 'poetry'"):
        data.build_dataset(None, {}, 1000, mix={"poetry": 1.0})


def test_shares_on_the_command_line_are_checked():
    from tools.train.__main__ import parse_mix, parse_seq_lens

    assert parse_seq_lens("2048:0.5,8192:0.5") == {2048: 0.5, 8192: 0.5}
    assert parse_mix("copy:0.25,edit:0.25,bench:0.5") == {"copy": 0.25, "edit": 0.25, "bench": 0.5}
    assert parse_mix("bench:0.3,bench_explain:0.2,copy:0.5")["bench_explain"] == 0.2
    for text, message in (("copy:0.5,poetry:0.5", "unknown kinds poetry"), ("copy:0.5,bench:0.4", "sum to 1"),
                          ("copy=0.5", "name:0.5")):
        with pytest.raises(SystemExit, match=message):
            parse_mix(text)
    with pytest.raises(SystemExit, match="must rise"):
        parse_seq_lens("8192:0.5,2048:0.5")
