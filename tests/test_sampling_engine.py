"""Sampling through Engine.generate: requests checked, temperature 0 still greedy, seeds reproducible,
the engine's tokens equal to the reference loop's seed for seed (so the distribution shown lossless in
test_sampling.py is the engine's), and the engine's own first tokens against the exact distribution."""

import pytest
import torch

import tileinfer
from tests.sampling_sim import Target, chain, one_thread, simulate, tables, tiny_sampling_pair  # noqa: F401
from tileinfer.cli import main
from tileinfer.errors import RequestError
from tileinfer_profiling.sampling_check import Conditionals, chi_square, exact_distribution

PROMPT = [3, 5]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    return tiny_sampling_pair(tmp_path_factory.mktemp("sampling_engine"))


@pytest.fixture(scope="module")
def engine(paths):
    """On the CPU wherever the suite runs: thousands of tiny seeded generations (the GPU tests below run
    the device path)."""
    return tileinfer.load(paths[0], draft=paths[1], weights="fp32", backend="torch", device="cpu")


@pytest.fixture(scope="module")
def logits(engine):
    return Conditionals(engine, PROMPT)


@pytest.mark.parametrize("kwargs, message", [
    (dict(temperature=-1.0), "temperature"), (dict(temperature=1.0, top_k=0), "top_k"),
    (dict(temperature=1.0, top_p=2.0), "top_p"), (dict(temperature=1.0, seed="x"), "seed"),
])
def test_bad_sampling_requests_fail_before_anything_runs(engine, kwargs, message):
    table = engine.sampler.table
    with pytest.raises(RequestError, match=message):
        engine.generate(PROMPT, 4, **kwargs)
    assert engine.sampler.table is table
    assert engine.generate(PROMPT, 3, stop_ids=[]).stats.new_tokens == 3


@pytest.mark.parametrize("block", [1, 4])
def test_temperature_zero_is_greedy_bit_for_bit(engine, block):
    greedy = engine.generate(PROMPT, 12, stop_ids=[], block_size=block)
    same = engine.generate(PROMPT, 12, stop_ids=[], block_size=block, temperature=0.0, top_k=2, top_p=0.5, seed=3)
    assert same.tokens == greedy.tokens and same.stats.tokens_per_step == greedy.stats.tokens_per_step
    assert same.stats.temperature == 0.0


@pytest.mark.parametrize("block", [1, 2, 16])
def test_same_seed_same_tokens(engine, block):
    kw = dict(stop_ids=[], block_size=block, temperature=1.0, top_p=0.95)
    a = engine.generate(PROMPT, 24, seed=11, **kw)
    assert engine.generate(PROMPT, 24, seed=11, **kw).tokens == a.tokens
    assert engine.generate(PROMPT, 24, seed=12, **kw).tokens != a.tokens
    drawn = engine.generate(PROMPT, 24, **kw)  # no seed: one is drawn and recorded
    assert isinstance(drawn.stats.seed, int)
    assert engine.generate(PROMPT, 24, seed=drawn.stats.seed, **kw).tokens == drawn.tokens
    s = a.stats
    assert (s.temperature, s.top_k, s.top_p, s.seed) == (1.0, None, 0.95, 11)


class Recorder:
    """Wraps an engine's drafter phase: records each step's drafts, optionally after replacing them with
    a drafter of the reference loop's kind (a function of the committed tokens), eager only."""

    def __init__(self, engine, drafter=None):
        self.engine, self.drafter = engine, drafter
        self.draft, self.read = engine._draft, engine._read
        self.runs = []

    def begin(self):
        self.runs.append([])
        self.out = None

    def _draft(self, shape, host_start):
        self.draft(shape, host_start)
        size, ids = shape.size, self.engine.block_ids
        if self.out is None:
            self.out = [int(ids[0])]
        if self.drafter is not None:
            ids[1:size].copy_(torch.tensor(self.drafter(None, None, tuple(self.out), size), dtype=torch.int64))
        self.runs[-1].append(tuple(ids[1:size].tolist()))

    def _read(self, *args):
        committed, stopped, cut = self.read(*args)
        if self.out is not None:
            self.out += committed
        return committed, stopped, cut

    def replay(self, run, step, prefix, n):
        drafts = self.runs[run][step - 1]
        assert len(drafts) == n - 1
        return drafts


ENGINE_CONFIGS = {  # block, drafter (None: DFlash's), temperature, top_k, top_p, max_new_tokens
    "plain": (1, None, 1.0, None, None, 10),
    "dflash-2": (2, None, 1.0, None, None, 10),
    "dflash-4-filtered": (4, None, 0.7, 5, 0.9, 10),
    "dflash-16": (16, None, 1.0, None, None, 20),
    "adversary-4-top-k": (4, torch.argmin, 1.0, 4, None, 10),
    "oracle-16": (16, torch.argmax, 0.5, None, None, 20),
}


@pytest.mark.parametrize("name", list(ENGINE_CONFIGS))
def test_engine_samples_the_reference_loops_tokens_seed_for_seed(engine, logits, monkeypatch, name):
    block, pick, t, k, p, max_new = ENGINE_CONFIGS[name]
    target = Target(logits, t, k, p)
    recorder = Recorder(engine, chain(target, pick, depth=max_new) if pick is not None else None)
    monkeypatch.setattr(engine, "_draft", recorder._draft)
    monkeypatch.setattr(engine, "_read", recorder._read)
    seeds = range(40)
    ours = []
    for seed in seeds:
        recorder.begin()
        ours.append(engine.generate(PROMPT, max_new, stop_ids=[], block_size=block, temperature=t, top_k=k,
                                    top_p=p, seed=seed))
    monkeypatch.undo()
    u = tables(seeds, max_new + 1, engine.block_max)
    expect, accepted, committed = simulate(target, recorder.replay, block, max_new, u)
    for seed, gen, tokens, counts in zip(seeds, ours, expect, committed):
        assert gen.tokens == tokens, (name, seed)
        assert gen.stats.tokens_per_step == counts, (name, seed)
    if block > 1:
        steps = [a for acc in accepted for a in acc]
        assert any(steps) or pick is torch.argmin, "no draft was ever accepted"
        if pick is torch.argmax:
            assert max(steps) >= 5, "long acceptance untested"


def test_acceptance_per_position(engine):
    gen = engine.generate(PROMPT, 30, stop_ids=[], block_size=4, temperature=1.0, seed=1, accept_profile=[3, 1])
    s = gen.stats
    assert s.acceptance_per_position[:2] == pytest.approx([0.5, 0.5], abs=0.05)
    assert s.acceptance_per_position[2] == 0
    assert len(s.drafts_offered) == 3 and s.drafts_offered[0] == s.steps
    real = engine.generate(PROMPT, 30, stop_ids=[], block_size=16, temperature=0.5, seed=2).stats
    assert len(real.acceptance_per_position) == 15
    assert real.as_dict()["acceptance_per_position"] == real.acceptance_per_position
    accepted = [n - 1 for n in real.tokens_per_step[:-1]]  # the last step may be cut by the length
    assert real.drafts_accepted[0] >= sum(a >= 1 for a in accepted)


@pytest.mark.slow
def test_engine_first_two_tokens_follow_the_target(engine, logits):
    """The engine's own samples, DFlash with its drafter (a block of 2: the first step verifies one draft)
    at temperature 0.8 with top-k 10, against the distribution enumerated from the target's logits."""
    t, k, runs = 0.8, 10, 20_000
    samples = [tuple(engine.generate(PROMPT, 2, stop_ids=[], block_size=2, temperature=t, top_k=k, seed=s).tokens)
               for s in range(runs)]
    target = Target(logits, t, k)
    result = chi_square(samples, exact_distribution(target.probs, 2, floor=50 / runs), 50)
    assert result.unlisted == 0 and result.p_value > 1e-3, str(result)


def test_triton_backend_samples_the_same_tokens(paths):
    """The Triton backend launches a step before reading the last (its uniform row advances on the
    device); it samples what the torch backend does on the same device."""
    triton = tileinfer.load(paths[0], draft=paths[1], weights="fp32", backend="triton")
    reference = tileinfer.load(paths[0], draft=paths[1], weights="fp32", backend="torch", device=triton.device)
    kw = dict(stop_ids=[], block_size=4, temperature=1.0, top_k=8, seed=5)
    assert triton.generate(PROMPT, 8, **kw).tokens == reference.generate(PROMPT, 8, **kw).tokens


def test_cli_sampling_flags(paths, capsys):
    args = ["generate", str(paths[0]), "3,5", "--ids", "--max-new-tokens", "6", "--weights", "fp32",
            "--temperature", "0.9", "--top-k", "5", "--seed", "4"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0
    assert capsys.readouterr().out == first
    assert main(args[:-2] + ["--top-p", "1.5"]) == 2
    assert "top_p" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.parametrize("block", [1, 4, 16])
def test_graph_replays_sample_what_eager_steps_sample(paths, block):
    """Inside CUDA graphs the uniforms' row, the temperature and the filters are device state: replays
    sample exactly what eager steps do, for any temperature, without recapturing."""
    gpu = tileinfer.load(paths[0], draft=paths[1], weights="fp32", device="cuda")
    for t, k, p in ((1.0, None, None), (0.6, 5, 0.9)):
        kw = dict(stop_ids=[], block_size=block, temperature=t, top_k=k, top_p=p, seed=9)
        graphs = gpu.generate(PROMPT, 40, **kw)
        assert graphs.tokens == gpu.generate(PROMPT, 40, eager=True, **kw).tokens
        assert graphs.tokens == gpu.generate(PROMPT, 40, **kw).tokens
    if block == 1:  # one step shape: another temperature replays the same graphs
        captured = len(gpu._graphs)
        gpu.generate(PROMPT, 40, stop_ids=[], block_size=block, temperature=0.3, seed=1)
        assert len(gpu._graphs) == captured


def test_temperature_runs_give_tokens_per_step_and_acceptance_curves(engine):
    from tileinfer_profiling.acceptance import acceptance_curves, temperature_runs
    from tileinfer_profiling.engine_prompts import benchmark_prompt

    runs = temperature_runs(engine, tasks=("edit",), new_tokens=12, seeds=2, stop_ids=[])  # every run takes steps
    assert runs["temperature"].tolist() == [0.0, 0.6, 1.0] and runs["seeds"].tolist() == [1, 2, 2]
    greedy = engine.generate(benchmark_prompt(engine, "edit", "1k", 12), 12, stop_ids=[]).stats
    assert runs["mean_tokens_per_step"][0] == greedy.mean_tokens_per_step
    curves = acceptance_curves(runs)
    assert len(curves) == sum(map(len, runs["acceptance_per_position"]))
    assert curves.groupby("temperature")["position"].min().tolist() == [1, 1, 1]
    assert curves["acceptance"].between(0, 1).all()


def _one(folder, pattern):
    found = list(folder.glob(pattern))
    assert len(found) == 1, (pattern, found)
    return found[0]


@pytest.mark.slow
@pytest.mark.parametrize("part", ["distribution", "cost", "acceptance", "ops"])
def test_sampling_bench_smoke(part, tmp_path, capsys):
    """bench/sampling_bench.py end to end at tiny sizes, a part at a time (its GPU run is the real one)."""
    import pandas as pd

    from bench import sampling_bench

    sampling_bench.main(["--smoke", "--parts", part, "--out", str(tmp_path), "--root", str(tmp_path / "checkpoints")])
    out = capsys.readouterr().out
    df = pd.read_csv(_one(tmp_path, f"sampling_{part}_*.csv"))
    assert len(df) and {"gpu", "torch", "triton", "git_rev", "command", "weights_kind"} <= set(df.columns)
    if part == "cost":
        assert set(df["sampling"]) == set(sampling_bench.MODES) and (df["step_ms"] > 0).all()
    if part == "acceptance":
        assert sorted(set(df["temperature"])) == [0.0, 0.6, 1.0]
        assert "tokens per step" in out.splitlines()[-3]
    if part == "ops":
        assert {"sample_block T=1", "sample_block top-k, top-p"} <= set(df["piece"]) and (df["us"] > 0).all()


@pytest.mark.gpu
def test_sampling_bench_launches(tmp_path, capsys):
    """Each launch of sample_block in its graph, its own time: T=1 is four launches (stats, finish, mass,
    pick), a filtered step of BF16 logits six (stats, the key histogram, its blocks' sums, finish, mass, pick)."""
    import pandas as pd

    from bench import sampling_bench

    sampling_bench.main(["--smoke", "--parts", "launches", "--out", str(tmp_path)])
    df = pd.read_csv(_one(tmp_path, "sampling_launches_*.csv"))
    counts = df.groupby(["rows", "sampling"])["launch"].count().to_dict()
    for rows in (1, 16):
        assert counts[rows, "T=1"] == 4
        assert counts[rows, "top-k 50, top-p 0.95"] == counts[rows, "top-p 0.95"] == 6
    assert (df["own_us"] >= 0).all() and (df["duration_us"] > 0).all()
    assert "launches of sample_block" in capsys.readouterr().out


def test_sampling_bench_launches_needs_a_gpu(tmp_path):
    from bench import sampling_bench
    from tileinfer.errors import ConfigError

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match="launches part"):
        sampling_bench.main(["--smoke", "--parts", "launches", "--out", str(tmp_path)])
    assert not list(tmp_path.glob("sampling_launches_*.csv"))


@pytest.fixture(scope="module")
def wide_pair(tmp_path_factory):
    """A vocabulary past the top-k candidates."""
    from tests.helpers import tiny_pair
    return tiny_pair(tmp_path_factory.mktemp("wide_vocab"), block_size=16, vocab_size=4 * 1024 + 517)


def _by_sort(monkeypatch):
    from tileinfer import sampling
    monkeypatch.setattr(sampling.SamplingParams, "candidates", lambda self, vocab: 0)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_top_k_from_candidates_samples_what_the_sort_samples(wide_pair, monkeypatch, device):
    """A top-k within the candidates finds each DFlash block's thresholds among its rows' largest logits;
    the tokens are those of the whole-row sort, seed for seed (CUDA graphs on a GPU, where the reference
    ops run on the torch backend). Plain decoding's single row sorts."""
    engine = tileinfer.load(wide_pair[0], draft=wide_pair[1], weights="fp32", device=device, backend="torch")
    assert engine.config.vocab_size > 4 * 1024
    runs = [dict(block_size=b, temperature=t, top_k=k, top_p=p, seed=s)
            for b, t, k, p, s in ((16, 1.0, 40, None, 1), (16, 1.5, 300, 0.9, 2), (16, 1.0, 7, 0.8, 3),
                                  (16, 2.0, 1024, None, 4), (1, 1.0, 40, 0.9, 5))]
    from tileinfer import sampling
    rows = []
    with monkeypatch.context() as m:
        m.setattr(sampling, "_threshold_from_candidates",
                  lambda x, *a, _f=sampling._threshold_from_candidates: rows.append(len(x)) or _f(x, *a))
        fast = [engine.generate(PROMPT, 16, stop_ids=[], eager=True, **kw).tokens for kw in runs]
    assert 16 in rows and min(rows) >= sampling.CANDIDATE_MIN_ROWS  # a request's last blocks are shorter
    assert fast == [engine.generate(PROMPT, 16, stop_ids=[], **kw).tokens for kw in runs]  # graphs on a GPU
    with monkeypatch.context() as m:
        _by_sort(m)
        assert engine.generate(PROMPT, 2, stop_ids=[], temperature=1.0, top_k=40).stats.new_tokens == 2
        sorted_ = [engine.generate(PROMPT, 16, stop_ids=[], **kw).tokens for kw in runs]
    assert fast == sorted_
    assert len({tuple(t) for t in fast}) == len(runs)


@pytest.mark.gpu
def test_fused_sampling_draws_what_the_reference_ops_draw(wide_pair):
    """On a GPU the Triton backend samples with `ops.sample.sample_block`; on FP32 weights its tokens are
    the reference ops' (torch backend), seed for seed, through CUDA graphs: plain and DFlash, every filter."""
    runs = [dict(block_size=b, temperature=t, top_k=k, top_p=p, seed=s)
            for b, t, k, p, s in ((16, 1.0, None, None, 1), (16, 1.5, 300, 0.9, 2), (16, 1.0, 7, 0.8, 3),
                                  (16, 0.7, None, 0.95, 4), (1, 1.0, 40, 0.9, 5), (1, 1.0, None, None, 6),
                                  (1, 0.8, None, 0.5, 7))]
    tokens = {}
    for backend in ("triton", "torch"):
        engine = tileinfer.load(wide_pair[0], draft=wide_pair[1], weights="fp32", device="cuda", backend=backend)
        tokens[backend] = [engine.generate(PROMPT, 24, stop_ids=[], **kw).tokens for kw in runs]
        del engine
    assert tokens["triton"] == tokens["torch"]
    assert len({tuple(t) for t in tokens["triton"]}) == len(runs)
