"""The hosts ``compare`` runs experiments on (``host:``): `HOSTS` holds each `Host` class as a
lazy ``"module:attr"`` entry, so naming a host imports only its `Host` (no framework).

A host registered here (``HOSTS.register("mine", "my_package.host:MyHost")``, from any
module) is a host of ``compare`` with no harness edit: the experiment file gains its section
(`host_classes`), and each run finds its class in the worker by `class_path`.
"""

from __future__ import annotations

from dataflex_rl.core.config import field_rows
from dataflex_rl.core.registry import ConfigError, Registry, suggest
from dataflex_rl.hosts.common.config import SHARED_SETTINGS
from dataflex_rl.hosts.host import Host

#: host name -> its `Host` class
HOSTS: Registry[type[Host]] = Registry("host", base=Host)
HOSTS.register("engine", "dataflex_rl.hosts.engine.host:EngineHost")
HOSTS.register("trl", "dataflex_rl.hosts.trl.host:TrlHost")
HOSTS.register("verl", "dataflex_rl.hosts.verl.host:VerlHost")
#: the host of an experiment file without ``host:``
DEFAULT_HOST = "engine"


def get_host(name: str, where: str = "host") -> Host:
    """The host called ``name`` (an unknown one: `ConfigError` listing the valid ones)."""
    if name not in HOSTS:
        raise ConfigError(
            f"{where}: unknown host {name!r}.{suggest(str(name), HOSTS.names())} "
            f"Hosts: {', '.join(HOSTS.names())}"
        )
    return HOSTS.get(name)()


def host_classes() -> dict[str, type[Host]]:
    """Every registered host's `Host` class by name, sorted (imports each `Host`'s module,
    never a framework)."""
    return {name: HOSTS.get(name) for name in HOSTS.names()}


def class_path(host: Host | type[Host]) -> str:
    """``"module:attr"`` of ``host``'s class: what a run's process imports to find its host
    (a host registered in the planning process only is found all the same)."""
    cls = host if isinstance(host, type) else type(host)
    return f"{cls.__module__}:{cls.__qualname__}"


def shared_keys(name: str) -> dict[str, dict]:
    """Host ``name``'s settings by leaf name: leaf -> its row (`field_rows`: dotted ``name``,
    type, default, range, doc) in the host's schemas, the first one where several share a
    leaf name."""
    out: dict[str, dict] = {}
    for prefix, schema in get_host(name).schemas.items():
        for row in field_rows(schema, f"{prefix}."):
            out.setdefault(row["name"].rpartition(".")[2], row)
    return out


def shared_settings_table() -> str:
    """The settings every host shares (`SHARED_SETTINGS`) as a Markdown table: where each host
    keeps it (keys of an experiment file), its default and its meaning (docs/config.md)."""
    hosts = HOSTS.names()
    rows = {h: shared_keys(h) for h in hosts}
    lines = [
        "| setting | " + " | ".join(hosts) + " | default | meaning |",
        "|---|" + "---|" * len(hosts) + "---|---|",
    ]
    for key, setting in SHARED_SETTINGS.items():
        where = [f"`{rows[h][key]['name']}`" if key in rows[h] else "—" for h in hosts]
        if setting.host_defaults is None:
            default = "`null`" if setting.default is None else f"`{setting.default}`"
        else:
            default = "the host's: " + ", ".join(
                f"{h} `{v}`" for h, v in setting.host_defaults.items()
            )
        lines.append(f"| `{key}` | " + " | ".join(where) + f" | {default} | {setting.meaning} |")
    return "\n".join(lines) + "\n"
