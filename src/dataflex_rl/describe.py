"""Human descriptions of presets and components, for ``dataflex-rl describe`` and the docs.

``docs/components/<name>.md`` holds exactly the text `describe` returns (a test checks it).
"""

from __future__ import annotations

import inspect

import yaml

from dataflex_rl.core.base import MIXERS, REWEIGHTERS, SCORERS, SELECTORS
from dataflex_rl.core.registry import UnknownNameError, suggest
from dataflex_rl.presets import PRESETS
from dataflex_rl.prerollout.base import SKIP_POLICIES

REGISTRIES = {"scorer": SCORERS, "selector": SELECTORS, "reweighter": REWEIGHTERS,
              "mixer": MIXERS, "skip policy": SKIP_POLICIES}
MECHANISM_OF = {"selector": "select", "reweighter": "reweight", "mixer": "mix",
                "skip policy": "prerollout"}


def all_names() -> list[str]:
    """Every preset and component name (sorted, unique)."""
    names = set(PRESETS)
    for reg in REGISTRIES.values():
        names.update(reg.names())
    return sorted(names)


def one_line(kind: str, name: str) -> str:
    """``kind  name  summary`` for ``dataflex-rl list``."""
    if kind == "preset":
        p = PRESETS[name]
        return f"{p.mechanism}: {p.description}"
    return REGISTRIES[kind].get(name).summary()


def _component_text(kind: str, name: str) -> str:
    cls = REGISTRIES[kind].get(name)
    doc = inspect.cleandoc(cls.__doc__ or "")
    lines = [f"## {kind} `{name}`", "", doc, ""]
    if kind == "scorer":
        lines.append(f"- granularity: {cls.granularity}")
        needs = ["rewards", "response_mask", "group_ids"] + list(cls.requires)
        lines.append(f"- signals needed: {', '.join(needs)}")
    else:
        lines.append(f"- mechanism: {MECHANISM_OF[kind]}")
        if getattr(cls, "needs_signal", True) and hasattr(cls, "accepts"):
            lines.append(f"- accepts scores at: {', '.join(sorted(cls.accepts))} level")
        if getattr(cls, "default_scorer", None):
            lines.append(f"- default scorer: {cls.default_scorer}")
        if hasattr(cls, "level"):
            lines.append(f"- weights at: {cls.level} level")
        for opt in ("recompute_advantages", "renormalize"):
            if hasattr(cls, f"{opt}_default"):
                lines.append(f"- {opt} by default: {str(getattr(cls, f'{opt}_default')).lower()}")
    gb = getattr(cls, "group_based", False)
    lines.append(f"- needs prompt groups: {'yes' if gb is True else 'no' if gb is False else 'when by_group'}")
    if cls.paper:
        lines.append(f"- paper: {cls.paper}")
    params = cls.parameters()
    lines += ["", "| parameter | type | default | range | meaning |", "|---|---|---|---|---|"]
    if not params:
        lines.append("| (none) | | | | |")
    for p in params:
        lines.append(f"| `{p['name']}` | {p['type']} | {p['default']!r} | {p['range']} | "
                     f"{p['doc']} |")
    return "\n".join(lines)


def _preset_text(name: str) -> str:
    p = PRESETS[name]
    spec = yaml.safe_dump(p.spec, sort_keys=False).strip() if p.spec else "{}  # no strategy"
    return "\n".join([f"## preset `{name}`", "", p.description, "",
                      f"- mechanism: {p.mechanism}", f"- paper: {p.paper}", "",
                      "```yaml", spec, "```"])


def describe(name: str) -> str:
    """Markdown describing every preset and component called ``name``.

    Raises:
        UnknownNameError: listing close matches.
    """
    parts = []
    if name in PRESETS:
        parts.append(_preset_text(name))
    for kind, reg in REGISTRIES.items():
        if name in reg:
            parts.append(_component_text(kind, name))
    if not parts:
        raise UnknownNameError(f"nothing called {name!r}.{suggest(name, all_names())} "
                               f"Run 'dataflex-rl list' for every name.")
    return f"# {name}\n\n" + "\n\n".join(parts) + "\n"
