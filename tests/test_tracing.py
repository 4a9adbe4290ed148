import timeit

import pytest
import torch

from tileinfer import tracing
from tileinfer.errors import ConfigError


@pytest.fixture
def entered():
    seen = []

    def hook(name, level, payload):
        seen.append((name, level, dict(payload)))

    tracing.add_hook(hook)
    yield seen
    tracing.remove_hook(hook)


def test_step_ranges_reach_hooks_with_payload(entered):
    with tracing.annotate("verify", kv_len=1024, m=16, num_splits=8):
        with tracing.annotate("layer.0.attention", level="layer", num_splits=8, kv_len=1024):
            pass
    with tracing.annotate("accept"):
        pass
    assert entered == [("verify", "step", {"kv_len": 1024, "m": 16, "num_splits": 8}),
                       ("accept", "step", {})]


def test_layer_ranges_only_when_switched_on(entered):
    with tracing.set_level("layer"):
        assert tracing.get_level() == "layer"
        with tracing.annotate("drafter"):
            with tracing.annotate("drafter.layer.2.mlp", level="layer", m=16):
                pass
    assert tracing.get_level() == "step"
    with tracing.annotate("layer.3.mlp", level="layer", m=1):
        pass
    assert [name for name, _, _ in entered] == ["drafter", "drafter.layer.2.mlp"]


def test_off_returns_shared_null_context_and_is_cheap():
    if tracing.nvtx_enabled():
        pytest.skip("an NVTX tool is attached")
    a = tracing.annotate("decode", kv_len=5)
    b = tracing.annotate("layer.0.mlp", level="layer", m=1)
    assert a is b
    with a:
        pass
    per_call = timeit.timeit(lambda: tracing.annotate("decode", kv_len=5), number=20000) / 20000
    assert per_call < 5e-6  # a few hundred ns in practice


def test_unknown_level_is_an_error():
    with pytest.raises(ConfigError):
        tracing.set_level("kernel")
    with pytest.raises(ConfigError):
        tracing.annotate("x", level="kernel")


def test_record_scopes_reach_torch_profiler():
    x = torch.randn(8, 8)
    with tracing.record_scopes(), tracing.set_level("layer"):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            with tracing.annotate("decode", kv_len=3):
                with tracing.annotate("layer.0.mlp", level="layer", m=1):
                    x @ x
    assert tracing.annotate("decode") is tracing.annotate("prefill")  # restored: off again
    names = {e.key for e in prof.key_averages()}
    assert {"decode", "layer.0.mlp"} <= names


def test_record_scopes_as_setter():
    tracing.record_scopes()
    try:
        assert tracing.annotate("decode") is not tracing.annotate("prefill")
    finally:
        tracing.record_scopes(False)


def test_nvtx_payload_split():
    assert tracing._nvtx_payload({"kv_len": 8192, "m": 16, "num_splits": 8}) == (8192, "m=16 num_splits=8")
    assert tracing._nvtx_payload({"m": 16}) == (None, "m=16")
    assert tracing._nvtx_payload({}) == (None, None)


class _FakeDomain:
    def __init__(self):
        self.calls = []

    def get_event_attributes(self, message, color, category, payload):
        return (message, category, payload)

    def push_range(self, attributes):
        self.calls.append(("push",) + attributes)

    def pop_range(self):
        self.calls.append(("pop",))


def test_nvtx_ranges_pushed_and_popped_when_a_tool_is_attached(monkeypatch):
    domain = _FakeDomain()
    monkeypatch.setattr(tracing, "_domain", domain)
    tracing._refresh()
    try:
        with tracing.annotate("verify", kv_len=2048, m=16):
            pass
        with tracing.annotate("layer.1.mlp", level="layer"):
            pass  # layer level is off: nothing
    finally:
        monkeypatch.undo()
        tracing._refresh()
    assert domain.calls == [("push", "verify", "m=16", 2048), ("pop",)]
