"""run_all.sh: every part calls its scripts with flags they take, in the configurations the issue lists;
run here with a stand-in Python that records its arguments (nothing is measured)."""

import importlib
import re
import shlex
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUN_ALL = REPO / "bench" / "ref" / "run_all.sh"

FAKE_PYTHON = r"""#!/usr/bin/env bash
printf '%s\n' "$*" >> "$FAKE_LOG"
case "$*" in
  *git_rev*) echo "${FAKE_REV:-abc1234}" ;;
  *prepare_random*) echo "target drafter" ;;
  *gpu_tag*) echo h200 ;;
  *"bench.ref.reference accept-profile"*) echo "1k:edit=7.1,1k:explain=2.9,8k:edit=1.87,8k:explain=2.5" ;;
  *"bench.ref.reference tokens-per-step"*) echo 1.87 ;;
  *"import vllm"*) exit 1 ;;
esac
exit 0
"""


def _commands(text):
    """`$PY -m module args` commands of a script, continuation lines joined, array expansions kept."""
    text = text.replace("\\\n", " ")
    return [(m.group(1), m.group(2)) for m in re.finditer(r"\$PY -m ([\w.]+)([^\n|;]*)", text)]


def _arrays(text):
    """Every array a script defines: name -> its elements as written (a later definition adds to it)."""
    out = {}
    for m in re.finditer(r"\b([A-Z_]+)=\(([^)]*)\)", text):
        out[m.group(1)] = (out.get(m.group(1), "") + " " + m.group(2)).strip()
    return out


def _parser(module, args):
    """The argparse parser a `python -m module args` command meets, or None."""
    if module == "tileinfer_profiling":
        from tileinfer_profiling.cli import build_parser
        return build_parser()._subparsers._group_actions[0].choices[args.split()[0]]
    mod = importlib.import_module(module)
    return mod.build_parser() if hasattr(mod, "build_parser") else None


@pytest.mark.parametrize("script", ["run_all.sh", "profile.sh"])
def test_scripts_pass_only_flags_their_modules_take(script):
    text = (REPO / "bench" / "ref" / script).read_text()
    arrays = _arrays(text)
    checked = 0
    for module, args in _commands(text):
        parser = _parser(module, args)
        if parser is None:
            continue
        for name, body in arrays.items():
            args = args.replace(f'"${{{name}[@]}}"', body)
        flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", args))
        known = set(parser._option_string_actions)
        assert flags <= known, (module, flags - known)
        checked += 1
    assert checked >= (4 if script == "run_all.sh" else 1)


@pytest.fixture
def fake_run(tmp_path):
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    log = tmp_path / "log.txt"

    def run(*parts, rev="abc1234", **env):
        log.write_text("")
        out = tmp_path / "out"
        proc = subprocess.run(["bash", str(RUN_ALL), *parts], capture_output=True, text=True, timeout=120,
                              env={"PATH": "/usr/bin:/bin", "PYTHON": str(fake), "FAKE_LOG": str(log),
                                   "FAKE_REV": rev, "OUT": str(out), **env})
        return proc, [shlex.split(line) for line in log.read_text().splitlines()]
    return run


def _calls(log, module):
    return [args for args in log if args[:2] == ["-m", module]]


def test_parts_run_the_configurations_of_the_issue(fake_run):
    proc, log = fake_run("1k", "8k-int8", "features", "profile", "sizes", "peers-8k", "vllm",
                         RANDOM_WEIGHTS="qwen3-4b")
    assert proc.returncode == 0, proc.stderr
    spec = _calls(log, "bench.ref.tileinfer_spec")
    ours = [a for a in spec if "qwen3-4b" in a]
    assert [(a[a.index("--points") + 1], a[a.index("--weights") + 1]) for a in ours] == [("1k", "bf16,int8"),
                                                                                         ("8k", "int8")]
    assert all(a[a.index("--dflash") + 1] == "on,off" and "--processes" not in a for a in spec)  # 3 at 1k, 2 at 8k
    assert all(a[a.index("--accept-profile") + 1].startswith("1k:edit=7.1") for a in spec)
    sizes = [a[a.index("--random-weights") + 1] for a in spec if a[a.index("--out") + 1].endswith("sizes.jsonl")]
    assert sizes == ["qwen3-0.6b", "qwen3-1.7b", "qwen3-8b"]
    (features,) = _calls(log, "bench.features")
    assert features[features.index("--point") + 1] == "1k" and features[features.index("--task") + 1] == "edit"
    (step_edit, step_explain) = _calls(log, "tileinfer_profiling")
    assert step_edit[step_edit.index("--max-new-tokens") + 1] == "256"
    (profile,) = _calls(log, "bench.ref.profile_summary")
    assert profile[profile.index("--out") + 1].endswith("profile_8k_bf16_h200.csv")
    (peers,) = _calls(log, "bench.peers.spec")
    assert peers[peers.index("--points") + 1] == "8k" and peers[peers.index("--processes") + 1] == "2"
    assert peers[peers.index("--engines") + 1] == "hf-eager,hf-compile,dflash-ref"
    assert peers[peers.index("--new-tokens") + 1] == "128,dflash-ref=16"
    assert not _calls(log, "bench.ref.vllm_spec") and "vLLM cannot replay" in proc.stdout


def test_a_dirty_revision_or_an_unknown_part_stops_the_run(fake_run):
    proc, log = fake_run("1k", rev="abc1234-dirty", RANDOM_WEIGHTS="qwen3-4b")
    assert proc.returncode == 2 and "not a clean commit" in proc.stderr and not _calls(log, "bench.ref.tileinfer_spec")
    proc, _ = fake_run("1k", rev="abc1234-dirty", RANDOM_WEIGHTS="qwen3-4b", ALLOW_DIRTY="1")
    assert proc.returncode == 0
    proc, _ = fake_run("2k", RANDOM_WEIGHTS="qwen3-4b")
    assert proc.returncode == 2 and "unknown part '2k'" in proc.stderr


def test_real_weights_skip_the_sizes_and_run_vllm_only_where_installed(fake_run):
    proc, log = fake_run("sizes", "peers-1k", "vllm")
    assert proc.returncode == 0, proc.stderr
    assert "skipped: the model sizes run on random weights" in proc.stdout
    assert "vLLM is not installed" in proc.stdout
    (peers,) = _calls(log, "bench.peers.spec")
    assert peers[peers.index("--model") + 1] == "Qwen/Qwen3-4B" and "--accept-profile" not in peers
    assert peers[peers.index("--new-tokens") + 1] == "dflash-ref=16"
