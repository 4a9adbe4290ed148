"""The model pair a notebook or report measures: checkpoints given by the caller, the embedded default
pair, or, where that is not installed, a tiny random pair standing in (and saying so). On a GPU a
report times a model a user would run: the given checkpoint, else a random-weight pair of Qwen3-4B's
shapes, written once and cached (`report_pair`) under ~/.cache/tileinfer/random ($TILEINFER_CACHE/random).

    engine, pair = load_engine(model=None, draft=None, weights="bf16")
    pair = report_pair(model=None, draft=None, shaped="qwen3-4b")   # what a GPU report times
"""

import os
from dataclasses import dataclass
from pathlib import Path

CACHE_DIR = Path(os.environ.get("TILEINFER_CACHE") or Path.home() / ".cache" / "tileinfer")
STAND_IN_DIR = CACHE_DIR / "stand-in"
RANDOM_DIR = CACHE_DIR / "random"
EMBEDDED_NOTE = ("the embedded toy pair: an 11 M-parameter Qwen3 and a 2-layer DFlash drafter trained on the "
                 "benchmark's Julia module templates (`tileinfer/assets/default/MODEL.md`)")
# A tiny pair whose context holds the 1k benchmark prompts.
STAND_IN_CONTEXT = 2048


@dataclass(frozen=True)
class Pair:
    model: str
    draft: str | None
    random_weights: bool
    note: str


def _looks_random(path):
    # tileinfer.random_weights writes no tokenizer; trained checkpoints ship one.
    return Path(path).is_dir() and not (Path(path) / "tokenizer.json").is_file()


def write_stand_in(directory=None, num_layers=2):
    """A tiny random target + drafter (written once) whose context holds 1k prompts: (target, drafter)."""
    from tileinfer.random_weights import write_dflash_drafter, write_qwen3

    root = Path(directory or STAND_IN_DIR) / "random-tiny"
    target, drafter = root / "target", root / "drafter"
    if not (target / "config.json").is_file():
        write_qwen3(target, "tiny", max_position_embeddings=STAND_IN_CONTEXT)
    if not (drafter / "config.json").is_file():
        write_dflash_drafter(drafter, target, num_layers=num_layers)
    return str(target), str(drafter)


def write_random_pair(preset, directory=None, drafter_layers=5, block_size=16):
    """A random target of `preset` (`tileinfer.random_weights.PRESETS`: "qwen3-4b", "tiny", ...) and a
    `drafter_layers`-layer DFlash drafter, written once under `directory`/`preset`: (target, drafter).
    Qwen3-4B's 4 B parameters are drawn on the GPU in seconds (on a CPU it takes minutes)."""
    from tileinfer.random_weights import write_dflash_drafter, write_qwen3

    root = Path(directory or RANDOM_DIR) / preset
    target, drafter = root / "target", root / "drafter"
    if not (target / "config.json").is_file():
        write_qwen3(target, preset)
    if not (drafter / "config.json").is_file():
        write_dflash_drafter(drafter, target, num_layers=drafter_layers, block_size=block_size)
    return str(target), str(drafter)


def report_pair(model=None, draft=None, shaped=None, cache_dir=None):
    """The pair a report times: `model` (and `draft`) when given; else, with `shaped` (a preset name; a
    GPU report passes "qwen3-4b"), a random-weight pair of those shapes written once under `cache_dir`,
    whose drafts the report replaces by the comparison's tokens per step; else the embedded pair."""
    if model is not None or shaped is None:
        return resolve_pair(model, draft)
    target, drafter = write_random_pair(shaped, cache_dir)
    return Pair(target, drafter, True,
                f"a {shaped}-shaped pair with random weights (target and 5-layer DFlash drafter, written once "
                f"to `{Path(target).parent}`)")


def resolve_pair(model=None, draft=None, stand_in_dir=None):
    """The checkpoints to load. model None: the embedded default pair, or, while it is not installed,
    a tiny random stand-in (said so in `note`)."""
    from tileinfer.loading import default_draft, default_model

    if model is None:
        if (Path(default_model()) / "config.json").is_file():
            model, draft = default_model(), draft or default_draft()
            return Pair(model, draft, False, EMBEDDED_NOTE)
        model, stand_in_draft = write_stand_in(stand_in_dir)
        return Pair(model, draft or stand_in_draft, True,
                    "the embedded default pair is not installed here, so a tiny random pair stands in "
                    f"({model}): costs are real, tokens and acceptance are not")
    note = f"{model}" + (f" with the drafter {draft}" if draft else " without a drafter")
    return Pair(str(model), None if draft is None else str(draft), _looks_random(model), note)


def load_engine(model=None, draft=None, weights="bf16", **load_kwargs):
    """(Engine, Pair): `tileinfer.load` on the resolved pair."""
    return load_pair(resolve_pair(model, draft), weights, **load_kwargs)


def load_pair(pair, weights="bf16", **load_kwargs):
    """(Engine, Pair): `tileinfer.load` on `pair`."""
    import tileinfer

    return tileinfer.load(pair.model, draft=pair.draft, weights=weights, **load_kwargs), pair


def is_embedded(pair):
    """Whether `pair` is the embedded default pair (trained on the benchmark's own templates)."""
    from tileinfer.loading import default_model

    return Path(pair.model).resolve() == Path(default_model()).resolve()
