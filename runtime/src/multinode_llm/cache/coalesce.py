"""Concurrent requests for the same thing share one: the first starts it, the others wait for it.

The shared work runs as a task of its own, so a caller that leaves (its client hung up) does not
cancel it for the others. Fills share blobs the same way (fills.py); this is for the small upstream
calls (HEADs, listings), where 200 cold requests for one file must send one HEAD upstream, not 200.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class Coalescer(Generic[V]):
    def __init__(self) -> None:
        self._running: dict[Hashable, asyncio.Future[V]] = {}

    async def run(self, key: Hashable, start: Callable[[], Awaitable[V]]) -> V:
        """``start()``'s result, shared with every caller asking with ``key`` meanwhile."""
        shared = self._running.get(key)
        if shared is None:
            shared = self._running[key] = asyncio.ensure_future(start())
            shared.add_done_callback(lambda done: self._finished(key, done))
        return await asyncio.shield(shared)

    def _finished(self, key: Hashable, done: asyncio.Future[V]) -> None:
        self._running.pop(key, None)
        if not done.cancelled():
            done.exception()  # retrieved: when every caller left, nobody else will

    def __len__(self) -> int:
        return len(self._running)
