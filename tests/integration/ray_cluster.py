"""A Ray cluster of several nodes on this machine for tests (``ray.cluster_utils.Cluster``):
a head node that holds no run (0 CPUs: drivers connect there) and worker nodes of 1 CPU.

`start` and `add_node` build it in a test's process (test_ray_cluster.py).
``python -m tests.integration.ray_cluster`` holds one in a process of its own, for tests whose
Python has no Ray (tests/hosts_trl, in TRL's venv): it starts the head and nodes ``a`` and
``b``, prints ``{"address": ..., "raylets": {"a": PID, "b": PID}}`` on one line, then for each
line ``remove NAME`` on its stdin removes that node (as a machine that goes away) and prints
``removed NAME``; at the end of its stdin it shuts the cluster down.
"""

from __future__ import annotations

import json
import sys

#: the smallest object store Ray accepts is ~75 MiB; a run's task passes a few KB
STORE = 80 * 1024 * 1024


def start():
    """The cluster with its head node only (connect with ``ray.init(address=c.address)``)."""
    import ray
    from ray.cluster_utils import Cluster

    head = {"num_cpus": 0, "include_dashboard": False, "object_store_memory": STORE}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    # Cluster writes its address where a plain ray.init() of any process on this machine
    # would join it; every driver here names the address
    ray._common.utils.reset_ray_address()
    return cluster


def add_node(cluster):
    return cluster.add_node(num_cpus=1, object_store_memory=STORE)


def raylet(node) -> int:
    """The pid of the node's raylet (what its workers see as ``RAY_RAYLET_PID``)."""
    from ray._private import ray_constants

    return node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid


def main() -> int:
    cluster = start()
    try:
        nodes = {name: add_node(cluster) for name in ("a", "b")}
        cluster.wait_for_nodes()
        raylets = {name: raylet(n) for name, n in nodes.items()}
        print(json.dumps({"address": cluster.address, "raylets": raylets}), flush=True)
        for line in sys.stdin:
            verb, _, name = line.strip().partition(" ")
            if verb == "remove":
                cluster.remove_node(nodes.pop(name), allow_graceful=False)
                print(f"removed {name}", flush=True)
    finally:
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
