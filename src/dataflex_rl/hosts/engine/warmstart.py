"""Supervised warm start of the tiny policy, and ``bootstrap``: build, train, save, hash.

Deterministic: the same arguments give the same parameter hash on the same software stack and
CPU capability (float reductions differ across SIMD widths).
"""

from __future__ import annotations

import json
import math
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from dataflex_rl.core.io import atomic_write_text
from dataflex_rl.core.metrics import metric_domain
from dataflex_rl.hosts.engine.config import default_difficulty
from dataflex_rl.hosts.engine.evaluation import evaluate
from dataflex_rl.hosts.engine.policy import (
    ASSETS_DIR,
    TINY_NAME,
    Policy,
    build_tiny_policy,
    parameter_hash,
    save_policy,
)
from dataflex_rl.hosts.engine.taskio import build_tasks, taskset_charset, warm_pairs
from dataflex_rl.hosts.engine.tokenizer import CharTokenizer

MANIFEST_FILE = "MANIFEST.json"


@dataclass(frozen=True)
class BootstrapArgs:
    """Everything that determines a bootstrapped checkpoint (stored in its MANIFEST). ``lr`` is
    AdamW's peak (`lr_at`); the task-split arguments (`TASK_SPLIT_KEYS`) must equal the engine's
    ``tasks`` settings of a run from it (``warm_size`` 0 warm-starts on the GRPO pools)."""

    seed: int = 0
    steps: int = 150
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.01
    domains: tuple[str, ...] = ("math", "logic", "science")
    task_seed: int = 0
    train_size: int = 2000
    eval_size: int = 200
    eval_seed: int = 0
    difficulty: dict[str, Any] | None = None
    warm_size: int = 0


#: `BootstrapArgs` field -> engine ``tasks`` key, for the arguments that fix the task split
TASK_SPLIT_KEYS = {
    "domains": "domains",
    "task_seed": "seed",
    "train_size": "train_size",
    "eval_size": "eval_size",
    "eval_seed": "eval_seed",
    "difficulty": "difficulty",
    "warm_size": "warm_size",
}


def encode_examples(
    tokenizer: CharTokenizer, prompts: list[str], answers: list[str]
) -> tuple[Tensor, Tensor, Tensor]:
    """Right-padded supervised examples ``[bos] prompt answer [eos]``: ids [M, L] int64,
    attention mask [M, L] bool, and label mask [M, L] bool, True where the *next* token is an
    answer token or the EOS."""
    seqs, starts = [], []
    for p, a in zip(prompts, answers):
        head = [tokenizer.bos_id] + tokenizer.encode(p)
        seqs.append(head + tokenizer.encode(a) + [tokenizer.eos_id])
        starts.append(len(head))
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), tokenizer.pad_id, dtype=torch.int64)
    lengths = torch.tensor([len(s) for s in seqs])
    attn = torch.arange(L)[None, :] < lengths[:, None]
    ids[attn] = torch.tensor([t for s in seqs for t in s], dtype=torch.int64)
    pos = torch.arange(L)[None, :]
    label = (pos >= torch.tensor(starts)[:, None] - 1) & (pos < lengths[:, None] - 1)
    return ids, attn, label


def supervised_loss(model: torch.nn.Module, ids: Tensor, attn: Tensor, label: Tensor) -> Tensor:
    """Mean next-token cross-entropy over the label positions of a right-padded batch."""
    logits = model(input_ids=ids, attention_mask=attn.long(), use_cache=False).logits.float()
    logp = torch.log_softmax(logits[:, :-1], -1)
    nll = -logp.gather(2, ids[:, 1:, None]).squeeze(2)
    m = label[:, :-1].float()
    return (nll * m).sum() / m.sum().clamp(min=1)


def lr_at(step: int, total: int, peak: float) -> float:
    """Linear warm-up over 5% of ``total`` then cosine decay to 10% of ``peak``."""
    warm = max(1, total // 20)
    if step < warm:
        return peak * (step + 1) / warm
    frac = (step - warm) / max(1, total - warm)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def warm_start(
    policy: Policy,
    prompts: list[str],
    answers: list[str],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    weight_decay: float,
    seed: int,
    groups: list[int] | None = None,
    callback: Callable[[int, float], None] | None = None,
    schedule: Callable[[int], float] | None = None,
) -> list[float]:
    """Train ``policy`` in place on prompt -> answer pairs; returns the loss per step.

    Every ``groups`` id is drawn equally often (None: examples uniformly), with replacement,
    seeded by ``seed``; ``schedule``: step -> factor of ``lr`` (None: `lr_at`).
    """
    ids, attn, label = encode_examples(policy.tokenizer, prompts, answers)
    gen = torch.Generator().manual_seed(seed)
    g = torch.zeros(len(prompts), dtype=torch.int64) if groups is None else torch.tensor(groups)
    draw_weights = 1.0 / torch.bincount(g)[g].double()
    model = policy.model
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    losses = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr) if schedule is None else lr * schedule(step)
        idx = torch.multinomial(draw_weights, batch_size, replacement=True, generator=gen)
        width = int(attn[idx].sum(1).max())
        loss = supervised_loss(model, ids[idx, :width], attn[idx, :width], label[idx, :width])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if callback is not None:
            callback(step, losses[-1])
    model.eval()
    return losses


def bootstrap(
    out_dir: str | Path, args: BootstrapArgs = BootstrapArgs(), *, progress: bool = False
) -> dict[str, Any]:
    """Build the tiny policy, warm-start it on the task generators, save it into ``out_dir``
    with a MANIFEST (``args`` verbatim, parameter hash, held-out greedy accuracy, versions);
    returns the MANIFEST.

    Raises:
        ConfigError: the task settings have too few distinct prompts for the splits.
    """
    import transformers

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    if args.difficulty is None:
        args = replace(args, difficulty=default_difficulty(args.domains))
    taskset = build_tasks(
        args.domains,
        args.task_seed,
        train_size=args.train_size,
        eval_size=args.eval_size,
        eval_seed=args.eval_seed,
        difficulty=args.difficulty,
        warm_size=args.warm_size,
    )
    tokenizer = CharTokenizer.from_charset(taskset_charset(taskset))
    policy = build_tiny_policy(tokenizer, args.seed)
    prompts, answers, groups = warm_pairs(taskset)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=args.steps, desc="bootstrap", unit="step")
    warm_start(
        policy,
        prompts,
        answers,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        weight_decay=args.weight_decay,
        seed=args.seed,
        groups=groups,
        callback=(lambda _step, loss: (bar.update(1), bar.set_postfix(loss=f"{loss:.3f}")))
        if bar is not None
        else None,
    )
    if bar is not None:
        bar.close()
    acc = evaluate(policy, taskset, samples=0)
    out = save_policy(policy, out_dir)
    manifest = {
        "parameter_sha256": parameter_hash(policy.model),
        "bootstrap_args": {
            k: list(v) if isinstance(v, tuple) else v for k, v in asdict(args).items()
        },
        "tasks": taskset.summary(),
        "warm_examples": {d: groups.count(i) for i, d in enumerate(taskset.domains)},
        "heldout_greedy_accuracy": {
            d: round(acc[f"eval/{metric_domain(d)}/greedy"], 4) for d in args.domains
        },
        "num_parameters": policy.num_parameters,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        # float reductions differ across SIMD widths: the hash reproduces only on this one
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "machine": platform.machine(),
        "wall_seconds": round(time.perf_counter() - t0, 1),
    }
    atomic_write_text(out / MANIFEST_FILE, json.dumps(manifest, indent=1) + "\n")
    return manifest


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The MANIFEST.json of a bootstrapped checkpoint."""
    path = Path(directory) / MANIFEST_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no MANIFEST (not a bootstrapped checkpoint)")
    return json.loads(path.read_text())


def policy_manifest(source: str) -> dict[str, Any] | None:
    """The MANIFEST of the policy loaded from ``source`` (``"tiny"`` or a directory), or None
    when it has none."""
    directory = ASSETS_DIR / TINY_NAME if source == TINY_NAME else Path(source)
    if not (directory / MANIFEST_FILE).is_file():
        return None
    return read_manifest(directory)


def split_differences(manifest: dict[str, Any], tasks: Any) -> dict[str, tuple[Any, Any]]:
    """``tasks`` key -> (the run's value, the bootstrap's) for each task-split setting in
    which ``tasks`` (a ``TasksConfig``) differs from a bootstrap ``manifest``."""
    boot = manifest.get("bootstrap_args", {})
    out = {}
    for boot_key, key in TASK_SPLIT_KEYS.items():
        ours, theirs = getattr(tasks, key), boot.get(boot_key)
        if key == "difficulty":
            ours = default_difficulty(tasks.domains) if ours is None else ours
            theirs = default_difficulty(boot.get("domains", ())) if theirs is None else theirs
        if _plain(ours) != _plain(theirs):
            out[key] = (ours, theirs)
    return out


def _plain(value: Any) -> Any:
    """``value`` as JSON would store it (tuples become lists), for comparisons."""
    return json.loads(json.dumps(value))
