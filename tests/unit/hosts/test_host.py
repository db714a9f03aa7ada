"""hosts/host.py: path resolution and the check in a host's own Python, without a framework."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.host import ExternalPythonHost, resolve_path


def test_resolve_path_prefers_the_experiment_folder_where_the_file_is(tmp_path):
    (tmp_path / "data.parquet").write_text("x")
    base = tmp_path
    assert resolve_path("data.parquet", base) == str(tmp_path / "data.parquet")
    assert resolve_path("missing.parquet", base) == "missing.parquet"  # the working directory's
    assert resolve_path(["data.parquet", "/abs/x"], base) == [
        str(tmp_path / "data.parquet"),
        "/abs/x",
    ]
    assert resolve_path(3, base) == 3


class Probe(ExternalPythonHost):
    """A host whose 'framework' is json and whose check module is this test's stand-in."""

    name, setup, framework = "probe", "bash scripts/setup_probe.sh", "json"
    check_module = "tests.unit.hosts.check_standin"
    schemas = {"probe": SimpleNamespace}

    def __getattr__(self, name):  # the abstract members this test does not call
        raise AttributeError(name)


for member in Probe.__abstractmethods__:
    setattr(Probe, member, lambda self, *a: None)
Probe.__abstractmethods__ = frozenset()


def exp(python: str):
    return SimpleNamespace(path="e.yaml", name="e", host_settings={"python": python})


def test_the_check_in_the_hosts_python_reads_its_config_error_back():
    host = Probe()
    assert host.check_python(exp(sys.executable)) == sys.executable
    host.run_check(exp(sys.executable), {"refuse": None})
    with pytest.raises(ConfigError, match=r"^e\.yaml: probe\.thing: refused here$"):
        host.run_check(exp(sys.executable), {"refuse": "e.yaml: probe.thing: refused here"})
    with pytest.raises(
        ConfigError, match=r"e\.yaml: probe\.python: .* does not exist .*setup_probe"
    ):
        host.check_python(exp("/no/such/python"))
