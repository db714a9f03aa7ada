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
        #: responses used of each problem's last noise block, where a ``counts`` generation
        #: ended inside one (the problem's next ``counts`` generation goes on from there)
        self._partial: dict[str, int] = {}

    @property
    def group_size(self) -> int:
        return self.grpo.group_size

    def generate(
        self,
        items: list,
        domain_ids: list[int] | None,
        round: int,
        counts: Tensor | None = None,
    ) -> Generation:
        G = self.group_size
        before = [] if round == AUDIT else self._before
        offsets = None
        if counts is not None and round != AUDIT:
            offsets = torch.tensor([self._partial.get(p.key, 0) for p in items], dtype=torch.int64)
        rollout, rewards, t_gen, t_rew = self.rollout(items, before, counts, offsets)
        if round != AUDIT:  # occurrences (blocks of G noise keys) each problem began
            if counts is None:
                blocks, ends = [1] * len(items), [0] * len(items)
            else:
                end = offsets + counts.to(torch.int64)
                blocks = (-(-end // G) - (offsets > 0).to(torch.int64)).tolist()
                ends = (end % G).tolist()
            self._before = [*self._before, *(p for p, b in zip(items, blocks) for _ in range(b))]
            for p, e in zip(items, ends):
                self._partial[p.key] = e
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
        rows: Tensor,
        group_ids: Tensor,
        items: list,
        domain_ids: list[int] | None,
    ) -> tuple[Rows, RolloutBatch]:
        first = generations[0]
        if len(generations) == 1 and torch.equal(rows, torch.arange(first.batch.batch_size)):
            return first.rows, first.batch
        pad = self.policy.tokenizer.pad_id
        whole = concat_rollouts([g.rows.rollout for g in generations], pad)
        starts = torch.ones_like(group_ids, dtype=torch.bool)
        starts[1:] = group_ids[1:] != group_ids[:-1]
        prompts = whole.prompt_index[rows[starts]]  # each assembled group's prompt row
        rollout = Rollout(
            prompt_ids=whole.prompt_ids[prompts],
            prompt_mask=whole.prompt_mask[prompts],
            response_ids=whole.response_ids[rows],
            response_mask=whole.response_mask[rows],
            old_log_probs=whole.old_log_probs[rows],
            prompt_index=group_ids.clone(),
            finished=whole.finished[rows],
            entropies=None if whole.entropies is None else whole.entropies[rows],
        )
        rewards = torch.cat([g.rows.rewards for g in generations])[rows]
        batch = grpo_batch(rollout, rewards, items, domain_ids, self.domains, self.step, self.grpo)
        return Rows(rollout, rewards), batch

    def rollout(
        self,
        problems: list,
        before: list = (),
        counts: Tensor | None = None,
        offsets: Tensor | None = None,
    ) -> tuple[Rollout, Tensor, float, float]:
        """Generate G responses per problem (``counts``: that many of each) with keyed noise
        and score them: (the rollout, its rewards, generation seconds, scoring seconds).
        ``before``: the problems generated earlier in the step: a prompt drawn again gets
        the noise of its next occurrence. Response j of a problem has the noise of sample
        j mod G of its (j div G)-th next occurrence, so its first G responses are those a
        plain group would get (common random numbers across arms); with ``offsets`` (a
        problem's earlier ``counts`` generation this step ended o responses into its last
        occurrence, which ``before`` holds), response j has the noise of response o + j
        counted from that occurrence: responses given a few at a time are those one
        generation of them all would get."""
        g = self.grpo
        G = g.group_size
        tok = self.policy.tokenizer
        t0 = time.perf_counter()
        ids = [[tok.bos_id] + tok.encode(p.prompt) for p in problems]
        if counts is None:
            keys = row_keys(self.noise_base, self.step, [p.key for p in [*before, *problems]], G)
            keys = keys[len(before) * G :]
            rollout = self._sample(ids, G, keys)
        else:
            counts = counts.to(torch.int64)
            off = torch.zeros_like(counts) if offsets is None else offsets.to(torch.int64)
            blocks = (off + counts + G - 1) // G  # occurrences each problem uses
            each = [p.key for p, b in zip(problems, blocks.tolist()) for _ in range(b)]
            earlier = [p.key for p in before]
            for p, o in zip(problems, off.tolist()):  # a partly used occurrence goes on
                if o > 0:
                    earlier.remove(p.key)
            keys = row_keys(self.noise_base, self.step, earlier + each, G)
            keys = keys[len(earlier) * G :].view(-1, G)
            first = torch.cumsum(blocks, 0) - blocks  # each problem's first block
            j = (
                torch.repeat_interleave(off, counts)
                + torch.arange(int(counts.sum()))
                - torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
            )
            # response index within its problem, counted from its first block
            block = torch.repeat_interleave(first, counts) + j // G
            keys = keys[block, j % G]
            which = torch.repeat_interleave(torch.arange(len(problems)), counts)
            one = self._sample([ids[i] for i in which.tolist()], 1, keys)
            starts = torch.cumsum(counts, 0) - counts
            rollout = Rollout(
                prompt_ids=one.prompt_ids[starts],
                prompt_mask=one.prompt_mask[starts],
                response_ids=one.response_ids,
                response_mask=one.response_mask,
                old_log_probs=one.old_log_probs,
                prompt_index=which,
                finished=one.finished,
                entropies=one.entropies,
            )
        t1 = time.perf_counter()
        texts = [tok.decode(row) for row in rollout.response_ids.tolist()]
        per_row = [problems[i] for i in rollout.prompt_index.tolist()]
        rewards = score(self.taskset, per_row, texts)
        return rollout, rewards, t1 - t0, time.perf_counter() - t1

    def _sample(self, ids: list, group_size: int, keys: Tensor) -> Rollout:
        g = self.grpo
        tok = self.policy.tokenizer
        return sample_groups(
            self.policy.model,
            ids,
            group_size,
            g.max_new_tokens,
            eos_id=tok.eos_id,
            pad_id=tok.pad_id,
            temperature=g.temperature,
            noise_keys=keys,
            entropies=self.entropies,
        )


#: the `Rollout` fields a queued generation keeps in a checkpoint
ROLLOUT_FIELDS = (
    "prompt_ids",
    "prompt_mask",
    "response_ids",
    "response_mask",
    "old_log_probs",
    "prompt_index",
    "finished",
    "entropies",
)


def encode_generation(gen: Generation) -> dict:
    """An engine generation as checkpoint data (asynchronous training's queue): its
    rollout, rewards and problems (by key)."""
    r = gen.rows.rollout
    return {
        "rollout": {f: getattr(r, f) for f in ROLLOUT_FIELDS},
        "rewards": gen.rows.rewards,
        "keys": [p.key for p in gen.items],
    }


def decode_generation(
    data: dict,
    version: int,
    domain_ids: list,
    problems: dict,
    domains: Sequence[str],
    grpo: GRPOConfig,
) -> Generation:
    """`encode_generation`'s output as the `Generation` again (``problems``: key ->
    problem of the training pools; its batch rebuilt at step ``version``)."""
    rollout = Rollout(**{f: data["rollout"][f] for f in ROLLOUT_FIELDS})
    items = [problems[k] for k in data["keys"]]
    rewards = data["rewards"]
    batch = grpo_batch(rollout, rewards, items, domain_ids, domains, version, grpo)
    gen = Generation(batch, Rows(rollout, rewards))
    gen.items, gen.domain_ids = items, list(domain_ids)
    return gen
