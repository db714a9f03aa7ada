"""The ``science`` domain: physics laws of the form ``x = y*z``, and unit conversions.

* ``law``: ``"F=ma m=4 a=7 F="`` -> ``"28"``; with ``inverse`` the unknown may be a factor,
  ``"V=IR V=12 R=4 I="`` -> ``"3"`` (always an exact integer).
* ``unit``: ``"3km=?m"`` -> ``"3000"``; with ``inverse`` also ``"3000m=?km"`` -> ``"3"``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.tasks.base import Domain

#: (product, factor, factor): the law ``product = factor * factor``
LAWS = (
    ("F", "m", "a"),
    ("V", "I", "R"),
    ("d", "v", "t"),
    ("W", "F", "d"),
    ("P", "I", "V"),
    ("Q", "I", "t"),
)
#: (larger unit, smaller unit, how many smaller units make one larger)
UNITS = (
    ("km", "m", 1000),
    ("m", "cm", 100),
    ("cm", "mm", 10),
    ("kg", "g", 1000),
    ("L", "mL", 1000),
    ("h", "min", 60),
    ("min", "s", 60),
)
#: metric prefixes as powers of ten, per dimension; ``units="metric"`` converts between any
#: two units of one dimension (``"37km=?cm"`` -> ``"3700000"``)
METRIC = (
    (("km", 3), ("m", 0), ("cm", -2), ("mm", -3)),
    (("kg", 3), ("g", 0), ("mg", -3)),
    (("L", 0), ("mL", -3)),
)
#: (larger unit, smaller unit, factor) of every pair of units of one metric dimension
METRIC_UNITS = tuple(
    (a, b, 10 ** (ea - eb))
    for dim in METRIC
    for i, (a, ea) in enumerate(dim)
    for b, eb in dim[i + 1 :]
)
UNIT_TABLES = {"mixed": UNITS, "metric": METRIC_UNITS}
KINDS = ("law", "unit")


class ScienceDomain(Domain):
    """Physics-style quantitative questions with integer answers.

    Args:
        level: preset of the knobs below (1 easiest .. 4; default 4).
        kinds: which families to draw from, a subset of ``("law", "unit")`` (uniform over them).
        min_value: smallest given factor / quantity (>= 1).
        max_value: largest given factor / quantity (<= 99 for laws, <= 999 for units only).
        inverse: also ask for a factor of a law and convert small units to large ones.
        units: the conversion table of ``unit``: ``"mixed"`` (`UNITS`: metric pairs and
            h/min/s) or ``"metric"`` (`METRIC_UNITS`: any two units of length, mass or volume,
            factors 10 to 10^6).

    Levels (values / inverse): 1 = 2-12 / no; 2 = 2-25 / yes; 3 = 2-40 / yes; all draw laws
    and mixed units. 4 = metric unit conversions only, quantities 1-999, both directions (the
    engine's default: 20,000 distinct prompts; a skill the tiny policy improves by RL). Calibration (~1M-parameter char policy, 1,400 warm-start steps on 2,000-problem
    pools of the three default domains): level 2 reached 32-41% held-out greedy accuracy
    (~60% on its own training pool); values 2-15 ~75%. Forward laws (multiplication) and unit
    conversions are the hard part.
    """

    name = "science"
    #: the engine's default level (engine.config.DEFAULT_DIFFICULTY)
    DEFAULT_LEVEL = 4
    LEVELS = {
        1: dict(kinds=("law", "unit"), min_value=2, max_value=12, inverse=False, units="mixed"),
        2: dict(kinds=("law", "unit"), min_value=2, max_value=25, inverse=True, units="mixed"),
        3: dict(kinds=("law", "unit"), min_value=2, max_value=40, inverse=True, units="mixed"),
        4: dict(kinds=("unit",), min_value=1, max_value=999, inverse=True, units="metric"),
    }

    def __init__(
        self,
        level: int | None = None,
        *,
        kinds: Sequence[str] | str | None = None,
        min_value: int | None = None,
        max_value: int | None = None,
        inverse: bool | None = None,
        units: str | None = None,
    ) -> None:
        s = self.resolve(
            level,
            kinds=(kinds,) if isinstance(kinds, str) else kinds,
            min_value=min_value,
            max_value=max_value,
            inverse=inverse,
            units=units,
        )
        self.units = str(s.get("units", "mixed"))
        self.settings["units"] = self.units
        if self.units not in UNIT_TABLES:
            raise ConfigError(
                f"science: units must be one of {sorted(UNIT_TABLES)}, got {self.units!r}"
            )
        self.kinds = tuple(s["kinds"])
        self.settings["kinds"] = self.kinds
        self.min_value, self.max_value = int(s["min_value"]), int(s["max_value"])
        self.inverse = bool(s["inverse"])
        if (
            not self.kinds
            or set(self.kinds) - set(KINDS)
            or len(set(self.kinds)) != len(self.kinds)
        ):
            raise ConfigError(
                f"science: kinds must be distinct values of {KINDS}, got {self.kinds!r}"
            )
        top = 99 if "law" in self.kinds else 999
        if not 1 <= self.min_value <= self.max_value <= top:
            raise ConfigError(
                f"science: need 1 <= min_value <= max_value <= {top} (kinds "
                f"{list(self.kinds)}), got {self.min_value}..{self.max_value}"
            )

    def sample(self, rng: random.Random) -> tuple[str, str]:
        kind = rng.choice(self.kinds)
        return self._law(rng) if kind == "law" else self._unit(rng)

    def _law(self, rng: random.Random) -> tuple[str, str]:
        law = rng.choice(LAWS)
        y, z = (rng.randint(self.min_value, self.max_value) for _ in range(2))
        values = dict(zip(law, (y * z, y, z)))
        unknown = rng.choice(law) if self.inverse else law[0]
        given = " ".join(f"{v}={values[v]}" for v in law if v != unknown)
        return f"{law[0]}={law[1]}{law[2]} {given} {unknown}=", str(values[unknown])

    def _unit(self, rng: random.Random) -> tuple[str, str]:
        big, small, factor = rng.choice(UNIT_TABLES[self.units])
        x = rng.randint(self.min_value, self.max_value)
        if self.inverse and rng.random() < 0.5:
            return f"{x * factor}{small}=?{big}", str(x)
        return f"{x}{big}=?{small}", str(x * factor)

    def task_type(self, prompt: str) -> str:
        """The kind: ``"unit"`` (``"3km=?m"``, the only prompts with a ``?``) or ``"law"``."""
        return "unit" if "?" in prompt else "law"

    def charset(self) -> str:
        chars = set("0123456789=")
        if "law" in self.kinds:
            chars.update(" " + "".join("".join(law) for law in LAWS))
        if "unit" in self.kinds:
            chars.update("?" + "".join(b + s for b, s, _ in UNIT_TABLES[self.units]))
        return "".join(sorted(chars))
