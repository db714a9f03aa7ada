"""How far can any first-visit skip rule go? The prompt-only oracle and screening, from p.

A group's outcome is random even given its prompt: a prompt solved with probability p gives
a zero-variance group of G samples (all right or all wrong) with probability
q = p^G + (1 - p)^G. No predictor that reads only the prompt can know more than p, so the
best any first-visit skip rule can do is bounded by a rule that knows every prompt's p. This
benchmark measures that bound on the instrument of issue 24 (the embedded default: the
shipped tiny policy, default tasks, G = 8, 16 prompts per step, 10 response tokens,
temperature 1).

1. Policies: the warm start, and a plain-GRPO (``baseline``) run of the embedded default at
   its middle and final step (trained here, ``--steps``). For each, the ``--prompts`` training
   prompts that run draws from that step on (the engine's own intake and seed; first visits
   only), each sampled ``--samples`` (M) times with the engine's sampler (`sample_groups`,
   keyed noise) at the training temperature and token limit, scored by the engine's verifiers
   (`taskio.score`).
2. The prompt-only oracle. From each prompt's M samples (c right), unbiased estimates of what
   a G-group of it gives (hypergeometric: a G-group is a uniform G-subset of the M samples):
   q = [C(c, G) + C(M - c, G)] / C(M, G), the expected response tokens of the group, and of
   those the tokens of a zero-variance group. Prompts are skipped in decreasing q. For each
   number skipped: the false-skip rate (expected share of skipped groups that would have had
   signal), tokens per effective group vs dynamic sampling (generate every prompt, train on
   the groups with signal: sum E[tokens] / sum (1 - q)), and its saving as a share of the
   oracle ceiling (the share of dynamic sampling's tokens on zero-variance groups: a skipper
   that knew every outcome) -- the definitions of `benchmarks/prerollout_savings.py` and the
   engine's accounting (`engine/tokens_zero_variance`, `engine/groups_effective`), in
   expectation over the sampling noise, the skip rule's own cost (a prefill) left out.
   Ranking by the q estimated from the same M samples that score it overstates the oracle
   (it is selected on noise: "in-sample", optimistic); ranking by the samples of all but one
   of ``--folds`` folds and scoring with the held-out fold (averaged over the folds)
   understates it (a rule that knows less than p: "cross-fit", conservative). The oracle lies
   between, in expectation; both are printed. Also the oracle's AUC
   for the zero-variance outcome (what the probe's 0.77 compares with) and a domain-only rule
   (the domains' mean q).
3. Screening k of G (k = 1..4), the screen's samples kept in the group: generate k, stop when
   they agree (both sides; or only all-wrong / only all-right screens), else generate the
   other G - k. Exact expected tokens per effective group and false-stop rate from the same
   samples (hypergeometric over ordered G-subsets).

The last lines: one per policy, the largest share of the ceiling any prompt-only rule reaches
at a false-skip rate <= 10% against the issue's target (two thirds): REACHABLE (even the
conservative estimate reaches it), UNREACHABLE (not even the optimistic one), else UNDECIDED;
and the best screen.

    .venv/bin/python benchmarks/prerollout_bound.py [--prompts 1000] [--samples 96]
        [--folds 4] [--steps 200] [--seed 0] [--chunks 4] [--workers 2]

A benchmark, not a test (default: 430 s wall on the shared 2 cores at nice 10; the plain-GRPO
run 243 s of it).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import time

import numpy as np

#: issue 24's target: tokens per effective group at least this share of the oracle ceiling
TARGET = 2 / 3
FALSE_SKIP_LIMITS = (0.10, 0.20, 0.30)
SKIP_SHARES = (0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.40)
SCREEN_SIDES = {"either": (True, True), "all-wrong": (False, True), "all-right": (True, False)}


# ------------------------------------------------------------------ the pure math (tested)
def _comb(n, r: int) -> np.ndarray:
    """C(n, r) elementwise as float64 (0 where n < r)."""
    n = np.asarray(n, dtype=np.int64)
    return np.array([float(math.comb(int(x), r)) if x >= r else 0.0 for x in n.ravel()]).reshape(
        n.shape
    )


def group_moments(correct: np.ndarray, lengths: np.ndarray, G: int) -> dict[str, np.ndarray]:
    """Unbiased per-prompt expectations for a group of G samples from M observed ones.

    A group of G is a uniform G-subset of a prompt's M samples, so these are unbiased for the
    same quantities under the prompt's true success probability and length distribution.

    Args:
        correct: [N, M] bool, sample j of prompt i was right.
        lengths: [N, M] response tokens of each sample.
        G: group size (<= M).

    Returns:
        ``q`` [N] P(zero-variance group), ``q_right`` / ``q_wrong`` (all right / all wrong),
        ``tokens`` [N] E[group tokens], ``zero_tokens`` [N] E[group tokens x zero-variance].
    """
    correct = np.asarray(correct, dtype=bool)
    lengths = np.asarray(lengths, dtype=np.float64)
    N, M = correct.shape
    if not 1 <= G <= M:
        raise ValueError(f"group_moments: need 1 <= G <= M, got G={G}, M={M}")
    c = correct.sum(1)
    w = M - c
    s_c = (lengths * correct).sum(1)
    s_w = (lengths * ~correct).sum(1)
    total = math.comb(M, G)
    q_right = _comb(c, G) / total
    q_wrong = _comb(w, G) / total
    # sample j lies in an all-right group with probability C(c - 1, G - 1) / C(M, G)
    zero_tokens = (s_c * _comb(c - 1, G - 1) + s_w * _comb(w - 1, G - 1)) / total
    return {
        "q": q_right + q_wrong,
        "q_right": q_right,
        "q_wrong": q_wrong,
        "tokens": G * (s_c + s_w) / M,
        "zero_tokens": zero_tokens,
    }


def skip_curve(
    rank: np.ndarray, q: np.ndarray, tokens: np.ndarray, zero_tokens: np.ndarray
) -> dict[str, np.ndarray]:
    """Skipping prompts in decreasing ``rank`` (ties: in the given order), scored with ``q``.

    Entry n of every array is for the first n prompts skipped (n = 0..N): ``share`` (n / N),
    ``false_skip`` (sum of 1 - q over the skipped / n; nan at n = 0), ``saving`` (1 - tokens
    per effective group of the kept prompts / that of dynamic sampling, which keeps all;
    nan when nothing with signal is kept) and ``of_ceiling`` (saving / ceiling). ``ceiling``
    is the share of dynamic sampling's tokens on zero-variance groups.
    """
    q = np.asarray(q, dtype=np.float64)
    tokens = np.asarray(tokens, dtype=np.float64)
    order = np.argsort(-np.asarray(rank, dtype=np.float64), kind="stable")
    signal = 1.0 - q[order]
    tok = tokens[order]
    n = np.arange(len(q) + 1)
    lost = np.concatenate([[0.0], np.cumsum(signal)])
    saved = np.concatenate([[0.0], np.cumsum(tok)])
    base = tokens.sum() / signal.sum()
    kept_signal = signal.sum() - lost
    with np.errstate(divide="ignore", invalid="ignore"):
        tpe = np.where(kept_signal > 1e-12, (tokens.sum() - saved) / kept_signal, np.nan)
        false_skip = np.where(n > 0, lost / np.maximum(n, 1), np.nan)
    ceiling = float(np.sum(zero_tokens) / tokens.sum())
    saving = 1.0 - tpe / base
    return {
        "share": n / len(q),
        "false_skip": false_skip,
        "saving": saving,
        "of_ceiling": saving / ceiling,
        "ceiling": np.float64(ceiling),
    }


def best_within(curve: dict, limit: float) -> tuple[float, float]:
    """(largest share of the ceiling at a false-skip rate <= ``limit``, the skip share there);
    (0, 0) when no skip qualifies (skipping nothing reaches 0)."""
    ok = (curve["false_skip"] <= limit + 1e-12) & ~np.isnan(curve["of_ceiling"])
    if not ok.any():
        return 0.0, 0.0
    vals = np.where(ok, curve["of_ceiling"], -np.inf)
    i = int(np.argmax(vals))
    return (float(vals[i]), float(curve["share"][i])) if vals[i] > 0 else (0.0, 0.0)


def screening(
    correct: np.ndarray,
    lengths: np.ndarray,
    G: int,
    k: int,
    stop_right: bool = True,
    stop_wrong: bool = True,
) -> dict[str, float]:
    """Screen k of G, the screen's samples kept: exact expectations from M samples per prompt.

    A group is an ordered uniform G-subset of the M samples; its first k are the screen. The
    group stops after the screen when the screen is all right (``stop_right``) or all wrong
    (``stop_wrong``); otherwise its other G - k samples are generated. A stopped group is not
    trained on; a continued group has signal (its screen disagrees) unless it ends all equal.

    Returns:
        ``stop`` (expected share of prompts stopped), ``false_stop`` (share of stopped groups
        that would have had signal), ``tpe_vs_dynamic`` (tokens per effective group / that of
        dynamic sampling, minus 1; negative is a saving).
    """
    correct = np.asarray(correct, dtype=bool)
    lengths = np.asarray(lengths, dtype=np.float64)
    N, M = correct.shape
    if not 1 <= k < G <= M:
        raise ValueError(f"screening: need 1 <= k < G <= M, got k={k}, G={G}, M={M}")
    g = group_moments(correct, lengths, G)
    c = correct.sum(1)
    w = M - c
    s_c = (lengths * correct).sum(1)
    s_w = (lengths * ~correct).sum(1)
    mean_len = (s_c + s_w) / M
    ck = math.comb(M, k)
    rest = (G - k) / (M - k)
    stop = np.zeros(N)
    lost = np.zeros(N)  # stopped groups that would have had signal
    rest_saved = np.zeros(N)  # tokens of the G - k not generated
    for on, x, s_x, s_y, q_side in (
        (stop_right, c, s_c, s_w, g["q_right"]),
        (stop_wrong, w, s_w, s_c, g["q_wrong"]),
    ):
        if not on:
            continue
        p_screen = _comb(x, k) / ck
        stop += p_screen
        lost += p_screen - q_side
        # a sample of this side is in the rest when the screen holds k of the other x - 1
        rest_saved += rest * (s_x * _comb(x - 1, k) + s_y * _comb(x, k)) / ck
    tokens = G * mean_len - rest_saved
    effective = (1.0 - g["q"]) - lost
    base = g["tokens"].sum() / (1.0 - g["q"]).sum()
    return {
        "stop": float(stop.mean()),
        "false_stop": float(lost.sum() / stop.sum()) if stop.sum() > 0 else float("nan"),
        "tpe_vs_dynamic": float(tokens.sum() / effective.sum() / base - 1.0)
        if effective.sum() > 1e-12
        else float("inf"),
    }


def expected_auc(score: np.ndarray, q: np.ndarray) -> float:
    """AUC of ``score`` for the zero-variance outcome, in expectation: prompt i is a positive
    with weight q_i and a negative with weight 1 - q_i, pairs of two different prompts (ties
    count one half)."""
    score = np.asarray(score, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    order = np.argsort(score, kind="stable")
    s, pos, neg = score[order], q[order], 1.0 - q[order]
    total = 0.0
    below = 0.0  # negative weight of strictly lower scores
    i = 0
    while i < len(s):
        j = i
        while j < len(s) and s[j] == s[i]:
            j += 1
        p, n = pos[i:j].sum(), neg[i:j].sum()
        total += p * below + 0.5 * p * n
        below += n
        i = j
    own = float((q * (1.0 - q)).sum())  # a prompt is not paired with itself
    return float((total - 0.5 * own) / (q.sum() * (1.0 - q).sum() - own))


# ------------------------------------------------------------------ measurement (workers)
def _config():
    from dataflex_rl.hosts.engine.config import load_config

    return load_config(
        {
            "policy": "tiny",
            "threads": 1,
            "eval": {"per_domain": 1, "samples": 0},
            "log": {"progress": False, "plots": False, "checkpoint_every": 0},
        }
    )


def _train(job: tuple) -> dict:
    """The plain-GRPO run: its policy at ``marks``, the keys it drew and its zero-variance
    share per step."""
    seed, steps, marks = job
    import copy

    import torch

    from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    tr = EmbeddedTrainer(_config(), "baseline", seed=seed)
    draws: list[list[str]] = []
    draw = tr.driver.draw

    def recording(n, step):
        items, doms, m = draw(n, step)
        draws.append([p.key for p in items])
        return items, doms, m

    tr.driver.draw = recording
    states, zero, tokens = {}, [], []
    for _ in range(steps):
        m = tr.train_step()
        zero.append(1.0 - m["engine/groups_effective"] / m["engine/prompts_generated"])
        tokens.append(m["engine/tokens_generated"] / m["engine/prompts_generated"])
        if tr.step in marks:
            states[tr.step] = copy.deepcopy(tr.policy.model.state_dict())
    return {
        "states": states,
        "draws": draws,
        "zero": zero,
        "tokens": tokens,
        "wall_s": time.perf_counter() - t0,
    }


def _estimate(job: tuple) -> dict:
    """M samples of each prompt the run draws at steps [start, stop) that it did not draw
    before step ``policy_step``, under the policy ``state`` of that step (None: the warm
    start)."""
    seed, label, state, policy_step, start, stop, M = job
    import torch

    from dataflex_rl.hosts.engine.noise import derive_seed, row_keys
    from dataflex_rl.hosts.engine.sampler import sample_groups
    from dataflex_rl.hosts.engine.taskio import score
    from dataflex_rl.hosts.engine.trainer import EmbeddedTrainer

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    cfg = _config()
    tr = EmbeddedTrainer(cfg, "baseline", seed=seed)
    if state is not None:
        tr.policy.model.load_state_dict(state)
    g, tok = cfg.grpo, tr.policy.tokenizer
    base = derive_seed(seed, f"bound:{label}")
    seen: set = set()
    out: dict = {"keys": [], "domain": [], "correct": [], "lengths": [], "draws": {}, "revisits": 0}
    for step in range(stop):
        items, doms, _ = tr.driver.draw(g.prompts_per_step, step)
        if step < policy_step:
            seen.update(p.key for p in items)
        if step < start:
            continue
        out["draws"][step] = [p.key for p in items]
        fresh = [(p, d) for p, d in zip(items, doms) if p.key not in seen]
        out["revisits"] += len(items) - len(fresh)
        if not fresh:
            continue
        problems = [p for p, _ in fresh]
        ids = [[tok.bos_id] + tok.encode(p.prompt) for p in problems]
        rollout = sample_groups(
            tr.policy.model,
            ids,
            M,
            g.max_new_tokens,
            eos_id=tok.eos_id,
            pad_id=tok.pad_id,
            temperature=g.temperature,
            noise_keys=row_keys(base, step, [p.key for p in problems], M),
        )
        texts = [tok.decode(row) for row in rollout.response_ids.tolist()]
        rewards = score(tr.taskset, [problems[i] for i in rollout.prompt_index.tolist()], texts)
        out["keys"] += [p.key for p in problems]
        out["domain"] += [d for _, d in fresh]
        out["correct"].append((rewards.view(-1, M) > 0.5).numpy())
        out["lengths"].append(rollout.response_mask.sum(1).view(-1, M).numpy())
    out["correct"] = np.concatenate(out["correct"])
    out["lengths"] = np.concatenate(out["lengths"])
    out["domains"] = list(tr.domains)
    out["wall_s"] = time.perf_counter() - t0
    return {"label": label, "start": start, **out}


# ------------------------------------------------------------------ report
def _pct(x: float) -> str:
    return "  n/a" if np.isnan(x) else f"{x * 100:5.1f}"


def _at_share(curve: dict, share: float) -> int:
    return int(round(share * (len(curve["share"]) - 1)))


def _analyze(
    label: str, d: dict, G: int, folds: int, run: dict | None, window: tuple[int, int]
) -> dict:
    correct, lengths = d["correct"], d["lengths"]
    N, M = correct.shape
    full = group_moments(correct, lengths, G)
    insample = skip_curve(full["q"], full["q"], full["tokens"], full["zero_tokens"])
    # cross-fit: rank by the other folds' samples, score with this fold's (unbiased given the
    # ranking), averaged over the folds
    crossed, aucs = [], []
    for f in np.array_split(np.arange(M), folds):
        rest = np.setdiff1d(np.arange(M), f)
        rank = group_moments(correct[:, rest], lengths[:, rest], G)["q"]
        ev = group_moments(correct[:, f], lengths[:, f], G)
        crossed.append(skip_curve(rank, ev["q"], ev["tokens"], ev["zero_tokens"]))
        aucs.append(expected_auc(rank, ev["q"]))
    cross = {k: np.mean([c[k] for c in crossed], 0) for k in ("share", "false_skip", "saving")}
    cross["ceiling"] = np.mean([c["ceiling"] for c in crossed])
    cross["of_ceiling"] = cross["saving"] / cross["ceiling"]
    dom = np.asarray(d["domain"])
    dom_q = np.array([full["q"][dom == i].mean() if (dom == i).any() else 0 for i in dom])
    domain = skip_curve(dom_q, full["q"], full["tokens"], full["zero_tokens"])
    auc_in = expected_auc(full["q"], full["q"])
    auc_cross = float(np.mean(aucs))
    screens = {
        (k, side): screening(correct, lengths, G, k, *flags)
        for k in (1, 2, 3, 4)
        for side, flags in SCREEN_SIDES.items()
        if not (k == 1 and side == "either")
    }
    p = correct.mean(1)
    by_domain = {
        name: (float(full["q"][dom == i].mean()), int((dom == i).sum()))
        for i, name in enumerate(d["domains"])
    }
    realized = None
    if run is not None:
        lo, hi = window
        realized = float(np.mean(run["zero"][lo:hi]))
    return {
        "label": label,
        "N": N,
        "M": M,
        "reward": float(p.mean()),
        "q": float(full["q"].mean()),
        "tokens": float(full["tokens"].mean()),
        "realized": realized,
        "window": window,
        "by_domain": by_domain,
        "insample": insample,
        "cross": cross,
        "domain": domain,
        "auc": (auc_in, auc_cross, expected_auc(dom_q, full["q"])),
        "screens": screens,
        "revisits": d["revisits"],
    }


def _print(r: dict) -> None:
    ins, cr, dm = r["insample"], r["cross"], r["domain"]
    doms = ", ".join(f"{k} {v[0]:.3f} (n={v[1]})" for k, v in r["by_domain"].items())
    real = (
        f"; the run's measured zero-variance share, steps {r['window'][0]}-{r['window'][1] - 1}: "
        f"{r['realized']:.3f}"
        if r["realized"] is not None
        else ""
    )
    print(
        f"\n== {r['label']}: {r['N']} first-visit prompts x {r['M']} samples (revisits dropped: "
        f"{r['revisits']}); mean reward {r['reward']:.3f}; E[zero-variance share] "
        f"{r['q']:.3f} (by domain: {doms}){real}; E[tokens per group] {r['tokens']:.1f}; oracle "
        f"ceiling {ins['ceiling'] * 100:.1f}% of tokens (cross-fit folds {cr['ceiling'] * 100:.1f}%)"
    )
    print(
        f"   AUC for the zero-variance outcome: oracle in-sample {r['auc'][0]:.3f}, cross-fit "
        f"{r['auc'][1]:.3f}, domain only {r['auc'][2]:.3f}"
    )
    print(
        "   skip share | false-skip %: in-sample  cross-fit  domain | of ceiling %: in-sample  "
        "cross-fit  domain"
    )
    for s in SKIP_SHARES:
        i = _at_share(ins, s)
        print(
            f"   {s * 100:9.0f}% |           {_pct(ins['false_skip'][i])}      "
            f"{_pct(cr['false_skip'][i])}   {_pct(dm['false_skip'][i])} |             "
            f"{_pct(ins['of_ceiling'][i])}      {_pct(cr['of_ceiling'][i])}   "
            f"{_pct(dm['of_ceiling'][i])}"
        )
    for lim in FALSE_SKIP_LIMITS:
        parts = []
        for name, c in (("in-sample", ins), ("cross-fit", cr), ("domain only", dm)):
            best, share = best_within(c, lim)
            parts.append(f"{name} {best * 100:.1f}% (skipping {share * 100:.1f}%)")
        print(
            f"   best share of the ceiling at false-skip <= {lim * 100:.0f}%: " + "; ".join(parts)
        )
    print("   screening k of G, screen kept | stops %  false-stop %  tokens/effective vs dynamic")
    for (k, side), s in r["screens"].items():
        print(
            f"   k={k} stop on {side:9s}          | {_pct(s['stop'])}      {_pct(s['false_stop'])}"
            f"         {s['tpe_vs_dynamic'] * 100:+6.1f}%"
        )


def _verdict(r: dict) -> str:
    hi, _ = best_within(r["insample"], 0.10)
    lo, _ = best_within(r["cross"], 0.10)
    if lo >= TARGET:
        verdict = "REACHABLE"
    elif hi < TARGET:
        verdict = "UNREACHABLE"
    else:
        verdict = "UNDECIDED"
    (k, side), s = min(r["screens"].items(), key=lambda kv: kv[1]["tpe_vs_dynamic"])
    return (
        f"{r['label']}: best prompt-only rule at false-skip <= 10% reaches {lo * 100:.0f}% "
        f"(conservative) to {hi * 100:.0f}% (optimistic) of the ceiling (target "
        f"{TARGET * 100:.0f}%): {verdict}; screening best k={k} (stop on {side}): tokens per "
        f"effective group "
        f"{s['tpe_vs_dynamic'] * 100:+.1f}% vs dynamic sampling (ceiling "
        f"-{r['insample']['ceiling'] * 100:.1f}%), false-stop {s['false_stop'] * 100:.0f}%"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=1000, help="first-visit prompts per policy")
    ap.add_argument("--samples", type=int, default=96, help="M: samples per prompt")
    ap.add_argument("--folds", type=int, default=4, help="cross-fit folds of the M samples")
    ap.add_argument("--steps", type=int, default=200, help="steps of the plain-GRPO run")
    ap.add_argument("--seed", type=int, default=0, help="seed of the run and of its draws")
    ap.add_argument("--chunks", type=int, default=4, help="jobs per policy")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    cfg = _config()
    G, P = cfg.grpo.group_size, cfg.grpo.prompts_per_step
    if args.folds < 2 or args.samples // args.folds < G:
        ap.error(
            f"--folds must be >= 2 and every fold hold >= G = {G} of the --samples "
            f"(got {args.samples} samples, {args.folds} folds)"
        )
    t0 = time.perf_counter()
    mid = args.steps // 2
    policies = [
        ("warm start", 0),
        (f"GRPO step {mid}", mid),
        (f"GRPO step {args.steps}", args.steps),
    ]
    n_steps = math.ceil(args.prompts / P)
    bounds = np.linspace(0, n_steps, args.chunks + 1).round().astype(int)

    def jobs(label, start, state):
        return [
            (args.seed, label, state, start, start + int(a), start + int(b), args.samples)
            for a, b in zip(bounds[:-1], bounds[1:])
            if b > a
        ]

    print(
        f"instrument: the embedded default (tiny policy, G={G}, {P} prompts/step, "
        f"{cfg.grpo.max_new_tokens} response tokens, temperature {cfg.grpo.temperature}, "
        f"{cfg.tasks.train_size} training prompts/domain); plain GRPO seed {args.seed}, "
        f"{args.steps} steps; per policy the first-visit prompts of steps [s, s+{n_steps}) x "
        f"M={args.samples} samples; each policy printed as it is done",
        flush=True,
    )
    results = []
    with mp.get_context("spawn").Pool(args.workers) as pool:
        train = pool.apply_async(_train, ((args.seed, args.steps, {mid, args.steps}),))
        pending = {
            policies[0][0]: [pool.apply_async(_estimate, (j,)) for j in jobs(*policies[0], None)]
        }
        run = train.get()
        print(f"plain GRPO run: {run['wall_s']:.0f}s", flush=True)
        for label, step in policies[1:]:
            pending[label] = [
                pool.apply_async(_estimate, (j,)) for j in jobs(label, step, run["states"][step])
            ]
        for label, step in policies:
            mine = sorted((p.get() for p in pending[label]), key=lambda p: p["start"])
            # the estimate drew the run's own prompts: checked where they overlap
            for part in mine:
                for s, keys in part["draws"].items():
                    if s < len(run["draws"]) and keys != run["draws"][s]:
                        raise RuntimeError(
                            f"step {s}: the estimate drew other prompts than the run"
                        )
            d = {
                "correct": np.concatenate([p["correct"] for p in mine])[: args.prompts],
                "lengths": np.concatenate([p["lengths"] for p in mine])[: args.prompts],
                "domain": sum((p["domain"] for p in mine), [])[: args.prompts],
                "domains": mine[0]["domains"],
                "revisits": sum(p["revisits"] for p in mine),
            }
            window = (max(step - 10, 0), min(step + 10, args.steps))
            results.append(_analyze(label, d, G, args.folds, run, window))
            _print(results[-1])
            print(f"   ({sum(p['wall_s'] for p in mine):.0f}s of sampling)", flush=True)
    print(f"\nwall {time.perf_counter() - t0:.0f}s")
    for r in results:
        print(_verdict(r))


if __name__ == "__main__":
    main()
