"""Test-only stand-in for generation: a scripted agent loop and its rule reward.

Each dataset row says in ``extra_info.solved_by`` how many of its ``rollout.n`` sessions answer
correctly: session ``s`` answers ``ground_truth`` when ``s < solved_by``, else ``"x"``; a row with
``extra_info.solved_from = k`` is answered so only from verl's step ``k`` on (validation at step
``k`` included). So every group's solve rate is fixed by the data and the step, and the tests
know which groups a strategy keeps and what each validation measures.
Rollout log-probs are a fixed function of the prompt and position, so verl's rollout
correction has something to correct. Tiny and deterministic; no model is run here.
"""

from __future__ import annotations

import hashlib

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput


class ScriptedAgentLoop(AgentLoopBase):
    """Answers from the script in the row; registered by the YAML the e2e test writes."""

    async def run(self, sampling_params, **kwargs) -> AgentLoopOutput:
        messages = list(kwargs["raw_prompt"])
        prompt_ids = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        info = kwargs.get("extra_info") or {}
        truth = str(kwargs["reward_model"]["ground_truth"])
        step = int(kwargs["global_steps"])  # the step that submitted the prompt
        solved = int(kwargs["session_id"]) < int(info.get("solved_by", 0))
        answer = truth if solved and step >= int(info.get("solved_from", 0)) else "x"
        response_ids = self.tokenizer.encode(f"{answer} ok") + [self.tokenizer.eos_token_id]
        seed = hashlib.sha256(messages[-1]["content"].encode()).digest()
        logprobs = [-0.2 - (seed[i % len(seed)] / 255.0) for i in range(len(response_ids))]
        return AgentLoopOutput(
            prompt_ids=list(prompt_ids),
            response_ids=response_ids,
            response_mask=[1] * len(response_ids),
            response_logprobs=logprobs,
            num_turns=2,
            metrics={},
            extra_fields={
                "turn_scores": [],
                "tool_rewards": [],
                # the weights' version as verl's LLM server records it: the global step of
                # their last sync (the step before the one that submitted the prompt; verl's
                # trajectory_staleness is then 0 in sync mode, the wait in async ones)
                "min_global_steps": step - 1,
                "max_global_steps": step - 1,
            },
        )


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """1 when the response starts with the ground truth, else 0."""
    return 1.0 if solution_str.strip().startswith(str(ground_truth)) else 0.0
