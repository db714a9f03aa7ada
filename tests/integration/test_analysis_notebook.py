"""examples/analysis.ipynb runs top to bottom on a real Jupyter kernel (nbclient, ipykernel)
and shows what the library computes on the shipped table: the report rendered as HTML with its
plots, the verdicts, a summary's table, the gate's lines and exit status, the saved files."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pandas as pd
import pytest

import dataflex_rl

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _outputs(cell) -> dict:
    """mime type (or "stream") -> the text the cell showed."""
    out: dict[str, str] = {}
    for o in cell.outputs:
        if o.output_type == "stream":
            out["stream"] = out.get("stream", "") + o.text
        elif o.output_type in ("execute_result", "display_data"):
            out.update(o.data)
        elif o.output_type == "error":
            raise AssertionError(f"{o.ename}: {o.evalue}")
    return out


def test_the_notebook_runs_and_shows_the_analysis(monkeypatch):
    # the kernel imports this checkout's package, as the test process does
    src = str(Path(dataflex_rl.__file__).parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    nb = nbformat.read(EXAMPLES / "analysis.ipynb", as_version=4)
    nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}
    ).execute()
    cells = [_outputs(c) for c in nb.cells if c.cell_type == "code"]
    head, shown, verdicts, logic, gate, saved = cells
    assert "<th>benchmark</th>" in head["text/html"] and "<th>sampled</th>" in head["text/html"]
    # the report: the page's body, scoped style, every plot inlined
    want = dataflex_rl.analyze(
        pd.read_csv(EXAMPLES / "results/quick_6seeds.csv"), baseline="baseline", margin=0.02
    )
    html = shown["text/html"]
    assert html.startswith("<style>") and "Verdicts on &#x27;average&#x27;" in html
    assert html.count("data:image/png;base64,") >= 3
    (c,) = want.analysis.primary.comparisons
    assert '<td class="verdict' in html and c.verdict in html and c.margin_verdict in html
    # the DataFrames and the gate say what the analysis computed
    assert c.margin_verdict in verdicts["text/plain"] and c.verdict in verdicts["text/plain"]
    table = logic["text/plain"].splitlines()  # a header, then the baseline and difffilter
    assert len(table) == 3 and "baseline" in table[1] and "difffilter" in table[2]
    g = want.gate("non-inferior")
    assert gate["stream"].splitlines() == g.lines()
    assert gate["text/plain"] == str(g.exit_code)
    names = ast.literal_eval(saved["text/plain"])  # the list of file names the kernel showed
    assert names == ["plots", "report.html", "report.md", "statistics.csv"]
