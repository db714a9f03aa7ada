"""`apply_decision` on TRL 1.16's real ``GRPOTrainer._compute_loss``, for every loss_type.

One generation batch comes from a stock trainer on the tiny offline model (`tiny.py`); its
advantages are replaced by fixed values of both signs and its old log-probs perturbed so that
tokens are clipped (the losses are then not the on-policy ones, where every ratio is 1). The
loss and the gradients of every parameter are then compared, in float32 and one process:

* dropping rows through `apply_decision` (``renormalize``) == physically removing them
  (``num_items_in_batch`` recomputed), weights applied to the kept rows in both;
* L(A w) == sum_i w_i L(A e_i) (weights are linear, dropped rows count as zeros);
* every row dropped: loss 0 and gradient 0;
* token weights that are the response weights broadcast == response weights.

The whole batch is one micro-batch here (gradient accumulation 1): bnpo, which normalizes by
the micro-batch's own tokens, is exact per micro-batch and only per micro-batch.
"""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from dataflex_rl.core.strategy import Decision  # noqa: E402
from dataflex_rl.hosts.trl.loss import LOSS_TYPES, apply_decision  # noqa: E402
from tests.hosts_trl.tiny import hashed_reward, tiny_dataset, tiny_model, tiny_tokenizer  # noqa: E402

N, G = 16, 4
#: relative tolerance on the loss and on the gradient (max |diff| / max |grad|)
RTOL = 1e-6


def _trainer(loss_type: str, model, tok, tmp):
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=str(tmp),
        per_device_train_batch_size=N,
        num_generations=G,
        gradient_accumulation_steps=1,
        max_completion_length=8,
        max_steps=1,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        gradient_checkpointing=False,
        loss_type=loss_type,
        importance_sampling_level="sequence" if loss_type == "luspo" else "token",
        epsilon_high=0.28 if loss_type != "cispo" else 1.2,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=hashed_reward,
        args=args,
        train_dataset=tiny_dataset(4),
        processing_class=tok,
    )
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    return trainer


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(trainer per loss_type, one generation output) sharing one tiny model."""
    tmp = tmp_path_factory.mktemp("trl_loss")
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    trainers = {lt: _trainer(lt, model, tok, tmp / lt) for lt in LOSS_TYPES}
    tr = trainers["dapo"]
    ds = tr.train_dataset
    torch.manual_seed(0)
    out = tr._generate_and_score_completions([ds[i] for i in range(N // G) for _ in range(G)])
    gen = torch.Generator().manual_seed(1)
    mask = out["completion_mask"]
    mask[5] = 0  # a row without loss tokens, as TRL's mask_truncated_completions leaves one
    out["advantages"] = torch.randn(N, generator=gen)
    with torch.no_grad():
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
        att = torch.cat([out["prompt_mask"], mask], 1)
        logps = tr._get_per_token_logps_and_entropies(model, ids, att, mask.shape[1])[0]
    out["old_per_token_logps"] = logps + 0.3 * torch.randn(logps.shape, generator=gen)
    out["num_items_in_batch"] = mask.sum()
    return trainers, out


def _copy(out: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in out.items()}


def _take(out: dict, idx: torch.Tensor) -> dict:
    """The batch with only rows ``idx``: what TRL would have built without the others."""
    sub = {k: v[idx] if isinstance(v, torch.Tensor) and v.dim() > 0 else v for k, v in out.items()}
    sub["num_items_in_batch"] = sub["completion_mask"].sum()
    return sub


def _loss_grad(trainer, batch: dict) -> tuple[float, torch.Tensor]:
    model = trainer.model
    model.zero_grad(set_to_none=True)
    loss = trainer._compute_loss(model, batch)
    loss.backward()
    grads = [
        p.grad.flatten() if p.grad is not None else torch.zeros(p.numel())
        for p in model.parameters()
    ]
    return float(loss.detach()), torch.cat(grads)


def _decision(out, keep, weights=None, renormalize=True, token_weights=None, adv=None):
    mask = out["completion_mask"].bool()
    has = mask.any(1)
    w = keep.float() if weights is None else weights * keep
    return Decision(
        keep_mask=keep,
        weights_per_response=torch.where(has, w, 0.0).float(),
        response_mask=mask,
        advantages_per_response=adv,
        denominator=keep if renormalize else None,
        token_weights=token_weights,
    )


def _lengths(out):
    return out["completion_mask"].sum(1)


def _close(
    a: tuple, b: tuple, what: str, rtol: float = RTOL, scale: float | None = None
) -> tuple[float, float]:
    """Relative differences (loss, gradient) of two (loss, grad) pairs, asserted <= rtol.

    The loss is compared relative to ``scale`` (default its own size; a sum of terms that
    cancel is compared to the sum of their sizes)."""
    (la, ga), (lb, gb) = a, b
    loss_diff = abs(la - lb)
    grad_diff = float((ga - gb).abs().max())
    scale_l = max(abs(lb) if scale is None else scale, 1e-12)
    scale_g = max(float(gb.abs().max()), 1e-12)
    assert loss_diff <= rtol * scale_l, f"{what}: loss {la!r} vs {lb!r}"
    assert grad_diff <= rtol * scale_g, f"{what}: grad max diff {grad_diff} (scale {scale_g})"
    print(f"{what}: |dloss| {loss_diff:.1e}, max |dgrad| {grad_diff:.1e}", end="; ")
    return loss_diff / scale_l, grad_diff / scale_g


#: the kept rows: groups 1 and 3 partly dropped, group 2 wholly; row 5 has no tokens
KEEP = torch.tensor([1, 1, 1, 1, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0, 1], dtype=torch.bool)


def test_old_log_probs_are_perturbed_enough_to_clip(setup):
    trainers, out = setup
    trainer = trainers["grpo"]
    trainer._metrics["train"].clear()
    trainer._compute_loss(trainer.model, _copy(out))
    clipped = trainer._metrics["train"]["clip_ratio/region_mean"][-1]
    assert 0.05 < clipped < 0.95, clipped


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_drop_equals_remove(setup, loss_type):
    trainers, out = setup
    trainer = trainers[loss_type]
    masked = _copy(out)
    metrics = apply_decision(masked, _decision(out, KEEP), slice(0, N), loss_type, _lengths(out))
    stays = KEEP & out["completion_mask"].bool().any(1)
    K = int(stays.sum())
    assert K == 8
    assert metrics["dataflex/trl/loss_rows_fraction"] == K / N
    row_loss = loss_type in ("grpo", "sapo", "dr_grpo", "luspo")
    assert metrics["dataflex/trl/advantage_scale"] == (N / K if row_loss else 1.0)
    assert int(masked["num_items_in_batch"]) == int(out["completion_mask"][stays].sum())
    removed = _take(out, stays.nonzero().squeeze(1))
    rel = _close(_loss_grad(trainer, masked), _loss_grad(trainer, removed), loss_type)
    print(f"drop==remove {loss_type}: rel loss diff {rel[0]:.2e}, rel grad diff {rel[1]:.2e}")
    # without the renormalization the drop shrinks the update (c and num_items matter)
    plain = _copy(out)
    plain["advantages"] = plain["advantages"] * stays
    l_plain, _ = _loss_grad(trainer, plain)
    l_removed, _ = _loss_grad(trainer, removed)
    assert abs(l_plain - l_removed) > 1e-3 * abs(l_removed)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_weighted_drop_equals_weighted_remove(setup, loss_type):
    """Weights and a drop together: the kept rows' weighted loss over the kept rows only."""
    trainers, out = setup
    trainer = trainers[loss_type]
    w = torch.linspace(0.25, 2.0, N)
    masked = _copy(out)
    apply_decision(masked, _decision(out, KEEP, w), slice(0, N), loss_type, _lengths(out))
    stays = KEEP & out["completion_mask"].bool().any(1)
    removed = _take(out, stays.nonzero().squeeze(1))
    removed["advantages"] = removed["advantages"] * w[stays]
    _close(_loss_grad(trainer, masked), _loss_grad(trainer, removed), loss_type)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_weights_are_linear(setup, loss_type):
    """L(A w) = sum_i w_i L(A e_i); without renormalize nothing else changes (c = 1)."""
    trainers, out = setup
    trainer = trainers[loss_type]
    w = torch.linspace(0.0, 3.0, N)
    keep = torch.ones(N, dtype=torch.bool)
    full = _copy(out)
    apply_decision(
        full, _decision(out, keep, w, renormalize=False), slice(0, N), loss_type, _lengths(out)
    )
    total_l, total_g, size = 0.0, 0.0, 0.0
    for i in range(N):
        one = _copy(out)
        e = torch.zeros(N)
        e[i] = 1.0
        m = apply_decision(
            one, _decision(out, keep, e, renormalize=False), slice(0, N), loss_type, _lengths(out)
        )
        assert m["dataflex/trl/advantage_scale"] == 1.0
        li, gi = _loss_grad(trainer, one)
        total_l, total_g = total_l + float(w[i]) * li, total_g + float(w[i]) * gi
        size += abs(float(w[i]) * li)
    rel = _close(_loss_grad(trainer, full), (total_l, total_g), loss_type, scale=size)
    print(f"linearity {loss_type}: rel loss diff {rel[0]:.2e}, rel grad diff {rel[1]:.2e}")


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_all_dropped_gives_zero_loss_and_gradient(setup, loss_type):
    trainers, out = setup
    batch = _copy(out)
    keep = torch.zeros(N, dtype=torch.bool)
    m = apply_decision(batch, _decision(out, keep), slice(0, N), loss_type, _lengths(out))
    assert m["dataflex/trl/loss_rows_fraction"] == 0.0 and m["dataflex/trl/loss_tokens"] == 0.0
    loss, grad = _loss_grad(trainers[loss_type], batch)
    assert loss == 0.0
    assert torch.count_nonzero(grad) == 0


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_token_weights_broadcast_equal_response_weights(setup, loss_type):
    trainers, out = setup
    trainer = trainers[loss_type]
    w = torch.linspace(0.5, 1.5, N)
    mask = out["completion_mask"].bool()
    per_resp, per_tok = _copy(out), _copy(out)
    apply_decision(per_resp, _decision(out, KEEP, w), slice(0, N), loss_type, _lengths(out))
    tok_w = torch.where(mask & KEEP[:, None], w[:, None], 0.0)
    m = apply_decision(
        per_tok, _decision(out, KEEP, w, token_weights=tok_w), slice(0, N), loss_type, _lengths(out)
    )
    assert m["dataflex/trl/per_token_advantages"] == 1.0
    assert per_tok["advantages"].shape == mask.shape
    _close(_loss_grad(trainer, per_tok), _loss_grad(trainer, per_resp), loss_type)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "bnpo"])
def test_recomputed_advantages_replace_trl_ones(setup, loss_type):
    trainers, out = setup
    trainer = trainers[loss_type]
    new_adv = -out["advantages"] * 0.5
    batch = _copy(out)
    apply_decision(batch, _decision(out, KEEP, adv=new_adv), slice(0, N), loss_type, _lengths(out))
    stays = KEEP & out["completion_mask"].bool().any(1)
    removed = _take(out, stays.nonzero().squeeze(1))
    removed["advantages"] = new_adv[stays]
    _close(_loss_grad(trainer, batch), _loss_grad(trainer, removed), loss_type)


@settings(max_examples=8)
@given(
    loss_type=st.sampled_from(LOSS_TYPES),
    keep_bits=st.lists(st.booleans(), min_size=N, max_size=N),
    weights=st.lists(st.floats(0.0, 4.0), min_size=N, max_size=N),
)
def test_random_keep_and_weights_equal_removal(setup, loss_type, keep_bits, weights):
    trainers, out = setup
    trainer = trainers[loss_type]
    keep = torch.tensor(keep_bits)
    w = torch.tensor(weights, dtype=torch.float32)
    stays = keep & out["completion_mask"].bool().any(1)
    batch = _copy(out)
    apply_decision(batch, _decision(out, keep, w), slice(0, N), loss_type, _lengths(out))
    if not bool(stays.any()):
        loss, grad = _loss_grad(trainer, batch)
        assert loss == 0.0 and torch.count_nonzero(grad) == 0
        return
    removed = _take(out, stays.nonzero().squeeze(1))
    removed["advantages"] = removed["advantages"] * w[stays]
    ref = _loss_grad(trainer, removed)
    if float(ref[1].abs().max()) == 0.0:  # every kept weight 0: nothing to compare to
        return
    # random weights can make the kept terms cancel (a loss of 1e-4 from terms of 1e-1):
    # the loss is compared to the size of its terms, the loss of the |advantages|
    sizes = {**removed, "advantages": removed["advantages"].abs()}
    scale = max(abs(ref[0]), abs(_loss_grad(trainer, sizes)[0]))
    _close(_loss_grad(trainer, batch), ref, loss_type, rtol=2e-6, scale=scale)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_kl_term_with_beta(setup, loss_type):
    """beta > 0: the KL of dropped rows leaves with their masks. Token losses stay exact;
    row-count losses scale the policy term by c but not the KL term (TRL adds beta * KL
    after the advantages act), so the kept rows' KL is averaged over N rows, not R."""
    trainers, out = setup
    trainer = trainers[loss_type]
    gen = torch.Generator().manual_seed(2)
    base = _copy(out)
    base["ref_per_token_logps"] = out["old_per_token_logps"] + 0.2 * torch.randn(
        out["old_per_token_logps"].shape, generator=gen
    )
    masked = _copy(base)
    m = apply_decision(masked, _decision(base, KEEP), slice(0, N), loss_type, _lengths(base))
    stays = KEEP & out["completion_mask"].bool().any(1)
    removed = _take(base, stays.nonzero().squeeze(1))
    trainer.beta = 0.5
    try:
        got, want = _loss_grad(trainer, masked), _loss_grad(trainer, removed)
        if loss_type in ("grpo", "sapo", "dr_grpo", "luspo"):
            # the KL part alone: scaling beta by c makes it exact again
            assert abs(got[0] - want[0]) > 1e-6
            trainer.beta = 0.5 * m["dataflex/trl/advantage_scale"]
            got = _loss_grad(trainer, masked)
        _close(got, want, loss_type)
    finally:
        trainer.beta = 0.0
