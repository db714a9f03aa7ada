"""A logistic probe on the policy's prompt representation: skip prompts never seen before."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from dataflex_rl.core.base import SKIP_POLICIES, SkipPolicy
from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.core.config import param
from dataflex_rl.core.history import PromptHistory
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.segment import segment_min

#: added to the running variance before the features are scaled
_VAR_EPS = 1e-8


def false_skip_bound(informative: int, n: int, confidence: float) -> float:
    """One-sided Clopper-Pearson upper bound on a rate from ``informative`` of ``n`` (1 when
    ``n`` is 0 or every one is informative): the rate p with P(Binomial(n, p) <= informative)
    = 1 - ``confidence``."""
    if n <= 0 or informative >= n:
        return 1.0
    from scipy import stats  # here, not at import: the verl plugin imports this module

    return float(stats.beta.ppf(confidence, informative + 1, n - informative))


def controlled_threshold(
    predicted: Tensor,
    informative: Tensor,
    target: float,
    confidence: float,
    floor: float = -math.inf,
) -> float:
    """The lowest skip threshold whose audited false-skip rate is bounded by ``target``.

    The smallest prediction t >= ``floor`` in ``predicted`` ([M] float64, the audit sample's
    predictions) such that, of the n entries with prediction >= t, k ``informative``,
    P(Binomial(n, target) <= k) <= 1 - ``confidence`` (the Clopper-Pearson bound <=
    ``target``); ``math.inf`` (skip nothing) when none passes. The bound is not monotone in
    t, so it is tested only at thresholds >= ``floor``, the ones that can be used.
    """
    if predicted.numel() == 0:
        return math.inf
    q = predicted.to(torch.float64).numpy()
    y = informative.to(torch.bool).numpy()
    order = np.argsort(-q, kind="stable")
    q, y = q[order], y[order]
    n = np.arange(1, len(q) + 1)
    k = np.cumsum(y)
    # a threshold t keeps every tie with it: only the last of a run of equal predictions
    last = np.append(q[1:] != q[:-1], True)
    from scipy import special  # here, not at import: the verl plugin imports this module

    passes = last & (q >= floor) & (special.bdtr(k, n, target) <= 1.0 - confidence)
    if not passes.any():
        return math.inf
    return float(q[np.flatnonzero(passes)[-1]])


def check_control(max_false_skip: float | None, audit: float, chooses: str) -> None:
    """ConfigError unless the false-skip control (``max_false_skip``) has audits to read."""
    if max_false_skip is not None and audit <= 0.0:
        raise ConfigError(
            f"max_false_skip: the false-skip control chooses its {chooses} from audited "
            "outcomes and needs audit > 0 (got audit 0); set max_false_skip: null to skip "
            "without it"
        )


def audit_draw(
    skip: Tensor,
    plain: Tensor,
    decided: Tensor | None,
    share: float,
    generator: torch.Generator | None,
) -> tuple[Tensor, list[int]]:
    """The audit's one draw over N candidates (u < ``share`` each): ([N] bool the skipped
    candidates audited, the control's sample: indices of the ``plain`` candidates the policy
    ``decided``, skipped or not; empty when ``decided`` is None)."""
    u = torch.rand(skip.shape[0], generator=generator, dtype=torch.float64)
    picked = u < share
    sample = [] if decided is None else (picked & plain & decided).nonzero().squeeze(1).tolist()
    return skip & picked, sample


def pop_sampled(sampled: dict, keys: list) -> tuple[list[int], list]:
    """(indices into ``keys``, their values) of the sampled prompts among ``keys``, removed
    from ``sampled``; a prompt generated twice in one batch counts its first group."""
    take, values = [], []
    for j, key in enumerate(keys):
        if key in sampled:
            take.append(j)
            values.append(sampled.pop(key))
    return take, values


@SKIP_POLICIES.register("probe")
@dataclass
class ProbeSkip(SkipPolicy):
    """``probe``: skip prompts predicted to give a zero-variance group, also on a first visit.

    The prediction is a logistic probe on the policy's prompt representation; a zero-variance
    group has all answers right, or all wrong.

    The host gives every candidate's representation: the policy model's hidden states after
    ``layer`` layers (0: its token embeddings), mean-pooled over the prompt's tokens; its
    forward-pass cost is counted (``probe_tokens``: prompt tokens x ``layer`` / layers of the
    model). The probe is a logistic regression on these features, scaled by their running mean
    and standard deviation, fitted online: after each step it adds the step's groups (label 1:
    the group came back zero-variance) to a memory of the ``memory`` most recent outcomes and
    takes ``iterations`` full-batch gradient steps (step size ``lr``, L2 penalty ``l2``) from
    its current weights. Once it has observed ``min_observed`` outcomes (it is *ready*), a
    candidate whose predicted probability q of a zero-variance group is at least the skip
    threshold is skipped: ``threshold``, or with ``max_false_skip`` (the default) the larger of
    ``threshold`` and the controlled threshold below.

    False-skip control (``max_false_skip``: the target false-skip rate). The audit sample is
    a uniform ``audit`` share of the probe's own decisions: every candidate of the plain batch
    the ready probe decides (first visits; with ``revisits`` null, all) draws u ~ U(0, 1) (the
    audit's draw), and u < ``audit`` puts it in the sample whatever the decision: skipped, it
    is audited (generated, not trained on); kept, it is generated and trained on as usual (no
    extra cost). Each sampled candidate's (q at the decision, whether its group came back
    informative) enters a table of the ``audit_memory`` most recent ones. After every step the
    threshold is recomputed from the table (`controlled_threshold`): for a candidate
    threshold t (each predicted q in the table), n(t) entries have q >= t and k(t) of them
    were informative; the one-sided Clopper-Pearson bound at ``confidence`` on the false-skip
    rate above t passes when P(Binomial(n(t), max_false_skip) <= k(t)) <= 1 - confidence; the
    controlled threshold is the lowest t that passes, and infinite (skip nothing) when none
    does, so it skips nothing until the table holds log(1 - confidence) / log(1 - target)
    entries (29 at the defaults) above the threshold. Since the sample is independent of the
    decision, k(t) / n(t) estimates the false-skip rate skipping at t would have had on the
    sampled decisions. Not covered: the choice of the lowest passing t among many (each
    bound holds for one t fixed in advance), and drift of the probe's predictions between a
    table entry's decision and today's. On a host that audits nothing (TRL) the table stays
    empty and the controlled probe skips nothing; ``max_false_skip: null`` skips at
    ``threshold``.

    Prompts with history go to ``revisits`` (default ``greso``, with its own parameters and
    state; null: the probe decides them too). A share ``audit`` of the skipped prompts of the
    plain batch (the ones skipping kept from generation, not over-drawn candidates) of every
    draw, refill rounds' included, is generated anyway and not trained on: the outcomes of these prompts are the false-skip rate
    (``audit_informative / audit_groups``) and the probe's unbiased labels for the prompts it
    skips, so it keeps learning where it acts. Hosts: the embedded engine and TRL compute the
    representation (`dataflex_rl.hosts.common.representation`); TRL generates only the batch
    it trains on and audits nothing; verl refuses the probe (its intake runs where no model is).

    Metrics of ``filter``: ``skipped`` (``skipped_probe`` by the probe, the rest by the
    revisit policy, whose metrics pass through), ``predicted_zero_variance`` (mean predicted
    probability over the candidates), ``probe_ready`` (1 once it may skip),
    ``probe_threshold`` (the skip threshold in use; 1 when the control allows no skip),
    ``probe_audit_sample`` (entries in the table) and ``probe_false_skip_bound`` (the bound
    above the threshold in use; 1 when it skips nothing).
    """

    reads_features: ClassVar[bool] = True
    paper: ClassVar[str] = (
        "a probe on the policy's own hidden states (POISE, arXiv 2605.07579) and prompt-only "
        "value prediction (PCL, arXiv 2510.01135); revisits as GRESO (arXiv 2506.02177)"
    )
    layer: int = param(
        0,
        "prompt representation: the policy's hidden states after this many layers, "
        "mean-pooled over the prompt (0: its token embeddings, no forward pass)",
        ge=0,
    )
    threshold: float = param(
        0.6,
        "skip when the predicted probability of a zero-variance group is at least this "
        "(with max_false_skip: the lowest skip threshold the control may set)",
        gt=0.0,
        le=1.0,
    )
    max_false_skip: float | None = param(
        0.1,
        "target false-skip rate: skip only above the lowest threshold whose audited "
        "false-skip rate has an upper confidence bound <= this (null: skip at threshold)",
        gt=0.0,
        lt=1.0,
    )
    confidence: float = param(
        0.95, "one-sided confidence of the false-skip bound (Clopper-Pearson)", gt=0.0, lt=1.0
    )
    audit_memory: int = param(
        2048, "most recent audit-sample outcomes the controlled threshold is chosen from", ge=1
    )
    audit: float = param(
        0.1,
        "share of the plain batch's skipped prompts generated anyway and not trained on "
        "(the false-skip audit; 0: none)",
        ge=0.0,
        le=1.0,
    )
    min_observed: int = param(128, "outcomes observed before the probe skips", ge=1)
    lr: float = param(0.5, "step size of the probe's gradient steps", gt=0.0, le=100.0)
    l2: float = param(0.01, "L2 penalty on the probe's weights", ge=0.0)
    iterations: int = param(
        10, "gradient steps on the remembered outcomes after each step", ge=1, le=10_000
    )
    memory: int = param(2048, "most recent outcomes the probe is fitted to", ge=1)
    revisits: str | dict | None = param(
        "greso",
        "skip policy of prompts with history: a name, or a mapping with 'name' and its "
        "parameters (null: the probe decides them too)",
        expect="a history skip policy's name, a mapping with 'name', or null",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self._revisit: SkipPolicy | None = None
        if self.revisits is not None:
            spec = {"name": self.revisits} if isinstance(self.revisits, str) else self.revisits
            if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
                raise ConfigError("revisits: expected a skip policy name or a mapping with 'name'")
            if spec["name"] == "probe":
                raise ConfigError("revisits: 'probe' cannot decide its own revisits; use null")
            cls = SKIP_POLICIES.get(spec["name"])
            params = {k: v for k, v in spec.items() if k != "name"}
            self._revisit = cls.from_config(params, "revisits")
            if self._revisit.feature_layer is not None:
                raise ConfigError(f"revisits: {spec['name']!r} reads features; use a history one")
            if getattr(self._revisit, "max_false_skip", None) is not None:
                raise ConfigError(
                    "revisits: the probe does not pass its audits on to the revisit policy, "
                    "whose false-skip control (max_false_skip) would then skip nothing; leave "
                    "it null there"
                )
        check_control(self.max_false_skip, self.audit, "threshold")
        self._reset()

    def _reset(self) -> None:
        self._w: Tensor | None = None  # [H] weights (None until the first features)
        self._b = torch.zeros((), dtype=torch.float64)
        self._n = 0  # outcomes seen by the running statistics
        self._mean: Tensor | None = None
        self._m2: Tensor | None = None
        self._x: Tensor | None = None  # [M, H] remembered features, oldest first
        self._y = torch.zeros(0, dtype=torch.float64)
        self._observed = 0
        # the candidates of the step being drawn: key -> row of their features
        self._pending_step = -1
        self._pending: dict = {}
        self._pending_x: list[Tensor] = []
        # the false-skip control: the audit sample's (prediction, informative), oldest first,
        # and the controlled threshold they give (inf: skip nothing)
        self._audit_q = torch.zeros(0, dtype=torch.float64)
        self._audit_informative = torch.zeros(0, dtype=torch.bool)
        self._controlled = math.inf
        # the last `filter` call (keys, predictions, decided by the probe) until `audit_mask`,
        # and this step's sampled candidates: key -> prediction, until their outcomes arrive
        self._round: tuple[list, Tensor, Tensor] | None = None
        self._sampled: dict = {}

    @property
    def feature_layer(self) -> int:
        return self.layer

    # ------------------------------------------------------------------ the probe
    @property
    def ready(self) -> bool:
        """Whether it has observed ``min_observed`` outcomes (and may skip)."""
        return self._observed >= self.min_observed and self._w is not None

    @property
    def skip_threshold(self) -> float:
        """The threshold in use: ``threshold``, or the larger of it and the controlled one
        (``math.inf``: skip nothing)."""
        if self.max_false_skip is None:
            return self.threshold
        return max(self.threshold, self._controlled)

    def _bound_in_use(self) -> float:
        """The false-skip bound over the table's entries above the threshold in use."""
        t = self.skip_threshold
        above = self._audit_q >= t
        return false_skip_bound(
            int((self._audit_informative & above).sum()), int(above.sum()), self.confidence
        )

    def _scaled(self, x: Tensor) -> Tensor:
        var = self._m2 / max(self._n, 1)
        return (x.to(torch.float64) - self._mean) / torch.sqrt(var + _VAR_EPS)

    def predict(self, features: Tensor) -> Tensor:
        """[N] float64 predicted probability of a zero-variance group (0.5 before any fit)."""
        if self._w is None:
            return torch.full((features.shape[0],), 0.5, dtype=torch.float64)
        return torch.sigmoid(self._scaled(features) @ self._w + self._b)

    def learn(self, features: Tensor, zero: Tensor, fit: bool = True) -> None:
        """Add outcomes ([K, H] features, [K] bool zero-variance) and, with ``fit``, take
        ``iterations`` gradient steps on the memory."""
        x = features.to(torch.float64)
        if x.shape[0]:
            H = x.shape[1]
            if self._w is None:
                self._w = torch.zeros(H, dtype=torch.float64)
                self._mean = torch.zeros(H, dtype=torch.float64)
                self._m2 = torch.zeros(H, dtype=torch.float64)
                self._x = torch.zeros(0, H, dtype=torch.float64)
            elif H != self._w.shape[0]:
                raise ValueError(f"probe: features have {H} columns, the probe {len(self._w)}")
            # running mean and sum of squared deviations (Chan et al.'s batch update)
            k, n = x.shape[0], self._n
            bmean = x.mean(0)
            delta = bmean - self._mean
            self._m2 = self._m2 + ((x - bmean) ** 2).sum(0) + delta**2 * (n * k / (n + k))
            self._mean = self._mean + delta * (k / (n + k))
            self._n = n + k
            self._x = torch.cat([self._x, x])[-self.memory :]
            self._y = torch.cat([self._y, zero.to(torch.float64)])[-self.memory :]
            self._observed += k
        if fit and self._w is not None and self._y.numel():
            z = self._scaled(self._x)
            y = self._y
            w, b = self._w, self._b
            for _ in range(self.iterations):
                g = torch.sigmoid(z @ w + b) - y
                w = w - self.lr * (z.T @ g / len(y) + self.l2 * w)
                b = b - self.lr * g.mean()
            self._w, self._b = w, b

    # ------------------------------------------------------------------ the skip policy
    def filter(
        self,
        history: PromptHistory,
        keys: list,
        step: int,
        generator: torch.Generator | None,
        features: Tensor | None = None,
    ) -> tuple[Tensor, dict]:
        n = len(keys)
        if features is None or features.shape[0] != n:
            got = None if features is None else tuple(features.shape)
            raise ValueError(f"probe: needs features [{n}, H] for {n} candidates, got {got}")
        if step != self._pending_step:
            self._pending_step, self._pending, self._pending_x = step, {}, []
        base = sum(x.shape[0] for x in self._pending_x)
        self._pending.update(zip(keys, range(base, base + n)))
        self._pending_x.append(features.detach().to(torch.float64))
        metrics: dict[str, float] = {}
        decides = torch.ones(n, dtype=torch.bool)
        skip = torch.zeros(n, dtype=torch.bool)
        if self._revisit is not None:
            seen = history.outcomes(keys).count > 0
            keep_r, metrics = self._revisit.filter(history, keys, step, generator)
            skip = seen & ~keep_r
            decides = ~seen
        q = self.predict(features)
        ready = self.ready
        by_probe = decides & (q >= self.skip_threshold) if ready else torch.zeros_like(skip)
        skip = skip | by_probe
        self._round = (list(keys), q, decides & ready)
        thr = self.skip_threshold
        metrics.update(
            {
                "dataflex/prerollout/skipped": float(skip.sum()),
                "dataflex/prerollout/skipped_probe": float(by_probe.sum()),
                "dataflex/prerollout/predicted_zero_variance": float(q.mean()) if n else 0.0,
                "dataflex/prerollout/probe_ready": float(ready),
            }
        )
        if self.max_false_skip is not None:
            metrics.update(
                {
                    "dataflex/prerollout/probe_threshold": min(thr, 1.0),
                    "dataflex/prerollout/probe_audit_sample": float(self._audit_q.numel()),
                    "dataflex/prerollout/probe_false_skip_bound": self._bound_in_use(),
                }
            )
        return ~skip, metrics

    def audit_mask(
        self, skip: Tensor, plain: Tensor, generator: torch.Generator | None
    ) -> Tensor | None:
        if self.audit <= 0.0:
            return None
        keys, q, decided = self._round or ([], None, None)
        if self.max_false_skip is None or len(keys) != skip.shape[0]:
            decided = None  # no control, or not the last filter's candidates: no sample
        audited, sample = audit_draw(skip, plain, decided, self.audit, generator)
        self._sampled.update((keys[j], float(q[j])) for j in sample)
        self._round = None
        return audited

    @staticmethod
    def _groups(batch: RolloutBatch) -> tuple[list, Tensor]:
        """(prompt keys, [K] bool zero-variance) of the batch's groups with responses."""
        present = batch.group_size > 0
        if batch.prompt_keys is None or not bool(present.any()):
            return [], torch.zeros(0, dtype=torch.bool)
        G = batch.num_groups
        first = segment_min(torch.arange(batch.batch_size), batch.group_ids, G, empty=0)
        groups = present.nonzero().squeeze(1)
        keys = [batch.prompt_keys[r] for r in first[groups].tolist()]
        return keys, (batch.group_std == 0)[groups]

    def _outcomes(self, batch: RolloutBatch) -> tuple[Tensor, Tensor]:
        """([K, H] features, [K] bool zero-variance) of the batch's groups whose features
        were drawn this step; sampled groups' outcomes go to the audit table."""
        keys, zero = self._groups(batch)
        if self._sampled and keys:
            take, q = pop_sampled(self._sampled, keys)
            if take:
                m = self.audit_memory
                self._audit_q = torch.cat([self._audit_q, torch.tensor(q, dtype=torch.float64)])
                self._audit_q = self._audit_q[-m:]
                self._audit_informative = torch.cat([self._audit_informative, ~zero[take]])[-m:]
        if not self._pending or not keys:
            return torch.zeros(0, 0, dtype=torch.float64), torch.zeros(0, dtype=torch.bool)
        get = self._pending.get
        rows = torch.tensor([get(key, -1) for key in keys], dtype=torch.int64)
        known = rows >= 0
        x = torch.cat(self._pending_x)[rows[known]]
        return x, zero[known]

    def observe_audit(self, batch: RolloutBatch, history: PromptHistory) -> None:
        x, zero = self._outcomes(batch)
        self.learn(x, zero, fit=False)  # fitted with the step's own outcomes in `observe`

    def observe(self, batch: RolloutBatch, history: PromptHistory) -> None:
        if self._revisit is not None:
            self._revisit.observe(batch, history)
        x, zero = self._outcomes(batch)
        self.learn(x, zero)
        self._pending, self._pending_x = {}, []
        self._round, self._sampled = None, {}
        if self.max_false_skip is not None:
            self._controlled = controlled_threshold(
                self._audit_q,
                self._audit_informative,
                self.max_false_skip,
                self.confidence,
                floor=self.threshold,
            )

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        def c(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.clone()

        return {
            "w": c(self._w),
            "b": self._b.clone(),
            "n": self._n,
            "mean": c(self._mean),
            "m2": c(self._m2),
            "x": c(self._x),
            "y": self._y.clone(),
            "observed": self._observed,
            "audit_q": self._audit_q.clone(),
            "audit_informative": self._audit_informative.clone(),
            # the controlled threshold (inf: skip nothing), a tensor: state trees hold finite
            # JSON numbers only
            "controlled": torch.tensor(self._controlled, dtype=torch.float64),
            "revisits": None if self._revisit is None else self._revisit.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self._reset()

        def c(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(torch.float64).clone()

        self._w, self._mean, self._m2, self._x = (c(state[k]) for k in ("w", "mean", "m2", "x"))
        self._b = state["b"].to(torch.float64).clone()
        self._n = int(state["n"])
        self._y = state["y"].to(torch.float64).clone()
        self._observed = int(state["observed"])
        self._audit_q = state["audit_q"].to(torch.float64).clone()
        self._audit_informative = state["audit_informative"].to(torch.bool).clone()
        self._controlled = float(state["controlled"])
        if self._revisit is not None:
            self._revisit.load_state_dict(state["revisits"])
