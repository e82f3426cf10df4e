"""Child processes a supervisor owns: each in its own process group, stopped gently, then surely.

Ray and vLLM both start helpers of their own (raylet, GCS, engine core). Each child runs in a new
session so that its whole process group can be killed by id, and nothing of it outlives the
supervisor. Stopping sends SIGTERM to the leader only, because Ray's `ray start --block` and vLLM's
server shut their helpers down in order when asked (signalling the whole group at once makes
`ray start` wait a minute for a GCS that is already gone), then SIGKILL to the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Mapping, Sequence

log = logging.getLogger(__name__)


class Child:
    """One started command; ``returncode`` is None while it runs."""

    def __init__(self, name: str, process: asyncio.subprocess.Process) -> None:
        self.name = name
        self.process = process

    @classmethod
    async def start(cls, name: str, argv: Sequence[str], env: Mapping[str, str]) -> Child:
        log.info("starting %s: %s", name, " ".join(argv))
        process = await asyncio.create_subprocess_exec(
            *argv, env=dict(env), start_new_session=True, stdin=asyncio.subprocess.DEVNULL
        )
        return cls(name, process)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    async def stop(self, grace_s: float) -> None:
        """SIGTERM the leader, wait up to ``grace_s``, then SIGKILL the whole process group."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), timeout=grace_s)
            except TimeoutError:
                log.warning("%s did not stop within %.0f s; killing it", self.name, grace_s)
        # The group id is the leader's pid (new session); helpers left behind go with it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        await self.process.wait()
