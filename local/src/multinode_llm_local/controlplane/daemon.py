"""The node daemon: every node agent of the real cluster and its volume provisioner, in one process.

``cluster up`` starts it in the host namespace as
``python -m multinode_llm_local.controlplane.daemon STATE_DIR``. Each agent talks to the API
server as its own node (``pki/node-N.kubeconfig``), the provisioner as the cluster's admin. On
SIGTERM every agent stops its pods (SIGTERM, their grace periods, SIGKILL) before the daemon exits,
as nodes being drained would.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from pathlib import Path

from multinode_llm_local.controlplane.api import Api
from multinode_llm_local.controlplane.network import ClusterNetwork
from multinode_llm_local.controlplane.node import NodeAgent
from multinode_llm_local.controlplane.provisioner import Provisioner

log = logging.getLogger("multinode_llm_local.controlplane.daemon")


async def serve(state_dir: Path) -> None:
    info = json.loads((state_dir / "cluster.json").read_text())
    network = ClusterNetwork(prefix=info["prefix"])
    apis = [Api.from_kubeconfig(state_dir / "pki" / f"{node}.kubeconfig") for node in info["nodes"]]
    admin = Api.from_kubeconfig(state_dir / "kubeconfig")
    async with admin:
        for api in apis:
            await api.__aenter__()
        agents = [
            NodeAgent(api, node, info, network, state_dir)
            for api, node in zip(apis, info["nodes"], strict=True)
        ]
        provisioner = Provisioner(admin, state_dir / "volumes")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        tasks = [asyncio.ensure_future(a.run()) for a in agents]
        tasks.append(asyncio.ensure_future(provisioner.run()))
        stopper = asyncio.ensure_future(stop.wait())
        done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stopper and task.exception() is not None:
                log.error("the node daemon failed", exc_info=task.exception())
        log.info("stopping every node's pods")
        await asyncio.gather(*(agent.stop() for agent in agents), return_exceptions=True)
        for task in tasks:
            task.cancel()
        for api in apis:
            await api.__aexit__()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="multinode_llm_local.controlplane.daemon")
    parser.add_argument("state_dir", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    asyncio.run(serve(args.state_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
