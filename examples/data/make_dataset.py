"""Write the small verl-schema dataset of ``examples/dataset.yaml`` (train.jsonl, test.jsonl).

Rows come from the built-in generators (at the levels the shipped tiny policy was warm-started
on, so a short run sees non-zero rewards); any verl-schema file works the same way::

    .venv/bin/python examples/data/make_dataset.py          # rewrites the two files
    .venv/bin/python examples/data/make_dataset.py --parquet  # also train.parquet / test.parquet
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dataflex_rl.hosts.engine.config import DEFAULT_DIFFICULTY
from dataflex_rl.tasks import build_taskset, save_dataset

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="output folder")
    parser.add_argument("--train", type=int, default=40, help="training rows per domain")
    parser.add_argument("--test", type=int, default=10, help="held-out rows per domain")
    parser.add_argument("--parquet", action="store_true", help="also write .parquet files")
    args = parser.parse_args()
    # seed 11: prompts other than the ones the shipped policy's bootstrap drew (seed 0)
    ts = build_taskset(
        train_size=args.train, eval_size=args.test, seed=11, difficulty=dict(DEFAULT_DIFFICULTY)
    )
    for split, pools in (("train", ts.train), ("test", ts.eval)):
        problems = [p for d in ts.domains for p in pools[d]]
        for suffix in (".jsonl", ".parquet") if args.parquet else (".jsonl",):
            print(save_dataset(problems, args.out / f"{split}{suffix}", split))


if __name__ == "__main__":
    main()
