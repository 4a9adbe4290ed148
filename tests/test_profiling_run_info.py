"""What every recorded row says about its run: one git revision rule, commands as typed at the repository root."""

import sys
import types

from tileinfer_profiling import run_info


def test_commands_are_recorded_relative_to_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))  # a script, not `python -m`
    argv = [str(tmp_path / "bench" / "gemm_bench.py"), "--out", str(tmp_path / "bench" / "results"),
            f"--model={tmp_path / 'ckpt'}", "--gpu", "NVIDIA H200", "--root", "/elsewhere/x"]
    assert run_info.command_line(argv) == ("python bench/gemm_bench.py --out bench/results --model=ckpt "
                                           "--gpu 'NVIDIA H200' --root /elsewhere/x")
    assert run_info.command_line(["/venv/bin/tileinfer", "profile", "ceilings"]) == "tileinfer profile ceilings"


def test_modules_are_recorded_as_python_m(monkeypatch):
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name="bench.ref.tileinfer_spec")
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert run_info.command_line(["/abs/bench/ref/tileinfer_spec.py", "--points", "1k"]) == (
        "python -m bench.ref.tileinfer_spec --points 1k")


def test_one_git_revision_rule(monkeypatch):
    run_info.git_rev.cache_clear()
    rev = run_info.git_rev()
    assert rev == "unknown" or rev.split("-")[0].isalnum()
    monkeypatch.setenv("TILEINFER_GIT_REV", "abc1234")
    run_info.git_rev.cache_clear()
    try:
        assert run_info.git_rev() == "abc1234" and run_info.run_info("cpu")["git_rev"] == "abc1234"
    finally:
        run_info.git_rev.cache_clear()
