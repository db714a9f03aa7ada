"""Token selection by entropy in real TRL 1.16 ``GRPOTrainer`` steps on CPU (tiny model).

With TRL's scope (``scope: micro_batch``) and one optimisation pass per generation
(``num_iterations`` 1, ``steps_per_generation`` = ``gradient_accumulation_steps``), the
strategy's token mask equals the mask TRL's own ``top_entropy_quantile`` applies in its loss,
micro-batch by micro-batch: both trainers' masks are recorded in the same run (TRL's own is
switched on beside ours) and compared.
"""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402

from dataflex_rl.core.registry import ConfigError  # noqa: E402
from dataflex_rl.hosts.trl.tensors import ROW_KEY  # noqa: E402
from tests.hosts_trl.trainers import Recorder, dataflex_trainer, logged  # noqa: E402

TRL_SCOPE = {
    "name": "high_entropy_trl",
    "tokens": {"preset": "high_entropy", "actuator": {"scope": "micro_batch", "fraction": 0.2}},
}


def _record_trl_masks(trainer, rec):
    """Per loss call: (generation index, this micro-batch's local rows, the mask TRL's own
    ``get_high_entropy_mask`` returned)."""
    seen, current = [], {}
    compute_loss = trainer._compute_loss
    high_entropy_mask = trainer.get_high_entropy_mask

    def recorded_loss(model, inputs):
        current["rows"] = inputs[ROW_KEY].clone()
        current["gen"] = len(rec.decisions) - 1
        return compute_loss(model, inputs)

    def recorded_mask(entropies, mask, threshold):
        out = high_entropy_mask(entropies, mask, threshold)
        seen.append((current["gen"], current["rows"], out.clone()))
        return out

    trainer._compute_loss = recorded_loss
    trainer.get_high_entropy_mask = recorded_mask
    return seen


def test_mask_equals_trls_top_entropy_quantile_micro_batch_by_micro_batch(tmp_path):
    steps = 4  # 4 generations x 2 micro-batches of 8 completions
    trainer = dataflex_trainer(tmp_path, TRL_SCOPE, max_steps=steps, top_entropy_quantile=0.2)
    rec = Recorder(trainer)
    trl = _record_trl_masks(trainer, rec)
    trainer.train()
    assert len(rec.decisions) == steps and len(trl) == 2 * steps
    kept = total = 0
    for gen, rows, trl_mask in trl:
        ours = rec.decisions[gen].token_keep_mask[rows.cpu()]
        T = trl_mask.shape[1]
        assert not ours[:, T:].any()
        assert torch.equal(ours[:, :T], trl_mask.cpu()), f"generation {gen}, rows {rows}"
        kept += int(trl_mask.sum())
        total += int(rec.batches[gen].response_mask[rows.cpu()].sum())
    # the masks are not trivial: about a fifth of the tokens, never all of them
    assert 0.15 < kept / total < 0.4
    for batch in rec.batches:  # the two micro-batches of 8 rows each
        assert torch.bincount(batch.micro_batch_ids).tolist() == [8, 8]
        assert batch.entropies is not None


def test_batch_scope_zeroes_the_advantages_of_tokens_not_kept(tmp_path):
    trainer = dataflex_trainer(tmp_path, "high_entropy", max_steps=2)
    rec = Recorder(trainer)
    trainer.train()
    for batch, decision, out in zip(rec.batches, rec.decisions, rec.outs):
        assert batch.micro_batch_ids is None  # the batch scope does not ask for them
        T = out["advantages"].shape[1]
        keep = decision.token_keep_mask[:, :T]
        adv = out["advantages"]
        assert adv.dim() == 2 and bool((adv[~keep] == 0).all())
        expect = batch.response_advantages[:, None].expand_as(adv)
        assert torch.allclose(adv[keep], expect[keep])
        # the denominators are TRL's (renormalize false): masks and token counts unchanged
        assert torch.equal(out["completion_mask"].sum(1), batch.response_length)
        assert int(out["num_items_in_batch"]) == int(batch.response_length.sum())
    fractions = logged(trainer, "dataflex/kept_token_fraction")
    assert all(0.2 <= f < 0.4 for f in fractions), fractions


def test_renormalized_token_selection_is_refused_before_any_work(tmp_path):
    spec = {"tokens": {"preset": "high_entropy", "renormalize": True}}
    with pytest.raises(ConfigError, match=r"tokens\.renormalize: a token-level selector"):
        dataflex_trainer(tmp_path, spec)


#: dapo's group selection with one refill round (so some steps stay short and keep dropped
#: groups in the batch) and high_entropy's token selection
DAPO_ENTROPY = {
    "name": "dapo_entropy_trl",
    "select": "dapo",
    "tokens": "high_entropy",
    "refill": {"max_rounds": 1},
}


def test_refill_then_token_selection_over_the_kept_groups(tmp_path):
    trainer = dataflex_trainer(tmp_path, DAPO_ENTROPY, max_steps=3)
    rec = Recorder(trainer)
    trainer.train()
    assert sum(logged(trainer, "dataflex/refill/rounds")) > 0
    dropped_groups = 0
    for batch, decision, out in zip(rec.batches, rec.decisions, rec.outs, strict=True):
        groups = batch.group_std > 0  # dapo's: the groups whose rewards are not all equal
        rows = groups.index_select(0, batch.group_ids) & batch.active_mask
        dropped_groups += int((~groups).sum())
        assert torch.equal(decision.loss_rows, rows)
        # the oracle: torch.quantile over the kept groups' valid tokens only
        pool = batch.response_mask & rows[:, None]
        expected = pool & (batch.entropies >= torch.quantile(batch.entropies[pool], 0.8))
        assert torch.equal(decision.token_keep_mask, expected)
        adv = out["advantages"]
        assert adv.dim() == 2 and bool((adv[~expected[:, : adv.shape[1]]] == 0).all())
        # TRL's denominators: every token of the kept groups' rows, none of the others'
        lengths = torch.where(rows, batch.response_length, 0)
        assert torch.equal(out["completion_mask"].sum(1), lengths)
        assert int(out["num_items_in_batch"]) == int(lengths.sum())
    assert dropped_groups > 0  # a short step: its dropped groups were outside the pool
