"""The conformance kit: one scripted rollout source drives the step of every host, and the
steps' traces are compared column by column (docs/conformance.md).

A `Script` stands in for the policy's sampler and the verifier, nothing else: each prompt
has a solve probability and response lengths drawn from its text, and the n-th generation of
a prompt in a run gets the same responses (rewards, lengths, per-token entropies and
log-probs) on every host. Everything between (draws, refill rounds, audits, assembly,
advantages, the decision, what the strategy observes) is the host's real code.

A `Recorder` wraps a `Driver`'s ``step`` and keeps, per step, what the issue of one step on
every host asks to compare: the prompts each generation drew (round by round, audits apart),
the groups the step trained on, the decision (keep mask, token keep mask, weights, the
advantages it used, proportions) and the figures of the draws, skips and refill rounds.
`compare` names every column in which two traces differ.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

#: solve probabilities a prompt's text picks from (all-wrong and all-right groups are common,
#: as on the tasks the tiny policy learns: refill and skip policies have work to do)
SOLVE = (0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 1.0)


@dataclass
class Outcome:
    """One prompt's G scripted responses."""

    rewards: list[float]
    lengths: list[int]  # valid tokens, EOS included (>= min_len)
    entropies: list[list[float]]  # per response, one per valid token
    log_probs: list[list[float]]


@dataclass
class Script:
    """The scripted rollout source (per-prompt solve probabilities and lengths, seeded).

    ``outcome(prompt)`` gives the responses of the next generation of ``prompt`` (its text):
    the n-th call for one text in a run is the same on every host that generates the same
    prompts in the same order."""

    seed: int = 0
    group_size: int = 4
    max_len: int = 6
    #: at least 3 tokens: a host that must tell responses apart by their token ids (TRL's
    #: scripted log-prob pass) codes a serial number in the first two
    min_len: int = 3
    seen: Counter = field(default_factory=Counter)

    def solve_prob(self, prompt: str) -> float:
        return SOLVE[random.Random(f"{self.seed}|p|{prompt}").randrange(len(SOLVE))]

    def outcome(self, prompt: str, responses: int | None = None) -> Outcome:
        """The next generation of ``prompt``: ``group_size`` responses (or ``responses``)."""
        n = self.seen[prompt]
        self.seen[prompt] += 1
        rng = random.Random(f"{self.seed}|o|{prompt}|{n}")
        p = self.solve_prob(prompt)
        G, T = responses or self.group_size, self.max_len
        rewards = [float(rng.random() < p) for _ in range(G)]
        lengths = [rng.randint(self.min_len, T) for _ in range(G)]
        # values on a 1/64 grid: float32 holds them exactly on every host
        entropies = [[rng.randint(1, 192) / 64 for _ in range(n_)] for n_ in lengths]
        log_probs = [[-rng.randint(0, 320) / 64 for _ in range(n_)] for n_ in lengths]
        return Outcome(rewards, lengths, entropies, log_probs)


def padded(rows: list[list[float]], T: int) -> torch.Tensor:
    """[B, T] float32, rows right-padded with 0."""
    out = torch.zeros(len(rows), T, dtype=torch.float32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.float32)
    return out


# ---------------------------------------------------------------------------- traces
@dataclass
class StepTrace:
    """What one step did, in host-neutral terms (prompts by their text)."""

    step: int
    rounds: list[list[str]]  # the prompts of each generation: the first, then refill rounds
    audited: list[str]
    trained: list[str]  # the assembled groups' prompts, in order
    keep: list[bool]  # per response of the assembled batch
    token_keep: list[list[int]] | None  # per response, the kept token positions
    weights: list[float]  # per response (mean over its valid tokens of the token weights)
    advantages: list[float]  # per response, what the update multiplies
    proportions: list[float] | None
    figures: dict[str, float]


#: the step figures every host reports alike (draws, skips, refill, decision)
FIGURES = (
    "dataflex/prerollout/candidates",
    "dataflex/prerollout/skipped",
    "dataflex/prerollout/candidates_skipped",
    "dataflex/prerollout/audited",
    "dataflex/prerollout/audit_groups",
    "dataflex/prerollout/audit_informative",
    "dataflex/refill/rounds",
    "dataflex/refill/prompts_drawn",
    "dataflex/refill/groups_kept",
    "dataflex/refill/groups_generated",
    "dataflex/refill/discarded",
    "dataflex/refill/full",
    "dataflex/rollouts/rounds",
    "dataflex/rollouts/prompts_resampled",
    "dataflex/rollouts/generated",
    "dataflex/rollouts/trained",
    "dataflex/rollouts/per_prompt_max",
    "dataflex/kept_group_fraction",
    "dataflex/kept_response_fraction",
    "dataflex/kept_token_fraction",
)


class Recorder:
    """Wraps ``driver.step`` and keeps a `StepTrace` per step; ``name(item)`` is a prompt's
    text (the host's items: problems, dataset rows, ...)."""

    def __init__(self, driver, name: Callable[[Any], str]) -> None:
        self.traces: list[StepTrace] = []
        self.name = name
        step = driver.step

        def recorded(host, n, s, **kw):
            out = step(host, n, s, **kw)
            self.traces.append(self.trace(out, s))
            return out

        driver.step = recorded

    def trace(self, out, step: int) -> StepTrace:
        d, b = out.decision, out.batch
        adv = d.advantages_per_response
        adv = b.advantage_per_response if adv is None else adv
        tk = d.token_keep_mask
        w = d.weights_per_token
        valid = b.response_mask.to(torch.float32)
        per_row = (w * valid).sum(1) / valid.sum(1).clamp(min=1)
        return StepTrace(
            step=step,
            rounds=[[self.name(i) for i in g.items] for g in out.generations],
            audited=[] if out.audit is None else [self.name(i) for i in out.audit.items],
            trained=[self.name(i) for i in _trained_items(out)],
            keep=d.keep_mask.tolist(),
            token_keep=None if tk is None else [r.nonzero().squeeze(1).tolist() for r in tk],
            weights=per_row.tolist(),
            advantages=adv.tolist(),
            proportions=None if d.proportions is None else d.proportions.tolist(),
            figures={k: float(out.metrics[k]) for k in FIGURES if k in out.metrics},
        )


def _trained_items(out) -> list:
    if out.groups is None:  # per-prompt budgets: a group per prompt of the first generation
        return list(out.generations[0].items)
    every = [i for g in out.generations for i in g.items]
    return [every[i] for i in out.groups.tolist()]


def compare(a: list[StepTrace], b: list[StepTrace], tol: float = 1e-5) -> list[str]:
    """Every column in which two runs' traces differ: ``"step s: column: a vs b"``."""
    diffs = []
    if len(a) != len(b):
        diffs.append(f"steps: {len(a)} vs {len(b)}")
    for x, y in zip(a, b):
        for col in StepTrace.__dataclass_fields__:
            u, v = getattr(x, col), getattr(y, col)
            if not _same(u, v, tol):
                diffs.append(f"step {x.step}: {col}: {_short(u)} vs {_short(v)}")
    return diffs


def _same(u, v, tol: float) -> bool:
    if isinstance(u, float) and isinstance(v, float):
        return (math.isnan(u) and math.isnan(v)) or abs(u - v) <= tol * max(1.0, abs(u), abs(v))
    if isinstance(u, dict) and isinstance(v, dict):
        return u.keys() == v.keys() and all(_same(u[k], v[k], tol) for k in u)
    if isinstance(u, list) and isinstance(v, list):
        return len(u) == len(v) and all(_same(p, q, tol) for p, q in zip(u, v))
    return u == v


def _short(x, n: int = 160) -> str:
    s = repr(x)
    return s if len(s) <= n else s[: n - 3] + "..."


# ---------------------------------------------------------------------------- intakes
def kit_intake(pools: list[list], domains, key=None, *, audits: bool, seed: int = 7):
    """The intake every host's run gets in the kit (the same pools in the same order, the
    same seeds: the same positions drawn), so that the draws are the one input the hosts
    share; ``audits``: whether skipped prompts are audited (the engine's and the example's
    setting; TRL and verl generate only what they train on)."""
    from dataflex_rl.hosts.common.intake import Intake

    D = len(domains)
    uniform = torch.full((D,), 1.0 / D, dtype=torch.float64)
    return Intake(pools, domains, uniform, seeds=(seed, seed + 1), audits=audits, key=key)


# ---------------------------------------------------------------------------- the engine
def script_engine(monkeypatch, script: Script) -> None:
    """The engine's sampler and verifier (`EngineGeneration.rollout`) answer from ``script``;
    the rest of its step (batches, GRPO advantages, assembly, the update) is its own."""
    from dataflex_rl.hosts.engine import generation
    from dataflex_rl.hosts.engine.sampler import Rollout, left_pad

    def rollout(self, problems, before=(), counts=None, offsets=None):
        tok = self.policy.tokenizer
        G, T = self.grpo.group_size, self.grpo.max_new_tokens
        assert G == script.group_size and T >= script.max_len
        n = [G] * len(problems) if counts is None else counts.tolist()
        outs = [script.outcome(p.prompt, k) for p, k in zip(problems, n)]
        lengths = torch.tensor([n for o in outs for n in o.lengths])
        mask = torch.arange(T)[None, :] < lengths[:, None]
        ids = torch.where(mask, tok.encode("1")[0], tok.pad_id)
        ids[torch.arange(len(lengths)), lengths - 1] = tok.eos_id
        prompt_ids, prompt_mask = left_pad(
            [[tok.bos_id] + tok.encode(p.prompt) for p in problems], tok.pad_id
        )
        rollout = Rollout(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            response_ids=ids,
            response_mask=mask,
            old_log_probs=padded([r for o in outs for r in o.log_probs], T),
            prompt_index=torch.arange(len(problems)).repeat_interleave(torch.tensor(n)),
            finished=torch.ones(len(lengths), dtype=torch.bool),
            entropies=padded([r for o in outs for r in o.entropies], T) if self.entropies else None,
        )
        rewards = torch.tensor([r for o in outs for r in o.rewards], dtype=torch.float32)
        return rollout, rewards, 0.0, 0.0

    monkeypatch.setattr(generation.EngineGeneration, "rollout", rollout)


def engine_trace(monkeypatch, strategy, tasks, *, steps, P, G, audits, grpo=None):
    """The engine's `StepTrace`s of ``steps`` steps of ``strategy`` on ``tasks`` (its
    training pools in domain order) under a fresh `Script`: the engine's own trainer, its
    sampler and verifier scripted (`script_engine`), the kit's intake; ``grpo``: more engine
    ``grpo`` settings (TRL's ``adv_eps`` 1e-4, to compare with TRL)."""
    from operator import attrgetter

    from dataflex_rl.hosts.engine.config import load_config
    from dataflex_rl.hosts.engine.policy import load_policy
    from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer

    script_engine(monkeypatch, Script(group_size=G, max_len=6))
    settings = {"prompts_per_step": P, "group_size": G, "max_new_tokens": 8, **(grpo or {})}
    tr = EmbeddedTrainer(
        load_config({"grpo": settings}), strategy, taskset=tasks, policy=load_policy("tiny")
    )
    domains = tasks.domains
    pools = [tasks.train[d] for d in domains]
    tr.driver.intake = kit_intake(pools, domains, attrgetter("key"), audits=audits)
    rec = Recorder(tr.driver, attrgetter("prompt"))
    for _ in range(steps):
        tr.train_step()
    return rec.traces


# ---------------------------------------------------------------------------- the example
def script_example(monkeypatch, example, script: Script) -> None:
    """examples/minimal_grpo.py's sampler (``model.generate``), verifier (``tasks.verify``)
    and sampling-time log-probs and entropies (``forward`` without gradients) answer from
    ``script``; its advantages, batches, assembly and loss are its own."""
    state: dict[str, Any] = {}
    real_rollout, real_forward, real_build = example.rollout, example.forward, example.build_taskset

    def rollout(model, tok, tasks, problems, domain_ids, args, entropies, counts=None):
        n = [args.group_size] * len(problems) if counts is None else counts.tolist()
        state["outs"] = [script.outcome(p.prompt, k) for p, k in zip(problems, n)]
        state["rewards"] = iter([r for o in state["outs"] for r in o.rewards])
        if not getattr(model, "_scripted", False):
            model._scripted = True
            model.generate = lambda **kw: _example_generate(state, tok, **kw)
        return real_rollout(model, tok, tasks, problems, domain_ids, args, entropies, counts)

    def forward(
        model, seq, attention_mask, prompt_len, response_mask, temperature, entropies=False
    ):
        if torch.is_grad_enabled():  # the update's pass: the model's own
            return real_forward(
                model, seq, attention_mask, prompt_len, response_mask, temperature, entropies
            )
        outs, T = state["outs"], response_mask.shape[1]
        old = padded([r for o in outs for r in o.log_probs], T)
        ent = padded([r for o in outs for r in o.entropies], T) if entropies else None
        return old, ent

    def build_taskset(*a, **kw):
        tasks = real_build(*a, **kw)
        tasks.verify = lambda problem, text: next(state["rewards"])
        return tasks

    monkeypatch.setattr(example, "rollout", rollout)
    monkeypatch.setattr(example, "forward", forward)
    monkeypatch.setattr(example, "build_taskset", build_taskset)


def _example_generate(state, tok, *, input_ids, num_return_sequences, max_new_tokens, **_):
    outs = state["outs"]
    G = num_return_sequences
    lengths = torch.tensor([n for o in outs for n in o.lengths])
    T = max_new_tokens
    mask = torch.arange(T)[None, :] < lengths[:, None]
    filler = next(i for i in range(len(tok)) if i not in (tok.eos_token_id, tok.pad_token_id))
    response = torch.where(mask, filler, tok.pad_token_id)
    response[torch.arange(len(lengths)), lengths - 1] = tok.eos_token_id
    return torch.cat([input_ids.repeat_interleave(G, 0), response], 1)
