"""The engine's part of a step (`StepHost`): generate and score a list of problems, and take
chosen groups out of a step's rollouts. What happens around it (draw, refill, audit,
assembly, decision) is `Driver.step`'s."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from dataflex_rl.core.batch import RolloutBatch
from dataflex_rl.hosts.common.step import AUDIT, Generation
from dataflex_rl.hosts.engine.batch import grpo_batch
from dataflex_rl.hosts.engine.config import GRPOConfig
from dataflex_rl.hosts.engine.noise import row_keys
from dataflex_rl.hosts.engine.policy import Policy
from dataflex_rl.hosts.engine.sampler import Rollout, concat_rollouts, sample_groups
from dataflex_rl.hosts.engine.taskio import score


@dataclass
class Rows:
    """The engine's rows of a generation: the rollout and its rewards [B]."""

    rollout: Rollout
    rewards: Tensor


class EngineGeneration:
    """The embedded engine's `StepHost` for one step (`EmbeddedTrainer.train_step` makes one
    per step).

    Responses are sampled with noise keyed by (seed, step, prompt, occurrence): a prompt
    generated again within the step's first generation and refill rounds gets the noise of
    its next occurrence; audited prompts get the noise of a first occurrence.
    """

    def __init__(
        self,
        policy: Policy,
        taskset,
        grpo: GRPOConfig,
        domains: Sequence[str],
        noise_base: int,
        step: int,
        entropies: bool,
    ) -> None:
        self.policy = policy
        self.taskset = taskset
        self.grpo = grpo
        self.domains = tuple(domains)
        self.noise_base = noise_base
        self.step = step
        self.entropies = entropies
        self._before: list = []  # the problems generated for training so far this step

    def generate(self, items: list, domain_ids: list[int] | None, round: int) -> Generation:
        before = [] if round == AUDIT else self._before
        rollout, rewards, t_gen, t_rew = self.rollout(items, before)
        if round != AUDIT:
            self._before = [*self._before, *items]
        batch = grpo_batch(rollout, rewards, items, domain_ids, self.domains, self.step, self.grpo)
        return Generation(
            batch,
            Rows(rollout, rewards),
            tokens=float(rollout.num_tokens),
            seconds=t_gen,
            score_seconds=t_rew,
        )

    def assemble(
        self,
        generations: Sequence[Generation],
        groups: Tensor,
        items: list,
        domain_ids: list[int] | None,
    ) -> tuple[Rows, RolloutBatch]:
        if len(generations) == 1 and torch.equal(groups, torch.arange(len(items))):
            return generations[0].rows, generations[0].batch
        G = self.grpo.group_size
        pad = self.policy.tokenizer.pad_id
        whole = concat_rollouts([g.rows.rollout for g in generations], pad)
        rows = (groups[:, None] * G + torch.arange(G)[None, :]).reshape(-1)
        rollout = Rollout(
            prompt_ids=whole.prompt_ids[groups],
            prompt_mask=whole.prompt_mask[groups],
            response_ids=whole.response_ids[rows],
            response_mask=whole.response_mask[rows],
            old_log_probs=whole.old_log_probs[rows],
            prompt_index=torch.arange(len(groups)).repeat_interleave(G),
            finished=whole.finished[rows],
            entropies=None if whole.entropies is None else whole.entropies[rows],
        )
        rewards = torch.cat([g.rows.rewards for g in generations])[rows]
        batch = grpo_batch(rollout, rewards, items, domain_ids, self.domains, self.step, self.grpo)
        return Rows(rollout, rewards), batch

    def rollout(self, problems: list, before: list = ()) -> tuple[Rollout, Tensor, float, float]:
        """Generate G responses per problem (keyed noise) and score them: (the rollout, its
        rewards, generation seconds, scoring seconds). ``before``: the problems generated
        earlier in the step: a prompt drawn again gets the noise of its next occurrence."""
        g = self.grpo
        tok = self.policy.tokenizer
        t0 = time.perf_counter()
        ids = [[tok.bos_id] + tok.encode(p.prompt) for p in problems]
        keys = row_keys(
            self.noise_base, self.step, [p.key for p in [*before, *problems]], g.group_size
        )[len(before) * g.group_size :]
        rollout = sample_groups(
            self.policy.model,
            ids,
            g.group_size,
            g.max_new_tokens,
            eos_id=tok.eos_id,
            pad_id=tok.pad_id,
            temperature=g.temperature,
            noise_keys=keys,
            entropies=self.entropies,
        )
        t1 = time.perf_counter()
        texts = [tok.decode(row) for row in rollout.response_ids.tolist()]
        per_row = [problems[i] for i in rollout.prompt_index.tolist()]
        rewards = score(self.taskset, per_row, texts)
        return rollout, rewards, t1 - t0, time.perf_counter() - t1
