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
import random
from pathlib import Path

INSTRUCTION = "Think step by step, then give the final answer as \\boxed{{{what}}}."
LOGIC_HELP = {
    "order": "Each clue 'x>y' says x is larger than y. List the letters from smallest to "
             "largest, with no spaces.",
    "horn": "Each rule 'x->y' says that x implies y. Answer yes or no.",
    "bool": "Evaluate the boolean formula (1 = true, 0 = false). Answer 1 or 0.",
}


def row(domain: str, source: str, question: str, answer: str, answer_type: str,
        what: str, index: int, split: str) -> dict:
    content = f"{question}\n\n{INSTRUCTION.format(what=what)}"
    return {"data_source": source, "domain": domain, "ability": domain,
            "prompt": [{"role": "user", "content": content}],
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"index": index, "split": split, "answer_type": answer_type}}


def gsm8k(split: str, n: int, seed: int) -> list[dict]:
    from datasets import load_dataset

    data = load_dataset("openai/gsm8k", "main", split=split).shuffle(seed=seed)
    out = []
    for i, ex in enumerate(data.select(range(min(n, len(data))))):
        answer = ex["answer"].split("####")[-1].strip().replace(",", "")
        out.append(row("math", "openai/gsm8k", ex["question"], answer, "number", "number",
                       i, split))
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
        out.append(row("science", "allenai/sciq", f"{ex['question']}\n{listed}", letter,
                       "choice", "letter", i, split))
    return out


def generated(domain: str, split: str, n: int, seed: int) -> list[dict]:
    """dataflex-rl's procedural problems (exact answers), worded for a language model."""
    from dataflex_rl.tasks import build_taskset

    level = {"math": 3, "logic": 3, "science": 3}[domain]
    tasks = build_taskset((domain,), train_size=n, eval_size=n, seed=seed,
                          difficulty={domain: level})
    problems = tasks.train[domain] if split == "train" else tasks.eval[domain]
    out = []
    for i, p in enumerate(problems[:n]):
        if domain == "logic":
            form = "order" if ("<" in p.prompt or ">" in p.prompt) and "->" not in p.prompt \
                else ("horn" if "->" in p.prompt else "bool")
            question = f"{LOGIC_HELP[form]}\n{p.prompt}"
            answer_type, what = "exact", "answer"
        else:
            verb = "Compute" if domain == "math" else "Convert the units"
            question = f"{verb}: {p.prompt}"
            answer_type, what = "number", "number"
        out.append(row(domain, f"dataflex/{domain}", question, p.answer, answer_type, what, i,
                       split))
    return out


def build(split: str, n: int, seed: int, offline: bool) -> list[dict]:
    if offline:
        return [r for d in ("math", "logic", "science") for r in generated(d, split, n, seed)]
    return gsm8k(split, n, seed) + generated("logic", split, n, seed) + sciq(split, n, seed)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="output directory")
    ap.add_argument("--train-per-domain", type=int, default=5000)
    ap.add_argument("--test-per-domain", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--offline", action="store_true",
                    help="no downloads: all three domains from dataflex-rl's generators")
    args = ap.parse_args(argv)
    import pandas as pd

    args.out.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", args.train_per_domain), ("test", args.test_per_domain)):
        rows = build(split, n, args.seed, args.offline)
        pd.DataFrame(rows).to_parquet(args.out / f"{split}.parquet")
        counts = pd.Series([r["domain"] for r in rows]).value_counts().to_dict()
        print(f"{args.out / f'{split}.parquet'}: {len(rows)} rows {counts}")


if __name__ == "__main__":
    main()
