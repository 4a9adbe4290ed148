"""The model pair a notebook or report measures: checkpoints given by the caller, the embedded default
pair, or, where that is not installed, a tiny random pair standing in (and saying so).

    engine, pair = load_engine(model=None, draft=None, weights="bf16")
"""

from dataclasses import dataclass
from pathlib import Path

STAND_IN_DIR = Path.home() / ".cache" / "tileinfer" / "stand-in"
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


def resolve_pair(model=None, draft=None, stand_in_dir=None):
    """The checkpoints to load. model None: the embedded default pair, or, while it is not installed,
    a tiny random stand-in (said so in `note`)."""
    from tileinfer.loading import default_draft, default_model

    if model is None:
        if (Path(default_model()) / "config.json").is_file():
            model, draft = default_model(), draft or default_draft()
            return Pair(model, draft, False, "the embedded default pair (trained, `tileinfer/assets/default`)")
        model, stand_in_draft = write_stand_in(stand_in_dir)
        return Pair(model, draft or stand_in_draft, True,
                    "the embedded default pair is not installed here, so a tiny random pair stands in "
                    f"({model}): costs are real, tokens and acceptance are not")
    note = f"{model}" + (f" with the drafter {draft}" if draft else " without a drafter")
    return Pair(str(model), None if draft is None else str(draft), _looks_random(model), note)


def load_engine(model=None, draft=None, weights="bf16", **load_kwargs):
    """(Engine, Pair): `tileinfer.load` on the resolved pair."""
    import tileinfer

    pair = resolve_pair(model, draft)
    return tileinfer.load(pair.model, draft=pair.draft, weights=weights, **load_kwargs), pair
