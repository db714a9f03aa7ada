"""How predictable is a zero-variance group before it is generated? Screening vs a probe.

Plain GRPO runs on the embedded default (2,000 training prompts per domain, 16 prompts x G = 8
per step) record, for every group, its 8 rewards and tokens and the policy's representation of
its prompt at that step (mean-pooled token embeddings and hidden states after each layer).
Then, offline:

- **screening** with k of the G samples first: a group whose first k samples agree is stopped
  (the rest is not generated). Reported: tokens saved, the share of stopped groups that would
  have had signal (false stops), and the change of tokens per effective group (a stopped group
  with signal is lost);
- **a probe**: a logistic regression (L2, LBFGS) on the standardized representation, refitted
  every 10 steps on all earlier groups and scored on the next 10 steps: AUC for the
  zero-variance outcome, and at thresholds the share skipped, the false-skip rate and the share
  of the zero-variance tokens it would avoid (of the ceiling); the domain alone as a reference.

    .venv/bin/python benchmarks/prerollout_predictability.py [--seeds 0 1] [--steps 200]
        [--workers 2]

A benchmark, not a test (default: about 6 minutes wall on 2 idle cores).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp


def _collect(job: tuple) -> dict:
    seed, steps = job
    import torch

    from dataflex_rl.hosts.common.representation import _left_pad
    from dataflex_rl.hosts.engine.config import load_config
    from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer

    torch.set_num_threads(1)
    cfg = load_config(
        {
            "policy": "tiny",
            "threads": 1,
            "eval": {"per_domain": 10, "samples": 0},
            "log": {"progress": False, "plots": False, "checkpoint_every": 0},
        }
    )
    tr = EmbeddedTrainer(cfg, "baseline", seed=seed)
    G = cfg.grpo.group_size
    rec: dict = {"feat": [], "rewards": [], "tokens": [], "domain": [], "step": []}
    rollout_fn, draw_fn = tr._rollout, tr.driver.draw
    domains: list = []

    def draw(n, step):
        items, doms, m = draw_fn(n, step)
        domains.append(doms)
        return items, doms, m

    def rollout(problems, step):
        tok = tr.policy.tokenizer
        ids, mask = _left_pad([[tok.bos_id] + tok.encode(p.prompt) for p in problems], 0)
        with torch.no_grad():
            out = tr.policy.model(
                input_ids=ids,
                attention_mask=mask.long(),
                position_ids=(mask.long().cumsum(1) - 1).clamp(min=0),
                output_hidden_states=True,
                use_cache=False,
            )
        w = mask.float()[:, :, None]
        rec["feat"].append(torch.stack([(h * w).sum(1) / w.sum(1) for h in out.hidden_states]))
        r = rollout_fn(problems, step)
        rec["rewards"].append(r[1].view(-1, G).clone())
        rec["tokens"].append(r[0].response_mask.sum(1).view(-1, G).clone())
        rec["domain"].append(torch.tensor(domains[-1]))
        rec["step"].append(torch.full((len(problems),), step))
        return r

    tr._rollout, tr.driver.draw = rollout, draw
    for _ in range(steps):
        tr.train_step()
    return {k: torch.cat(v, 1 if k == "feat" else 0) for k, v in rec.items()}


def _fit(x, y, lam):
    import torch

    w = torch.zeros(x.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=100, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(x @ w + b, y)
        loss = loss + lam * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach(), b.detach()


def _auc(score, y) -> float:
    import torch

    order = score.argsort()
    rank = torch.empty_like(score)
    rank[order] = torch.arange(len(score), dtype=score.dtype)
    pos = y.sum()
    neg = len(y) - pos
    return float((rank[y.bool()].sum() - pos * (pos - 1) / 2) / (pos * neg))


def _report(seed: int, d: dict) -> None:
    import torch

    R, T = d["rewards"], d["tokens"].double()
    G = R.shape[1]
    k = (R > 0.5).sum(1)
    zero = (k == 0) | (k == G)
    tok = T.sum(1)
    ceiling = float(tok[zero].sum() / tok.sum())
    print(
        f"seed {seed}: {len(k)} groups, zero-variance {zero.double().mean():.3f} of groups "
        f"(all wrong {(k == 0).double().mean():.3f}, all right {(k == G).double().mean():.3f}), "
        f"{ceiling:.3f} of tokens (the ceiling)"
    )
    base = float(tok.sum() / (~zero).sum())
    for ks in (2, 3, 4):
        first = (R[:, :ks] > 0.5).sum(1)
        stop = (first == 0) | (first == ks)
        saved = float(T[:, ks:].sum(1)[stop].sum() / tok.sum())
        false = float((stop & ~zero).double().sum() / stop.double().sum())
        cost = T[:, :ks].sum() + T[:, ks:].sum(1)[~stop].sum()
        tpe = float(cost / (~stop & ~zero).sum())
        print(
            f"  screen k={ks}: stops {stop.double().mean():.3f} of groups, saves {saved:.3f} of "
            f"tokens, false stops {false:.3f}, tokens per effective group {tpe / base - 1:+.3f}"
        )
    step = d["step"]
    y = zero.double()
    sets = {f"layer {i}": d["feat"][i].double() for i in range(d["feat"].shape[0])}
    sets["domain only"] = torch.nn.functional.one_hot(d["domain"], 3).double()
    for name, F in sets.items():
        pred = torch.full((len(k),), float("nan"), dtype=torch.float64)
        for s0 in range(20, int(step.max()) + 1, 10):
            train, test = step < s0, (step >= s0) & (step < s0 + 10)
            mu, sd = F[train].mean(0), F[train].std(0) + 1e-6
            w, b = _fit((F[train] - mu) / sd, y[train], 1e-2)
            pred[test] = torch.sigmoid(((F[test] - mu) / sd) @ w + b)
        m = ~pred.isnan()
        p, z, t = pred[m], y[m], tok[m]
        ceil = (t * z).sum() / t.sum()
        line = f"  probe {name:11s} AUC {_auc(p, z):.3f}"
        for th in (0.4, 0.5, 0.6, 0.7):
            sk = p >= th
            if not bool(sk.any()):
                line += f" | >={th}: skips none"
                continue
            line += (
                f" | >={th}: skips {sk.double().mean():.2f}, false-skip "
                f"{1 - z[sk].mean():.2f}, {(t * z * sk).sum() / t.sum() / ceil:.2f} of ceiling"
            )
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    with mp.get_context("spawn").Pool(args.workers) as pool:
        data = pool.map(_collect, [(s, args.steps) for s in args.seeds])
    for seed, d in zip(args.seeds, data):
        _report(seed, d)


if __name__ == "__main__":
    main()
