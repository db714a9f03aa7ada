"""Test-only: build a tiny model, tokenizer and dataset, then run ``python -m
verl.trainer.main_ppo`` (the real v1 sync pipeline) on CPU with the shims of
`tests.hosts.verl_cpu_shims`. Used by ``test_verl_e2e.py``; runnable by hand::

    .venv-verl/bin/python -m tests.hosts.verl_e2e_run /tmp/run difffilter
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHAT = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_model(out: Path) -> Path:
    """A 2-layer Qwen2 (hidden 64) with a byte-level tokenizer of 259 tokens, built in code."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    if (out / "config.json").exists():
        return out
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {t: i for i, t in enumerate(specials + sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=CHAT
    ).save_pretrained(out)
    import torch

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=len(vocab),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    Qwen2ForCausalLM(cfg).save_pretrained(out)
    return out


def build_dataset(path: Path, rows: list[tuple]) -> Path:
    """One verl-schema row per (domain, solved_by[, solved_from]): the script of
    `verl_fake_rollout` (solved_from: the first step it is answered as solved_by says, 0)."""
    import pandas as pd

    records = [
        {
            "prompt": [{"role": "user", "content": f"{row[0]} question {i}"}],
            "data_source": row[0],
            "domain": row[0],
            "reward_model": {"style": "rule", "ground_truth": str(i % 10)},
            "extra_info": {
                "index": i,
                "solved_by": row[1],
                "solved_from": row[2] if len(row) > 2 else 0,
            },
        }
        for i, row in enumerate(rows)
    ]
    pd.DataFrame(records).to_parquet(path)
    return path


def base_overrides(work: Path) -> list[str]:
    """The settings of every CPU run that are not the run's own (seeds, files, budget, output):
    the tiny model on CPU, scripted generation (`verl_fake_rollout`), one fake GPU."""
    loops = work / "agent_loops.yaml"
    loops.write_text(
        "- name: scripted\n  _target_: tests.hosts.verl_fake_rollout.ScriptedAgentLoop\n"
    )
    return [
        "algorithm.adv_estimator=grpo",
        "data.max_prompt_length=64",
        "data.max_response_length=16",
        "data.dataloader_num_workers=0",
        "data.shuffle=false",
        "+actor_rollout_ref.model.override_config.attn_implementation=eager",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.ref.strategy=fsdp2",
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False",
        "actor_rollout_ref.actor.use_torch_compile=False",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.rollout.name=cpu_test",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.nnodes=1",  # no hybrid replicas: "standalone", unused
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.rollout.agent.default_agent_loop=scripted",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops}",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        f"reward.custom_reward_function.path={ROOT / 'tests/hosts/verl_fake_rollout.py'}",
        "reward.num_workers=1",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        "trainer.project_name=dataflex_e2e",
        "+ray_kwargs.ray_init.num_gpus=1",
        "ray_kwargs.ray_init.num_cpus=32",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    ]


#: environment of every CPU run (VERL_USE_EXTERNAL_MODULES: the shims, in every process)
CPU_ENV = {
    "VERL_PLATFORM": "cpu",
    "VERL_ENGINE_DEVICE": "cuda",
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_NUM_THREADS": "1",
    "RAY_DEDUP_LOGS": "0",
    "WANDB_MODE": "disabled",
    "HYDRA_FULL_ERROR": "1",
}
SHIMS = "tests.hosts.verl_cpu_shims"


def overrides(
    work: Path, data: Path, model: Path, steps: int, extra: list[str], mode: str = "dataflex"
) -> list[str]:
    return [
        *base_overrides(work),
        f"trainer.v1.trainer_mode={mode}",
        f"data.train_files={data}",
        f"data.val_files={data}",
        "data.train_batch_size=4",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.rollout.n=4",
        "trainer.logger=[console,file]",
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        f"trainer.default_local_dir={work / 'ckpt'}",
        "trainer.experiment_name=run",
        "+dataflex.poll_interval=0.1",
        *extra,
    ]


def run(
    work: Path,
    data: Path,
    model: Path,
    steps: int,
    extra: list[str],
    tag: str,
    timeout: float = 480,
    *,
    mode: str = "dataflex",
    env: dict[str, str] | None = None,
) -> tuple[list[dict], Path]:
    """Run the pipeline in trainer mode ``mode`` (``env``: more environment); returns
    (per-step logged metrics, record dir)."""
    record = work / f"record_{tag}"
    record.mkdir(parents=True, exist_ok=True)
    metrics_path = work / f"metrics_{tag}.jsonl"
    env = {
        **os.environ,
        **CPU_ENV,
        # this checkout's package first (a worktree beside an editable install of another)
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
        ),
        "VERL_USE_EXTERNAL_MODULES": SHIMS,
        "VERL_FILE_LOGGER_PATH": str(metrics_path),
        "DATAFLEX_TEST_RECORD": str(record),
        "RAY_ADDRESS": "local",
        **(env or {}),
    }  # a fresh cluster even if the test process runs one
    cmd = [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        *overrides(work, data, model, steps, extra, mode),
    ]
    log = work / f"log_{tag}.txt"
    with open(log, "w") as f:
        proc = subprocess.run(
            cmd, cwd=work, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout
        )
    if proc.returncode != 0:
        tail = log.read_text()[-6000:]
        raise RuntimeError(f"verl run {tag!r} failed ({proc.returncode}); log tail:\n{tail}")
    lines = metrics_path.read_text().splitlines() if metrics_path.exists() else []
    return [json.loads(x)["data"] | {"step": json.loads(x)["step"]} for x in lines], record


if __name__ == "__main__":
    work = Path(sys.argv[1])
    work.mkdir(parents=True, exist_ok=True)
    model = build_model(work / "model")
    data = build_dataset(
        work / "train.parquet", [("math", 2), ("logic", 4), ("math", 0), ("logic", 2)] * 4
    )
    steps, _ = run(work, data, model, 2, [f"+dataflex.strategy={sys.argv[2]}"], "manual")
    for s in steps:
        print(s["step"], {k: v for k, v in s.items() if k.startswith(("dataflex/", "actor/"))})
