"""A GPU's tuned configs with some values replaced, for the engines loaded inside: an A/B of one tuned value
without editing `tileinfer/ops/configs/<gpu>.json`.

    with overridden({"prefill_attention": {"tma": False}}):
        engine = tileinfer.load(...)          # its kernels read the section with tma off

    with replaced(read_configs("before.json", gpu)):
        engine = tileinfer.load(...)          # a whole configs file in place of the installed one

The patch is merged into every GPU's configs key by key (a dict into a dict, any other value replaces):
{"skinny_gemm": {"2560x4096": {"m1": {"bf16": {"prefetch_k": 64}}}}} sets one field of one entry and
keeps the rest of it. A patch that names a section, shape, bucket or kind the configs lack is refused, so a
typo cannot measure the tuned configs under another name.
"""

import json
from contextlib import contextmanager

from tileinfer.ops import gemm_configs, tuning


def parse(text: str) -> dict:
    """A patch from its JSON text (a file's path when it names one): {} for "" or "none"."""
    if text in ("", "none"):
        return {}
    try:
        patch = json.loads(open(text).read() if text.endswith(".json") else text)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"an override is a JSON object or a .json file: {e}") from None
    if not isinstance(patch, dict):
        raise ValueError(f"an override is a JSON object, got {type(patch).__name__}")
    return patch


def merged(base: dict, patch: dict, where: str = "") -> dict:
    """base with patch merged in key by key. A field an entry lacks may be given (the kernel's default
    stands for it until then: a misspelt one fails where the kernel reads its config); a section, shape,
    bucket or kind the configs lack is an error naming its path."""
    out = dict(base)
    for key, value in patch.items():
        path = f"{where}.{key}" if where else key
        if key not in base:
            if isinstance(value, dict):
                raise KeyError(f"the tuned configs have no {path!r} to override")
            out[key] = value
        elif isinstance(value, dict) and isinstance(base[key], dict):
            out[key] = merged(base[key], value, path)
        else:
            out[key] = value
    return out


def check(patch: dict, gpu: str) -> None:
    """Raise ValueError where `patch` names something `gpu`'s tuned configs lack, or where the GPU has none."""
    if not patch:
        return
    base = tuning.gpu_configs(gpu)
    if not base:
        raise ValueError(f"{gpu} has no tuned configs: an override would change nothing")
    try:
        merged(base, patch)
    except KeyError as e:
        raise ValueError(e.args[0]) from None


def for_this_machine(text: str) -> dict:
    """The patch of an --override argument, checked against this machine's GPU (ValueError if it cannot apply)."""
    import torch

    patch = parse(text)
    check(patch, tuning.gpu_of(torch.device("cuda")) if torch.cuda.is_available() else "cpu")
    return patch


def add_argument(parser) -> None:
    parser.add_argument("--override", default="none",
                        help="tuned values replaced for this run, a JSON object or .json file (bench/tuned_override.py)")


def from_args(parser, args) -> dict:
    """The --override patch for this machine; one that cannot apply ends the run as the parser's error."""
    try:
        return for_this_machine(args.override)
    except ValueError as e:
        parser.error(f"--override: {e}")


def label(patch: dict) -> str:
    """The patch as one line for a result's column: "none" when empty."""
    return json.dumps(patch, sort_keys=True, separators=(",", ":")) if patch else "none"


def read_configs(path: str, gpu: str) -> dict:
    """The configs file at `path`, to stand in for `gpu`'s installed one; ValueError naming what is wrong
    (unreadable, not a JSON object, or another GPU's file)."""
    try:
        configs = json.loads(open(path).read())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: {e}") from None
    if not isinstance(configs, dict):
        raise ValueError(f"{path}: a configs file is a JSON object, got {type(configs).__name__}")
    if configs.get("gpu") != gpu:
        raise ValueError(f"{path} holds the configs of {configs.get('gpu')!r}, this machine's GPU is {gpu!r}")
    return configs


@contextmanager
def _serving(configs_of):
    """`configs_of(gpu)` as every kernel's source of tuned configs inside, the installed files again after."""
    tuned = tuning.gpu_configs
    tuning.gpu_configs = gemm_configs.gpu_configs = configs_of
    gemm_configs._lookup.cache_clear()
    try:
        yield
    finally:
        tuning.gpu_configs = gemm_configs.gpu_configs = tuned
        gemm_configs._lookup.cache_clear()


@contextmanager
def overridden(patch: dict):
    """The GPU's tuned configs with `patch` merged in, for the engines loaded (and graphs captured) inside;
    the configs as tuned again after. A GPU without a configs file keeps its defaults."""
    if not patch:
        yield
        return
    tuned = tuning.gpu_configs

    def configs(gpu: str) -> dict:
        base = tuned(gpu)
        return merged(base, patch) if base else base

    with _serving(configs):
        yield


@contextmanager
def replaced(configs: dict | None):
    """`configs` (a whole file, `read_configs`) in place of its GPU's installed file for the engines loaded
    inside; None leaves the installed files."""
    if configs is None:
        yield
        return
    tuned = tuning.gpu_configs
    with _serving(lambda gpu: configs if gpu == configs["gpu"] else tuned(gpu)):
        yield
