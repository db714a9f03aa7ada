"""The paper's method names, each expanded to a full strategy spec, registered in `PRESETS` (in
the paper's order) on the table's first use. A preset is a strategy, and its section can seed
a mechanism in a custom one (``select: {preset: difffilter, actuator: {low: 0.1}}``).
"""

from __future__ import annotations

from dataflex_rl.core.preset import PRESETS, Preset

_P = [
    Preset(
        "baseline",
        "plain GRPO: every response counts equally, domains sampled as given",
        "Shao et al. 2024, DeepSeekMath (GRPO)",
        {},
    ),
    # --- select
    Preset(
        "difffilter",
        "drop groups whose solve rate is outside (0.2, 0.8): all-correct and "
        "all-wrong groups carry no GRPO signal",
        "Yu et al. 2025, DAPO (dynamic sampling); Bae et al. 2025, online difficulty filtering",
        {
            "select": {
                "scorer": {"name": "solve_rate", "threshold": 0.5},
                "actuator": {"name": "band", "low": 0.2, "high": 0.8, "inclusive": False},
            }
        },
    ),
    Preset(
        "maxvar",
        "keep, per group, the half of the responses whose rewards have maximum variance",
        "Xu et al. 2025, PODS: Not All Rollouts are Useful (max-variance down-sampling)",
        {
            "select": {
                "scorer": "reward",
                "actuator": {"name": "max_variance", "keep_fraction": 0.5},
            }
        },
    ),
    Preset(
        "gfpo",
        "keep, per group, the half of the responses with the best reward per token",
        "Shrivastava et al. 2025, GFPO: Sample More to Think Less",
        {"select": {"scorer": "efficiency", "actuator": {"name": "gfpo", "keep_fraction": 0.5}}},
    ),
    Preset(
        "topk",
        "keep the half of the responses with the largest |advantage|",
        "advantage-magnitude top-k selection (e.g. Lin et al. 2025)",
        {
            "select": {
                "scorer": "advantage_magnitude",
                "actuator": {"name": "top_fraction", "fraction": 0.5, "by_group": False},
            }
        },
    ),
    # --- reweight
    Preset(
        "softmax",
        "weight responses by softmax(|advantage| / T), mean 1",
        "softmax prioritisation of samples by |advantage|",
        {
            "reweight": {
                "scorer": "advantage_magnitude",
                "actuator": {"name": "softmax", "temperature": 1.0},
            }
        },
    ),
    Preset(
        "per",
        "weight responses by (|advantage| + eps)^alpha, mean 1",
        "Schaul et al. 2016, Prioritized Experience Replay",
        {
            "reweight": {
                "scorer": "advantage_magnitude",
                "actuator": {"name": "per", "alpha": 0.6, "eps": 0.01},
            }
        },
    ),
    Preset(
        "diffband",
        "double the weight of responses whose group solve rate lies in [0.2, 0.8], mean 1",
        "difficulty-band reweighting (soft counterpart of difffilter)",
        {
            "reweight": {
                "scorer": {"name": "solve_rate", "threshold": 0.5},
                "actuator": {"name": "band_weight", "low": 0.2, "high": 0.8, "inside": 2.0},
            }
        },
    ),
    Preset(
        "ar",
        "token weights alpha * p_t + (1 - alpha), p_t the sampling probability of the "
        "token, mean 1",
        "probability-aware token reweighting (low-probability tokens count less)",
        {"reweight": {"scorer": "token_prob", "actuator": {"name": "ar", "alpha": 0.5}}},
    ),
    # --- mix
    Preset(
        "static",
        "fixed domain proportions (uniform unless given)",
        "fixed data mixture",
        {"mix": {"actuator": {"name": "static", "floor": 0.0}}},
    ),
    Preset(
        "reward_gap",
        "sample lagging domains more: p = softmax((max_d r_d - r_d) / T) over "
        "windowed mean rewards",
        "reward-gap domain mixing",
        {
            "mix": {
                "scorer": {"name": "domain_reward", "window": 10},
                "actuator": {"name": "reward_gap", "temperature": 0.1, "floor": 0.05},
                "warmup_steps": 5,
                "every": 5,
            }
        },
    ),
    Preset(
        "dump_ucb",
        "UCB over domains: windowed mean |advantage| + c sqrt(2 ln N / n_d), softmax(value / T)",
        "Wang et al. 2025, DUMP: distribution-level curriculum learning for RL post-training",
        {
            "mix": {
                "scorer": {"name": "domain_advantage_magnitude", "window": 10},
                "actuator": {"name": "ucb", "c": 1.0, "temperature": 0.1, "floor": 0.05},
                "warmup_steps": 5,
                "every": 5,
            }
        },
    ),
    Preset(
        "tscl",
        "sample domains by learning progress: |slope| of the per-step mean reward "
        "over a window, softmax(progress / T)",
        "Matiisen et al. 2017, Teacher-Student Curriculum Learning",
        {
            "mix": {
                "scorer": {"name": "learning_progress", "window": 10, "signed": False},
                "actuator": {"name": "softmax", "temperature": 0.01, "floor": 0.05},
                "warmup_steps": 5,
                "every": 5,
            }
        },
    ),
    # --- beyond the seed paper
    Preset(
        "dapo",
        "dynamic sampling: drop groups whose rewards are all equal (zero variance: no GRPO "
        "signal) and refill the batch with new prompts (as many per round as expected to fill "
        "it), up to 4 refill rounds per step",
        "Yu et al. 2025, DAPO: an open-source LLM reinforcement learning system at scale "
        "(dynamic sampling)",
        {
            "select": {
                "scorer": "reward_std",
                "actuator": {"name": "band", "low": 0.0, "high": None, "inclusive": False},
            },
            "refill": {"max_rounds": 4, "overdraw": True},
        },
    ),
    Preset(
        "high_entropy",
        "policy gradient only on the top 20% highest-entropy tokens of the batch (the "
        "policy's entropy at each response token)",
        "Wang et al. 2025, Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive "
        "Effective RL for LLM Reasoning (arXiv 2506.01939)",
        {
            "tokens": {
                "scorer": "token_entropy",
                "actuator": {"name": "top_tokens", "fraction": 0.2, "scope": "batch"},
            }
        },
    ),
    Preset(
        "dapo_entropy",
        "dapo and high_entropy in one strategy: drop the zero-variance groups and refill the "
        "batch (up to 4 rounds), then train on the top 20% highest-entropy tokens of the kept "
        "groups; the loss is averaged over every token of the kept groups",
        "Yu et al. 2025, DAPO (dynamic sampling); Wang et al. 2025, Beyond the 80/20 Rule "
        "(arXiv 2506.01939)",
        {
            "select": {
                "scorer": "reward_std",
                "actuator": {"name": "band", "low": 0.0, "high": None, "inclusive": False},
            },
            "tokens": {
                "scorer": "token_entropy",
                "actuator": {"name": "top_tokens", "fraction": 0.2, "scope": "batch"},
            },
            "refill": {"max_rounds": 4, "overdraw": True},
        },
    ),
    Preset(
        "ragen_snr",
        "SNR-aware filtering: keep the fewest groups holding 90% of the batch's reward "
        "variance (groups in decreasing variance; zero-variance groups never kept)",
        "Wang et al. 2026, RAGEN-2: Reasoning Collapse in Agentic RL (arXiv 2604.06268), "
        "SNR-aware filtering (top-p 0.9, the authors' setting)",
        {
            "select": {
                "scorer": "reward_variance",
                "actuator": {"name": "top_p_mass", "p": 0.9},
            }
        },
    ),
    Preset(
        "nemotron_curriculum",
        "draw each domain's prompts by a Gaussian (width 0.15) over their estimated pass rate "
        "whose centre falls linearly from 0.8 to 0.3 over 200 steps; the domain counts follow "
        "the mix as without it",
        "NVIDIA 2025, Nemotron 3 Nano technical report (arXiv 2512.20848) sec. 3.2.2, "
        "per-domain Gaussian sampling over pass rate with a centre that decreases over "
        "training (centre, width and length here are this library's choice)",
        {
            "curriculum": {
                "actuator": {
                    "name": "target_difficulty",
                    "schedule": "linear",
                    "start": 0.8,
                    "end": 0.3,
                    "steps": 200,
                    "width": 0.15,
                }
            }
        },
    ),
    Preset(
        "maxrl",
        "difficulty-weighted advantages: each group's advantages become (r - mean) / mean "
        "(about 1/p on a hard prompt's successes; 0 for a group without success)",
        "Tajwar, Zeng et al. 2026, Maximum Likelihood Reinforcement Learning (MaxRL, "
        "arXiv 2602.02710)",
        {"reweight": {"scorer": "reward", "actuator": {"name": "maxrl"}}},
    ),
    Preset(
        "reinforce_ada",
        "per-prompt rollouts until signal: a prompt whose responses all score alike is "
        "sampled again, G more per round, up to 3 extra rounds; the update trains on a "
        "balanced subset of G responses per prompt (half above its mean reward)",
        "Xiong et al. 2025, Reinforce-Ada: an adaptive sampling framework for "
        "Reinforce-style LLM training (arXiv 2510.04996), sequential sampling until a "
        "prompt's group holds both outcomes, then a balanced fixed-size group (the round "
        "count is this library's choice)",
        {"rollouts": {"mode": "until_signal", "max_rounds": 3}},
    ),
    Preset(
        "knapsack_rl",
        "per-prompt rollout allocation: the step's G x prompts responses are shared among "
        "its prompts (2 to 32 each) by a greedy knapsack on each prompt's estimated pass "
        "rate p, value (1 - p^n - (1-p)^n) p (1-p)^2; groups of uneven size",
        "Li et al. 2025, Knapsack RL: unlocking exploration of LLMs via optimizing budget "
        "allocation (arXiv 2509.25849), task value = P(non-zero gradient) x InfoGain, "
        "InfoGain ~ p(1-p)^2 (bounds and the domain-rate prior are this library's choice)",
        {
            "rollouts": {
                "mode": "allocate",
                "min_responses": 2,
                "max_responses": 32,
                "value": "knapsack",
                "prior_weight": 4.0,
            }
        },
    ),
    Preset(
        "adaptive_rollout",
        "per-prompt rollouts within the step's budget: 2 responses each, then 2 more per "
        "round to every prompt whose responses all score alike (fewest first), until the "
        "step's G x prompts responses are spent or 6 rounds ran; the update trains on every "
        "response, groups of uneven size",
        "Zhang et al. 2025, Improving Sampling Efficiency in RLVR through Adaptive Rollout "
        "and Response Reuse (AR3PO, arXiv 2509.25808): more responses for prompts without "
        "signal, sampled in stages (the fixed per-step budget, the stopping rule -- both "
        "outcomes -- and the round sizes are this library's choice; no response reuse)",
        {"rollouts": {"mode": "sequential", "first": 2, "per_round": 2, "max_rounds": 6}},
    ),
]

for _preset in _P:
    PRESETS.register(_preset)
