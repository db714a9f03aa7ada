"""``report`` (and importing the package) never imports torch; the built-in components
register themselves on a registry's first use, whatever was imported first."""

import subprocess
import sys
import textwrap

from tests.release_table import paper_records, write_paper_csv


def _python(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_report_from_a_csv_never_imports_torch(tmp_path):
    table = write_paper_csv(tmp_path / "paper.csv", paper_records()[:30])
    out = _python(
        f"""
        import sys
        from dataflex_rl.cli import main
        code = main(["report", "--from-csv", {str(table)!r}, "--by", "model,campaign,regime",
                     "--scale", "0.01", "--baseline", "baseline,static", "--no-plots",
                     "--out", {str(tmp_path / "out")!r}])
        print(code, "torch" in sys.modules)
        """
    )
    assert out.splitlines()[-1] == "0 False"
    assert (tmp_path / "out" / "report.md").exists()


def test_the_package_imports_without_torch_and_its_names_load_on_use():
    out = _python(
        """
        import sys
        import dataflex_rl
        before = "torch" in sys.modules
        from dataflex_rl import SCORERS, PRESETS, Strategy
        print(before, "torch" in sys.modules, "token_entropy" in SCORERS, "dapo" in PRESETS,
              Strategy.__module__)
        """
    )
    assert out == "False True True True dataflex_rl.core.strategy"


def test_a_registry_holds_the_builtins_whatever_module_was_imported_first():
    # a component module imported on its own registers itself and loads the others
    out = _python(
        """
        from dataflex_rl.select.band import Band  # noqa: F401
        from dataflex_rl.core.base import MIXERS, SELECTORS
        from dataflex_rl.core.preset import PRESETS
        print(sorted(SELECTORS)[:3], "ucb" in MIXERS, list(PRESETS)[0])
        """
    )
    assert out == "['band', 'gfpo', 'max_variance'] True baseline"
