"""The decision log: per step, the signals a strategy reads and the decision the host applied.

Every host writes it the same way (one call after ``strategy.decide``); ``dataflex-rl replay``
reads it. Columns and layout: docs/replay.md#what-is-logged. Files are Apache Parquet with
plain column types (``LOG_DIR/responses/part-<first step>.parquet``, one row per response;
``LOG_DIR/steps/...``, one row per step), each holding ``steps_per_file`` steps, written whole
(temporary name, then rename) once complete; every file's schema metadata carries
``dataflex.schema_version`` (`SCHEMA_VERSION`), the table name, the domains, the strategy
spec and the host's settings (JSON strings).
"""

from __future__ import annotations

import json
import math
import operator
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import Tensor

from dataflex_rl.core.rowops import first_valid_values, masked_row_sums

#: version of the columns above; readers refuse a newer major version (2: every generated
#: group, ``refill_round`` and ``discarded``; 3: ``staleness``, the steps' ``curriculum_*``,
#: ``rollouts_*`` and ``async_*`` columns)
SCHEMA_VERSION = 3
RESPONSES, STEPS = "responses", "steps"
#: prefix of the metadata keys in every file's schema
META_PREFIX = "dataflex."
#: pre-rollout counts copied from the host's step metrics (``dataflex/prerollout/<name>``)
PREROLLOUT_COUNTS = (
    "candidates",
    "candidates_skipped",
    "skipped",
    "tokens_saved_est",
    "skipped_first",
    "skipped_revisit",
    "skipped_probe",
    "audited",
    "audit_groups",
    "audit_informative",
)

#: curriculum figures of the step's draws copied from the host's step metrics
#: (``dataflex/curriculum/<name>``; NaN without a curriculum, or before it acts)
CURRICULUM_FIGURES = ("target", "drawn_pass_rate", "drawn_unseen")
#: per-prompt budget figures of the step copied from the host's step metrics
#: (``dataflex/rollouts/<name>``; NaN without a ``rollouts`` section)
ROLLOUT_FIGURES = (
    "rounds",
    "prompts_resampled",
    "generated",
    "trained",
    "per_prompt_min",
    "per_prompt_max",
)


def part_name(first_step: int) -> str:
    """File name of the part whose first step is ``first_step`` (sorts by step)."""
    return f"part-{first_step:09d}.parquet"


class DecisionLog:
    """Append-only Parquet writer of per-step signals and decisions.

    ``domains`` in id order (None: the first batch's); ``strategy_spec`` as plain data;
    ``full_tokens`` / ``token_prob_mean``: `DecisionLogConfig`; ``settings``: host facts
    replay needs (advantage estimator, ``norm_adv_by_std``, seeds), stored in the metadata.
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        domains: Sequence[str] | None,
        strategy_spec: Mapping,
        host: str,
        steps_per_file: int = 100,
        full_tokens: bool = False,
        token_prob_mean: bool = False,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        if steps_per_file < 1:
            raise ValueError(f"steps_per_file must be >= 1, got {steps_per_file}")
        self.folder = Path(folder)
        self.domains = None if domains is None else tuple(domains)
        self.steps_per_file = int(steps_per_file)
        self.full_tokens = bool(full_tokens)
        self.token_prob_mean = bool(token_prob_mean)
        self.metadata = {
            "schema_version": str(SCHEMA_VERSION),
            "host": host,
            "strategy": json.dumps(strategy_spec, default=str),
            "settings": json.dumps(
                {
                    "full_tokens": self.full_tokens,
                    "token_prob_mean": self.token_prob_mean,
                    **dict(settings or {}),
                },
                default=str,
            ),
        }
        self._responses: list[dict[str, Any]] = []
        self._steps: list[dict[str, Any]] = []
        #: seconds spent in `record` and in writing files (for overhead figures)
        self.seconds = 0.0

    @classmethod
    def from_config(
        cls,
        config,
        run_dir: str | Path,
        *,
        strategy,
        domains: Sequence[str] | None,
        host: str,
        seed: int,
        settings: Mapping[str, Any] | None = None,
    ) -> DecisionLog:
        """Build from a ``decision_log`` config section for a host's run (a relative
        ``config.dir`` is under ``run_dir``); the strategy's spec, advantage estimator, std
        normalization, ``adv_eps`` and ``seed`` go into the log's settings."""
        common = {
            "advantage_estimator": strategy.advantage_estimator,
            "norm_adv_by_std": strategy.norm_adv_by_std,
            "adv_eps": strategy.adv_eps,
            "seed": seed,
        }
        return cls(
            Path(run_dir) / config.dir,
            domains=domains,
            strategy_spec=strategy.spec.to_dict(),
            host=host,
            steps_per_file=config.steps_per_file,
            full_tokens=config.full_tokens,
            token_prob_mean=config.token_prob_mean,
            settings={**common, **(settings or {})},
        )

    # ------------------------------------------------------------------ per step
    def record(
        self,
        batch,
        decision,
        *,
        target: Tensor | None = None,
        metrics: Mapping[str, float] | None = None,
        rounds: Tensor | None = None,
        discarded: Sequence[tuple[int, Any, Tensor]] = (),
    ) -> None:
        """Log one step: ``batch`` (the `RolloutBatch` given to ``decide``) and its `Decision`,
        and the step's generated groups the decision did not see.

        Args:
            target: [D] proportions the batch was drawn at (None: unknown, logged as NaN).
            metrics: the host's step metrics; the pre-rollout counts are copied from them.
            rounds: [G] the generation (0: the step's first, r: refill round r) of each of
                ``batch``'s groups (None: all 0).
            discarded: (round, that generation's `RolloutBatch`, [its G] bool: its groups
                not in ``batch``) for each refill generation with groups the step generated
                and does not train on; logged with ``discarded`` set and no decision (not
                kept, weight 0), numbered after ``batch``'s groups.
        """
        t0 = time.perf_counter()
        if self.domains is None:
            self.domains = tuple(batch.domains)
        if tuple(batch.domains) != self.domains:
            raise ValueError(
                f"decision log: batch domains {batch.domains} differ from the log's {self.domains}"
            )
        first = _first_rows(batch)
        cols = self._response_columns(batch, decision, first)
        rnd = np.zeros(batch.num_groups, np.int32) if rounds is None else rounds.cpu().numpy()
        cols["refill_round"] = rnd.astype(np.int32)[cols["group"]]
        cols["discarded"] = np.zeros(batch.batch_size, dtype=bool)
        self._responses.append(cols)
        extra = self._discarded_columns(batch.num_groups, batch.step, discarded)
        self._responses += extra
        row = self._step_row(batch, decision, target, metrics or {}, cols, first)
        real = [~c["is_padding"] for c in extra]
        row["discarded_groups"] = sum(int(w.sum()) for _, _, w in discarded)
        row["discarded_responses"] = sum(len(c["step"]) for c in extra)
        row["discarded_tokens"] = sum(int(c["length"][r].sum()) for c, r in zip(extra, real))
        self._steps.append(row)
        if len(self._steps) >= self.steps_per_file:
            self.flush()
        self.seconds += time.perf_counter() - t0

    def _discarded_columns(
        self, offset: int, step: int, discarded: Sequence[tuple[int, Any, Tensor]]
    ) -> list[dict[str, Any]]:
        """The response columns of each generation's discarded groups (`record`), their
        groups numbered from ``offset`` on."""
        out = []
        for rnd, gen, which in discarded:
            which = which.cpu()
            if not bool(which.any()):
                continue
            if gen.step != step:
                raise ValueError(f"decision log: a step-{gen.step} generation in step {step}")
            rows = which[gen.group_ids.cpu()].numpy()
            cols = self._signal_columns(gen, _first_rows(gen))
            cols = {
                k: v[rows] if isinstance(v, np.ndarray) else v.filter(pa.array(rows))
                for k, v in cols.items()
            }
            renumber = np.cumsum(which.numpy()) - 1 + offset  # [G] new ids of kept-out groups
            offset += int(which.sum())
            R = int(rows.sum())
            cols["group"] = renumber[cols["group"]].astype(np.int64)
            cols["micro_batch"] = np.full(R, -1, np.int64)
            cols["keep"] = np.zeros(R, dtype=bool)
            cols["kept_tokens"] = np.zeros(R, np.int64)
            cols["weight"] = np.zeros(R, np.float32)
            cols["decision_advantage"] = None
            cols["refill_round"] = np.full(R, rnd, np.int32)
            cols["discarded"] = np.ones(R, dtype=bool)
            out.append(cols)
        return out

    def _response_columns(self, batch, decision, first: np.ndarray) -> dict[str, Any]:
        """The signal columns of ``batch`` and the decision's columns."""
        cols = self._signal_columns(batch, first)
        B = batch.batch_size
        mb = batch.micro_batch_ids
        cols["micro_batch"] = np.full(B, -1, np.int64) if mb is None else mb.cpu().numpy()
        cols["keep"] = decision.keep_mask.cpu().numpy()
        cols["kept_tokens"] = decision.loss_mask.sum(1).to(torch.int64).cpu().numpy()
        cols["weight"] = decision.weights_per_response.detach().to(torch.float32).cpu().numpy()
        a = decision.advantages_per_response
        cols["decision_advantage"] = (
            None if a is None else a.detach().to(batch.rewards.dtype).cpu().numpy()
        )
        return cols

    def _signal_columns(self, batch, first: np.ndarray) -> dict[str, Any]:
        """What ``batch`` holds, per response (every column but the decision's)."""
        B = batch.batch_size
        n = batch.response_length
        nf = n.clamp(min=1).to(torch.float32)
        cols: dict[str, Any] = {
            "step": np.full(B, batch.step, dtype=np.int64),
            "group": batch.group_ids.cpu().numpy(),
            "prompt_key": _prompt_keys(batch, first),
            "domain": pa.DictionaryArray.from_arrays(
                pa.array(batch.domain_ids.to(torch.int32).cpu().numpy()),
                pa.array(list(self.domains), type=pa.string()),
            ),
            "is_padding": batch.is_padding.cpu().numpy(),
            "reward": batch.rewards.detach().cpu().numpy(),
            "length": n.cpu().numpy(),
            # updates since the policy that generated the row (asynchronous training; 0)
            "staleness": (
                np.zeros(B, np.int64) if batch.staleness is None else batch.staleness.cpu().numpy()
            ),
        }
        if batch.response_advantages is not None:  # the host's per-response values: exact,
            # and no [B, T] read
            a = batch.response_advantages.detach()
            a = torch.where(n > 0, a, torch.zeros_like(a)).to(torch.float32).cpu().numpy()
            cols["advantage"], cols["advantage_mean"] = a, a.copy()
        elif batch.advantages is not None:
            sums = masked_row_sums(batch.advantages.detach(), batch.response_mask)
            first = first_valid_values(batch.advantages.detach(), batch.response_mask, n)
            first = torch.where(torch.isfinite(sums), first, sums)  # keep invalid rows invalid
            cols["advantage"] = first.to(torch.float32).cpu().numpy()
            cols["advantage_mean"] = (sums / nf).to(torch.float32).cpu().numpy()
        else:
            cols["advantage"] = cols["advantage_mean"] = np.full(B, np.nan, np.float32)
        if batch.old_log_probs is not None:
            sums = masked_row_sums(batch.old_log_probs.detach(), batch.response_mask)
            cols["logprob_mean"] = (sums / nf).to(torch.float32).cpu().numpy()
        else:
            cols["logprob_mean"] = np.full(B, np.nan, np.float32)
        if batch.entropies is not None:
            sums = masked_row_sums(batch.entropies.detach(), batch.response_mask)
            cols["entropy_mean"] = (sums / nf).to(torch.float32).cpu().numpy()
        else:
            cols["entropy_mean"] = np.full(B, np.nan, np.float32)
        if self.token_prob_mean:
            cols["prob_mean"] = _prob_mean(batch, nf)
        if self.full_tokens:
            offsets = pa.array(np.concatenate([[0], np.cumsum(n.cpu().numpy())]).astype(np.int32))
            for name, t in (
                ("advantage_tokens", batch.advantages),
                ("logprob_tokens", batch.old_log_probs),
                ("entropy_tokens", batch.entropies),
            ):
                values = (
                    t.detach()[batch.response_mask].to(torch.float32).cpu().numpy()
                    if t is not None
                    else np.full(int(n.sum()), np.nan, np.float32)
                )
                cols[name] = pa.ListArray.from_arrays(offsets, pa.array(values))
        return cols

    def _step_row(self, batch, decision, target, metrics, cols, first) -> dict[str, Any]:
        D = len(self.domains)
        G = batch.num_groups
        dom = cols["domain"].indices.to_numpy()
        groups = np.bincount(dom[first], minlength=D) / max(G, 1)
        nan = np.full(D, math.nan)
        tgt = nan if target is None else target.detach().to(torch.float64).cpu().numpy()
        nxt = (
            nan
            if decision.proportions is None
            else decision.proportions.detach().to(torch.float64).cpu().numpy()
        )
        real = ~cols["is_padding"]
        row: dict[str, Any] = {
            "step": batch.step,
            "responses": batch.batch_size,
            "groups": G,
            "max_length": int(batch.response_mask.shape[1]),
            "tokens": int(cols["length"][real].sum()),
            "kept": int(cols["keep"].sum()),
            "kept_tokens": int(cols["kept_tokens"].sum()),
            "renormalize": bool(decision.metrics.get("dataflex/select/renormalize")),
            "renormalize_tokens": bool(decision.metrics.get("dataflex/tokens/renormalize")),
            "recomputed": decision.advantages_per_response is not None,
            "per_response_advantages": batch.response_advantages is not None,
            "mix_updated": decision.proportions is not None,
            "decide_ms": float(decision.metrics.get("dataflex/time_ms", math.nan)),
        }
        for d, name in enumerate(self.domains):
            row[f"target_{name}"] = float(tgt[d])
            row[f"actual_{name}"] = float(groups[d])
            row[f"next_{name}"] = float(nxt[d])
        for key in PREROLLOUT_COUNTS:
            row[f"prerollout_{key}"] = float(metrics.get(f"dataflex/prerollout/{key}", math.nan))
        for key in CURRICULUM_FIGURES:
            row[f"curriculum_{key}"] = float(metrics.get(f"dataflex/curriculum/{key}", math.nan))
        for key in ROLLOUT_FIGURES:
            row[f"rollouts_{key}"] = float(metrics.get(f"dataflex/rollouts/{key}", math.nan))
        st = batch.staleness
        row["async_staleness_mean"] = (
            0.0 if st is None else float(st.float().mean()) if len(st) else 0.0
        )
        row["async_staleness_max"] = 0.0 if st is None else float(st.max()) if len(st) else 0.0
        return row

    # ------------------------------------------------------------------ files
    def _schema_metadata(self, table: str) -> dict[bytes, bytes]:
        meta = {**self.metadata, "table": table, "domains": json.dumps(list(self.domains))}
        return {f"{META_PREFIX}{k}".encode(): v.encode() for k, v in meta.items()}

    def flush(self) -> None:
        """Write the buffered steps as one file per table (nothing when the buffer is empty)."""
        if not self._steps:
            return
        t0 = time.perf_counter()
        first = int(self._steps[0]["step"])
        tables = [self._response_table(c) for c in self._responses]
        schema = _unify(tables).with_metadata(self._schema_metadata(RESPONSES))
        _write_atomic(
            self.folder / RESPONSES / part_name(first),
            pa.concat_tables([t.cast(schema) for t in tables]),
        )
        steps = pa.Table.from_pylist(self._steps)
        _write_atomic(
            self.folder / STEPS / part_name(first),
            steps.replace_schema_metadata(self._schema_metadata(STEPS)),
        )
        self._responses, self._steps = [], []
        self.seconds += time.perf_counter() - t0

    def _response_table(self, cols: dict[str, Any]) -> pa.Table:
        B = len(cols["step"])
        arrays = {}
        for name, v in cols.items():
            if v is None:  # no recomputed advantages this step: nulls of the reward's type
                v = pa.nulls(B, pa.from_numpy_dtype(cols["reward"].dtype))
            arrays[name] = v if isinstance(v, (pa.Array, pa.ChunkedArray)) else pa.array(v)
        return pa.table(arrays)

    def close(self) -> None:
        """Write what is buffered."""
        self.flush()

    def truncate(self, step: int) -> None:
        """Drop every logged step >= ``step`` (resuming from a checkpoint at ``step``)."""
        for table in (RESPONSES, STEPS):
            for path in sorted((self.folder / table).glob("part-*.parquet")):
                data = pq.read_table(path)
                keep = pa.compute.less(data["step"], step)
                if bool(pa.compute.all(keep).as_py()):
                    continue
                if not bool(pa.compute.any(keep).as_py()):
                    path.unlink()
                    continue
                _write_atomic(path, data.filter(keep))


def _write_atomic(path: Path, table: pa.Table) -> None:
    """Write ``table`` (one row group) to ``path`` via a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp, compression="lz4", row_group_size=max(table.num_rows, 1))
    os.replace(tmp, path)


def _unify(tables: list[pa.Table]) -> pa.Schema:
    """One schema for the buffered steps (a column of nulls takes the other steps' type)."""
    schema = tables[0].schema
    for t in tables[1:]:
        for i, f in enumerate(t.schema):
            if pa.types.is_null(schema.field(i).type) and not pa.types.is_null(f.type):
                schema = schema.set(i, f)
    return schema


def _first_rows(batch) -> np.ndarray:
    """[G] index of the first row of each group (group ids are dense)."""
    B, G = batch.batch_size, batch.num_groups
    return (
        torch.full((G,), B, dtype=torch.int64)
        .scatter_reduce_(0, batch.group_ids.cpu(), torch.arange(B), "amin")
        .numpy()
    )


def _prob_mean(batch, nf: Tensor) -> np.ndarray:
    """[B] mean token probability exp(old_log_prob) over valid tokens (NaN without them)."""
    if batch.old_log_probs is None:
        return np.full(batch.batch_size, np.nan, np.float32)
    p = torch.exp(batch.old_log_probs.detach()).clamp_(max=1.0)
    return (masked_row_sums(p, batch.response_mask) / nf).to(torch.float32).cpu().numpy()


def _prompt_keys(batch, first: np.ndarray) -> pa.Array:
    """The batch's prompt keys as a dictionary array: one dictionary entry per group."""
    B = batch.batch_size
    if batch.prompt_keys is None or B == 0:
        return pa.nulls(B, pa.string())
    G = batch.num_groups
    first = first.tolist()
    per_group = (
        operator.itemgetter(*first)(batch.prompt_keys) if G > 1 else (batch.prompt_keys[first[0]],)
    )
    try:
        dictionary = pa.array(list(per_group))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        dictionary = None
    if dictionary is None or dictionary.type not in (pa.string(), pa.int64()):
        dictionary = pa.array([str(k) for k in per_group], type=pa.string())
    # rows of one group share its key (prompt_keys is per response; groups share a prompt)
    return pa.DictionaryArray.from_arrays(
        pa.array(batch.group_ids.to(torch.int32).cpu().numpy()), dictionary
    )
