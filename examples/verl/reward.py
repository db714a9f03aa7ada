"""Rule reward for the math / logic / science data of ``prepare_data.py`` (verl custom reward).

    reward.custom_reward_function.path=examples/verl/reward.py
    reward.custom_reward_function.name=compute_score

The final answer of a response is the content of its last ``\\boxed{...}``, else what follows
its last ``Answer:``, else its last non-empty line. It is compared according to
``extra_info["answer_type"]``: ``number`` (numeric equality), ``choice`` (the option letter) or
``exact`` (case- and space-insensitive). The score is 1.0 or 0.0.
"""

from __future__ import annotations

import re

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def final_answer(text: str) -> str:
    """The response's final answer (see the module doc); "" when there is none."""
    starts = [m.end() for m in _BOX.finditer(text)]
    for start in reversed(starts):  # the last box whose braces balance
        depth = 1
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                return text[start:i].strip()
    if "Answer:" in text:
        tail = text.rsplit("Answer:", 1)[1].strip()
        return tail.splitlines()[0].strip() if tail else ""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _number(text: str) -> float | None:
    found = _NUMBER.findall(text.replace("$", ""))
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text).lower()


def matches(answer: str, truth: str, answer_type: str) -> bool:
    """Whether a final answer equals the ground truth under ``answer_type``."""
    if answer_type == "number":
        a, t = _number(answer), _number(truth)
        return a is not None and t is not None and abs(a - t) <= 1e-6 * max(1.0, abs(t))
    if answer_type == "choice":
        letter = re.search(r"\b([A-D])\b", answer.upper())
        return letter is not None and letter.group(1) == truth.strip().upper()
    return bool(answer) and _squash(answer) == _squash(truth)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """verl's custom reward signature; 1.0 when the final answer matches, else 0.0."""
    answer_type = (extra_info or {}).get("answer_type", "exact")
    return 1.0 if matches(final_answer(solution_str or ""), str(ground_truth), answer_type) else 0.0
