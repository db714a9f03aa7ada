"""Test stand-ins for what TRL's ``AsyncGRPOTrainer`` needs outside this CPU machine.

- `StandInWorker`: a rollout worker (``RolloutWorkerProtocol``) in place of the vLLM server and
  TRL's ``AsyncRolloutWorker``: it samples with its own copy of the policy, scores with the
  reward function and computes advantages as ``AsyncRolloutWorker._score_group`` does. It is
  deterministic: a group is generated when the trainer asks the queue for a sample and none is
  left, ``burst`` groups at a time with the policy version it was last told, so the later groups
  of a burst are trained on after weight syncs (staleness > 0). It records every group.
- `CopyWeights`: weight transfer (``WeightTransferProtocol``) into the worker's copy.
- `cpu_async_trl(monkeypatch)`: three GPU- or server-only calls of TRL 1.16, stood in on CPU:
  ``packing._flash_attn`` (the FA3 varlen kernel fetched from the Hub; here the same masked
  attention in torch), ``get_peak_flops_per_device`` (asks CUDA for the device name; None is
  what TRL returns for an unknown device) and ``VLLMClient`` (constructed even when weight
  transfer is injected; never called here).
"""

from __future__ import annotations

import queue

import numpy as np
import torch


class CpuVarlen:
    """``flash_attn_varlen_func`` in torch: segment i's queries attend, causally aligned to the
    end, to its keys ``cu_k[i]:cu_k[i+1]`` (grouped-query heads repeated)."""

    @staticmethod
    def flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale=None, **_):
        out = torch.empty_like(q)
        rep = q.shape[1] // k.shape[1]
        for i in range(cu_q.numel() - 1):
            a, b, c, d = int(cu_q[i]), int(cu_q[i + 1]), int(cu_k[i]), int(cu_k[i + 1])
            qs = q[a:b].transpose(0, 1)
            ks = k[c:d].repeat_interleave(rep, 1).transpose(0, 1)
            vs = v[c:d].repeat_interleave(rep, 1).transpose(0, 1)
            mask = torch.arange(d - c)[None, :] <= torch.arange(b - a)[:, None] + (d - c) - (b - a)
            att = torch.nn.functional.scaled_dot_product_attention(
                qs, ks, vs, attn_mask=mask, scale=softmax_scale
            )
            out[a:b] = att.transpose(0, 1)
        return out


class _NoServer:
    def __init__(self, *args, **kwargs) -> None:
        pass

    def __getattr__(self, name):
        raise AssertionError(f"the test stand-in has no vLLM server (VLLMClient.{name})")


def cpu_async_trl(monkeypatch) -> None:
    from trl.experimental.async_grpo import async_grpo_trainer, packing

    monkeypatch.setattr(packing, "_flash_attn", lambda: CpuVarlen)
    monkeypatch.setattr(async_grpo_trainer, "get_peak_flops_per_device", lambda acc, dt: None)
    monkeypatch.setattr(async_grpo_trainer, "VLLMClient", _NoServer)


class _LazyQueue:
    def __init__(self, worker: StandInWorker) -> None:
        self.worker = worker
        self.items: list = []

    def get(self, timeout=None):
        if not self.items:
            self.worker.generate(self.worker.burst)
        return self.items.pop(0)

    def get_nowait(self):
        raise queue.Empty

    def qsize(self) -> int:
        return len(self.items)


class StandInWorker:
    """``records``: per generated group, (group id, policy version, rewards [G])."""

    def __init__(self, policy, tokenizer, dataset, reward, *, G, max_new_tokens, burst, seed=0):
        from trl.experimental.async_grpo.async_rollout_worker import RolloutSample

        self.Sample = RolloutSample
        self.policy, self.tok, self.data, self.reward = policy, tokenizer, dataset, reward
        self.G, self.max_new, self.burst = G, max_new_tokens, burst
        self.rollout_buffer = _LazyQueue(self)
        self.metrics_queue = queue.Queue()
        self.version = 0
        self.next_group = 0
        self.records: list[tuple[int, int, list[float]]] = []
        self.gen = torch.Generator().manual_seed(seed)

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def check_health(self, stale_after_s) -> None: ...

    def update_model_version(self, version: int) -> None:
        self.version = version

    def generate(self, groups: int) -> None:
        tok, G = self.tok, self.G
        for _ in range(groups):
            gid = self.next_group
            self.next_group += 1
            row = self.data[gid % len(self.data)]
            ids = tok(row["prompt"])["input_ids"]
            x = torch.tensor([ids] * G)
            with torch.no_grad():
                torch.manual_seed(int(torch.randint(1 << 30, (1,), generator=self.gen)))
                out = self.policy.generate(
                    x,
                    do_sample=True,
                    max_new_tokens=self.max_new,
                    pad_token_id=tok.pad_token_id,
                    eos_token_id=tok.eos_token_id,
                )
                logits = self.policy(out).logits.float()
            logps = torch.log_softmax(logits[:, :-1], -1).gather(2, out[:, 1:, None])[..., 0]
            texts = [tok.decode(o[len(ids) :], skip_special_tokens=True) for o in out]
            extra = {k: [row[k]] * G for k in row if k != "prompt"}
            r = np.array(self.reward(prompts=[row["prompt"]] * G, completions=texts, **extra))
            adv = (r - r.mean()) / (r.std() + 1e-8)  # as AsyncRolloutWorker._score_group
            self.records.append((gid, self.version, r.tolist()))
            for j in range(G):
                done = (out[j, len(ids) :] != tok.pad_token_id).nonzero()
                end = len(ids) + (int(done.max()) + 1 if done.numel() else 0)
                seq = out[j, :end].numpy()
                mask = np.zeros_like(seq)
                mask[len(ids) :] = 1
                old = np.zeros(len(seq), np.float32)
                old[1:] = logps[j, : end - 1].numpy()
                self.rollout_buffer.items.append(
                    self.Sample(
                        prompt=row["prompt"],
                        completion=texts[j],
                        input_ids=seq,
                        completion_mask=mask,
                        old_log_probs=old,
                        advantage=float(adv[j]),
                        model_version=self.version,
                        group_id=gid,
                        metrics={"reward": float(r[j])},
                    )
                )


class CopyWeights:
    """Weight transfer into the stand-in worker's policy (by parameter name)."""

    def __init__(self, worker: StandInWorker) -> None:
        self.worker = worker
        self.syncs = 0

    def init_weight_transfer(self) -> None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def destroy(self) -> None: ...

    def send_weights(self, iterator) -> None:
        state = {name: t.detach().clone() for name, t in iterator}
        self.worker.policy.load_state_dict(state, strict=False)
        self.syncs += 1
