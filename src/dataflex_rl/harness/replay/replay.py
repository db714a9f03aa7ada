"""Offline replay: re-run strategies on the rollouts a run logged (``dataflex-rl replay``).

`replay` rebuilds each step's `RolloutBatch` from a decision log's columns and calls each
strategy's ``decide`` (and ``filter_prompts``) step by step, so its state evolves as on these
rollouts. Without ``full_tokens`` per-token fields are rebuilt from per-response means (the
first-token advantage, ``log(prob_mean)`` else ``logprob_mean``, ``entropy_mean``): exact or
approximate as docs/replay.md says.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.spec import strategy_label
from dataflex_rl.core.strategy import Strategy
from dataflex_rl.hosts.common.decision_log import META_PREFIX, RESPONSES, SCHEMA_VERSION, STEPS


# ---------------------------------------------------------------------------- reading
@dataclass
class DecisionLogData:
    """A decision log in memory: numpy columns of the whole run, and its metadata."""

    folder: Path
    domains: tuple[str, ...]
    strategy: dict
    settings: dict
    host: str
    columns: dict[str, Any]  # response columns, numpy (prompt_key: a Python list)
    steps: dict[str, np.ndarray]  # step columns
    bounds: np.ndarray  # [S + 1] row offsets of each step in ``columns``

    @property
    def num_steps(self) -> int:
        return len(self.steps["step"])

    def batch(self, i: int) -> RolloutBatch:
        """The `RolloutBatch` of the i-th logged step (see the module doc for token fields)."""
        a, b = int(self.bounds[i]), int(self.bounds[i + 1])
        c = self.columns
        T = int(self.steps["max_length"][i])
        length = torch.from_numpy(c["length"][a:b])
        mask = torch.arange(T)[None, :] < length[:, None]
        maskf = mask.to(torch.float32)
        adv = lp = ent = None
        if "advantage_tokens" in c:
            adv = _scatter_tokens(c["advantage_tokens"], c["token_offsets"], a, b, mask)
            lp = _scatter_tokens(c["logprob_tokens"], c["token_offsets"], a, b, mask)
            if "entropy_tokens" in c:
                ent = _scatter_tokens(c["entropy_tokens"], c["token_offsets"], a, b, mask)
        else:
            if not np.isnan(c["advantage"][a:b]).all():
                adv = torch.from_numpy(c["advantage"][a:b])[:, None] * maskf
            per_row = c.get("prob_mean")
            per_row = np.log(per_row[a:b]) if per_row is not None else c["logprob_mean"][a:b]
            if not np.isnan(per_row).all():
                per_row = np.ascontiguousarray(per_row, dtype=np.float32)
                lp = torch.from_numpy(per_row)[:, None] * maskf
        if ent is None and "entropy_mean" in c and not np.isnan(c["entropy_mean"][a:b]).all():
            ent = torch.from_numpy(c["entropy_mean"][a:b])[:, None] * maskf
        if ent is not None and b > a and bool(torch.isnan(ent[mask]).all()):
            ent = None  # the host passed no entropies
        if adv is not None and b > a and bool(torch.isnan(adv[mask]).all()):
            adv = None  # the host logged no advantages (NaN on every valid token)
        per_response, keys = {}, c["prompt_key"]
        flag = self.steps.get("per_response_advantages")
        if flag is not None and bool(flag[i]) and not np.isnan(c["advantage"][a:b]).all():
            # the host passed its per-response values: pass the logged ones (exact) the same
            # way, so the decision reads what the host's did (also when the host had no token
            # advantages and the log's token columns hold none)
            adv_r = torch.from_numpy(c["advantage"][a:b])
            per_response = {"response_advantages": adv_r, "response_lengths": length}
        return RolloutBatch(
            rewards=torch.from_numpy(c["reward"][a:b]),
            response_mask=mask,
            group_ids=torch.from_numpy(c["group"][a:b]),
            domain_ids=torch.from_numpy(c["domain"][a:b]),
            domains=self.domains,
            advantages=adv,
            old_log_probs=lp,
            prompt_keys=None if keys is None else tuple(keys[a:b]),
            is_padding=torch.from_numpy(c["is_padding"][a:b]),
            step=int(self.steps["step"][i]),
            entropies=ent,
            micro_batch_ids=_micro_batches(c, a, b),
            **per_response,
        )

    def logged(self, i: int) -> dict[str, np.ndarray]:
        """The decision the host applied at the i-th logged step."""
        a, b = int(self.bounds[i]), int(self.bounds[i + 1])
        c = self.columns
        nxt = np.array([self.steps[f"next_{d}"][i] for d in self.domains])
        return {
            "keep": c["keep"][a:b],
            "kept_tokens": c["kept_tokens"][a:b] if "kept_tokens" in c else None,
            "weight": c["weight"][a:b],
            "decision_advantage": c["decision_advantage"][a:b],
            "next": nxt,
        }


def _micro_batches(c: dict, a: int, b: int) -> torch.Tensor | None:
    """[b - a] the logged micro-batch ids of rows a..b (None: the host gave none)."""
    mb = c.get("micro_batch")
    if mb is None or b == a or bool((mb[a:b] < 0).any()):
        return None
    return torch.from_numpy(mb[a:b])


def _scatter_tokens(
    values: np.ndarray, offsets: np.ndarray, a: int, b: int, mask: torch.Tensor
) -> torch.Tensor:
    """[B, T] tensor holding rows a..b's logged valid-token values, right-aligned to ``mask``."""
    out = torch.zeros(mask.shape, dtype=torch.float32)
    out[mask] = torch.from_numpy(values[offsets[a] : offsets[b]])
    return out


def resolve_log_dir(path: str | Path) -> Path:
    """A log folder, or a run folder holding one under ``decisions/``."""
    p = Path(path)
    if (p / RESPONSES).is_dir():
        return p
    if (p / "decisions" / RESPONSES).is_dir():
        return p / "decisions"
    raise ConfigError(
        f"{p}: no decision log here (expected {p}/{RESPONSES}/ or "
        f"{p}/decisions/{RESPONSES}/); enable it with decision_log.enabled: true "
        "(engine) or +dataflex.decision_log.enabled=true (verl)"
    )


def _meta(schema: pa.Schema, path: Path) -> dict[str, str]:
    raw = schema.metadata or {}
    meta = {
        k.decode()[len(META_PREFIX) :]: v.decode()
        for k, v in raw.items()
        if k.decode().startswith(META_PREFIX)
    }
    if "schema_version" not in meta:
        raise ConfigError(f"{path}: not a dataflex decision log (no schema version)")
    if int(meta["schema_version"]) > SCHEMA_VERSION:
        raise ConfigError(
            f"{path}: decision log schema {meta['schema_version']} is newer than "
            f"this dataflex-rl reads ({SCHEMA_VERSION}); upgrade dataflex-rl"
        )
    return meta


def _read_parts(folder: Path, table: str) -> tuple[pa.Table, dict[str, str]]:
    files = sorted((folder / table).glob("part-*.parquet"))
    if not files:
        raise ConfigError(
            f"{folder / table}: no part-*.parquet files (a run shorter than "
            "steps_per_file that crashed before its first file?)"
        )
    parts = [pq.read_table(f) for f in files]
    meta = _meta(parts[0].schema, files[0])
    return pa.concat_tables(
        [p.replace_schema_metadata(None) for p in parts], promote_options="permissive"
    ), meta


def read_log(path: str | Path) -> DecisionLogData:
    """Read a decision log folder (or a run folder with ``decisions/``) into memory."""
    folder = resolve_log_dir(path)
    resp, meta = _read_parts(folder, RESPONSES)
    if "discarded" in resp.column_names:  # generated, never decided on: not replayed
        resp = resp.filter(pc.invert(resp["discarded"]))
    steps_t, _ = _read_parts(folder, STEPS)
    domains = tuple(json.loads(meta["domains"]))
    steps = {name: steps_t[name].to_numpy(zero_copy_only=False) for name in steps_t.column_names}
    order = np.argsort(steps["step"], kind="stable")
    steps = {k: v[order] for k, v in steps.items()}
    step_col = resp["step"].to_numpy()
    if len(step_col) and np.any(np.diff(step_col) < 0):
        sort = np.argsort(step_col, kind="stable")
        resp = resp.take(pa.array(sort))
        step_col = step_col[sort]
    bounds = np.searchsorted(step_col, np.append(steps["step"], np.iinfo(np.int64).max))
    bounds[-1] = len(step_col)
    names = "group is_padding reward length advantage advantage_mean logprob_mean keep weight"
    optional = ("prob_mean", "entropy_mean", "micro_batch", "kept_tokens")
    names = [*names.split(), *(n for n in optional if n in resp.column_names)]
    cols: dict[str, Any] = {n: resp[n].to_numpy(zero_copy_only=False) for n in names}
    advantage = pc.fill_null(resp["decision_advantage"], math.nan)
    cols["decision_advantage"] = advantage.to_numpy(zero_copy_only=False)
    dom = pc.index_in(pc.cast(resp["domain"], pa.string()), value_set=pa.array(domains))
    cols["domain"] = dom.to_numpy(zero_copy_only=False).astype(np.int64)
    keys = resp["prompt_key"]
    if pa.types.is_dictionary(keys.type):  # files may differ: dictionary-encoded or plain
        keys = pc.cast(keys, keys.type.value_type)
    cols["prompt_key"] = None if keys.null_count == len(keys) else keys.to_pylist()
    if "advantage_tokens" in resp.column_names:
        token_cols = ["advantage_tokens", "logprob_tokens"]
        token_cols += ["entropy_tokens"] if "entropy_tokens" in resp.column_names else []
        for name in token_cols:
            lists = resp[name].combine_chunks()
            cols[name] = lists.flatten().to_numpy(zero_copy_only=False).astype(np.float32)
        cols["token_offsets"] = np.concatenate([[0], np.cumsum(cols["length"])])
    for name in ("group", "length"):
        cols[name] = cols[name].astype(np.int64, copy=False)
    for name, v in cols.items():  # Arrow's buffers are read-only; torch wants writable ones
        if isinstance(v, np.ndarray) and not v.flags.writeable:
            cols[name] = v.copy()
    strategy, settings = json.loads(meta["strategy"]), json.loads(meta.get("settings", "{}"))
    return DecisionLogData(
        folder, domains, strategy, settings, meta.get("host", "?"), cols, steps, bounds
    )


# ---------------------------------------------------------------------------- signals
def signal_notes(strategy: Strategy, log: DecisionLogData) -> list[str]:
    """What this strategy reads that the log holds only approximately, and the flag to set."""
    notes = []
    if strategy.feature_layer is not None:
        name = strategy.spec.prerollout.actuator.name
        notes.append(
            f"prerollout: {name} reads the policy's prompt representation, which the log does "
            "not hold: its skip decisions are not replayed (its skipped shares read 0); "
            "its decisions are in the run's metrics (dataflex/prerollout/*)"
        )
    logged_refill = isinstance(log.strategy, dict) and log.strategy.get("refill") is not None
    if strategy.refill_rounds or logged_refill:
        by = f" (the log was written by {log.strategy.get('name', '?')!r}, which refilled: its "
        by = by + "batches over-represent prompts that its selector keeps)" if logged_refill else ""
        discarded = int(np.nansum(log.steps.get("discarded_groups", np.zeros(0))))
        notes.append(
            "refill: replay re-decides on the groups the logged run decided on (on the engine, "
            "every group of each step up to the last one it needed, refill rounds included; on "
            "TRL, the assembled batch), so a selector's keep mask replays exactly; it cannot "
            "redo the refill itself: which prompts a strategy would have drawn and generated "
            "to replace what it drops needs new generations"
            + by
            + (
                f". The log's {discarded} discarded groups (generated, not trained on) carry "
                "no decision on the update: replay leaves them out (they count in the "
                "generation cost, steps.discarded_*)"
                if discarded
                else ""
            )
        )
    logged_cur = isinstance(log.strategy, dict) and log.strategy.get("curriculum") is not None
    if "curriculum" in strategy.parts or logged_cur:
        name = (
            strategy.spec.curriculum.actuator.name
            if "curriculum" in strategy.parts
            else "the logged run's curriculum"
        )
        by = (
            f" (the log was written by {log.strategy.get('name', '?')!r}, which had a "
            "curriculum: its batches over-represent prompts whose estimated pass rate was near "
            "its target)"
            if logged_cur
            else ""
        )
        notes.append(
            f"curriculum: {name} chooses which prompts of each domain are drawn, before "
            "generation; replay cannot redo draws: it re-decides on the prompts the logged "
            "run drew and generated (which prompts a curriculum would have drawn needs new "
            "generations), so only the strategy's other mechanisms are replayed, and its "
            "prompt history learns from the logged batches. The logged run's targets and "
            "drawn prompts' mean estimated pass rates are steps.curriculum_target and "
            "steps.curriculum_drawn_pass_rate" + by
        )
    logged_rollouts = isinstance(log.strategy, dict) and log.strategy.get("rollouts") is not None
    if strategy.rollouts is not None or logged_rollouts:
        mode = (
            strategy.rollouts.mode
            if strategy.rollouts is not None
            else log.strategy["rollouts"].get("mode", "?")
        )
        by = (
            f" (the log was written by {log.strategy.get('name', '?')!r}, whose per-prompt "
            "budgets chose the responses it logged)"
            if logged_rollouts
            else ""
        )
        notes.append(
            f"rollouts: {mode} sets how many responses each prompt gets, during generation; "
            "replay cannot redo it (more responses of a prompt need new generations): it "
            "re-decides on the responses the logged run trained on, so only the strategy's "
            "other mechanisms are replayed. The logged run's rounds and responses per prompt "
            "are steps.rollouts_*" + by
        )
    full = bool(log.settings.get("full_tokens"))
    c = log.columns
    for mech, (scorer, actuator) in strategy.parts.items():
        for comp in (scorer, actuator):
            reads = getattr(comp, "requires", ()) if comp is not None else ()
            name = type(comp).__name__
            if "old_log_probs" in reads and not full:
                if "prob_mean" in c:
                    notes.append(
                        f"{mech}: {name} reads per-token probabilities; the log has "
                        "each response's mean (token_prob_mean), so kept sets and "
                        "per-response weights replay exactly up to float rounding, "
                        "token weights within a response do not (log them with "
                        "decision_log.full_tokens: true)"
                    )
                else:
                    notes.append(
                        f"{mech}: {name} reads per-token probabilities; the log has "
                        "only each response's mean log-prob, so per-response weights "
                        "are approximate (exp of the mean log-prob). Set "
                        "decision_log.token_prob_mean: true (per-response weights) "
                        "or decision_log.full_tokens: true (token weights)"
                    )
            if "entropies" in reads and not full:
                notes.append(
                    f"{mech}: {name} reads per-token entropies; the log has each "
                    "response's mean entropy only, so a response's tokens are kept or "
                    "dropped together and the token choices are not the run's (log them "
                    "with decision_log.full_tokens: true)"
                )
            if "micro_batch_ids" in reads and (
                "micro_batch" not in c or bool((c["micro_batch"] < 0).any())
            ):
                notes.append(
                    f"{mech}: {name} takes its quantile per loss micro-batch, which the "
                    "log does not hold: replay pools the whole step instead"
                )
            if "advantages" in reads and not full:
                valid = (c["length"] > 0) & np.isfinite(c["advantage"])
                a, m = c["advantage"][valid], c["advantage_mean"][valid]
                if np.any(np.abs(a - m) > 1e-5 * np.maximum(1.0, np.abs(a))):
                    notes.append(
                        f"{mech}: {name} reads advantages, which vary over the tokens "
                        "of a response in this log; replay uses the first token's "
                        "value. Set decision_log.full_tokens: true"
                    )
    return notes


def check_signals(label: str, strategy: Strategy, log: DecisionLogData) -> None:
    """ConfigError, before replaying, for a strategy reading entropies the log lacks."""
    ent = log.columns.get("entropy_mean")
    if "entropies" in strategy.reads and (ent is None or bool(np.isnan(ent).all())):
        raise ConfigError(
            f"replay: strategy {label!r} reads per-token entropies, which this log does not "
            "hold (the logged run's strategy did not read them, so its host did not compute "
            "them); replay it on the log of a run whose strategy reads entropies"
        )


# ---------------------------------------------------------------------------- replay
@dataclass
class ReplayResult:
    """Per-step rows, overall figures per strategy and pairwise agreement."""

    log: DecisionLogData
    strategies: list[str]
    rows: list[dict] = field(default_factory=list)  # one per (strategy, step)
    overall: dict[str, dict] = field(default_factory=dict)
    pairwise: list[dict] = field(default_factory=list)
    notes: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def steps_per_second(self) -> float:
        """Logged steps replayed per second, all strategies together."""
        return self.log.num_steps / self.seconds if self.seconds > 0 else math.inf


def strategies_with_overrides(specs: Sequence[Any], dotted: Sequence[str]) -> list[Any]:
    """Each strategy of ``specs`` expanded to its full mapping with the ``KEY=VALUE``
    ``overrides`` set, checked like a strategy file (ConfigError names the override); without
    overrides ``specs`` as it is."""
    from dataflex_rl.core.config import with_overrides
    from dataflex_rl.core.spec import StrategyFile, parse_strategy

    if not dotted:
        return list(specs)

    out = []
    for spec in specs:
        label = strategy_label(spec)
        where = f"strategy {label}"
        data = {**parse_strategy(spec, where).to_dict(), "name": label}

        def build(data: dict, _: list[str], where: str = where) -> dict:
            parse_strategy(data, where)
            return data

        try:
            out.append(with_overrides(data, dotted, StrategyFile, where, build))
        except ConfigError as e:
            if len(specs) == 1:
                raise
            raise ConfigError(f"{where}: {e}") from e
    return out


def build_for_log(spec: Any, log: DecisionLogData) -> Strategy:
    """The strategy bound as the logging host bound its own."""
    s = log.settings
    return Strategy(
        spec,
        domains=log.domains,
        advantage_estimator=s.get("advantage_estimator", "grpo"),
        norm_adv_by_std=bool(s.get("norm_adv_by_std", True)),
        adv_eps=float(s.get("adv_eps", 1e-6)),  # logs before it was recorded: 1e-6
    )


def replay(
    log: DecisionLogData, specs: Sequence[Any], *, labels: Sequence[str] | None = None
) -> ReplayResult:
    """Re-run every strategy in ``specs`` on ``log``, step by step: per step and strategy
    retention, weight ESS, proportions, skipped prompts, agreement with the logged decision
    (``exact`` for the run's own) and between strategies (docs/replay.md)."""
    import warnings

    from dataflex_rl.core.strategy import StrategyWarning

    labels = list(labels) if labels is not None else [strategy_label(s) for s in specs]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"replay: strategy labels must differ, got {labels}")
    strategies = [build_for_log(s, log) for s in specs]
    for lb, st in zip(labels, strategies):
        check_signals(lb, st, log)
    res = ReplayResult(
        log, labels, notes={lb: signal_notes(st, log) for lb, st in zip(labels, strategies)}
    )
    seed = int(log.settings.get("prerollout_seed", 0))
    gens = [torch.Generator().manual_seed(seed) for _ in strategies]
    S, N, D = log.num_steps, int(log.bounds[-1]), len(log.domains)
    active = np.zeros(N, dtype=bool)
    out = {
        lb: {
            "own": st.spec.to_dict() == log.strategy,
            "keep": np.zeros(N, dtype=bool),
            "weight": np.zeros(N, dtype=np.float32),
            "skip": np.zeros(N, dtype=bool),
            "exact": np.zeros(S, dtype=bool),
            "updated": np.zeros(S, dtype=bool),
            "target": np.full((S, D), np.nan),
        }
        for lb, st in zip(labels, strategies)
    }
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StrategyWarning)
        for i in range(S):
            a, b = int(log.bounds[i]), int(log.bounds[i + 1])
            batch = log.batch(i)
            logged = log.logged(i)
            active[a:b] = batch.active_mask.numpy()
            for lb, st, gen in zip(labels, strategies, gens):
                o = out[lb]
                skip = _skipped_groups(st, batch, gen)
                d = st.decide(batch)
                o["keep"][a:b] = d.keep_mask.numpy()
                o["weight"][a:b] = d.weights_per_response.numpy()
                if skip is not None:
                    o["skip"][a:b] = skip[batch.group_ids.numpy()]
                o["exact"][i] = _identical(d, logged)
                o["updated"][i] = d.proportions is not None
                if st.proportions is not None:
                    o["target"][i] = st.proportions.numpy()
    res.seconds = time.perf_counter() - t0
    res.rows, res.overall = _figures(log, labels, out, active)
    res.pairwise = _pairwise(log, labels, out, active)
    return res


def _skipped_groups(st: Strategy, batch: RolloutBatch, gen: torch.Generator) -> np.ndarray | None:
    """[G] bool: groups whose prompt the pre-rollout policy would not have generated."""
    G = batch.num_groups
    if "prerollout" not in st.parts or batch.prompt_keys is None or G == 0:
        return None
    if st.feature_layer is not None:  # the log holds no prompt representations
        return None
    first = torch.full((G,), batch.batch_size, dtype=torch.int64).scatter_reduce_(
        0, batch.group_ids, torch.arange(batch.batch_size), "amin"
    )
    keep, _ = st.filter_prompts([batch.prompt_keys[i] for i in first.tolist()], batch.step, gen)
    return (~keep).numpy()


def _identical(d, logged: dict) -> bool:
    """Keep mask, tokens in the loss per row, weights, recomputed advantages and mixer update
    bit-identical to the log."""
    adv = d.advantages_per_response
    adv = np.full(len(logged["keep"]), np.nan) if adv is None else adv.numpy()
    nxt = np.full(len(logged["next"]), np.nan) if d.proportions is None else d.proportions.numpy()
    tokens = logged["kept_tokens"]
    return bool(
        np.array_equal(d.keep_mask.numpy(), logged["keep"])
        and (tokens is None or np.array_equal(d.loss_mask.sum(1).numpy(), tokens))
        and np.array_equal(d.weights_per_response.numpy(), logged["weight"])
        and np.array_equal(
            adv.astype(np.float64), logged["decision_advantage"].astype(np.float64), equal_nan=True
        )
        and np.array_equal(nxt, logged["next"], equal_nan=True)
    )


def _seg(x: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """[S] sums of ``x`` over each step's rows (empty steps: 0)."""
    x = x.astype(np.float64)
    c = np.concatenate([[0.0], np.cumsum(x)])
    return c[bounds[1:]] - c[bounds[:-1]]


def _seg_jaccard(a: np.ndarray, b: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    inter, union = _seg(a & b, bounds), _seg(a | b, bounds)
    return np.where(union > 0, inter / np.maximum(union, 1), 1.0)


def _seg_corr(x: np.ndarray, y: np.ndarray, m: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """[S] Pearson correlation of x and y over each step's rows where ``m``: 1 for two equal
    constant vectors, NaN when one alone is constant."""
    x, y = np.where(m, x, 0.0).astype(np.float64), np.where(m, y, 0.0).astype(np.float64)
    n = np.maximum(_seg(m, bounds), 1)
    mx, my = _seg(x, bounds) / n, _seg(y, bounds) / n
    vx = np.maximum(_seg(x * x, bounds) / n - mx * mx, 0.0)
    vy = np.maximum(_seg(y * y, bounds) / n - my * my, 0.0)
    cov = _seg(x * y, bounds) / n - mx * my
    tol = 1e-12 * np.maximum(1.0, np.maximum(mx * mx, my * my))
    cx, cy = vx <= tol, vy <= tol
    same = _seg(m & (x != y), bounds) == 0
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.clip(cov / np.sqrt(vx * vy), -1.0, 1.0)
    return np.where(cx & cy, np.where(same, 1.0, np.nan), np.where(cx | cy, np.nan, r))


def _figures(
    log: DecisionLogData, labels: list[str], out: dict, active: np.ndarray
) -> tuple[list[dict], dict[str, dict]]:
    """Per-step rows (strategy-major) and overall figures, for all steps at once."""
    bounds = log.bounds
    c = log.columns
    steps = log.steps["step"]
    lengths = c["length"].astype(np.float64)
    real = ~c["is_padding"]
    tokens = _seg(lengths * real, bounds)
    n_active = _seg(active, bounds)
    logged_keep = c["keep"] & active
    rows, overall = [], {}
    for lb in labels:
        o = out[lb]
        keep = o["keep"] & active
        w = np.where(active, o["weight"], 0.0).astype(np.float64)
        kept = _seg(keep, bounds)
        sq = _seg(w * w, bounds)
        ess = np.where(
            (sq > 0) & (n_active > 0),
            _seg(w, bounds) ** 2 / np.maximum(sq, 1e-300) / np.maximum(n_active, 1),
            0.0,
        )
        skipped_rows = o["skip"] & real
        groups = log.steps["groups"].astype(np.float64)
        skip_groups = _seg(skipped_rows & _first_of_group(c["group"], bounds), bounds)
        fig = {
            "retention": np.where(n_active > 0, kept / np.maximum(n_active, 1), 0.0),
            "ess_fraction": ess,
            "skip_rate": np.where(groups > 0, skip_groups / np.maximum(groups, 1), 0.0),
            "responses_saved": _seg(skipped_rows, bounds),
            "tokens_saved": _seg(lengths * skipped_rows, bounds),
            "jaccard_logged": _seg_jaccard(keep, logged_keep, bounds),
            "weight_corr_logged": _seg_corr(o["weight"], c["weight"], active, bounds),
            "weight_max_diff_logged": _seg_max(np.abs(o["weight"] - c["weight"]), bounds),
        }
        for i in range(len(steps)):
            row = {"strategy": lb, "step": int(steps[i]), "responses": int(n_active[i])}
            row.update(kept=int(kept[i]), tokens=int(tokens[i]))
            row.update({k: float(v[i]) for k, v in fig.items()})
            row["responses_saved"] = int(row["responses_saved"])
            row["tokens_saved"] = int(row["tokens_saved"])
            row["exact"] = bool(o["exact"][i]) if o["own"] else None
            row["mix_updated"] = bool(o["updated"][i])
            row.update({f"target_{d}": float(o["target"][i, k]) for k, d in enumerate(log.domains)})
            rows.append(row)
        saved, total_tokens = float(fig["tokens_saved"].sum()), float(tokens.sum())
        ov = {
            "steps": len(steps),
            "retention": float(kept.sum() / max(n_active.sum(), 1)),
            "ess_fraction": nanmean(ess),
            "skip_rate": nanmean(fig["skip_rate"]),
            "responses_saved": int(fig["responses_saved"].sum()),
            "tokens_saved": int(saved),
            "tokens_saved_fraction": saved / total_tokens if total_tokens else 0.0,
            "jaccard_logged": nanmean(fig["jaccard_logged"]),
            "weight_corr_logged": nanmean(fig["weight_corr_logged"]),
            "exact_steps": int(o["exact"].sum()) if o["own"] else None,
        }
        ov.update({f"target_{d}": nanmean(o["target"][:, k]) for k, d in enumerate(log.domains)})
        overall[lb] = ov
    return rows, overall


def _first_of_group(group: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """[N] bool: the first row of each group within its step."""
    first = np.ones(len(group), dtype=bool)
    first[1:] = group[1:] != group[:-1]
    first[bounds[:-1][bounds[:-1] < len(group)]] = True
    return first


def _seg_max(x: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    starts = bounds[:-1]
    nonempty = bounds[1:] > starts
    out = np.zeros(len(starts))
    if x.size and nonempty.any():
        out[nonempty] = np.maximum.reduceat(x, starts[nonempty])
    return out


def _pairwise(log: DecisionLogData, labels: list[str], out: dict, active: np.ndarray) -> list[dict]:
    rows = []
    for x, y in itertools.combinations(labels, 2):
        a, b = out[x], out[y]
        jac = _seg_jaccard(a["keep"] & active, b["keep"] & active, log.bounds)
        cor = _seg_corr(a["weight"], b["weight"], active, log.bounds)
        rows += [
            {"a": x, "b": y, "step": int(s), "jaccard": float(j), "weight_corr": float(c)}
            for s, j, c in zip(log.steps["step"], jac, cor)
        ]
    return rows


def nanmean(values) -> float:
    """The mean of the finite ``values`` (NaN without any)."""
    v = np.asarray(list(values), dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else math.nan
