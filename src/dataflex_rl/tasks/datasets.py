"""Load (and save) verl-schema datasets (JSONL, JSON, parquet, save_to_disk directories) as
task pools; every problem of the data is an error at load time (see docs/datasets.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dataflex_rl.core.registry import ConfigError, suggest
from dataflex_rl.core.spec import get_path
from dataflex_rl.deps import available
from dataflex_rl.tasks.base import Domain, Problem, TaskSet
from dataflex_rl.tasks.verifiers import build_verifier, verifier_kinds

log = logging.getLogger(__name__)
_MISSING = object()
#: the columns tried, in order, when ``domain_key`` is null (the same on every host)
DEFAULT_DOMAIN_COLUMNS = ("domain", "data_source")
PathLike = str | Path
#: files of HF ``datasets``' save_to_disk layout
STATE_FILE, DATASET_DICT_FILE = "state.json", "dataset_dict.json"
#: splits of a DatasetDict used for evaluation, in order of preference
EVAL_SPLITS = ("test", "validation")


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


def domain_column(
    rows: Sequence[Mapping] | None,
    columns: Mapping[str, Sequence] | None,
    key: str | None,
    all_columns: Sequence[str] | None = None,
    *,
    setting: str = "dataflex.domain_key",
    where: str = "",
    data: str = "the training set",
    row_name: Callable[[int], str] = "row {}".format,
) -> tuple[list[str], str]:
    """(each row's domain, the column used), read from the column ``key`` (dotted for
    nested fields; None: the first of `DEFAULT_DOMAIN_COLUMNS` any row has): one rule on
    every host. ``columns`` (name -> values) is a fast path for ``rows``; ``all_columns``,
    ``setting``, ``where``, ``data`` and ``row_name`` only shape the error messages.

    Raises:
        ConfigError: the column is not in the dataset, or some rows lack it.
    """

    def read(name: str) -> list | None:
        top, _, rest = name.partition(".")
        if columns is not None:
            if top not in columns:
                return None
            values = list(columns[top])
            return values if not rest else [get_path(v, rest) for v in values]
        return [get_path(r, name) for r in rows]

    for name in (key,) if key is not None else DEFAULT_DOMAIN_COLUMNS:
        values = read(name)
        if values is not None and any(v is not None for v in values):
            missing = [i for i, v in enumerate(values) if v is None]
            if missing:
                raise ConfigError(
                    f"{where}{setting}: {len(missing)} of {len(values)} rows have no {name!r} "
                    f"(first: "
                    f"{row_name(missing[0])}); every row needs the domain column"
                )
            return [str(v) for v in values], name
    if all_columns is None:
        all_columns = (
            list(columns)
            if columns is not None
            else list(dict.fromkeys(k for r in (rows or [])[:1000] for k in r))
        )
    listed = ", ".join(map(repr, all_columns)) or "none"
    if key is not None:
        raise ConfigError(
            f"{where}{setting}: {key!r} is not a column of {data} "
            f"(columns: {listed}); set {setting} to the column that holds each prompt's domain"
        )
    raise ConfigError(
        f"{where}{setting}: {data} has neither "
        f"{' nor '.join(map(repr, DEFAULT_DOMAIN_COLUMNS))} (columns: {listed}); "
        f"set {setting} to the column that holds each prompt's domain"
    )


def read_rows(path: str | Path, split: str | None = None) -> list[dict[str, Any]]:
    """Rows of a ``.jsonl``, ``.json`` (a list of objects) or ``.parquet`` file, or of a
    directory written by HF ``datasets``' ``save_to_disk`` (see `read_saved`).
    ``split``: of a ``DatasetDict`` directory. ConfigError (naming the path) for anything
    unreadable or empty.
    """
    p = Path(path)
    if p.is_dir():
        rows = read_saved(p, split)
    elif not p.is_file():
        raise ConfigError(f"dataset {str(p)!r}: no such file or directory")
    else:
        rows = _read_file(p)
    if not rows:
        raise ConfigError(f"dataset {str(p)!r}: no rows (the file or dataset is empty)")
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
    if bad is not None:
        raise ConfigError(f"dataset {str(p)!r}: row {bad} is not an object")
    return rows


def _read_file(p: Path) -> list[Any]:
    suffix = p.suffix.lower()
    if suffix not in (".jsonl", ".json", ".parquet"):
        raise ConfigError(
            f"dataset {str(p)!r}: unknown format {suffix!r}; use .parquet, .jsonl, .json or a "
            "save_to_disk directory"
        )
    if p.stat().st_size == 0:
        raise ConfigError(f"dataset {str(p)!r}: the file is empty")
    try:
        if suffix == ".jsonl":
            with p.open(encoding="utf-8") as f:
                return [json.loads(line) for line in f if line.strip()]
        if suffix == ".json":
            rows = json.loads(p.read_text(encoding="utf-8"))
            if not isinstance(rows, list):
                raise ConfigError(f"dataset {str(p)!r}: a .json dataset must be a list of rows")
            return rows
        return _read_parquet(p)
    except json.JSONDecodeError as e:
        raise ConfigError(f"dataset {str(p)!r}: invalid JSON ({e})") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"dataset {str(p)!r}: not UTF-8 text ({e.reason})") from e


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
    try:
        return pq.read_table(p).to_pylist()
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ... for a damaged file
        raise ConfigError(
            f"dataset {str(p)!r}: not a readable parquet file ({_first_line(e)})"
        ) from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def saved_splits(path: str | Path) -> list[str] | None:
    """The split names of a ``DatasetDict.save_to_disk`` directory, or None if ``path`` is
    not one."""
    p = Path(path) / DATASET_DICT_FILE
    if not p.is_file():
        return None
    try:
        splits = json.loads(p.read_text())["splits"]
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"dataset {str(p)!r}: not a datasets split list ({e})") from None
    return [str(s) for s in splits]


def read_saved(path: str | Path, split: str | None = None) -> list[dict[str, Any]]:
    """Rows of a ``save_to_disk`` directory (``split``: required for a ``DatasetDict``),
    read with ``datasets`` when installed, else with pyarrow from the files ``state.json``
    lists, in order. ConfigError: not such a directory, a bad split, unreadable files.
    """
    p = Path(path)
    splits = saved_splits(p)
    if splits is not None:
        if split is None or split not in splits:
            what = "choose a split" if split is None else f"no split {split!r}"
            raise ConfigError(f"dataset {str(p)!r}: {what}; splits there: {', '.join(splits)}")
        p = p / split
    if not (p / STATE_FILE).is_file():
        raise ConfigError(
            f"dataset {str(p)!r}: a directory, but not one written by datasets' save_to_disk "
            f"(no {STATE_FILE} or {DATASET_DICT_FILE})"
        )
    try:
        if available("datasets"):
            import datasets

            return datasets.load_from_disk(str(p)).to_list()
        return _read_arrow_shards(p)
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f"dataset {str(p)!r}: cannot read it ({_first_line(e)})") from None


def _read_arrow_shards(p: Path) -> list[dict[str, Any]]:
    """The rows of a save_to_disk ``Dataset`` directory, read with pyarrow alone."""
    try:
        import pyarrow as pa
    except ImportError:
        raise ConfigError(
            f"dataset {str(p)!r}: reading a save_to_disk directory needs pyarrow "
            '(pip install "dataflex-rl[tasks]") or datasets'
        ) from None
    state = json.loads((p / STATE_FILE).read_text())
    files = [f["filename"] for f in state["_data_files"]]
    rows: list[dict[str, Any]] = []
    for name in files:
        with pa.memory_map(str(p / name)) as source:
            rows.extend(pa.ipc.open_stream(source).read_all().to_pylist())
    return rows


def content_sha256(path: str | Path) -> str:
    """SHA-256 of a dataset's content: a file's bytes, or for a directory every file's
    relative path and bytes, in path order (a renamed, added or changed shard changes it)."""
    p = Path(path)
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
    h = hashlib.sha256()
    for f in files:
        h.update((f.relative_to(p).as_posix() if f != p else "").encode() + b"\0")
        with f.open("rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()


def _columns(row: Mapping[str, Any]) -> list[str]:
    """The columns of a row, nested mappings as dotted paths one level down."""
    out = []
    for k, v in row.items():
        out.append(str(k))
        if isinstance(v, Mapping):
            out.extend(f"{k}.{sub}" for sub in v)
    return out


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


def _sources(path: PathLike | Sequence[PathLike]) -> list[Path]:
    """One path or a list of paths, as a non-empty list."""
    paths = [path] if isinstance(path, (str, Path)) else list(path)
    if not paths:
        raise ConfigError("dataset: an empty list of files")
    return [Path(p) for p in paths]


def load_problems(
    path: PathLike | Sequence[PathLike],
    domain_key: str | None = None,
    *,
    prompt_column: str = "prompt",
    answer_column: str = "reward_model.ground_truth",
    limit: int | None = None,
    split: str | None = None,
) -> dict[str, list[Problem]]:
    """Problems of verl-schema file(s) ``path``, per domain, in file order.

    Chat prompts are joined into ``prompt`` (blank-line separated) and kept in
    ``extra["messages"]``; a list ground truth gives ``answer`` (first) and
    ``extra["answers"]``; a repeated prompt keeps its first row; ``extra["row"]`` names the
    source row. ``domain_key`` as `domain_column`; ``limit``: rows per domain.

    Raises:
        ConfigError: missing file or column, or a row without a required column.
    """
    return _load_problems(path, domain_key, prompt_column, answer_column, limit, split)[0]


def _load_problems(
    path: PathLike | Sequence[PathLike],
    domain_key: str | None,
    prompt_column: str,
    answer_column: str,
    limit: int | None,
    split: str | None,
    data: str = "the training set",
) -> tuple[dict[str, list[Problem]], str]:
    """`load_problems` (of ``data``, for messages), and the domain column it used."""
    sources = _sources(path)
    rows: list[tuple[Path, int, dict]] = [
        (source, i, row) for source in sources for i, row in enumerate(read_rows(source, split))
    ]
    named = str(sources[0]) if len(sources) == 1 else [str(s) for s in sources]
    domains, used = domain_column(
        [row for _, _, row in rows],
        None,
        domain_key,
        list(dict.fromkeys(c for _, _, row in rows[:1000] for c in _columns(row))),
        setting="tasks.domain_key",
        where=f"dataset {named!r}: ",
        data=data,
        row_name=lambda k: f"{rows[k][0]} row {rows[k][1]}",
    )
    pools: dict[str, list[Problem]] = {}
    seen: dict[str, set[str]] = {}
    duplicates = 0
    for (source, i, row), domain in zip(rows, domains):
        where = f"dataset {str(source)!r}"
        raw_prompt = get_path(row, prompt_column, _MISSING)
        if raw_prompt is _MISSING or raw_prompt is None:
            raise ConfigError(
                f"{where}: row {i} has no prompt column {prompt_column!r}; columns "
                f"present: {', '.join(_columns(row))}"
            )
        truth = get_path(row, answer_column, _MISSING)
        if truth is _MISSING or truth is None:
            raise ConfigError(
                f"{where}: row {i} has no ground-truth column {answer_column!r}; columns "
                f"present: {', '.join(_columns(row))}"
            )
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
        extra["row"] = f"{source} row {i}"
        if messages is not None:
            extra["messages"] = messages
        if len(answers) > 1:
            extra["answers"] = answers
        pool.append(Problem(problem_key(domain, prompt), domain, prompt, answers[0], extra))
    if duplicates:
        log.info("%s: skipped %d rows repeating a prompt of their domain", path, duplicates)
    return pools, used


class LoadedDomain(Domain):
    """A domain whose problems come from a file; it verifies (``verifier``: a spec of
    `dataflex_rl.tasks.verifiers`) but cannot generate."""

    def __init__(self, name: str, verifier: Any = "exact") -> None:
        self.name = name  # type: ignore[misc]
        self.settings = {"verifier": verifier if not callable(verifier) else repr(verifier)}
        self._check: Callable[[str | None, str], float] = (
            verifier
            if callable(verifier)
            else build_verifier(verifier, f"verifiers.{name}", domain=name)
        )

    def sample(self, rng: random.Random) -> tuple[str, str]:
        raise ConfigError(
            f"domain {self.name!r} was loaded from a file and cannot generate new problems"
        )

    def charset(self) -> str:
        return ""

    def check_truth(self, problem: Problem) -> str | None:
        """Why ``problem``'s ground truth cannot be verified (None if it can)."""
        check = getattr(self._check, "check_truth", None)
        if check is None:
            return None
        answers = (problem.extra.get("answers") if problem.extra else None) or [problem.answer]
        return next((why for why in map(check, answers) if why is not None), None)

    def verify(self, problem: Problem, response: str | None) -> float:
        answers = (problem.extra.get("answers") if problem.extra else None) or [problem.answer]
        return 1.0 if any(float(self._check(response, a)) >= 1.0 for a in answers) else 0.0


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


def default_eval_split(path: PathLike | Sequence[PathLike]) -> str | None:
    """The held-out split of a ``DatasetDict`` training directory (``test``, else
    ``validation``), or None (not a DatasetDict, or neither split is there)."""
    paths = _sources(path)
    splits = saved_splits(paths[0]) if len(paths) == 1 and paths[0].is_dir() else None
    return next((s for s in EVAL_SPLITS if s in (splits or ())), None)


def load_dataset(
    path: PathLike | Sequence[PathLike],
    domain_key: str | None = None,
    *,
    eval_path: PathLike | Sequence[PathLike] | None = None,
    eval_fraction: float = 0.0,
    seed: int = 0,
    domains: Sequence[str] | None = None,
    verifier: Any = "exact",
    limit: int | None = None,
    prompt_column: str = "prompt",
    answer_column: str = "reward_model.ground_truth",
) -> TaskSet:
    """A `TaskSet` from verl-schema files: training pools and disjoint eval sets per domain.

    A ``DatasetDict`` directory gives its ``train`` split for training and its ``test``
    (else ``validation``) split for evaluation (see docs/datasets.md).

    Args:
        eval_path: held-out file(s); their prompts are removed from the training pools.
        eval_fraction: without ``eval_path``, hold out this fraction of each domain (by
            ``seed``).
        domains: keep only these, in this order (default: first appearance, or a mapping
            ``verifier``'s key order).
        verifier: one verifier spec, or a mapping domain -> spec naming every domain.
        limit: at most this many rows per domain and file.

    Raises:
        ConfigError: missing file or column, a domain without a verifier or a verifier
            without a domain, an uncheckable ground truth, bad fraction.
    """
    if not 0.0 <= eval_fraction < 1.0:
        raise ConfigError(f"eval_fraction must be in [0, 1), got {eval_fraction!r}")
    if eval_path is not None and eval_fraction:
        raise ConfigError("give either eval_path or eval_fraction, not both")
    train, used = _load_problems(path, domain_key, prompt_column, answer_column, limit, "train")
    held_out = (
        eval_path
        if eval_path is not None
        else path
        if not eval_fraction and default_eval_split(path) is not None
        else None
    )
    evals = (
        {}
        if held_out is None
        else _load_problems(
            held_out,
            used,
            prompt_column,
            answer_column,
            limit,
            default_eval_split(held_out),
            data=f"the held-out set (the training set's domains come from {used!r})",
        )[0]
    )
    found = list(dict.fromkeys([*train, *evals]))
    where = f"dataset {str(path)!r}"
    if isinstance(verifier, Mapping):
        undeclared = [d for d in found if d not in verifier]
        if undeclared:
            raise ConfigError(
                f"{where}: no verifier declared for domain(s) {undeclared}; domains found: "
                f"{found}. Declare one per domain (verifiers: {{{undeclared[0]}: KIND}}); "
                f"kinds: {', '.join(verifier_kinds())}, or 'module:attr'"
            )
        absent = [d for d in verifier if d not in found]
        if absent:
            raise ConfigError(
                f"verifiers: domain(s) {absent} are not in {str(path)!r}; domains found: "
                f"{found}.{suggest(absent[0], found)}"
            )
        if domains is None:
            domains = list(verifier)
    names = list(domains) if domains is not None else found
    unknown = [d for d in names if d not in found]
    if unknown:
        raise ConfigError(f"domains {unknown} are not in {str(path)!r} (domains there: {found})")
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
        v = verifier.get(d) if isinstance(verifier, Mapping) else verifier
        handlers[d] = LoadedDomain(d, v)
        for p in [*pool, *held]:
            why = handlers[d].check_truth(p)
            if why is not None:
                raise ConfigError(
                    f"{p.extra.get('row', where)}: {why}, but domain {d!r} is verified by "
                    f"{handlers[d].settings['verifier']!r}"
                )
    return TaskSet(tuple(names), train_out, eval_out, handlers)


def to_verl_rows(problems: Iterable[Problem], split: str = "train") -> list[dict[str, Any]]:
    """verl-schema rows for ``problems`` (``split`` goes to ``extra_info.split``)."""
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
                "extra_info": {"split": split, "index": i, "key": p.key, "domain": p.domain},
            }
        )
    return rows


def save_dataset(problems: Iterable[Problem], path: str | Path, split: str = "train") -> Path:
    """Write ``problems`` as verl-schema ``.jsonl`` or ``.parquet`` (needs pyarrow)."""
    return write_rows(to_verl_rows(problems, split), path)


def write_rows(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write ``rows`` as ``.jsonl`` or ``.parquet`` (needs pyarrow; ConfigError without it
    or for another suffix); parent folders are made."""
    p = Path(path)
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
        pq.write_table(pa.Table.from_pylist(list(rows)), p)
    else:
        raise ConfigError(f"{str(p)!r}: unknown format {p.suffix!r}; use .parquet or .jsonl")
    return p
