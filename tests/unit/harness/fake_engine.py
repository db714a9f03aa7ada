"""A stand-in for ``run_training`` (same signature and files) so runner tests need no model.

Scores are a deterministic function of (strategy, seed, domain, step); the strategy named
``broken`` raises, ``crash`` kills its process, ``noisy`` warns, ``slow`` writes its pid to
``pids/slow-<seed>`` and waits while the file ``hold`` exists. Every call is appended to
``calls.log`` in the experiment's output folder.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

EFFECT = {"baseline": 0.0, "difffilter": 0.05, "dump_ucb": -0.02}
DOMAIN_BASE = {"math": 0.40, "logic": 0.50, "science": 0.30}


def score(name: str, seed: int, domain: str, step: int, steps: int) -> float:
    return DOMAIN_BASE[domain] + 0.01 * seed + EFFECT.get(name, 0.0) * step / max(steps, 1)


def run_training(config, strategy, *, seed, out_dir, resume):
    steps = config.steps
    name = strategy["name"]
    out = Path(out_dir)
    with (out.parents[2] / "calls.log").open("a") as f:
        f.write(f"{name} {seed} {resume}\n")
    if name == "broken":
        raise ValueError("broken on purpose")
    if name == "crash":  # the worker process dies (as when killed for memory)
        os._exit(3)
    if name == "slow":  # a run to cancel or kill (tests of the executors)
        root = out.parents[2]
        (root / "pids").mkdir(exist_ok=True)
        (root / "pids" / f"slow-{seed}").write_text(str(os.getpid()))
        while (root / "hold").exists():
            time.sleep(0.1)
    if name == "noisy":
        warnings.warn("step 3: something odd", UserWarning, stacklevel=1)
        warnings.warn("step 4: something odd", UserWarning, stacklevel=1)
    every = config.eval.every or steps
    domains = list(config.tasks.domains)
    lines = []
    for step in range(steps):
        rec = {"kind": "train", "step": step}
        if "mix" in strategy:
            for d in domains:
                rec[f"dataflex/mix/domain/{d}/target"] = 1 / len(domains)
                rec[f"dataflex/mix/domain/{d}/actual"] = 1 / len(domains)
        lines.append(rec)
    for step in sorted({*range(0, steps + 1, max(every, 1)), steps}):
        lines.append(
            {
                "kind": "eval",
                "step": step,
                **{f"eval/{d}/greedy": score(name, seed, d, step, steps) for d in domains},
            }
        )
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return {"strategy": name, "seed": seed, "steps": steps}
