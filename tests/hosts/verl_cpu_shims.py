"""Test-only: run verl 0.9.1's real v1 sync pipeline on CPU. Never shipped, never imported by
the package.

Imported in every process of a test run (driver and Ray actors) through
``VERL_USE_EXTERNAL_MODULES=tests.hosts.verl_cpu_shims`` (see ``test_verl_e2e.py``). It adds:

* a ``cpu`` platform (``VERL_PLATFORM=cpu``: gloo process groups) and the ``torch.cpu``
  functions verl calls that torch lacks;
* a rollout name ``cpu_test`` with no server: generation comes from the scripted agent loop
  in `tests.hosts.verl_fake_rollout`, so the trainer builds no hybrid replicas and weight sync
  is a no-op (stock 0.9.1 generates only with vLLM/SGLang/TRT-LLM, all GPU-only);
* with ``DATAFLEX_TEST_RECORD=<dir>``: what verl computed and what reached the actor, per step.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """One fake accelerator that is the CPU (Ray is told there is one GPU)."""

    device_name = "cpu"
    vendor_name = "cpu"
    device_module = torch.cpu

    def is_available(self):
        return True

    def current_device(self):
        return "cpu"  # used as .to(device) and torch.device(...)

    def device_count(self):
        return 1

    def set_device(self, device_index):
        pass

    def synchronize(self, device_index=None):
        pass

    def manual_seed(self, seed):
        torch.manual_seed(seed)

    def manual_seed_all(self, seed):
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings):
        pass

    def empty_cache(self):
        pass

    def get_device_capability(self, device_index=0):
        return None, None

    def communication_backend_name(self):
        return "gloo"

    def visible_devices_envvar(self):
        return "CUDA_VISIBLE_DEVICES"

    def ray_resource_name(self):
        return "GPU"

    def ray_noset_envvars(self):
        return []

    def is_ipc_supported(self):
        return False

    def profiler_start(self):
        pass

    def profiler_stop(self):
        pass

    def cudart(self):
        return None

    @contextmanager
    def nvtx_range(self, msg):
        yield


def _zero(*args, **kwargs):
    return 0


def _none(*args, **kwargs):
    return None


_CPU_SHIMS = {
    "empty_cache": _none,
    "ipc_collect": _none,
    "reset_peak_memory_stats": _none,
    "memory_reserved": _zero,
    "memory_allocated": _zero,
    "max_memory_reserved": _zero,
    "max_memory_allocated": _zero,
    "mem_get_info": lambda *a, **k: (8 << 30, 16 << 30),
    "get_device_name": lambda *a, **k: "cpu",
    "set_rng_state": lambda state, *a, **k: torch.set_rng_state(state),
    "get_rng_state": lambda *a, **k: torch.get_rng_state(),
}
for _name, _fn in _CPU_SHIMS.items():  # torch.cpu lacks what verl calls on torch.cuda
    if not hasattr(torch.cpu, _name):
        setattr(torch.cpu, _name, _fn)

# verl joins "cpu:gloo,<device>:<backend>", which repeats cpu here: plain gloo instead
import verl.utils.distributed as _distributed  # noqa: E402

_init_group = _distributed.initialize_global_process_group_ray


def _gloo_group(timeout_second=None, backend=None):
    return _init_group(timeout_second=timeout_second, backend=backend or "gloo")


_distributed.initialize_global_process_group_ray = _gloo_group

# heavier verl modules only after the platform exists (some resolve it at import)
from verl.checkpoint_engine import CheckpointEngineManager  # noqa: E402
from verl.checkpoint_engine.base import (  # noqa: E402
    CheckpointEngineRegistry,
    ColocatedCheckpointEngine,
)
from verl.trainer.ppo.v1.trainer_base import PPOTrainer  # noqa: E402
from verl.utils.ray_utils import auto_await  # noqa: E402
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry  # noqa: E402


class _NoServer(RolloutReplica):
    """Registered so verl's config checks pass. No hybrid replicas are built; separate_async's
    standalone replicas (`PPOTrainerSeparateAsync._setup`) are this, serving nothing: the
    scripted agent loop never calls a server."""

    async def init_standalone(self):
        self._server_address = f"cpu_test:{self.replica_rank}"
        self._server_handle = None

    async def launch_servers(self):
        raise NotImplementedError("cpu_test replicas launch no server")


RolloutReplicaRegistry.register("cpu_test", lambda: _NoServer)


@CheckpointEngineRegistry.register("cpu_test")
class _NoSync(ColocatedCheckpointEngine):
    """separate_async refuses the ``naive`` backend (its standalone rollout is not colocated);
    the CPU runs have nothing to sync (`CheckpointEngineManager.update_weights` is a no-op)."""


PPOTrainer._enable_hybrid_replicas = False  # no inference engine on the "GPU"


async def _no_op(self, *args, **kwargs):
    return {}


# nothing to sync: no replicas (auto_await as verl's own: callable from sync and async code;
# separate_async reads update_weights' result as a dict of metrics)
CheckpointEngineManager.update_weights = auto_await(_no_op)
CheckpointEngineManager.sleep_replicas = auto_await(_no_op)


def _recorder(name: str, method):
    """Wrap a trainer method to save the TransferQueue fields of its returned batch."""
    import transfer_queue as tq

    fields = (
        "rollout_is_weights",
        "response_mask",
        "loss_mask",
        "advantages",
        "entropy",
        "rm_scores",
    )

    def wrapped(self, batch, metrics):
        out = method(self, batch, metrics)
        present = [f for f in fields if f in (out.fields or ())]
        data = tq.kv_batch_get(keys=out.keys, partition_id=out.partition_id, select_fields=present)
        record = {f: data[f].to_padded_tensor(0.0) for f in present}
        record["keys"] = list(out.keys)
        record["padding"] = [bool(t.get("is_padding", False)) for t in out.tags]
        local = int(getattr(self, "local_trigger_step", 0) or 0)  # separate_async's updates
        suffix = f"_{local}" if local else ""
        torch.save(
            record,
            os.path.join(
                os.environ["DATAFLEX_TEST_RECORD"], f"{name}_step{self.global_steps}{suffix}.pt"
            ),
        )
        return out

    return wrapped


def _record_submissions(method):
    def wrapped(self, batch):
        path = os.path.join(os.environ["DATAFLEX_TEST_RECORD"], "submitted.txt")
        with open(path, "a") as f:
            f.write(f"{self.global_steps} {' '.join(str(s) for s in batch['data_source'])}\n")
        return method(self, batch)

    return wrapped


if os.environ.get("DATAFLEX_TEST_RECORD"):
    # verl's advantage step (which the dataflex trainer extends through super()), and what
    # the actor update receives
    PPOTrainer._compute_advantage = _recorder("verl", PPOTrainer._compute_advantage)
    PPOTrainer._update_actor = _recorder("actor", PPOTrainer._update_actor)
    PPOTrainer._submit_batch_to_rollout = _record_submissions(PPOTrainer._submit_batch_to_rollout)
