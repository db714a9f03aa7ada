"""A ``compare`` on the Ray executor with the stand-in engine, as a process of its own (tests
of cancelling and killing it): ``python -m tests.integration.ray_driver OUT ADDRESS``.

Strategies ``baseline`` and ``slow`` (tests/unit/harness/fake_engine.py: ``slow`` waits while
``OUT/hold`` exists), seeds 0 and 1.
"""

from __future__ import annotations

import dataclasses
import sys

from dataflex_rl.harness.running.compare import run_compare
from tests.unit.harness.running.test_runner import FAKE, experiment


def main(out: str, address: str) -> int:
    exp = experiment(strategies=["baseline", {"label": "slow", "strategy": "baseline"}])
    exp = dataclasses.replace(exp, executor="ray")
    res = run_compare(exp, out, progress=False, plots=False, train_fn=FAKE, address=address)
    ex = res.execution
    print(f"done {len(ex.done)} skipped {ex.skipped} failed {len(ex.failed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
