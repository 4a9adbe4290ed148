"""Named ranges around the engine's steps and layers, for nsys/ncu (NVTX) and torch.profiler.

    with annotate("verify", kv_len=kv_len, m=16, num_splits=8):
        ...
    with annotate(f"layer.{i}.attention", level="layer", num_splits=8, kv_len=kv_len):
        ...

A range is emitted to up to three places:
- NVTX, domain "tileinfer", when a tool (nsys, ncu) is attached to the process. The name stays
  fixed; the payload goes to the NVTX payload (`kv_len` or `tokens`, the value that changes every
  step) and category (the others, e.g. "m=16 num_splits=8"), so ranges group by name in the tools.
- `torch.profiler.record_function(name)` while `record_scopes()` is on, so that torch traces can
  attribute kernels to steps and layers (torch.profiler does not see NVTX ranges).
- hooks added with `add_hook(fn)`: `fn(name, level, payload)` on entry.

Levels: "step" ranges (`PHASES`) are always emitted; "layer" ranges
only after `set_level("layer")` (or TILEINFER_TRACE_LEVEL=layer in the environment). With no tool
attached, no scopes recorded and no hooks, `annotate` returns one shared null context.
"""

import contextlib
import os

from tileinfer.errors import ConfigError

__all__ = ["annotate", "set_level", "get_level", "record_scopes", "add_hook", "remove_hook",
           "nvtx_enabled", "LEVELS", "PHASES", "STEP_PHASES"]

LEVELS = ("step", "layer")
# The "step" ranges the engine emits: prefill, then per step a drafter pass and a verify (DFlash) or a
# decode (plain), then accept.
PHASES = ("prefill", "drafter", "verify", "decode", "accept")
STEP_PHASES = PHASES[1:]
DOMAIN = "tileinfer"
# Payload keys that change every step go to the NVTX payload; the rest name the category.
_PAYLOAD_KEYS = ("kv_len", "tokens")

_NULL = contextlib.nullcontext()


def _nvtx_domain():
    if os.environ.get("NVTX_DISABLE"):
        return None
    try:
        import nvtx
    except ImportError:
        return None
    domain = nvtx.get_domain(DOMAIN)
    # Without an attached tool the package hands out a dummy domain whose calls do nothing.
    return None if type(domain).__name__ == "DummyDomain" else domain


_domain = _nvtx_domain()
_level = os.environ.get("TILEINFER_TRACE_LEVEL", "step")
if _level not in LEVELS:
    _level = "step"
_record = False
_hooks = []
_active = {"step": False, "layer": False}  # annotate's fast path reads only this


def _refresh():
    on = _domain is not None or _record or bool(_hooks)
    _active["step"] = on
    _active["layer"] = on and _level == "layer"


_refresh()


def nvtx_enabled():
    """True when NVTX ranges reach a tool (nsys or ncu attached, `nvtx` installed)."""
    return _domain is not None


class _Range:
    __slots__ = ("name", "level", "payload", "_rf")

    def __init__(self, name, level, payload):
        self.name, self.level, self.payload = name, level, payload
        self._rf = None

    def __enter__(self):
        for hook in _hooks:
            hook(self.name, self.level, self.payload)
        if _domain is not None:
            value, category = _nvtx_payload(self.payload)
            _domain.push_range(_domain.get_event_attributes(self.name, None, category, value))
        if _record:
            import torch
            self._rf = torch.profiler.record_function(self.name)
            self._rf.__enter__()
        return self

    def __exit__(self, *exc):
        if self._rf is not None:
            self._rf.__exit__(*exc)
            self._rf = None
        if _domain is not None:
            _domain.pop_range()
        return False


def _nvtx_payload(payload):
    if not payload:
        return None, None
    value = None
    rest = []
    for key, v in payload.items():
        if value is None and key in _PAYLOAD_KEYS:
            value = int(v)
        else:
            rest.append(f"{key}={v}")
    return value, (" ".join(rest) or None)


def annotate(name, level="step", **payload):
    """A context manager marking a range `name`; `payload` (ints) travels beside the name."""
    active = _active.get(level)
    if not active:
        if active is None:
            raise ConfigError(f"unknown trace level {level!r}; use one of {LEVELS}")
        return _NULL
    return _Range(name, level, payload)


class _Setting:
    """Applies a setting at once; used as a context manager it restores the previous one on exit."""

    def __init__(self, apply, previous):
        self._apply, self._previous = apply, previous

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._apply(self._previous)
        return False


def _set_record(enabled):
    global _record
    _record = bool(enabled)
    _refresh()


def record_scopes(enabled=True):
    """Switch `torch.profiler.record_function` scopes on (or off); `with record_scopes():` restores."""
    previous = _record
    _set_record(enabled)
    return _Setting(_set_record, previous)


def _set_level(level):
    global _level
    _level = level
    _refresh()


def set_level(level):
    """Emit ranges down to `level` ("step" or "layer"); `with set_level("layer"):` restores."""
    if level not in LEVELS:
        raise ConfigError(f"unknown trace level {level!r}; use one of {LEVELS}")
    previous = _level
    _set_level(level)
    return _Setting(_set_level, previous)


def get_level():
    return _level


def add_hook(fn):
    """Call `fn(name, level, payload)` whenever a range is entered."""
    _hooks.append(fn)
    _refresh()
    return fn


def remove_hook(fn):
    if fn in _hooks:
        _hooks.remove(fn)
    _refresh()
