"""Run chosen tests N times in a row and print the failures per test (a flake audit).

    python scripts/repeat_tests.py -n 10 tests/integration/test_faults.py
    python scripts/repeat_tests.py -n 30 --venv .venv-trl tests/hosts_trl/test_trl_two_ranks.py
    python scripts/repeat_tests.py -n 10 --venv .venv-verl tests/hosts/test_verl_compare.py -- -k e2e

Each round is a fresh `pytest` process (a new interpreter, new temporary folders, new ports), run
with the chosen venv's python, `DATAFLEX_RUN_SLOW=1` and `HF_HUB_OFFLINE=1`; arguments after `--`
go to pytest. The table counts, per test id, the rounds it failed or errored in (a module
fixture that fails errors every test that uses it), then the rounds' wall times; the
last lines of each failure are kept under --log-dir (default .test-logs/repeat). Exit status 0
when every round passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str]) -> argparse.Namespace:
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    p = argparse.ArgumentParser(
        description="Run chosen tests N times in a row and print the failures per test.",
        epilog="Arguments after -- go to pytest (e.g. -- -k two_ranks).",
    )
    p.add_argument("tests", nargs="+", help="test files or node ids, as pytest takes them")
    p.add_argument("-n", "--rounds", type=int, default=10, help="how many rounds (default 10)")
    p.add_argument(
        "--venv",
        default=".venv",
        help="the venv whose python runs pytest: .venv (main), .venv-trl or .venv-verl",
    )
    p.add_argument(
        "--log-dir",
        type=Path,
        default=ROOT / ".test-logs" / "repeat",
        help="where each failed round's output is kept (default .test-logs/repeat)",
    )
    args = p.parse_args(argv)
    args.pytest_args = extra
    if args.rounds < 1:
        p.error("-n/--rounds must be at least 1")
    python = ROOT / args.venv / "bin" / "python"
    if not python.exists():
        p.error(f"{python} does not exist: set it up first (scripts/setup*.sh)")
    args.python = python
    return args


def outcomes(junit: Path) -> dict[str, str]:
    """test id -> 'passed' | 'failed' | 'error' | 'skipped' from a junit xml report."""
    seen: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        state = next((k for k in ("error", "failure", "skipped") if k in kinds), "passed")
        if seen.get(test) in ("failure", "error"):
            continue  # a teardown error reported beside a call's result keeps the worst
        seen[test] = state
    return {t: {"failure": "failed"}.get(s, s) for t, s in seen.items()}


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    args.log_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "DATAFLEX_RUN_SLOW": os.environ.get("DATAFLEX_RUN_SLOW", "1"),
        "HF_HUB_OFFLINE": "1",
    }
    failed: Counter[str] = Counter()
    tests: set[str] = set()
    walls: list[float] = []
    bad_rounds = 0
    for k in range(1, args.rounds + 1):
        junit = args.log_dir / f"round{k}.xml"
        junit.unlink(missing_ok=True)
        cmd = [str(args.python), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        cmd += [f"--junitxml={junit}", *args.tests, *args.pytest_args]
        start = time.monotonic()
        run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        walls.append(time.monotonic() - start)
        seen = outcomes(junit) if junit.exists() else {}
        tests |= set(seen)
        bad = sorted(t for t, s in seen.items() if s in ("failed", "error"))
        failed.update(bad)
        ok = run.returncode == 0 and not bad
        if not ok:
            bad_rounds += 1
            log = args.log_dir / f"round{k}.log"
            log.write_text(run.stdout + run.stderr)
            if not seen:
                failed["<pytest exited before reporting: see the log>"] += 1
        summary = "ok" if ok else f"FAILED ({len(bad)} tests, exit {run.returncode}, {log})"
        print(f"round {k}/{args.rounds}: {walls[-1]:.0f} s {summary}", flush=True)
    width = max(map(len, tests | set(failed)), default=10)
    print(f"\n{'test':<{width}}  failed/rounds")
    for test in sorted(tests | set(failed)):
        print(f"{test:<{width}}  {failed[test]}/{args.rounds}")
    print(
        f"\n{bad_rounds} of {args.rounds} rounds failed; wall s min {min(walls):.0f}, "
        f"median {sorted(walls)[len(walls) // 2]:.0f}, max {max(walls):.0f}"
    )
    return 1 if bad_rounds else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
