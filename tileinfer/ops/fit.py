"""Launch configs that fit the device they run on.

A config tuned or guessed for one case can need more shared memory than a GPU offers for another
dtype or shape (fp32 tiles are twice bf16's: the prefill attention's 64×64 tiles with 3 stages need
245,760 B in fp32 against the H200's 232,448 B per block). Triton checks the compiled kernel against
the device's own limits before the first launch and raises `OutOfResources`; `launch_fitted` then
tries the next, smaller config of the kernel's shrink sequence and remembers the one that fits, so
every later call (and every CUDA-graph capture, whose warm-up runs outside the capture) launches it
directly. The sequence depends only on the starting config, never on M or the KV length, so exact
mode's kernels stay the same for every row count.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterable, TypeVar

from triton.runtime.errors import OutOfResources

from tileinfer.errors import ConfigError

C = TypeVar("C")
_fitted: dict = {}


def launch_fitted(key, candidates: Iterable[C], launch: Callable[[C], object]):
    """launch(cfg) with the first config in `candidates` the device can run; the winner is kept per `key`
    (which must name everything the compiled kernel depends on besides the config)."""
    known = _fitted.get(key)
    if known is not None:
        return launch(known)
    refused = []
    for cfg in candidates:
        try:
            out = launch(cfg)
        except OutOfResources as err:
            refused.append(f"{cfg}: {err}")
            continue
        _fitted[key] = cfg
        return out
    raise ConfigError(f"no launch config of {key[0] if isinstance(key, tuple) else key} fits this device: "
                      + "; ".join(refused[-3:]))


def fitted_config(key):
    """The config `launch_fitted` settled on for `key`, or None before its first launch."""
    return _fitted.get(key)


def shrink(cfg, *, stages: str = "num_stages", blocks: tuple[tuple[str, int], ...] = (), min_stages: int = 1):
    """cfg, then fewer pipeline stages down to `min_stages`, then each block dimension of `blocks`
    ((field, minimum) pairs, in order) halved down to its minimum, stages reset each time."""
    yield cfg
    base = cfg
    for s in range(getattr(cfg, stages) - 1, min_stages - 1, -1):
        yield replace(base, **{stages: s})
    for field, lowest in blocks:
        while getattr(base, field) // 2 >= lowest:
            base = replace(base, **{field: getattr(base, field) // 2})
            yield base
            for s in range(getattr(base, stages) - 1, min_stages - 1, -1):
                yield replace(base, **{stages: s})
