"""bench/memory_check.py's rows on the embedded pair: plan beside measured, the phase that peaks."""

import tileinfer
from bench import memory_check


def test_rows_name_the_peak_phase():
    rows = memory_check.check(tileinfer.load(), "embedded pair", (40,), 4)
    assert [r["what"] for r in rows] == ["prefill", "step, block 1", "step, block 16"]
    steps = {r["what"]: r for r in rows[1:]}
    assert steps["step, block 1"]["peak_phase"] == "verify"
    phases = dict(p.split(":") for p in steps["step, block 16"]["phase_bytes"].split())
    assert set(phases) == {"drafter", "verify"}
    assert max(map(int, phases.values())) == steps["step, block 16"]["measured_bytes"] > 0
    assert all(r["planned_bytes"] > 0 and r["plan_over_measured"] > 0 for r in rows)
