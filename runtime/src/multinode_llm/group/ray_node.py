"""`ray start` for one pod, with the pinned ports and the pod's own temp dir, run as a child.

`ray start --block` stays in the foreground and watches the Ray processes it started, so the
supervisor owns the whole Ray node as one child: when it exits, Ray on this pod is gone. Only Ray's
public command line is used here; `ray stop` is never called (it stops every Ray on the machine).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from pathlib import Path

from multinode_llm.accelerator import Accelerator
from multinode_llm.config import Node
from multinode_llm.group import ray_logs
from multinode_llm.group.process import Child

STOP_GRACE_S = 10.0  # Ray drains a node in about a second while its GCS answers
# A failed group has nothing to drain: Ray's shutdown takes 2-3 s more after its drain, which the
# restart would wait for; its processes go with the SIGKILL of its process group instead.
FAILED_STOP_GRACE_S = 1.0
# The raylet starts one idle Python worker per CPU for the first driver that connects, for that
# driver's job only. On the head the first driver is the supervisor's own view of the cluster
# (group/cluster.py), which runs no tasks, and vLLM's actors ask for their own runtime env, so the
# workers could serve no one: they would import Ray on the cores vLLM is starting on, then idle
# for good (2 here, 0.85 CPU s; one per CPU on a GPU node). A user's own value wins.
NO_PRESTART = {"RAY_prestart_worker_first_driver": "0"}


def ray_executable() -> str:
    """The `ray` script beside this interpreter (a venv's), else the one on PATH."""
    beside = Path(sys.executable).with_name("ray")
    return str(beside) if beside.exists() else "ray"


def start_command(
    node: Node, head_address: str | None, accelerator: Accelerator | None = None
) -> list[str]:
    """`ray start`: a head when ``head_address`` is None, else a worker joining that head; the
    pod's GPUs as ``accelerator``'s Ray resource (default: Ray's own GPU)."""
    ports = node.ray_ports
    argv = [
        ray_executable(),
        "start",
        "--block",
        "--node-ip-address",
        node.pod_ip,
        *(accelerator or Accelerator()).ray_start_arguments(node.gpus),
        "--temp-dir",
        str(node.ray_temp_dir),
        "--disable-usage-stats",
        # The supervisor relays the workers' output into the pod's log (group/ray_logs.py).
        "--include-log-monitor",
        "false",
        "--node-manager-port",
        str(ports.node_manager),
        "--object-manager-port",
        str(ports.object_manager),
        "--runtime-env-agent-port",
        str(ports.runtime_env_agent),
        "--dashboard-agent-grpc-port",
        str(ports.dashboard_agent_grpc),
        "--dashboard-agent-listen-port",
        str(ports.dashboard_agent_listen),
        "--metrics-export-port",
        str(ports.metrics_export),
        "--min-worker-port",
        str(ports.min_worker),
        "--max-worker-port",
        str(ports.max_worker),
    ]
    if head_address is None:
        return [*argv, "--head", "--port", str(ports.gcs), "--include-dashboard", "false"]
    return [*argv, "--address", head_address]


class RayNode(Child):
    """`ray start --block`, and the relay of its workers' output into the pod's log."""

    def __init__(self, child: Child, relay: ray_logs.LogRelay) -> None:
        super().__init__(child.name, child.process)
        self.relay = asyncio.get_running_loop().create_task(relay.run(), name="ray-logs")

    async def stop(self, grace_s: float) -> None:
        await super().stop(grace_s)
        await ray_logs.stop(self.relay)  # after Ray: a stopped worker's last lines are relayed


async def start(node: Node, head_address: str | None, env: Mapping[str, str]) -> RayNode:
    node.ray_temp_dir.mkdir(parents=True, exist_ok=True)
    relay = ray_logs.LogRelay(node.ray_temp_dir)  # first: Ray's files of this run are newer
    command = start_command(node, head_address, Accelerator.from_env(env))
    return RayNode(await Child.start("ray", command, {**NO_PRESTART, **env}), relay)
