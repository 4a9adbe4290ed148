"""The embedded default pair generalises: tokens per step on held-out prompts (phrasings, layouts and
files it never trained on, `tileinfer_profiling.prompts.heldout`) stay above floors, losslessly.

The shipped pair's `training.json` carries a `heldout` section once it was trained on the data that
generalises (`python -m tools.train train` writes it); a pair without one predates that training,
and the floors do not apply to it yet.
"""

import json
from pathlib import Path

import pytest
import torch

import tileinfer
from tileinfer_profiling.prompts import POINTS
from tileinfer_profiling.prompts.heldout import heldout_prompt

ASSETS = Path(tileinfer.__file__).parent / "assets" / "default"
MANIFEST = ASSETS / "training.json"
# Mean tokens per step per (task, point) the pair must reach: at 1k over held-out prompts 0 (Python) and
# 1 (Julia), 48 new tokens; at 8k over all four, 128 new tokens, as acceptance_heldout.csv measures them
# (the first 48 tokens of an 8k edit hold its hardest part). No explain at 8k: an 8k prefill takes ~20 s
# on a busy CPU.
FLOORS = {("copy", "1k"): 4.0, ("edit", "1k"): 4.0, ("explain", "1k"): 2.0, ("copy", "8k"): 3.0, ("edit", "8k"): 3.0}
PROMPTS = {"1k": (0, 1), "8k": (0, 1, 2, 3)}
NEW_TOKENS = {"1k": 48, "8k": 128}


def trained_for_heldout():
    return MANIFEST.is_file() and "heldout" in json.loads(MANIFEST.read_text())


pytestmark = pytest.mark.skipif(
    not trained_for_heldout(),
    reason=f"the shipped pair predates held-out training: {MANIFEST.name} has no 'heldout' section "
           "(retrain with `python -m tools.train`, tools/train/README.md)")


@pytest.fixture(scope="module")
def engine():
    return tileinfer.load(weights="bf16" if torch.cuda.is_available() else "fp32")


@pytest.mark.parametrize("task, point", list(FLOORS))
def test_heldout_floor_and_lossless(engine, task, point):
    per_prompt = []
    for index in PROMPTS[point]:
        ids = heldout_prompt(task, POINTS[point].prompt_tokens, engine.tokenizer, index).ids
        spec = engine.generate(ids, NEW_TOKENS[point])
        plain = engine.generate(ids, NEW_TOKENS[point], block_size=1)
        assert spec.tokens == plain.tokens, (task, point, index)
        per_prompt.append(spec.stats.mean_tokens_per_step)
    mean = sum(per_prompt) / len(per_prompt)
    assert mean >= FLOORS[task, point], (task, point, per_prompt)
