"""Conformance on real TRL: `DataflexGRPOTrainer` and the embedded engine run the same step on
the same scripted rollouts for every preset (refill, token selection and skip policies
included), and their traces agree column by column (docs/conformance.md).

TRL's generation is scripted through its own ``rollout_func`` (prompt and completion ids, the
sampler's log-probs), its reward through a reward function reading the same script, and its
no-gradient log-prob and entropy pass (``_get_per_token_logps_and_entropies``, what TRL and
the host call to get old log-probs and entropies) answers from the script; TRL computes the
advantages, the host draws, refills, assembles and decides as it always does."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402

from dataflex_rl import PRESETS, Strategy  # noqa: E402
from dataflex_rl.cli import main  # noqa: E402
from dataflex_rl.core.spec import parse_strategy  # noqa: E402
from tests.conformance.kit import (  # noqa: E402
    Recorder,
    Script,
    compare,
    engine_trace,
    kit_intake,
    padded,
)

DOMAINS = ("math", "logic", "science")
P, G, STEPS = 4, 4, 3
#: TRL's constant added to the group std (``GRPOTrainer``: ``std + 1e-4``); the engine's
#: ``grpo.adv_eps`` is set to it, so both compute the same advantages
TRL_EPS = 1e-4
SKIPPING = {
    "greso_strict": {
        "name": "greso_strict",
        "prerollout": {"actuator": {"name": "greso", "explore_prob": 0.0, "min_explore": 0.0}},
    },
}
#: presets TRL refuses up front: uneven groups (tests/hosts_trl/test_trl_rollouts.py)
REFUSED = [
    n
    for n in PRESETS
    if getattr(parse_strategy(n).rollouts, "mode", None) in ("allocate", "sequential")
]
NAMES = [
    n for n in PRESETS if not Strategy(n, domains=DOMAINS).feature_layer and n not in REFUSED
] + list(SKIPPING)


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    out = tmp_path_factory.mktemp("policy") / "tiny"
    assert main(["export", "policy", "--out", str(out)]) == 0
    return out


def tasks_of(name):
    from dataflex_rl.tasks import build_taskset

    spec = SKIPPING.get(name, name)
    size = 2 if "prerollout" in Strategy(spec, domains=DOMAINS).parts else 24
    return build_taskset(DOMAINS, train_size=size, difficulty=dict(math=5, logic=3, science=4))


def trl_trace(monkeypatch, spec, tasks, policy, out_dir):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dataflex_rl.hosts.trl import DataflexGRPOConfig, DataflexGRPOTrainer
    from tests.hosts_trl.trainers import grpo_args

    script = Script(group_size=G, max_len=6)
    tok = AutoTokenizer.from_pretrained(policy)
    eos, pad = tok.eos_token_id, tok.pad_token_id
    usable = [i for i in range(len(tok)) if i not in (eos, pad, tok.bos_token_id)]
    problems = [p for d in DOMAINS for p in tasks.train[d]]
    ds = Dataset.from_dict(
        {"prompt": [p.prompt for p in problems], "domain": [p.domain for p in problems]}
    )
    state = {"serial": 0}
    #: (prompt ids, completion ids) -> the script's (log-probs, entropies) of that response
    scripted: dict[tuple, tuple] = {}

    def rollout_func(prompts, trainer):  # TRL's own hook for a generation backend
        assert all(prompts[i] == prompts[i - i % G] for i in range(len(prompts)))
        outs = [script.outcome(prompts[i]) for i in range(0, len(prompts), G)]
        state["outs"] = outs
        prompt_ids, completion_ids = [], []
        for o, prompt in zip(outs, prompts[::G]):
            ids = tok(prompt)["input_ids"]
            for j, n in enumerate(o.lengths):
                # a serial number in the first two tokens: every response of the run has its
                # own ids, so the log-prob pass below can tell them apart
                k, U = state["serial"], len(usable)
                state["serial"] += 1
                assert k < U * U and n >= 3
                c = [usable[k // U], usable[k % U]] + [usable[0]] * (n - 3) + [eos]
                scripted[tuple(ids), tuple(c)] = (o.log_probs[j], o.entropies[j])
                prompt_ids.append(ids)
                completion_ids.append(c)
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": [lp for o in outs for lp in o.log_probs],
        }

    def reward(prompts, completions, **_):
        return [r for o in state["outs"] for r in o.rewards]

    block = {"strategy": spec, "domain_key": "domain", "domains": list(DOMAINS)}
    trainer = DataflexGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(policy),
        reward_funcs=reward,
        args=grpo_args(
            out_dir, DataflexGRPOConfig, dataflex=block, max_steps=STEPS, max_completion_length=8
        ),
        train_dataset=ds,
        processing_class=tok,
        rollout_func=rollout_func,
    )
    real = trainer._get_per_token_logps_and_entropies

    def logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, *a, **kw):
        if torch.is_grad_enabled():  # the loss's pass: the model's own
            return real(model, input_ids, attention_mask, logits_to_keep, *a, **kw)
        T = logits_to_keep
        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist()):
            prompt = [i for i, m in zip(ids[:-T], mask[:-T]) if m]
            completion = [i for i, m in zip(ids[-T:], mask[-T:]) if m]
            rows.append(scripted[tuple(prompt), tuple(completion)])
        logps = padded([r[0] for r in rows], T)
        ent = padded([r[1] for r in rows], T)
        return logps, ent if kw.get("compute_entropy") else None, None

    trainer._get_per_token_logps_and_entropies = logps_and_entropies
    rows = [[i for i, p in enumerate(problems) if p.domain == d] for d in DOMAINS]
    trainer.driver.intake = kit_intake(rows, DOMAINS, audits=False)
    rec = Recorder(trainer.driver, lambda row: problems[row].prompt)
    trainer.train()
    return rec.traces


@pytest.mark.parametrize("name", NAMES)
def test_trl_and_the_engine_run_the_same_step(policy, tmp_path, name):
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    spec = SKIPPING.get(name, name)
    with pytest.MonkeyPatch.context() as mp:
        engine = engine_trace(
            mp, spec, tasks_of(name), steps=STEPS, P=P, G=G, audits=False,
            grpo={"adv_eps": TRL_EPS},
        )  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        trl = trl_trace(mp, spec, tasks_of(name), policy, tmp_path / "trl")
    assert len(engine) == STEPS and engine[0].rounds[0]
    assert compare(engine, trl) == []
