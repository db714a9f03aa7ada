"""Build a multi-domain math / logic / science dataset in verl's parquet schema.

    python examples/verl/prepare_data.py --out ~/data/dataflex_mix             # downloads
    python examples/verl/prepare_data.py --out /tmp/mix --offline              # generators only

Sources (``--offline`` replaces the downloaded ones with dataflex-rl's own generators):

* math: GSM8K (``openai/gsm8k``), numeric answers;
* logic: dataflex-rl's ordering / implication / boolean puzzles, stated in words;
* science: SciQ (``allenai/sciq``) as 4-option multiple choice.

Each row has ``domain`` (the column the ``dataflex`` block reads by default), ``data_source``,
``prompt`` (chat messages), ``reward_model.ground_truth`` and ``extra_info.answer_type`` for
``reward.py``. Writes ``train.parquet`` and ``test.parquet`` into ``--out``.
"""

from __future__ import annotations

import argparse
import functools
import random
from pathlib import Path

INSTRUCTION = "Think step by step, then give the final answer as \\boxed{{{what}}}."
LOGIC_HELP = {
    "order": "Each clue 'x<y' or 'y>x' says x comes before y. List the letters in order, "
    "with no spaces.",
    "horn": "The first letter is true; each rule 'x-y' says that if x is true, y is true. "
    "List every true letter in alphabetical order, with no spaces.",
    "bool": "Evaluate the boolean formula (1 = true, 0 = false). Answer 1 or 0.",
}
#: generator levels for a language model: arithmetic with 3-4 operands up to 99, the hardest
#: implication chains, metric unit conversions (each has room for thousands of distinct prompts)
LEVELS = {"math": {"level": 4, "min_terms": 3}, "logic": 3, "science": 4}


def row(
    domain: str,
    source: str,
    question: str,
    answer: str,
    answer_type: str,
    what: str,
    index: int,
    split: str,
) -> dict:
    content = f"{question}\n\n{INSTRUCTION.format(what=what)}"
    return {
        "data_source": source,
        "domain": domain,
        "ability": domain,
        "prompt": [{"role": "user", "content": content}],
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"index": index, "split": split, "answer_type": answer_type},
    }


def gsm8k(split: str, n: int, seed: int) -> list[dict]:
    from datasets import load_dataset

    data = load_dataset("openai/gsm8k", "main", split=split).shuffle(seed=seed)
    out = []
    for i, ex in enumerate(data.select(range(min(n, len(data))))):
        answer = ex["answer"].split("####")[-1].strip().replace(",", "")
        out.append(
            row("math", "openai/gsm8k", ex["question"], answer, "number", "number", i, split)
        )
    return out


def sciq(split: str, n: int, seed: int) -> list[dict]:
    from datasets import load_dataset

    data = load_dataset("allenai/sciq", split="test" if split == "test" else "train")
    data = data.shuffle(seed=seed)
    rng = random.Random(seed)
    out = []
    for i, ex in enumerate(data.select(range(min(n, len(data))))):
        options = [ex["correct_answer"], ex["distractor1"], ex["distractor2"], ex["distractor3"]]
        rng.shuffle(options)
        letter = "ABCD"[options.index(ex["correct_answer"])]
        listed = "\n".join(f"{'ABCD'[k]}. {o}" for k, o in enumerate(options))
        out.append(
            row(
                "science",
                "allenai/sciq",
                f"{ex['question']}\n{listed}",
                letter,
                "choice",
                "letter",
                i,
                split,
            )
        )
    return out


@functools.cache
def _taskset(domain: str, n_train: int, n_test: int, seed: int):
    """One split of one de-duplicated stream: train and test never share a prompt."""
    from dataflex_rl.tasks import build_taskset

    return build_taskset(
        (domain,),
        train_size=n_train,
        eval_size=n_test,
        seed=seed,
        difficulty={domain: LEVELS[domain]},
    )


def generated(domain: str, split: str, sizes: tuple[int, int], seed: int) -> list[dict]:
    """dataflex-rl's procedural problems (exact answers), worded for a language model."""
    tasks = _taskset(domain, *sizes, seed)
    problems = tasks.train[domain] if split == "train" else tasks.eval[domain]
    handler = tasks.handler(domain)
    out = []
    for i, p in enumerate(problems):
        if domain == "logic":
            question = f"{LOGIC_HELP[handler.task_type(p.prompt)]}\n{p.prompt}"
            answer_type, what = "exact", "answer"
        else:
            verb = "Compute" if domain == "math" else "Convert the units"
            question = f"{verb}: {p.prompt}"
            answer_type, what = "number", "number"
        out.append(
            row(domain, f"dataflex/{domain}", question, p.answer, answer_type, what, i, split)
        )
    return out


def build(split: str, sizes: tuple[int, int], seed: int, offline: bool) -> list[dict]:
    """Rows of ``split``; ``sizes`` = (train, test) problems per domain."""
    if offline:
        return [r for d in ("math", "logic", "science") for r in generated(d, split, sizes, seed)]
    n = sizes[0] if split == "train" else sizes[1]
    return gsm8k(split, n, seed) + generated("logic", split, sizes, seed) + sciq(split, n, seed)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="output directory")
    ap.add_argument("--train-per-domain", type=int, default=5000)
    ap.add_argument("--test-per-domain", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--offline",
        action="store_true",
        help="no downloads: all three domains from dataflex-rl's generators",
    )
    args = ap.parse_args(argv)
    import pandas as pd

    args.out.mkdir(parents=True, exist_ok=True)
    sizes = (args.train_per_domain, args.test_per_domain)
    for split in ("train", "test"):
        rows = build(split, sizes, args.seed, args.offline)
        pd.DataFrame(rows).to_parquet(args.out / f"{split}.parquet")
        counts = pd.Series([r["domain"] for r in rows]).value_counts().to_dict()
        print(f"{args.out / f'{split}.parquet'}: {len(rows)} rows {counts}")


if __name__ == "__main__":
    main()
