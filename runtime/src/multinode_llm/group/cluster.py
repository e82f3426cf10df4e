"""The head's view of its Ray cluster, through Ray's public driver API (`ray.init`, `ray.nodes`).

One connection is made once and kept: asking the GCS for its node table is a local gRPC call of
well under a millisecond, where running `ray status` (or importing Ray in an exec probe) costs
seconds of CPU each time. Ray's calls block, so they run in a thread.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from multinode_llm.group.progress import RayNodeInfo

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 5.0


class ClusterView:
    def __init__(self, address: str) -> None:
        self.address = address
        self._ray: Any = None

    async def connect(self) -> None:
        await asyncio.wait_for(asyncio.to_thread(self._connect), timeout=60)

    def _connect(self) -> None:
        import ray  # heavy; only the head's supervisor needs it, once

        # A driver that prints nothing of Ray's workers and starts no dashboard of its own.
        ray.init(address=self.address, log_to_driver=False, logging_level=logging.WARNING)
        self._ray = ray

    async def nodes(self) -> list[RayNodeInfo]:
        raw = await asyncio.wait_for(asyncio.to_thread(self._ray.nodes), timeout=CALL_TIMEOUT_S)
        return [_node_info(entry) for entry in raw]

    async def close(self) -> None:
        """Disconnect the driver before Ray stops, or Ray's client waits a minute for a dead GCS."""
        if self._ray is not None:
            ray, self._ray = self._ray, None
            try:
                await asyncio.wait_for(asyncio.to_thread(ray.shutdown), timeout=CALL_TIMEOUT_S)
            except TimeoutError:
                log.warning("disconnecting from Ray took longer than %.0f s", CALL_TIMEOUT_S)


def _node_info(entry: dict[str, Any]) -> RayNodeInfo:
    resources = entry.get("Resources") or {}
    return RayNodeInfo(
        node_id=str(entry.get("NodeID", "")),
        ip=str(entry.get("NodeManagerAddress", "")),
        alive=bool(entry.get("Alive", False)),
        gpus=float(resources.get("GPU", 0.0)),
        raylet_port=int(entry.get("NodeManagerPort", 0) or 0),
        is_head="node:__internal_head__" in resources,
    )
