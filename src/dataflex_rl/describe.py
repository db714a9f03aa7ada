"""Human descriptions of presets and components, for ``dataflex-rl describe`` and the docs.

``docs/components/<name>.md`` holds exactly the text `describe` returns (a test checks it).
"""

from __future__ import annotations

import inspect

import yaml

from dataflex_rl.core.base import MECHANISM_REGISTRIES, REGISTRIES
from dataflex_rl.core.config import field_rows
from dataflex_rl.core.registry import UnknownNameError, suggest
from dataflex_rl.core.spec import AdmissionOptions, RefillOptions, RolloutsOptions
from dataflex_rl.presets import PRESETS

#: the strategy sections that are options, not a registry's components
SECTIONS_OF = {
    "admission": AdmissionOptions,
    "refill": RefillOptions,
    "rollouts": RolloutsOptions,
}

#: actuator kind -> the mechanism (strategy section) it acts in (a selector: `mechanism_of`)
MECHANISM_OF = {reg.kind: mechanism for mechanism, reg in MECHANISM_REGISTRIES.items()}


def mechanism_of(kind: str, cls: type) -> str:
    """The strategy section an actuator class acts in: ``tokens`` for a token-level selector,
    ``select`` for the other selectors."""
    if kind == "selector":
        return "tokens" if cls.level == "token" else "select"
    return MECHANISM_OF[kind]


def all_names() -> list[str]:
    """Every preset and component name (sorted, unique)."""
    names = set(PRESETS) | set(SECTIONS_OF)
    for reg in REGISTRIES.values():
        names.update(reg.names())
    return sorted(names)


def one_line(kind: str, name: str) -> str:
    """``kind  name  summary`` for ``dataflex-rl list``."""
    if kind == "preset":
        p = PRESETS[name]
        return f"{p.mechanism}: {p.description}"
    return _without_pointer(name, REGISTRIES[kind].get(name).summary())


def _without_pointer(name: str, summary: str) -> str:
    """A summary without its leading pointer (``"``per`` (preset ``per``): w = ..."`` ->
    ``"w = ..."``): a class whose name differs from its registry or preset name starts its
    docstring with them, which ``list`` already shows."""
    if summary.startswith(f"``{name}``") and ": " in summary:
        rest = summary.split(": ", 1)[1]
        word = rest.split(" ", 1)[0]
        return rest[:1].upper() + rest[1:] if len(word) > 1 and word.isalpha() else rest
    return summary


def class_path(cls: type) -> str:
    """``module.Class`` of a component class."""
    return f"{cls.__module__}.{cls.__qualname__}"


def _component_text(kind: str, name: str) -> str:
    cls = REGISTRIES[kind].get(name)
    doc = inspect.cleandoc(cls.__doc__ or "")
    lines = [f"## {kind} `{name}` (class `{class_path(cls)}`)", "", doc, ""]
    if kind == "scorer":
        lines.append(f"- granularity: {cls.granularity}")
        needs = ["rewards", "response_mask", "group_ids"] + list(cls.requires)
        lines.append(f"- signals needed: {', '.join(needs)}")
    else:
        lines.append(f"- mechanism: {mechanism_of(kind, cls)}")
        if getattr(cls, "needs_signal", True) and hasattr(cls, "accepts"):
            lines.append(f"- accepts scores at: {', '.join(sorted(cls.accepts))} level")
        if getattr(cls, "default_scorer", None):
            lines.append(f"- default scorer: {cls.default_scorer}")
        if kind == "selector" and cls.level == "token":
            lines.append(
                "- keeps: tokens of the responses select kept (a [B, T] mask; a response "
                "with none is dropped)"
            )
        elif hasattr(cls, "level") and kind != "selector":
            lines.append(f"- weights at: {cls.level} level")
            if not getattr(cls, "normalized", True):
                lines.append(
                    "- weights: absolute (applied as they are on every kept row, not "
                    "normalized to mean 1; `normalize` has no effect)"
                )
        token_selector = kind == "selector" and cls.level == "token"
        for opt in ("renormalize",) if token_selector else ("recompute_advantages", "renormalize"):
            if hasattr(cls, f"{opt}_default"):
                lines.append(f"- {opt} by default: {str(getattr(cls, f'{opt}_default')).lower()}")
    gb = getattr(cls, "group_based", False)
    lines.append(
        f"- needs prompt groups: {'yes' if gb is True else 'no' if gb is False else 'when by_group'}"
    )
    if cls.paper:
        lines.append(f"- paper: {cls.paper}")
    lines += ["", _param_table(cls.parameters())]
    return "\n".join(lines)


def _param_table(params: list[dict]) -> str:
    lines = ["| parameter | type | default | range | meaning |", "|---|---|---|---|---|"]
    if not params:
        lines.append("| (none) | | | | |")
    for p in params:
        lines.append(
            f"| `{p['name']}` | {_cell(p['type'])} | {_cell(repr(p['default']))} | "
            f"{_cell(p['range'])} | {_cell(p['doc'])} |"
        )
    return "\n".join(lines)


def _section_text(name: str) -> str:
    """A strategy section that is not a registry's (``refill``, ``rollouts``): its options."""
    cls = SECTIONS_OF[name]
    doc = inspect.cleandoc(cls.__doc__ or "")
    return "\n".join([f"## strategy section `{name}`", "", doc, "", _param_table(field_rows(cls))])


def _cell(text) -> str:
    """A Markdown table cell: a ``|`` (a union type such as ``str | dict``) is escaped."""
    return str(text).replace("|", "\\|")


def _preset_text(name: str) -> str:
    p = PRESETS[name]
    spec = yaml.safe_dump(p.spec, sort_keys=False).strip() if p.spec else "{}  # no strategy"
    return "\n".join(
        [
            f"## preset `{name}`",
            "",
            p.description,
            "",
            f"- mechanism: {p.mechanism}",
            *_preset_classes(p.spec),
            f"- paper: {p.paper}",
            "",
            "```yaml",
            spec,
            "```",
        ]
    )


def _preset_classes(spec: dict) -> list[str]:
    """``- <mechanism> <role>: `name` (class `module.Class`)`` for each component of a preset."""
    lines = []
    for mechanism, section in spec.items():
        for role in ("scorer", "actuator"):
            ref = section.get(role)
            if ref is None:
                continue
            name = ref if isinstance(ref, str) else ref["name"]
            reg = REGISTRIES["scorer"] if role == "scorer" else MECHANISM_REGISTRIES[mechanism]
            lines.append(f"- {mechanism} {role}: `{name}` (class `{class_path(reg.get(name))}`)")
    return lines


def describe(name: str) -> str:
    """Markdown describing every preset and component called ``name``.

    Raises:
        UnknownNameError: listing close matches.
    """
    parts = []
    if name in PRESETS:
        parts.append(_preset_text(name))
    if name in SECTIONS_OF:
        parts.append(_section_text(name))
    for kind, reg in REGISTRIES.items():
        if name in reg:
            parts.append(_component_text(kind, name))
    if not parts:
        raise UnknownNameError(
            f"nothing called {name!r}.{suggest(name, all_names())} "
            f"Run 'dataflex-rl list' for every name."
        )
    return f"# {name}\n\n" + "\n\n".join(parts) + "\n"


def write_docs(out_dir) -> list[str]:
    """Write ``<name>.md`` with `describe` for every name, plus an index; returns the files."""
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name in all_names():
        path = out / f"{name}.md"
        path.write_text(describe(name))
        files.append(path.name)
    index = [
        "# Components and presets",
        "",
        "Generated by `dataflex-rl describe --all --out docs/components`; each page is what "
        "`dataflex-rl describe NAME` prints.",
        "",
    ]
    index += [f"- [{n}]({n}.md)" for n in all_names()]
    (out / "README.md").write_text("\n".join(index) + "\n")
    return files
