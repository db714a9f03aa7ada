"""``python -m dataflex_rl.harness.running.worker``: one run as a process of its own.

Reads a `RunSpec` (its fields as JSON) on stdin, runs it (`runner.execute_run`: the same
resume, files and failure handling as a local worker process) and prints its record on the
marked line `launch.run_launch` reads. What the Ray executor starts on a node (`Launch`).
"""

from __future__ import annotations

import json
import sys

from dataflex_rl.harness.running.launch import print_record
from dataflex_rl.harness.running.runner import RunSpec, execute_run


def main() -> int:
    run = RunSpec(**json.loads(sys.stdin.read()))
    print_record(execute_run(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
