"""hosts/registry.py: the registry, and the interface every host module implements."""

import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.registry import HOSTS, host_module

#: what hosts/registry.py says a host module defines
INTERFACE = (
    "SETUP",
    "parse_section",
    "domains",
    "run_config",
    "CONTROLS",
    "TRACKING",
    "train_fn",
    "python",
    "check",
    "setup_lines",
    "train",
    "read_records",
    "has_checkpoint",
    "steps_done",
)


@pytest.mark.parametrize("name", list(HOSTS))
def test_every_host_module_has_the_interface(name):
    module = host_module(name)
    missing = [a for a in INTERFACE if not hasattr(module, a)]
    assert not missing, f"host {name!r} lacks {missing}"


def test_unknown_host_lists_the_valid_ones():
    with pytest.raises(ConfigError, match=r"host: unknown host 'engin'\. Did you mean 'engine'"):
        host_module("engin")
    with pytest.raises(ConfigError, match="Hosts: engine"):
        host_module("nope")
