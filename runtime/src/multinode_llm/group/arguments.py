"""Flags both supervisors take. Each overrides one environment variable; None means "not given"."""

from __future__ import annotations

import argparse
from typing import Any


def add_node_arguments(parser: argparse.ArgumentParser) -> None:
    node = parser.add_argument_group("this pod (flags override the environment KServe injects)")
    node.add_argument("--pod-ip", help="this pod's address (env POD_IP, from the downward API)")
    node.add_argument(
        "--gpus", type=int, help="GPUs of this pod, given to Ray (env REQUEST_GPU_COUNT)"
    )
    node.add_argument(
        "--node-count", type=int, help="pods in the group, head included (env RAY_NODE_COUNT)"
    )
    node.add_argument(
        "--ray-port", type=int, help="the head's Ray GCS port (env RAY_PORT, default 6379)"
    )
    node.add_argument(
        "--ray-temp-dir", help="this node's Ray temp dir (env RAY_TEMP_DIR, default /tmp/ray)"
    )
    node.add_argument(
        "--wait-timeout",
        type=float,
        help="seconds to wait for the group, then exit 1 (env GROUP_WAIT_TIMEOUT, default 600)",
    )
    node.add_argument("--status-port", type=int, help="the status and probe port (default 8081)")
    node.add_argument(
        "--executor",
        choices=("ray", "mp"),
        help="how vLLM forms the group: Ray's cluster, or vLLM's own multi-node executor "
        "(KServe 0.18+'s mp mode) (env MULTINODE_LLM_EXECUTOR, default ray)",
    )
    node.add_argument(
        "--master-port",
        type=int,
        help="mp: the head's torch.distributed TCPStore port, vLLM --master-port "
        "(env MASTER_PORT, default 29500)",
    )


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {name: value for name, value in vars(args).items() if value is not None}
