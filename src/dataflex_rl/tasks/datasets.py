"""Load (and save) verl-schema datasets as task pools.

A verl row looks like::

    {"data_source": "openai/gsm8k", "domain": "math",
     "prompt": [{"role": "user", "content": "..."}], "ability": "math",
     "reward_model": {"style": "rule", "ground_truth": "72"}, "extra_info": {"index": 0}}

The domain of a row is its ``domain_column`` (dotted paths such as ``"extra_info.domain"``
work), falling back to ``data_source``. JSONL and JSON always work; parquet needs ``pyarrow``
(or ``pandas``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dataflex_rl.core.registry import ConfigError, import_object
from dataflex_rl.core.spec import get_path
from dataflex_rl.tasks.base import Domain, Problem, TaskSet, exact_match

log = logging.getLogger(__name__)
_MISSING = object()
VERIFIERS = ("exact", "math")


def problem_key(domain: str, prompt: str) -> str:
    """``"<domain>:<prompt>"`` for short one-line prompts, else ``"<domain>:#<sha1[:16]>"``."""
    if len(prompt) <= 64 and "\n" not in prompt:
        return f"{domain}:{prompt}"
    return f"{domain}:#{hashlib.sha1(prompt.encode('utf-8')).hexdigest()[:16]}"


def _plain(obj: Any) -> Any:
    """numpy arrays / scalars (as pandas returns them) -> Python lists / scalars."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
        return _plain(obj.tolist())
    return obj


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a ``.jsonl``, ``.json`` (a list of objects) or ``.parquet`` file.

    Raises:
        ConfigError: missing file, unknown suffix, unreadable content, or no parquet reader.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"dataset {str(p)!r}: no such file")
    suffix = p.suffix.lower()
    try:
        if suffix == ".jsonl":
            with p.open(encoding="utf-8") as f:
                rows = [json.loads(line) for line in f if line.strip()]
        elif suffix == ".json":
            rows = json.loads(p.read_text(encoding="utf-8"))
            if not isinstance(rows, list):
                raise ConfigError(f"dataset {str(p)!r}: a .json dataset must be a list of rows")
        elif suffix == ".parquet":
            rows = _read_parquet(p)
        else:
            raise ConfigError(
                f"dataset {str(p)!r}: unknown format {suffix!r}; use .parquet, .jsonl or .json"
            )
    except json.JSONDecodeError as e:
        raise ConfigError(f"dataset {str(p)!r}: invalid JSON ({e})") from e
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
    if bad is not None:
        raise ConfigError(f"dataset {str(p)!r}: row {bad} is not an object")
    return rows


def _read_parquet(p: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        try:
            import pandas as pd
        except ImportError:
            raise ConfigError(
                f"dataset {str(p)!r}: reading parquet needs pyarrow "
                f'(pip install "dataflex-rl[tasks]") or pandas; JSONL needs '
                "nothing"
            ) from None
        return [_plain(r) for r in pd.read_parquet(p).to_dict(orient="records")]
    return pq.read_table(p).to_pylist()


def _prompt_text(value: Any, where: str) -> tuple[str, list | None]:
    value = _plain(value)
    if isinstance(value, str):
        return value, None
    if (
        isinstance(value, list)
        and value
        and all(isinstance(m, Mapping) and "content" in m for m in value)
    ):
        return "\n\n".join(str(m["content"]) for m in value), value
    raise ConfigError(
        f"{where}: prompt must be a string or a list of chat messages "
        f"with 'content', got {value!r:.80}"
    )


def load_problems(
    path: str | Path,
    domain_column: str = "domain",
    *,
    prompt_column: str = "prompt",
    answer_column: str = "reward_model.ground_truth",
    limit: int | None = None,
) -> dict[str, list[Problem]]:
    """Problems of a verl-schema file, per domain, in file order.

    Chat prompts are joined into ``prompt`` (contents separated by blank lines) and kept in
    ``extra["messages"]``; a list ground truth becomes ``answer`` (first) and
    ``extra["answers"]`` (all). A repeated prompt within a domain keeps its first row.

    Args:
        path: ``.parquet``, ``.jsonl`` or ``.json`` file.
        domain_column: column (or dotted path) naming the domain; rows without it use
            ``data_source``.
        prompt_column: column of the prompt.
        answer_column: column (or dotted path) of the ground truth.
        limit: keep at most this many rows per domain.

    Raises:
        ConfigError: missing file, or a row without a required column (path and column named).
    """
    rows = read_rows(path)
    where = f"dataset {str(path)!r}"
    pools: dict[str, list[Problem]] = {}
    seen: dict[str, set[str]] = {}
    duplicates = 0
    for i, row in enumerate(rows):
        domain = get_path(row, domain_column, _MISSING)
        if domain is _MISSING or domain is None:
            domain = row.get("data_source")
        if domain is None:
            raise ConfigError(
                f"{where}: row {i} has neither the domain column "
                f"{domain_column!r} nor 'data_source'"
            )
        raw_prompt = get_path(row, prompt_column, _MISSING)
        if raw_prompt is _MISSING:
            raise ConfigError(f"{where}: row {i} has no prompt column {prompt_column!r}")
        truth = get_path(row, answer_column, _MISSING)
        if truth is _MISSING or truth is None:
            raise ConfigError(f"{where}: row {i} has no answer column {answer_column!r}")
        domain = str(domain)
        prompt, messages = _prompt_text(raw_prompt, f"{where}: row {i}")
        truth = _plain(truth)
        answers = [str(t) for t in truth] if isinstance(truth, list) else [str(truth)]
        if not answers:
            raise ConfigError(f"{where}: row {i} has an empty answer list in {answer_column!r}")
        if prompt in seen.setdefault(domain, set()):
            duplicates += 1
            continue
        pool = pools.setdefault(domain, [])
        if limit is not None and len(pool) >= limit:
            continue
        seen[domain].add(prompt)
        extra = {k: _plain(row[k]) for k in ("data_source", "ability", "extra_info") if k in row}
        if messages is not None:
            extra["messages"] = messages
        if len(answers) > 1:
            extra["answers"] = answers
        pool.append(Problem(problem_key(domain, prompt), domain, prompt, answers[0], extra))
    if duplicates:
        log.info("%s: skipped %d rows repeating a prompt of their domain", where, duplicates)
    return pools


class LoadedDomain(Domain):
    """A domain whose problems come from a file; it verifies but cannot generate.

    Args:
        name: the domain name.
        verifier: ``"exact"`` (canonical string match), ``"math"`` (math-verify), or
            ``"module:attr"`` naming a ``(response, ground_truth) -> float`` callable (scores
            below 1 count as 0).
    """

    def __init__(self, name: str, verifier: str = "exact") -> None:
        self.name = name  # type: ignore[misc]
        self.verifier = verifier
        self.settings = {"verifier": verifier}
        self._check: Callable[[str | None, str], float]
        if verifier == "exact":
            self._check = exact_match_response
        elif verifier == "math":
            from dataflex_rl.tasks.math_verify import MathVerifier

            self._check = MathVerifier()
        elif ":" in verifier:
            fn = import_object(verifier, f"verifier of domain {name!r}")
            if not callable(fn):
                raise ConfigError(f"verifier {verifier!r} of domain {name!r} is not callable")
            self._check = fn  # type: ignore[assignment]
        else:
            raise ConfigError(
                f"verifier of domain {name!r}: unknown {verifier!r}; use one of "
                f"{', '.join(VERIFIERS)} or 'module:attr'"
            )

    def sample(self, rng: random.Random) -> tuple[str, str]:
        raise ConfigError(
            f"domain {self.name!r} was loaded from a file and cannot generate new problems"
        )

    def charset(self) -> str:
        return ""

    def verify(self, problem: Problem, response: str | None) -> float:
        answers = (problem.extra.get("answers") if problem.extra else None) or [problem.answer]
        return 1.0 if any(float(self._check(response, a)) >= 1.0 for a in answers) else 0.0


def exact_match_response(response: str | None, answer: str) -> float:
    """`exact_match` with the (response, ground_truth) argument order of verifiers."""
    return exact_match(answer, response)


def _split(
    pool: list[Problem], fraction: float, seed: int, domain: str
) -> tuple[list[Problem], list[Problem]]:
    order = list(range(len(pool)))
    random.Random(f"{seed}:{domain}").shuffle(order)
    n_eval = int(round(fraction * len(pool)))
    held = set(order[:n_eval])
    return (
        [p for i, p in enumerate(pool) if i not in held],
        [p for i, p in enumerate(pool) if i in held],
    )


def load_dataset(
    path: str | Path,
    domain_column: str = "domain",
    *,
    eval_path: str | Path | None = None,
    eval_fraction: float = 0.0,
    seed: int = 0,
    domains: Sequence[str] | None = None,
    verifier: str | Mapping[str, str] = "exact",
    limit: int | None = None,
    prompt_column: str = "prompt",
    answer_column: str = "reward_model.ground_truth",
) -> TaskSet:
    """A `TaskSet` from verl-schema files: training pools and disjoint eval sets per domain.

    Args:
        path: training file (``.parquet``, ``.jsonl`` or ``.json``).
        domain_column: column naming the domain (falls back to ``data_source``).
        eval_path: held-out file; its prompts are removed from the training pools.
        eval_fraction: without ``eval_path``, hold out this fraction of each domain
            (deterministic given ``seed``).
        seed: seed of the held-out split.
        domains: keep only these domains, in this order (default: order of first appearance).
        verifier: ``"exact"``, ``"math"`` or ``"module:attr"``, for all domains or per domain.
        limit: at most this many rows per domain and file.
        prompt_column: column of the prompt.
        answer_column: column (dotted path) of the ground truth.

    Raises:
        ConfigError: missing file or column, unknown domain or verifier, bad fraction.
    """
    if not 0.0 <= eval_fraction < 1.0:
        raise ConfigError(f"eval_fraction must be in [0, 1), got {eval_fraction!r}")
    if eval_path is not None and eval_fraction:
        raise ConfigError("give either eval_path or eval_fraction, not both")
    cols = dict(
        domain_column=domain_column,
        prompt_column=prompt_column,
        answer_column=answer_column,
        limit=limit,
    )
    train = load_problems(path, **cols)
    evals = load_problems(eval_path, **cols) if eval_path is not None else {}
    found = list(dict.fromkeys([*train, *evals]))
    names = list(domains) if domains is not None else found
    unknown = [d for d in names if d not in found]
    if unknown:
        raise ConfigError(f"domains {unknown} are not in {str(path)!r} (domains there: {found})")
    if isinstance(verifier, Mapping):
        bad = set(verifier) - set(names)
        if bad:
            raise ConfigError(f"verifier: unknown domains {sorted(bad)}; domains: {names}")
    train_out, eval_out, handlers = {}, {}, {}
    for d in names:
        pool = train.get(d, [])
        if eval_fraction:
            pool, held = _split(pool, eval_fraction, seed, d)
        else:
            held = evals.get(d, [])
            held_prompts = {p.prompt for p in held}
            dropped = sum(p.prompt in held_prompts for p in pool)
            if dropped:
                log.info("domain %r: dropped %d training rows whose prompt is held out", d, dropped)
                pool = [p for p in pool if p.prompt not in held_prompts]
        train_out[d], eval_out[d] = pool, held
        v = verifier.get(d, "exact") if isinstance(verifier, Mapping) else verifier
        handlers[d] = LoadedDomain(d, v)
    return TaskSet(tuple(names), train_out, eval_out, handlers)


def to_verl_rows(problems: Iterable[Problem], split: str = "train") -> list[dict[str, Any]]:
    """verl-schema rows for ``problems`` (e.g. to train the built-in domains under verl).

    Args:
        problems: the problems.
        split: stored in ``extra_info.split``.
    """
    rows = []
    for i, p in enumerate(problems):
        messages = (p.extra.get("messages") if p.extra else None) or [
            {"role": "user", "content": p.prompt}
        ]
        rows.append(
            {
                "data_source": p.domain,
                "domain": p.domain,
                "prompt": messages,
                "ability": p.domain,
                "reward_model": {"style": "rule", "ground_truth": p.answer},
                "extra_info": {"split": split, "index": i, "key": p.key},
            }
        )
    return rows


def save_dataset(problems: Iterable[Problem], path: str | Path, split: str = "train") -> Path:
    """Write ``problems`` as verl-schema ``.jsonl`` or ``.parquet`` (needs pyarrow).

    Raises:
        ConfigError: unknown suffix, or parquet without pyarrow.
    """
    p = Path(path)
    rows = to_verl_rows(problems, split)
    if p.suffix.lower() == ".jsonl":
        p.parent.mkdir(parents=True, exist_ok=True)
        with p.open("w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    elif p.suffix.lower() == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ConfigError(
                f"{str(p)!r}: writing parquet needs pyarrow (pip install "
                '"dataflex-rl[tasks]"); .jsonl needs nothing'
            ) from None
        p.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), p)
    else:
        raise ConfigError(f"{str(p)!r}: unknown format {p.suffix!r}; use .parquet or .jsonl")
    return p
