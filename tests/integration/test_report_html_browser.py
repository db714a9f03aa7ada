"""report.html in a real headless Chromium (Debian's, driven by selenium and chromedriver).

At a laptop and a phone viewport the page loads with no console message of level error or
warning, requests nothing but itself and data: URIs (DevTools network events), every plot
decodes, the page itself never scrolls sideways (only tables and plots, in their own boxes),
and a screenshot is taken: ``<tmp>/report_html_{laptop,phone}.png`` (the top of the page; the
phone's from the verdict table on), also written to docs/img/ with DATAFLEX_DOCS_IMG=1. The
index page of a report per stratum (``report --by``) the same way, its links to the strata's
pages resolving to files (``<tmp>/report_index_{laptop,phone}.png``). Chromium comes from ``bash scripts/setup_browser.sh`` (run by
``scripts/setup.sh test``); without it the test fails, it does not skip.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests import release_table, report_rows

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
#: the flags that work headless as root on a closed network (no background connections)
FLAGS = (
    "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
    "--disable-background-networking --disable-component-update --disable-sync"
).split()
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
#: name -> (width, height, device pixel ratio, mobile, section the screenshot starts at)
VIEWPORTS = {"laptop": (1366, 800, 1, False, ""), "phone": (390, 844, 2, True, "verdicts")}


def _runs(exe: Path) -> bool:
    try:
        return subprocess.run([exe, "--version"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not _runs(p)]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} missing or not running: install Debian's Chromium with "
            "`bash scripts/setup_browser.sh` (as root; scripts/setup.sh test runs it)",
            pytrace=False,
        )
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("selenium is missing: pip install -e '.[dev]'", pytrace=False)
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    d = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def page(synthetic_report) -> Path:
    return synthetic_report / "report.html"


def _requests(driver) -> list[str]:
    """URLs of the requests since the last call (DevTools ``Network.requestWillBeSent``)."""
    events = (json.loads(e["message"])["message"] for e in driver.get_log("performance"))
    return [
        e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"
    ]


def _load(driver, page: Path, viewport: str) -> dict:
    """Open ``page`` at ``viewport``; assert no console message and no request besides the
    page and data: URIs; return the page's state."""
    width, height, ratio, mobile, _ = VIEWPORTS[viewport]
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": ratio, "mobile": mobile},
    )
    driver.get("about:blank")
    driver.get_log("browser"), _requests(driver)  # drop what came before this page
    url = page.as_uri()
    driver.get(url)
    state = driver.execute_script(
        "return {ready: document.readyState, inner: window.innerWidth,"
        " scroll: document.documentElement.scrollWidth,"
        " sections: [...document.querySelectorAll('main > section')].map(s => s.id),"
        " images: [...document.images].map(i => [i.complete, i.naturalWidth]),"
        " links: [...document.links].map(a => a.href),"
        " h1: document.querySelector('h1').textContent}"
    )
    messages = [m for m in driver.get_log("browser") if m["level"] in ("SEVERE", "WARNING")]
    assert messages == [], f"console messages at {viewport}: {messages}"
    outside = [u for u in _requests(driver) if u != url and not u.startswith("data:")]
    assert outside == [], f"requests at {viewport} besides the page and data: URIs: {outside}"
    assert state["ready"] == "complete"
    assert state["scroll"] <= state["inner"], f"the page scrolls sideways at {viewport}"
    return state


def _screenshot(driver, name: str, anchor: str, tmp_path: Path) -> None:
    if anchor:
        driver.execute_script(f"document.getElementById('{anchor}').scrollIntoView()")
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})["data"]
    path = tmp_path / f"{name}.png"
    path.write_bytes(base64.b64decode(shot))
    print(f"screenshot: {path}")
    if os.environ.get("DATAFLEX_DOCS_IMG") == "1":
        shutil.copy(path, DOCS_IMG / path.name)


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_report_html_in_chromium(driver, page, viewport, tmp_path):
    state = _load(driver, page, viewport)
    assert state["h1"] == report_rows.TITLE  # escaped in the source, shown as typed
    assert state["sections"][:3] == ["sensitivity", "verdicts", "forest"]
    assert len(state["images"]) == 4 and all(ok and w > 0 for ok, w in state["images"])
    _screenshot(driver, f"report_html_{viewport}", VIEWPORTS[viewport][4], tmp_path)


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_strata_index_in_chromium(driver, synthetic_strata_report, viewport, tmp_path):
    index = synthetic_strata_report / "report.html"
    state = _load(driver, index, viewport)
    assert state["h1"] == release_table.TITLE
    assert state["sections"][0] == "index" and len(state["sections"]) == 8 + 3
    assert state["images"] == []  # (written without plots)
    # links: the page's own sections, and each stratum's report.html, which exists
    pages = {u for u in state["links"] if not u.startswith(index.as_uri() + "#")}
    assert len(pages) == 8
    assert all(u.startswith("file://") and Path(unquote(u[7:])).is_file() for u in pages)
    # a link followed: the stratum's own page loads the same way (no messages or requests)
    stratum = _load(driver, Path(unquote(sorted(pages)[0][len("file://") :])), viewport)
    assert stratum["h1"].startswith(f"{release_table.TITLE} — model=")
    _load(driver, index, viewport)
    _screenshot(
        driver, f"report_index_{viewport}", "index" if viewport == "phone" else "", tmp_path
    )
    _screenshot(driver, f"report_index_{viewport}_stratum", state["sections"][4], tmp_path)


@pytest.fixture(scope="module")
def paper_index(tmp_path_factory) -> Path:
    """The index page of the paper-sized release table (13 strata, 3 by-columns, empty regime
    cells, two references), written without plots."""
    from dataflex_rl.harness.reporting.report import ReportInputs
    from dataflex_rl.harness.reporting.strata import write_strata_report
    from dataflex_rl.harness.statistics.analysis import StatsOptions
    from dataflex_rl.harness.statistics.results_table import read_table

    tmp = tmp_path_factory.mktemp("paper_index")
    table = read_table(
        release_table.write_paper_csv(tmp / "paper.csv"),
        by=("model", "campaign", "regime"),
        scale=0.01,
    )
    inputs = ReportInputs("paper.csv", "", options=StatsOptions(n_boot=200), plots=False)
    write_strata_report(table, tmp / "report", inputs, ("baseline", "static"))
    return tmp / "report" / "report.html"


def test_the_index_of_a_paper_table_fits_a_laptop_screen(driver, paper_index, tmp_path):
    state = _load(driver, paper_index, "laptop")
    assert len(state["sections"]) == 1 + 12 + 2
    box = driver.execute_script(
        "const s = document.querySelector('#index .scroll');"
        "const links = [...s.querySelectorAll('a')].map(a => a.getBoundingClientRect().right);"
        "return {scroll: s.scrollWidth, client: s.clientWidth, right: s.getBoundingClientRect()"
        ".right, links: links, inner: window.innerWidth};"
    )
    # the whole index table shows without scrolling, its report links included
    assert box["scroll"] <= box["client"], box
    assert len(box["links"]) == 12 and max(box["links"]) <= min(box["right"], box["inner"])
    _screenshot(driver, "report_index_paper_laptop", "", tmp_path)
