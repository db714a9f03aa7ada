"""The hosts ``compare`` runs experiments on (``host:`` in an experiment file).

``HOSTS`` holds each host's `Host` class as a lazy ``"module:attr"`` entry: the harness never
imports a host's framework, and naming a host imports only its `Host` (which imports no
framework either). `get_host` gives the host of a name.
"""

from __future__ import annotations

from dataflex_rl.core.registry import ConfigError, Registry, suggest
from dataflex_rl.hosts.host import Host

#: host name -> its `Host` class
HOSTS: Registry[type[Host]] = Registry("host", base=Host)
HOSTS.register("engine", "dataflex_rl.hosts.engine.host:EngineHost")
HOSTS.register("trl", "dataflex_rl.hosts.trl.host:TrlHost")
HOSTS.register("verl", "dataflex_rl.hosts.verl.host:VerlHost")


def get_host(name: str, where: str = "host") -> Host:
    """The host called ``name``.

    Raises:
        ConfigError: an unknown host (the valid ones listed).
    """
    if name not in HOSTS:
        raise ConfigError(
            f"{where}: unknown host {name!r}.{suggest(str(name), HOSTS.names())} "
            f"Hosts: {', '.join(HOSTS.names())}"
        )
    return HOSTS.get(name)()
