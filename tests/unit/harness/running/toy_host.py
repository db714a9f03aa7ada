"""A toy `Host` the harness has never heard of (test_toy_host.py registers it as ``toy``).

Its settings are the experiment's ``toy:`` section (`ToySettings`); its training function
(`train`) trains nothing: it writes the held-out accuracy of each domain at step 0 and at the
last step into ``toy.jsonl``, its record format (one JSON line per evaluation, ``{"step",
"domain", "correct", "problems"}``). The accuracy is deterministic: a base per (seed, domain),
the same for every strategy at step 0 (the runs are paired), plus the strategy's ``effect``
(``toy.effects``) at the end.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dataflex_rl.core.config import Checked, key_path, param, validate
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.host import Host, HostControls, merge_overrides

RECORDS = "toy.jsonl"
TRAIN_FN = "tests.unit.harness.running.toy_host:train"


@dataclass
class ToySettings(Checked):
    """The ``toy:`` section of an experiment file."""

    domains: list[str] = param(["alpha", "beta"], "the held-out domains")
    effects: dict[str, float] = param(
        {}, "accuracy a strategy (by label) adds by the last step", ge=-1.0, le=1.0
    )
    lr: float = param(0.1, "the learning rate (no_update: 0)", ge=0.0)
    sampling_stream: int = param(0, "the sampling stream (aa: another)", ge=0)


def base_accuracy(seed: int, domain: str) -> float:
    """A fixed accuracy in [0.3, 0.5) per (seed, domain)."""
    digest = hashlib.sha256(f"{seed}/{domain}".encode()).digest()
    return 0.3 + 0.2 * digest[0] / 256


def train(settings: dict, strategy: dict, *, seed: int, out_dir: str, resume: bool) -> dict:
    """The one signature of every host's training function; writes `RECORDS`."""
    n = settings["per_domain"]
    effect = settings["effects"].get(strategy["name"], 0.0) if settings["lr"] else 0.0
    lines = []
    for step, gain in ((0, 0.0), (settings["steps"], effect)):
        for d in settings["domains"]:
            correct = round(n * min(1.0, max(0.0, base_accuracy(seed, d) + gain)))
            lines.append({"step": step, "domain": d, "correct": correct, "problems": n})
    Path(out_dir, RECORDS).write_text("".join(json.dumps(r) + "\n" for r in lines))
    return {"strategy": strategy["name"], "seed": seed}


class ToyHost(Host):
    """A host of the tests (``host: toy``): runs in the harness's worker processes."""

    name = "toy"
    section_doc = "host toy: the toy host's settings (tests/unit/harness/running/toy_host.py)"
    setup = "nothing to install"
    controls = HostControls(stream="sampling_stream", lr="lr", section="toy.")
    tracking = "nothing: the toy host's runs log only toy.jsonl"
    schemas = {"toy": ToySettings}
    train_default = TRAIN_FN
    no_token_budget = "its runs do not generate"

    def parse_section(self, data: Any, where: str, base: Path | None) -> dict:
        return asdict(validate(ToySettings, data, where))

    def domains(self, exp) -> list[str]:
        return list(exp.host_settings["domains"])

    def run_config(self, exp, overrides: dict) -> dict:
        where = key_path(exp.path or exp.name, self.name)
        settings = asdict(
            validate(ToySettings, merge_overrides(exp.host_settings, overrides), where)
        )
        if exp.evaluation.metric != "greedy":
            raise ConfigError(
                f"{key_path(exp.path or exp.name, 'evaluation.metric')}: host toy evaluates "
                "greedy accuracy only"
            )
        return {**settings, "steps": exp.budget.steps, "per_domain": exp.evaluation.per_domain}

    def check(self, exp) -> None:
        if not exp.host_settings["domains"]:
            raise ConfigError(f"{key_path(exp.path or exp.name, 'toy.domains')}: none given")

    def setup_lines(self, exp) -> list[str]:
        return [
            f"host: toy, domains {', '.join(self.domains(exp))}",
            "paired on toy: every arm of a seed starts from the same accuracy",
        ]

    def read_records(self, out: Path, config: dict, mixes: bool) -> tuple[list, list]:
        evals: dict[int, dict] = {}
        for line in Path(out, RECORDS).read_text().splitlines():
            r = json.loads(line)
            row = evals.setdefault(r["step"], {"step": r["step"]})
            row[f"{r['domain']}/greedy"] = r["correct"] / r["problems"]
        return [evals[s] for s in sorted(evals)], []

    def has_checkpoint(self, out: Path) -> bool:
        return False

    def steps_done(self, out: Path) -> int:
        path = Path(out, RECORDS)
        return (
            max((json.loads(x)["step"] for x in path.read_text().splitlines()), default=0)
            if path.is_file()
            else 0
        )
