"""docs/extending.md, executed: a user's scorer and actuator from their own module, via YAML."""

import ast
import re
from pathlib import Path

import pytest
import torch

import dataflex_rl
from dataflex_rl import ConfigError, Strategy, from_lists

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "custom_strategy"


@pytest.fixture
def user_module_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))


def test_user_components_from_yaml(user_module_on_path):
    strategy = Strategy(EXAMPLE / "strategy.yaml")
    # two groups; lengths 2, 20, 4, 40; |A| = 1 for all.
    # score = 1 / (1 + len/16): 0.889, 0.444, 0.8, 0.286 -> AtLeast(0.4) drops only row 3
    batch = from_lists([1, 0, 1, 0], [0, 0, 1, 1], [2, 20, 4, 40], advantages=[1, -1, 1, -1])
    decision = strategy.decide(batch)
    assert decision.keep_mask.tolist() == [True, True, True, False]
    w = decision.weights_per_response
    assert w[3] == 0
    # softmax(score / 0.5) over the three kept rows, mean 1 over them
    s = torch.tensor([1 / (1 + 2 / 16), 1 / (1 + 20 / 16), 1 / (1 + 4 / 16)], dtype=torch.float64)
    expected = torch.softmax(s / 0.5, 0) * 3
    torch.testing.assert_close(w[:3].double(), expected, rtol=1e-5, atol=1e-6)
    assert type(strategy.parts["select"][0]).__module__ == "my_strategies"


def test_user_component_param_typo_is_an_error(user_module_on_path):
    spec = {
        "select": {
            "scorer": {"name": "my_strategies:ShortAdvantage", "scael": 3.0},
            "actuator": "my_strategies:AtLeast",
        }
    }
    with pytest.raises(ConfigError, match=r"select\.scorer\.scael.*Did you mean 'scale'"):
        Strategy(spec)


def test_missing_user_module_is_a_clear_error():
    with pytest.raises(ConfigError, match="cannot import module 'no_such_module'"):
        Strategy({"select": {"scorer": "no_such_module:X", "actuator": "band"}})


def _dataflex_imports(code: str) -> list[tuple[str, str]]:
    """(module, name) of every ``from dataflex_rl... import name`` and ``import dataflex_rl...``
    in Python source."""
    out = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dataflex_rl"):
            out += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names if a.name.startswith("dataflex_rl")]
    return out


def test_component_docs_and_examples_import_only_the_top_level():
    sources = {}
    for doc in ("extending.md", "config.md"):  # the pages that show a component
        blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / doc).read_text(), flags=re.S)
        sources |= {f"docs/{doc} block {i}": b for i, b in enumerate(blocks)}
    for path in (EXAMPLE / "my_strategies.py", ROOT / "examples" / "minimal_grpo.py"):
        sources[str(path.relative_to(ROOT))] = path.read_text()
    seen = set()
    for where, code in sources.items():
        for module, name in _dataflex_imports(code):
            assert module == "dataflex_rl", f"{where}: imports from {module}, not dataflex_rl"
            assert name in dataflex_rl.__all__, f"{where}: {name} is not in dataflex_rl.__all__"
            assert getattr(dataflex_rl, name) is not None
            seen.add(name)
    # what docs/extending.md's components and registration use, at least
    assert {"Scorer", "Selector", "RolloutBatch", "param", "SCORERS", "Strategy"} <= seen


def test_top_level_names_are_the_core_objects():
    from dataflex_rl.core import base, batch, config

    assert dataflex_rl.Scorer is base.Scorer and dataflex_rl.SCORERS is base.SCORERS
    assert dataflex_rl.param is config.param and dataflex_rl.from_lists is batch.from_lists
    assert all(hasattr(dataflex_rl, n) for n in dataflex_rl.__all__)
