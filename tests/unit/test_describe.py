"""`describe` and `list` point from registry and preset names to classes and back."""

from __future__ import annotations

import inspect

import pytest

from dataflex_rl.core.base import MECHANISM_REGISTRIES, REGISTRIES
from dataflex_rl.describe import describe, one_line
from dataflex_rl.presets import PRESETS

COMPONENTS = [(kind, name) for kind, reg in REGISTRIES.items() for name in reg.names()]


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _presets_using(kind: str, name: str) -> list[str]:
    out = []
    for preset, p in PRESETS.items():
        for mechanism, section in p.spec.items():
            ref = section.get("actuator")
            ref = ref if isinstance(ref, str) or ref is None else ref["name"]
            if ref == name and MECHANISM_REGISTRIES[mechanism].kind == kind:
                out.append(preset)
    return out


@pytest.mark.parametrize("kind, name", COMPONENTS)
def test_a_class_whose_name_drifts_names_its_registry_name_and_presets_first(kind, name):
    cls = REGISTRIES[kind].get(name)
    first = inspect.cleandoc(cls.__doc__).splitlines()[0]
    drifting = [p for p in _presets_using(kind, name) if p != name]
    if cls.__name__ != _camel(name) or drifting:
        assert first.startswith(f"``{name}``"), (cls.__name__, first)
        pointer = first.split(": ", 1)[0]
        for preset in _presets_using(kind, name):
            assert f"``{preset}``" in pointer, (cls.__name__, preset, first)


def test_describe_shows_the_class_next_to_the_registry_name():
    text = describe("per")
    assert "## reweighter `per` (class `dataflex_rl.reweight.response.Priority`)" in text
    assert "- reweight actuator: `per` (class `dataflex_rl.reweight.response.Priority`)" in text
    assert (
        "- reweight scorer: `advantage_magnitude` "
        "(class `dataflex_rl.scorers.policy.AdvantageMagnitude`)"
    ) in text
    assert "- select actuator: `band` (class `dataflex_rl.select.band.Band`)" in describe(
        "difffilter"
    )


def test_list_leaves_the_pointer_out_of_the_summary():
    assert one_line("reweighter", "per").startswith("w = (|score| + eps) ** alpha")
    assert one_line("selector", "band").startswith("Keep scores in a band")
    assert not any(one_line(kind, name).startswith(f"``{name}``") for kind, name in COMPONENTS)
