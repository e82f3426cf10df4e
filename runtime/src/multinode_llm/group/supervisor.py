"""What the head and worker supervisors share: the status server, signals, deadline-aware waits."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import errno
import logging
import signal
import socket
import time
from pathlib import Path

from multinode_llm.health.restarts import RestartsFile
from multinode_llm.health.server import StatusServer
from multinode_llm.health.state import HealthState

TICK_S = 1.0  # how often the monitor loop refreshes what the probes answer
CONNECT_TIMEOUT_S = 1.0
RESOLVE_TIMEOUT_S = 2.0  # a DNS server that does not answer must not stall a deadline


class GroupError(Exception):
    """The group cannot serve; the message says why. The supervisor exits non-zero with it.

    ``cause`` is the restart cause the next run counts (health/restarts.py); None for a failure
    that is none of them (the next run counts it as unknown).
    """

    def __init__(self, message: str, *, cause: str | None) -> None:
        super().__init__(message)
        self.cause = cause


class StopRequest(Exception):  # noqa: N818 - a request to stop, not an error
    """SIGTERM or SIGINT arrived while waiting: stop everything and exit 0."""


# A supervisor's last phases, in order: set by ``run`` and ``_stop`` below; a head in one of them
# takes no node any more (worker.py waits for its next run).
FAILED, STOPPING, STOPPED = "failed", "stopping", "stopped"
FINAL_PHASES = (FAILED, STOPPING, STOPPED)


class Supervisor:
    """Runs ``main()`` with the status port open; SIGTERM or SIGINT make it stop and exit 0."""

    def __init__(self, role: str, status_port: int, restarts_file: Path) -> None:
        self.log = logging.getLogger(f"multinode_llm.{role}")
        self.state = HealthState(role=role)
        self.restarts_file = restarts_file
        self.restarts: RestartsFile | None = None
        self.left = False  # this run recorded why it leaves
        self.server = StatusServer(self.state, status_port)
        self.stopping = asyncio.Event()
        self.failed = False  # a failed group stops its children without the courtesy of a drain
        # Work beside serving (the compile cache's publish): cancelled on every exit.
        self.background: list[asyncio.Task[None]] = []

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stop_requested, signum)
        self.restarts = RestartsFile.start(self.restarts_file)
        self.state.restarts = dict(self.restarts.counts)
        await self.server.start()
        try:
            return await self.main()
        except StopRequest:
            return 0
        except GroupError as failure:
            # First: kubelet may SIGKILL the children's stop below, and this run with it.
            self._leave(failure.cause)
            self.state.phase = FAILED
            self.failed = True
            self.log.error("%s", failure)
            await self._stop()
            # Again as the very last line, where `kubectl logs --previous` ends, below Ray's own.
            self.log.error("exit 1: %s", failure)
            return 1
        finally:
            await self._stop()

    async def _stop(self) -> None:
        if self.state.phase != STOPPED:
            self.state.phase = STOPPING
            for task in self.background:
                task.cancel()
            await self.cleanup()
            await self.server.stop()
            self.state.phase = STOPPED

    async def main(self) -> int:
        raise NotImplementedError

    async def cleanup(self) -> None:
        """Stop every child this supervisor started (called on every exit)."""

    async def pause(self, seconds: float) -> None:
        """Sleep; raise StopRequest at once when SIGTERM or SIGINT arrives."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), timeout=seconds)
        if self.stopping.is_set():
            raise StopRequest

    def _stop_requested(self, signum: int) -> None:
        self.log.info("received %s: stopping", signal.Signals(signum).name)
        if not self.stopping.is_set():
            # Kubelet stops a container whose liveness or startup probe failed with SIGTERM: the
            # failing probe says why. With every probe passing, nothing is recorded: a pod being
            # deleted takes the file with it, and any other kill is one without a word.
            self._leave(self.state.kill_cause())
        self.stopping.set()

    def _leave(self, cause: str | None) -> None:
        """Record why this run leaves; the first cause wins (a stop can fail in its turn)."""
        if cause is not None and self.restarts is not None and not self.left:
            self.left = True
            self.log.info("leaving (%s): recorded for the next start's restart count", cause)
            self.restarts.leave(cause)


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = time.monotonic()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    @property
    def remaining(self) -> float:
        return self.seconds - self.elapsed

    def passed(self) -> bool:
        return self.remaining <= 0


async def port_open(host: str, port: int, timeout: float = CONNECT_TIMEOUT_S) -> bool:
    """Whether a TCP connection to host:port succeeds: cheap proof that a server is there."""
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def http_ok(url: str, timeout: float = CONNECT_TIMEOUT_S) -> bool:
    """Whether GET ``url`` answers 200 (a status port's /ready); False on any failure."""
    import aiohttp  # not imported by `multinode-llm probe`, which imports the CLI

    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            session.get(url) as answer,
        ):
            return answer.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


async def resolve(host: str, timeout: float = RESOLVE_TIMEOUT_S) -> str | None:
    """The IPv4 (or, failing that, IPv6) address ``host`` resolves to, or None (also on timeout)."""
    lookup = asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    try:
        infos = await asyncio.wait_for(lookup, timeout)
    except (OSError, UnicodeError, TimeoutError):
        return None
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return str(infos[0][4][0]) if infos else None


class Reach(enum.Enum):
    """What one TCP connection attempt to a peer's port found."""

    OPEN = "open"  # it accepted: a server listens
    REFUSED = "refused"  # nothing listens, or the network says the host is unreachable
    SILENT = "silent"  # no answer in time: a busy or flooded peer, or a lost packet


async def reach(host: str, port: int) -> Reach:
    """One connection attempt to ``host:port`` within CONNECT_TIMEOUT_S, and what it found.

    A refusal is conclusive at once: the peer's process is gone (its pod stays, its port is
    closed), so the supervisors act on the first one. Silence is not: only a longer one counts
    (a lease, a grace period, or Ray's own health checks), so a busy peer is never cut off.
    """
    try:
        _reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port), CONNECT_TIMEOUT_S
        )
    except ConnectionRefusedError:
        return Reach.REFUSED
    except TimeoutError:
        return Reach.SILENT
    except OSError as error:
        gone = error.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH)
        return Reach.REFUSED if gone else Reach.SILENT
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return Reach.OPEN


async def refuses(host: str, port: int) -> bool:
    """Whether ``host`` says for sure that nothing listens on ``port`` (see ``reach``)."""
    return await reach(host, port) is Reach.REFUSED
