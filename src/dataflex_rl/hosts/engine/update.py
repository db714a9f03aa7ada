"""The engine's policy update: the clipped GRPO loss (`loss`) weighed and averaged by the decision
(`Decision.aggregate`), plus an optional k3 KL to the initial policy, then an SGD or AdamW step with gradient clipping."""

from __future__ import annotations

import copy

import torch

from dataflex_rl.core.strategy import Decision
from dataflex_rl.hosts.engine.config import GRPOConfig, OptimConfig
from dataflex_rl.hosts.engine.loss import kl_k3, masked_token_mean, policy_loss, response_log_probs
from dataflex_rl.hosts.engine.sampler import Rollout


def gradient_rows(
    decision: Decision, advantages: torch.Tensor, loss_agg: str, kl: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """([B] bool the rows the update computes the loss on, the loss's denominator): the rows
    that can have a gradient (a weighted advantage not 0 on a token of the denominator; with
    a KL term, every kept row); the denominator is `Decision.denominator_tokens`, of the
    rows with a weighted advantage only under ``informative-token-mean``. The loss of the
    rows left out is 0, so ``decision.aggregate`` on the others is the whole batch's."""
    signal = (advantages * decision.weights_per_token != 0) & decision.denominator_mask
    informative = signal.any(1)
    rows = informative | (decision.loss_mask.any(1) if kl else False)
    num_tokens = decision.denominator_tokens(None if loss_agg == "token-mean" else informative)
    return rows, num_tokens


class Learner:
    """The policy's model (trained in place), its optimizer and (with ``kl_coef > 0``) a frozen
    copy as KL reference."""

    def __init__(
        self,
        model: torch.nn.Module,
        grpo: GRPOConfig,
        optim: OptimConfig,
        is_cap: float | None = None,
    ) -> None:
        self.model = model
        self.grpo = grpo
        self.optim = optim
        #: asynchronous training's truncated importance-sampling cap (None: synchronous)
        self.is_cap = is_cap
        self.ref_model = None
        if grpo.kl_coef > 0:
            self.ref_model = copy.deepcopy(model).eval().requires_grad_(False)
        o, params = optim, model.parameters()
        self.optimizer = (
            torch.optim.SGD(params, lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)
            if o.name == "sgd"
            else torch.optim.AdamW(
                params, lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay
            )
        )

    def learn(
        self, rollout: Rollout, advantages: torch.Tensor, decision: Decision, step: int
    ) -> dict[str, float]:
        """Policy-gradient update on the rows that can have a gradient (a weighted advantage
        not 0 somewhere; with a KL term, every kept row); the loss is the decision's
        (`Decision.aggregate`). With ``loss_agg: token-mean`` the other rows still count in
        the denominator (as in verl)."""
        g, o = self.grpo, self.optim
        mask, kept_mask = decision.denominator_mask, decision.loss_mask
        rows, num_tokens = gradient_rows(
            decision, advantages, g.loss_agg, self.ref_model is not None
        )
        lr = o.lr * min(1.0, (step + 1) / o.warmup_steps) if o.warmup_steps else o.lr
        out = {
            "engine/rows_in_loss_fraction": float(rows.float().mean()),
            "engine/loss_tokens": float(num_tokens),
            "optim/lr": lr,
            "engine/empty_update": float(not bool(rows.any())),
        }
        if not bool(rows.any()):
            # nothing can have a gradient: no optimizer step (AdamW would still move the
            # parameters through its moments)
            out.update({"loss/policy": 0.0, "loss/total": 0.0, "optim/grad_norm": 0.0})
            return out
        idx = rows.nonzero().squeeze(1)
        T = int(rollout.response_mask[idx].sum(1).max())
        sub = {
            "resp": rollout.response_ids[idx, :T],
            "rmask": rollout.response_mask[idx, :T],
            "old": rollout.old_log_probs[idx, :T],
            "adv": advantages[idx, :T],
            "mask": mask[idx, :T],
            "kept": kept_mask[idx, :T],
        }
        pidx = rollout.prompt_index[idx]
        p_ids, p_mask = rollout.prompt_ids[pidx], rollout.prompt_mask[pidx]
        ref_logp = None
        if self.ref_model is not None:
            with torch.no_grad():
                ref_logp = response_log_probs(
                    self.ref_model, p_ids, p_mask, sub["resp"], sub["rmask"], g.temperature
                )
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.model.train()
        for epoch in range(g.ppo_epochs):
            logp = response_log_probs(
                self.model, p_ids, p_mask, sub["resp"], sub["rmask"], g.temperature
            )
            if self.is_cap is not None and epoch == 0:
                out.update(self._off_policy(sub, logp.detach()))
            per_token, pg = policy_loss(
                logp, sub["old"], sub["adv"], sub["mask"], g.clip_low, g.clip_high, g.clip_ratio_c
            )
            loss = decision.aggregate(per_token, idx, num_tokens)
            total = loss
            if ref_logp is not None:
                kl = masked_token_mean(
                    kl_k3(logp, ref_logp), sub["kept"], num_tokens=kept_mask.sum()
                )
                total = loss + g.kl_coef * kl
                out["loss/kl"] = float(kl.detach())
            self.optimizer.zero_grad(set_to_none=True)
            total.backward()
            norm = torch.nn.utils.clip_grad_norm_(
                self.model.parameters(), o.grad_clip if o.grad_clip > 0 else float("inf")
            )
            self.optimizer.step()
        self.model.eval()
        out.update(
            {
                "loss/policy": float(loss.detach()),
                "loss/total": float(total.detach()),
                "optim/grad_norm": float(norm),
                **{f"loss/{k}": v for k, v in pg.items()},
            }
        )
        return out

    def _off_policy(self, sub: dict, prox: torch.Tensor) -> dict[str, float]:
        """Asynchronous training's correction, in place on ``sub``: the rows were generated
        by an older policy (``sub["old"]``, the sampling log-probs), so the PPO ratio is
        taken against the current, proximal policy (``prox``: the first epoch's log-probs,
        no extra forward pass) and each token's advantage is weighed by the truncated
        importance ratio min(pi_prox / pi_old, ``is_cap``)."""
        tokens = sub["rmask"]
        w = torch.exp(prox - sub["old"]).masked_fill(~tokens, 1.0)
        clipped = (w > self.is_cap) & tokens
        w = w.clamp(max=self.is_cap)
        sub["adv"] = sub["adv"] * w
        sub["old"] = prox
        n = tokens.sum().clamp(min=1)
        return {
            "engine/async_is_weight_mean": float((w * tokens).sum() / n),
            "engine/async_is_clipped_fraction": float(clipped.sum() / n),
        }
