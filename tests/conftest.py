"""Shared test settings: a moderate hypothesis profile (the CI machine has 2 shared cores)."""

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "dataflex",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("dataflex")


@pytest.fixture(scope="session")
def synthetic_report(tmp_path_factory):
    """The folder of a report written once per test run from `tests.report_rows` (every
    section filled); tests only read it."""
    from dataflex_rl.harness.reporting.report import write_report
    from dataflex_rl.harness.statistics.analysis import StatsOptions
    from tests import report_rows

    out = tmp_path_factory.mktemp("synthetic_report")
    write_report(report_rows.rows(), out, report_rows.inputs(options=StatsOptions(n_boot=1000)))
    return out


@pytest.fixture(scope="session")
def synthetic_strata_report(tmp_path_factory):
    """The folder of a report per stratum (model × campaign × regime, 8 strata) of the release
    table `tests.release_table`, written once per test run without plots; tests only read it."""
    from dataflex_rl.harness.reporting.report import ReportInputs
    from dataflex_rl.harness.reporting.strata import write_strata_report
    from dataflex_rl.harness.statistics.analysis import StatsOptions
    from dataflex_rl.harness.statistics.results_table import read_domains, read_table
    from tests import release_table

    tmp = tmp_path_factory.mktemp("synthetic_strata")
    table = read_table(
        release_table.write_release_csv(tmp / "release.csv"),
        by=("model", "campaign", "regime"),
        scale=0.01,
        domains=read_domains(release_table.write_domains_yaml(tmp / "domains.yaml")),
    )
    inputs = ReportInputs(
        release_table.TITLE, "grpo", options=StatsOptions(n_boot=200), plots=False
    )
    write_strata_report(table, tmp / "report", inputs)
    return tmp / "report"
