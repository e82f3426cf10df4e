"""The head's view of its Ray cluster, through Ray's public driver API (`ray.init`, `ray.nodes`).

One connection is made once and kept: asking the GCS for its node table is a local gRPC call of
well under a millisecond, where running `ray status` (or importing Ray in an exec probe) costs
seconds of CPU each time. Ray's calls block, so each runs in a daemon thread of its own: when the
GCS is gone a call can hang for a minute, and such a thread must not hold up the supervisor's exit
(the event loop's default executor would wait for it).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from multinode_llm.group.progress import RayNodeInfo

log = logging.getLogger(__name__)
T = TypeVar("T")

CALL_TIMEOUT_S = 2.0  # a local GCS answers in milliseconds; silence means trouble


class ClusterView:
    def __init__(self, address: str) -> None:
        self.address = address
        self._ray: Any = None

    async def connect(self) -> None:
        await asyncio.wait_for(_in_daemon_thread(self._connect), timeout=60)

    def _connect(self) -> None:
        import ray  # heavy; only the head's supervisor needs it, once

        # A driver that prints nothing of Ray's workers and starts no dashboard of its own.
        ray.init(address=self.address, log_to_driver=False, logging_level=logging.WARNING)
        self._ray = ray

    async def nodes(self) -> list[RayNodeInfo]:
        raw = await asyncio.wait_for(_in_daemon_thread(self._ray.nodes), timeout=CALL_TIMEOUT_S)
        return [_node_info(entry) for entry in raw]

    async def close(self) -> None:
        """Disconnect the driver before Ray stops, or Ray's client waits a minute for a dead GCS."""
        if self._ray is not None:
            ray, self._ray = self._ray, None
            try:
                await asyncio.wait_for(_in_daemon_thread(ray.shutdown), timeout=CALL_TIMEOUT_S)
            except TimeoutError:
                log.warning("disconnecting from Ray took longer than %.0f s", CALL_TIMEOUT_S)


def _in_daemon_thread(call: Callable[[], T]) -> asyncio.Future[T]:
    """Run a blocking call in a daemon thread; its result (or exception) completes the future."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def finish(outcome: Callable[[], None]) -> None:
        if not future.done():  # not cancelled by a timeout meanwhile
            outcome()

    def work() -> None:
        try:
            result = call()
        except BaseException as error:  # handed to the awaiting coroutine, which decides
            loop.call_soon_threadsafe(finish, functools.partial(future.set_exception, error))
        else:
            loop.call_soon_threadsafe(finish, functools.partial(future.set_result, result))

    threading.Thread(target=work, name="ray-call", daemon=True).start()
    return future


def _node_info(entry: dict[str, Any]) -> RayNodeInfo:
    resources = entry.get("Resources") or {}
    return RayNodeInfo(
        node_id=str(entry.get("NodeID", "")),
        ip=str(entry.get("NodeManagerAddress", "")),
        alive=bool(entry.get("Alive", False)),
        gpus=float(resources.get("GPU", 0.0)),
        raylet_port=int(entry.get("NodeManagerPort", 0) or 0),
        is_head="node:__internal_head__" in resources,
        hostname=str(entry.get("NodeManagerHostname", "")),
    )
