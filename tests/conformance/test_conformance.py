"""Conformance: the embedded engine and examples/minimal_grpo.py run the same step on the same
scripted rollouts for every preset (refill, token selection and skip policies included), and
their traces agree column by column (docs/conformance.md; TRL: tests/hosts_trl/
test_trl_conformance.py, against the same engine traces)."""

from __future__ import annotations

import importlib.util
import sys
from operator import attrgetter
from pathlib import Path

import pytest

from dataflex_rl import PRESETS, Strategy
from dataflex_rl.cli import main
from tests.conformance.kit import (
    Recorder,
    Script,
    compare,
    engine_trace,
    kit_intake,
    script_example,
)

ROOT = Path(__file__).resolve().parents[2]
DOMAINS = ("math", "logic", "science")
P, G, STEPS = 4, 4, 3
#: skip policies set to skip a revisited prompt whose group agreed (as test_minimal_grpo's)
SKIPPING = {
    "greso_strict": "name: greso_strict\nprerollout:\n  actuator: "
    "{name: greso, explore_prob: 0.0, min_explore: 0.0}\n",
    "thompson_flat": "name: thompson_flat\nprerollout:\n  actuator: "
    "{name: thompson, prior_a: 0.01, prior_b: 0.01, low: 0.3, high: 0.7}\n",
}
#: presets whose skip policy reads the policy's prompt representation (the example has none)
NEEDS_FEATURES = sorted(n for n in PRESETS if Strategy(n, domains=DOMAINS).feature_layer)
NAMES = [n for n in PRESETS if n not in NEEDS_FEATURES] + list(SKIPPING)


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location(
        "minimal_grpo_conformance", ROOT / "examples" / "minimal_grpo.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass resolves its annotations there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    out = tmp_path_factory.mktemp("policy") / "tiny"
    assert main(["export", "policy", "--out", str(out)]) == 0
    return out


def strategy_of(name: str, tmp_path: Path) -> str:
    if name not in SKIPPING:
        return name
    path = tmp_path / f"{name}.yaml"
    path.write_text(SKIPPING[name])
    return str(path)


def train_size(name: str) -> int:
    # two prompts per domain for skip policies: later steps revisit, which skipping reads
    return 2 if "prerollout" in Strategy(strategy_of_spec(name), domains=DOMAINS).parts else 24


def strategy_of_spec(name: str):
    from dataflex_rl.core.spec import parse_strategy

    if name in SKIPPING:
        import yaml

        return parse_strategy(yaml.safe_load(SKIPPING[name]))
    return name


def tasks_of(size: int):
    from dataflex_rl.tasks import build_taskset

    return build_taskset(DOMAINS, train_size=size, difficulty=dict(math=5, logic=3, science=4))


def engine_of(monkeypatch, name: str, tmp_path: Path, size: int):
    strategy = strategy_of(name, tmp_path)
    tasks = tasks_of(size)
    return engine_trace(monkeypatch, strategy, tasks, steps=STEPS, P=P, G=G, audits=True)


def example_trace(monkeypatch, example, policy, name: str, tmp_path: Path, size: int):
    script = Script(group_size=G, max_len=6)
    script_example(monkeypatch, example, script)
    recorders = []
    real_driver = example.Driver

    def driver(strategy, intake, **kw):
        d = real_driver(strategy, intake, **kw)
        recorders.append(Recorder(d, attrgetter("prompt")))
        return d

    monkeypatch.setattr(
        example,
        "Intake",
        lambda pools, domains, *a, key=None, **kw: kit_intake(pools, domains, key, audits=True),
    )
    monkeypatch.setattr(example, "Driver", driver)
    args = example.Args(
        policy=str(policy),
        strategy=strategy_of(name, tmp_path),
        steps=STEPS,
        prompts_per_step=P,
        group_size=G,
        max_new_tokens=8,
        train_size=size,
    )
    example.train(args)
    return recorders[0].traces


@pytest.mark.parametrize("name", NAMES)
def test_the_engine_and_the_example_run_the_same_step(example, policy, tmp_path, name):
    size = train_size(name)
    with pytest.MonkeyPatch.context() as mp:
        engine = engine_of(mp, name, tmp_path, size)
    with pytest.MonkeyPatch.context() as mp:
        loop = example_trace(mp, example, policy, name, tmp_path, size)
    assert len(engine) == STEPS and engine[0].rounds[0]  # something ran
    assert compare(engine, loop) == []
    if name == "reinforce_ada":  # prompts without signal were sampled again
        assert sum(len(t.rounds) - 1 for t in engine) > 0
        assert sum(t.figures["dataflex/rollouts/prompts_resampled"] for t in engine) > 0
    if name == "knapsack_rl":  # uneven groups once the domain rates differ
        sizes = [t.figures["dataflex/rollouts/per_prompt_max"] for t in engine]
        assert max(sizes) > G
    if name == "adaptive_rollout":  # rounds of 2 for prompts without signal, uneven groups
        assert sum(len(t.rounds) - 1 for t in engine) > 0
        assert max(t.figures["dataflex/rollouts/per_prompt_max"] for t in engine) > 2


def test_the_kit_names_the_column_that_differs(monkeypatch, tmp_path):
    # the same host under two scripted sources: dapo's rounds, kept groups and figures move
    # with the rollouts, and the kit says so per column (a kit that compared nothing would
    # pass the test above)
    size = train_size("dapo")
    a = engine_of(monkeypatch, "dapo", tmp_path, size)
    import tests.conformance.kit as kit

    monkeypatch.setattr(kit, "SOLVE", (0.0, 1.0))  # every group agrees: rounds run dry
    b = engine_of(monkeypatch, "dapo", tmp_path, size)
    diffs = compare(a, b)
    assert any(": rounds:" in d for d in diffs) and any(": figures:" in d for d in diffs)
    assert compare(a, a) == []
