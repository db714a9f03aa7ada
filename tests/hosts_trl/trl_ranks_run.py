"""One rank of a multi-process TRL run with a dataflex strategy; writes what this rank saw.

Run by ``tests/hosts_trl/test_trl_two_ranks.py`` as::

    torchrun --standalone --nproc_per_node 2 tests/hosts_trl/trl_ranks_run.py OUT [LOSS_TYPE=grpo]
        [VARIANT=all]

(VARIANT ``rollouts``: `ROLLOUTS` with 3 completions per prompt, so each round's prompts are
rounded up to a multiple of 2, one share per rank.)

(CPU, gloo). Every rank writes ``OUT/rank<p>.json``: per generation batch, the global view it
decided on (N, the keep mask, the weights per response and per token, the proportions, the
intake's rows) and what it applied to its own slice (its rows, its kept rows, its per-token
weights, ``num_items_in_batch``, the host metrics).
The test compares the files: the global views must be identical and the slices must tile N.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # tests.hosts_trl.tiny; the package comes from PYTHONPATH

from dataflex_rl.hosts.trl import DataflexGRPOConfig, DataflexGRPOTrainer  # noqa: E402
from tests.hosts_trl.tiny import (  # noqa: E402
    end_rank,
    hashed_reward,
    tiny_dataset,
    tiny_model,
    tiny_tokenizer,
)

#: every mechanism, acting from the first or second generation, and refill (the rounds'
#: rows are generated on both ranks and the batch assembled on each); token-level weights
#: (ar), so each rank cuts [n, T] weights to its own padding
STRATEGY = {
    "name": "ranks_all_four",
    "prerollout": {"actuator": {"name": "greso", "explore_prob": 0.5}, "warmup_steps": 1},
    "mix": {"preset": "reward_gap", "warmup_steps": 1, "every": 1},
    "select": {"preset": "difffilter"},
    "reweight": {"preset": "ar"},
    "refill": {"max_rounds": 2},
}


#: per-prompt rollouts until signal with G = 3 over 2 ranks: an until_signal round of an odd
#: number of prompts is rounded up to an even one (its first prompts repeated)
ROLLOUTS = {"name": "ranks_rollouts", "rollouts": {"mode": "until_signal", "max_rounds": 3}}


def _rounded(weights: torch.Tensor) -> list:
    """[rows, T] weights as nested lists, rounded so the JSON compares exactly."""
    return [[round(w, 6) for w in row] for row in weights.tolist()]


class RecordingTrainer(DataflexGRPOTrainer):
    """Records each decision (global) and its application (this rank)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.views: list[dict] = []
        strategy = self.driver.strategy
        decide = strategy.decide

        def recording_decide(batch, observed=None):
            d = decide(batch, observed)
            self._last_decision = d
            self._last_batch_advantages = batch.response_advantages
            self.views.append(
                {
                    "step": batch.step,
                    "N": batch.batch_size,
                    "lengths": batch.response_length.tolist(),
                    "rewards": [None if r != r else r for r in batch.rewards.tolist()],
                    "prompt_keys": list(batch.prompt_keys or ()),
                    "keep": d.keep_mask.int().tolist(),
                    "weights": [round(w, 6) for w in d.weights_per_response.tolist()],
                    "token_weights": _rounded(d.weights_per_token),
                    "renormalize": d.renormalizes,
                    "proportions": None
                    if strategy.proportions is None
                    else strategy.proportions.tolist(),
                }
            )
            return d

        strategy.decide = recording_decide  # instance attribute: this trainer only

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        if self.model.training:
            n = out["advantages"].shape[0]
            p = self.accelerator.process_index
            train = self._metrics["train"]
            # the per-token weights this rank applied: its rows of its own decision, and the
            # advantages TRL's loss reads, divided back by (TRL's advantage x c) on loss tokens
            w_local = self._last_decision.weights_per_token[p * n : (p + 1) * n]
            base = self._last_batch_advantages[p * n : (p + 1) * n]
            # 1 when the strategy leaves the loss alone (rollouts only: no decision applied)
            c = (train.get("dataflex/trl/advantage_scale") or [1.0])[-1]
            adv, mask = out["advantages"].detach(), out["completion_mask"].bool()
            per_token = adv.dim() == 2
            if not per_token:  # TRL's own [n] advantages: the strategy left the loss alone
                adv = adv[:, None].expand(mask.shape)
            T = adv.shape[1]
            expect = base[:, None] * w_local[:, :T] * c
            applied = torch.where(mask, adv, torch.zeros_like(adv))
            self.views[-1]["token_weights_slice"] = _rounded(w_local)
            self.views[-1]["applied_matches_weights"] = bool(
                torch.allclose(applied, torch.where(mask, expect, torch.zeros_like(expect)))
            )
            self.views[-1].update(
                {
                    "rank": p,
                    "rows": [p * n, (p + 1) * n],
                    "local_kept_rows": int(out["completion_mask"].any(1).sum()),
                    "local_loss_rows": out["completion_mask"].any(1).int().tolist(),
                    "num_items_in_batch": int(out["num_items_in_batch"]),
                    "advantage_scale": c,
                    "per_token_advantages": per_token,
                    "kept_response_fraction": (
                        train.get("dataflex/kept_response_fraction") or [1.0]
                    )[-1],
                    **{
                        name: train[key][-1]
                        for name, key in (
                            ("refill_rounds", "dataflex/refill/rounds"),
                            ("refill_groups_kept", "dataflex/refill/groups_kept"),
                            ("rollouts_rounds", "dataflex/rollouts/rounds"),
                            ("rollouts_generated", "dataflex/rollouts/generated"),
                            ("rollouts_per_prompt_max", "dataflex/rollouts/per_prompt_max"),
                        )
                        if train.get(key)
                    },
                }
            )
        return out


def main(out_dir: str, loss_type: str = "grpo", variant: str = "all") -> None:
    tok = tiny_tokenizer()
    rollouts = variant == "rollouts"
    args = DataflexGRPOConfig(
        output_dir=os.path.join(out_dir, "run"),
        per_device_train_batch_size=3 if rollouts else 8,
        num_generations=3 if rollouts else 4,
        gradient_accumulation_steps=1,
        max_completion_length=8,
        max_steps=2,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        gradient_checkpointing=False,
        loss_type=loss_type,
        seed=0,
        dataflex={"strategy": ROLLOUTS if rollouts else STRATEGY, "seed": 0},
    )
    trainer = RecordingTrainer(
        model=tiny_model(tok),
        reward_funcs=hashed_reward,
        args=args,
        train_dataset=tiny_dataset(16),
        processing_class=tok,
    )
    trainer.train()
    rank = trainer.accelerator.process_index
    world = trainer.accelerator.num_processes
    Path(out_dir, f"rank{rank}.json").write_text(
        json.dumps({"rank": rank, "world": world, "views": trainer.views}, indent=1)
    )
    end_rank(trainer)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(*sys.argv[1:])
