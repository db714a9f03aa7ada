"""One rank of a two-process TRL run comparing token masks with TRL's own.

Run by ``tests/hosts_trl/test_trl_two_ranks.py`` as::

    torchrun --standalone --nproc_per_node 2 tests/hosts_trl/trl_entropy_ranks_run.py OUT

(CPU, gloo). The strategy selects the top 20% of tokens by entropy per loss micro-batch,
gathered over both processes (``scope: micro_batch``), and TRL's own ``top_entropy_quantile``
is on beside it. Every rank writes ``OUT/entropy_rank<p>.json``: per loss call, whether the
decision's mask on this rank's rows of that micro-batch equals the mask TRL applied, and the
token counts.
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
from dataflex_rl.hosts.trl.tensors import ROW_KEY  # noqa: E402
from tests.hosts_trl.tiny import (  # noqa: E402
    end_rank,
    hashed_reward,
    tiny_dataset,
    tiny_model,
    tiny_tokenizer,
)

STRATEGY = {
    "name": "high_entropy_trl_scope",
    "tokens": {"preset": "high_entropy", "actuator": {"scope": "micro_batch", "fraction": 0.2}},
}


class RecordingTrainer(DataflexGRPOTrainer):
    """Records, per loss call, TRL's own entropy mask next to the decision's."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[dict] = []
        self._decisions: list = []
        strategy = self.driver.strategy
        decide = strategy.decide

        def recording_decide(batch, observed=None):
            d = decide(batch, observed)
            self._decisions.append((d, batch.micro_batch_ids.clone()))
            return d

        strategy.decide = recording_decide
        self._rows = None

    def _compute_loss(self, model, inputs):
        self._rows = inputs[ROW_KEY].cpu()
        return super()._compute_loss(model, inputs)

    def get_high_entropy_mask(self, entropies, mask, threshold):
        trl = super().get_high_entropy_mask(entropies, mask, threshold).cpu()
        decision, micro = self._decisions[-1]
        p, n = self.accelerator.process_index, self._dataflex_micro.shape[0]
        rows = self._rows + p * n  # this rank's rows of the global batch
        ours = decision.token_keep_mask[rows]
        T = trl.shape[1]
        self.calls.append(
            {
                "generation": len(self._decisions) - 1,
                "micro_batch": sorted(set(micro[rows].tolist())),
                "equal": bool(torch.equal(ours[:, :T], trl) and not ours[:, T:].any()),
                "kept": int(trl.sum()),
                "tokens": int(mask.sum()),
            }
        )
        return super().get_high_entropy_mask(entropies, mask, threshold)


def main(out_dir: str) -> None:
    tok = tiny_tokenizer()
    args = DataflexGRPOConfig(
        output_dir=os.path.join(out_dir, "run"),
        per_device_train_batch_size=4,
        num_generations=4,
        gradient_accumulation_steps=2,
        max_completion_length=8,
        max_steps=2,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        gradient_checkpointing=False,
        top_entropy_quantile=0.2,
        seed=0,
        dataflex={"strategy": STRATEGY, "seed": 0},
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
    Path(out_dir, f"entropy_rank{rank}.json").write_text(
        json.dumps({"rank": rank, "calls": trainer.calls}, indent=1)
    )
    end_rank(trainer)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(*sys.argv[1:])
