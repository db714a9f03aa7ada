"""Optional dependencies (issue 12, item 12): each extra's absence, made by blocking the import
(``sys.modules[name] = None`` makes ``import name`` raise ImportError)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dataflex_rl.cli import main
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.deps import EXTRAS, MissingDependencyError, available, plots_available, require

ROOT = Path(__file__).resolve().parents[2]
TINY = {
    "policy": "tiny",
    "steps": 1,
    "threads": 1,
    "grpo": {"prompts_per_step": 3, "group_size": 2},
    "tasks": {"train_size": 30},
    "eval": {"per_domain": 2, "samples": 1, "every": 1},
    "log": {"progress": False, "plots": True, "checkpoint_every": 0},
}


def _block(monkeypatch, *names):
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def test_available_and_require(monkeypatch):
    assert available("json") and not available("surely_not_a_module_xyz")
    _block(monkeypatch, "matplotlib")
    assert not available("matplotlib") and not available("matplotlib.pyplot")
    with pytest.raises(MissingDependencyError, match=r'pip install "dataflex-rl\[engine\]"'):
        require("matplotlib", "plots")
    assert isinstance(MissingDependencyError("x"), ConfigError)


@pytest.mark.parametrize("module", sorted(EXTRAS))
def test_every_extra_names_itself_when_missing(monkeypatch, module):
    _block(monkeypatch, module)
    package, extra = EXTRAS[module]
    with pytest.raises(MissingDependencyError) as e:
        require(module, "something")
    assert f"dataflex-rl[{extra}]" in str(e.value) and package in str(e.value)


def test_plots_degrade_with_one_line(monkeypatch):
    said = []
    _block(monkeypatch, "matplotlib")
    assert not plots_available("report plots", say=said.append)
    assert len(said) == 1 and "report plots skipped" in said[0] and "[engine]" in said[0]


def _write(tmp_path, cfg) -> str:
    import yaml

    path = tmp_path / "engine.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_train_without_the_engine_extra_refuses_before_any_work(monkeypatch, tmp_path, capsys):
    _block(monkeypatch, "transformers")
    out = tmp_path / "run"
    assert main(["train", _write(tmp_path, TINY), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "needs 'transformers'" in err and 'pip install "dataflex-rl[engine]"' in err
    assert "Traceback" not in err and not out.exists()


def test_bootstrap_without_the_engine_extra_refuses(monkeypatch, tmp_path, capsys):
    _block(monkeypatch, "transformers")
    assert main(["bootstrap", "--out", str(tmp_path / "b"), "--steps", "1"]) == 2
    assert "dataflex-rl[engine]" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_train_without_matplotlib_trains_and_skips_plots(monkeypatch, tmp_path, capsys):
    _block(monkeypatch, "matplotlib", "matplotlib.pyplot")
    out = tmp_path / "run"
    assert main(["train", _write(tmp_path, TINY), "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("matplotlib is not installed") == 1
    assert json.loads((out / "summary.json").read_text())["steps"] == 1
    assert not (out / "plots").exists()


def test_report_without_matplotlib_writes_the_report(monkeypatch, tmp_path, capsys):
    csv = tmp_path / "r.csv"
    csv.write_text(
        "method,seed,benchmark,score\n"
        + "".join(
            f"{m},{s},b,{0.5 + 0.01 * s + (0.02 if m == 'new' else 0)}\n"
            for m in ("baseline", "new")
            for s in range(4)
        )
    )
    _block(monkeypatch, "matplotlib", "matplotlib.pyplot")
    out = tmp_path / "rep"
    assert main(["report", "--from-csv", str(csv), "--out", str(out)]) == 0
    assert "plots skipped" in capsys.readouterr().out
    assert (out / "report.md").is_file()
    assert not list(out.rglob("*.png"))


@pytest.mark.parametrize(
    "module, call",
    [
        ("reasoning_gym", "dataflex_rl.tasks.rgym:_reasoning_gym"),
        ("math_verify", "dataflex_rl.tasks.math_verify:_math_verify"),
    ],
)
def test_task_extras(monkeypatch, module, call):
    from dataflex_rl.core.registry import import_object

    _block(monkeypatch, module)
    with pytest.raises(MissingDependencyError, match=r"dataflex-rl\[tasks\]"):
        import_object(call)()


def test_parquet_without_pyarrow_or_pandas(monkeypatch, tmp_path):
    from dataflex_rl.tasks.datasets import _read_parquet

    _block(monkeypatch, "pyarrow", "pyarrow.parquet", "pandas")
    with pytest.raises(
        ConfigError, match=r'parquet needs pyarrow \(pip install "dataflex-rl\[tasks'
    ):
        _read_parquet(tmp_path / "x.parquet")


def test_a_bare_install_names_the_extra_from_a_fresh_process(tmp_path):
    """``pip install dataflex-rl`` without extras: nothing of the engine extra is importable
    from the start of the process (not only after the package was imported)."""
    import os
    import subprocess

    src = str(ROOT / "src")
    code = (
        "import sys\n"
        "for m in ('transformers', 'matplotlib', 'pyarrow', 'math_verify', "
        "'reasoning_gym'):\n    sys.modules[m] = None\n"
        "from dataflex_rl.cli import main\n"
        f"sys.exit(main(['train', {_write(tmp_path, TINY)!r}, '--out', "
        f"{str(tmp_path / 'run')!r}]))\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert p.returncode == 2, p.stderr
    assert 'pip install "dataflex-rl[engine]"' in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "run").exists()
