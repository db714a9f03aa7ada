"""A logistic probe on the policy's prompt representation: skip prompts never seen before."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

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
    its current weights. Once it has observed ``min_observed`` outcomes, a candidate whose
    predicted probability of a zero-variance group is ``threshold`` or more is skipped.

    Prompts with history go to ``revisits`` (default ``greso``, with its own parameters and
    state; null: the probe decides them too). A share ``audit`` of the skipped prompts of the
    plain batch (the ones skipping kept from generation, not over-drawn candidates) is
    generated anyway and not trained on: the outcomes of these prompts are the false-skip rate
    (``audit_informative / audit_groups``) and the probe's unbiased labels for the prompts it
    skips, so it keeps learning where it acts. Hosts: the embedded engine and TRL compute the
    representation (`dataflex_rl.hosts.common.representation`); TRL fills an exact batch and
    audits nothing; verl refuses the probe (its intake runs where no model is).

    Metrics of ``filter``: ``skipped`` (``skipped_probe`` by the probe, the rest by the
    revisit policy, whose metrics pass through), ``predicted_zero_variance`` (mean predicted
    probability over the candidates) and ``probe_ready`` (1 once it may skip).
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
        "skip when the predicted probability of a zero-variance group is at least this",
        gt=0.0,
        le=1.0,
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

    @property
    def feature_layer(self) -> int:
        return self.layer

    # ------------------------------------------------------------------ the probe
    @property
    def ready(self) -> bool:
        """Whether it has observed ``min_observed`` outcomes (and may skip)."""
        return self._observed >= self.min_observed and self._w is not None

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
        by_probe = decides & (q >= self.threshold) if self.ready else torch.zeros_like(skip)
        skip = skip | by_probe
        metrics.update(
            {
                "dataflex/prerollout/skipped": float(skip.sum()),
                "dataflex/prerollout/skipped_probe": float(by_probe.sum()),
                "dataflex/prerollout/predicted_zero_variance": float(q.mean()) if n else 0.0,
                "dataflex/prerollout/probe_ready": float(self.ready),
            }
        )
        return ~skip, metrics

    def audit_mask(self, skip: Tensor, generator: torch.Generator | None) -> Tensor | None:
        if self.audit <= 0.0:
            return None
        u = torch.rand(skip.shape[0], generator=generator, dtype=torch.float64)
        return skip & (u < self.audit)

    def _outcomes(self, batch: RolloutBatch) -> tuple[Tensor, Tensor]:
        """([K, H] features, [K] bool zero-variance) of the batch's groups whose features
        were drawn this step."""
        G = batch.num_groups
        present = batch.group_size > 0
        if batch.prompt_keys is None or not self._pending or not bool(present.any()):
            return torch.zeros(0, 0, dtype=torch.float64), torch.zeros(0, dtype=torch.bool)
        first = segment_min(torch.arange(batch.batch_size), batch.group_ids, G, empty=0)
        groups = present.nonzero().squeeze(1)
        get = self._pending.get
        rows = torch.tensor(
            [get(batch.prompt_keys[r], -1) for r in first[groups].tolist()], dtype=torch.int64
        )
        known = rows >= 0
        x = torch.cat(self._pending_x)[rows[known]]
        return x, (batch.group_std == 0)[groups][known]

    def observe_audit(self, batch: RolloutBatch, history: PromptHistory) -> None:
        x, zero = self._outcomes(batch)
        self.learn(x, zero, fit=False)  # fitted with the step's own outcomes in `observe`

    def observe(self, batch: RolloutBatch, history: PromptHistory) -> None:
        if self._revisit is not None:
            self._revisit.observe(batch, history)
        x, zero = self._outcomes(batch)
        self.learn(x, zero)
        self._pending, self._pending_x = {}, []

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
        if self._revisit is not None:
            self._revisit.load_state_dict(state["revisits"])
