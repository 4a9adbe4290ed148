"""The order tests are handed to pytest-xdist's workers in: slow tests start at once under both schedulers."""

from types import SimpleNamespace

from tests.conftest import _worksteal_workers, slow_first


def _items(n, slow_at):
    return [SimpleNamespace(name=f"t{i}", keywords={"slow": True} if i in slow_at else {}) for i in range(n)]


def _shares(n, workers):
    """The contiguous shares worksteal cuts from n pending tests (xdist's check_schedule)."""
    out, start = [], 0
    for k in range(workers):
        size = (n - start) // (workers - k)
        out.append(range(start, start + size))
        start += size
    return out


def test_without_worksteal_the_slow_tests_lead():
    items = _items(10, {3, 7})
    assert [i.name for i in slow_first(items)] == ["t3", "t7", "t0", "t1", "t2", "t4", "t5", "t6", "t8", "t9"]


def test_worksteal_shares_each_start_with_their_part_of_the_slow_tests():
    items = _items(83, {5, 20, 21, 40, 41, 60, 61, 82})  # 8 slow, 3 workers: 3, 3 and 2 each
    ordered = slow_first(items, workers=3)
    assert sorted(i.name for i in ordered) == sorted(i.name for i in items)  # every test, once
    for share in _shares(len(ordered), 3):
        names = [ordered[i] for i in share]
        n_slow = sum("slow" in i.keywords for i in names)
        assert n_slow in (2, 3) and all("slow" in i.keywords for i in names[:n_slow])
    # the quick tests keep their order
    quick = [i.name for i in ordered if "slow" not in i.keywords]
    assert quick == [i.name for i in items if "slow" not in i.keywords]


def test_the_scheduler_is_read_from_the_controller_s_command_line(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "16")
    worker = SimpleNamespace(workerinput={"mainargv": ["pytest", "-n", "16", "--dist", "worksteal"]})
    assert _worksteal_workers(worker) == 16
    assert _worksteal_workers(SimpleNamespace(workerinput={"mainargv": ["pytest", "-n", "16"]})) == 0
    assert _worksteal_workers(SimpleNamespace()) == 0  # not a worker
