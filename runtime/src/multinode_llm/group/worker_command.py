"""`multinode-llm worker`: its arguments, and the supervisor its executor asks for
(group/worker.py with Ray, group/mp_worker.py with vLLM's own executor)."""

from __future__ import annotations

import argparse
import asyncio
import os

from multinode_llm.config import worker_config
from multinode_llm.group import arguments
from multinode_llm.group.mp_worker import MpWorkerSupervisor
from multinode_llm.group.worker import WorkerSupervisor


def add_arguments(parser: argparse.ArgumentParser) -> None:
    arguments.add_node_arguments(parser)
    parser.add_argument(
        "--head-address",
        help="the head's host name or IP (default: HEAD_SVC.POD_NAMESPACE.svc.CLUSTER_DOMAIN)",
    )


def run(args: argparse.Namespace) -> int:
    config = worker_config(os.environ, arguments.overrides(args))
    supervisor = MpWorkerSupervisor(config) if config.node.mp else WorkerSupervisor(config)
    return asyncio.run(supervisor.run())
