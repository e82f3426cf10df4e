"""Peer caches: found from a headless Service's DNS name (or listed), kept if they answer ``/live``.

Every blob has one owner: the live peer (self included) that scores highest for the blob's key under
rendezvous hashing. A node that misses asks the owner, and only the owner goes upstream, so a group
of nodes fetches each blob from the Hub once however many start at once. When a peer dies, only the
blobs it owned move (to each blob's next-ranked peer), and nodes that were reading from it carry on
from the next one in the ranking.

Peers exchange only immutable, content-addressed blobs; refs and authorization are never asked of
a peer (see routes.py), so a peer can make a transfer slow or fail, never wrong: every node verifies
every blob's hash itself. A peer that failed a transfer is left out until a probe finds it well
again after the probe interval; one that answered wrongly (a wrong byte, a wrong length, a
redirect) is left out for ``LIAR_QUARANTINE`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import socket
import time
from collections.abc import Iterable

import aiohttp

log = logging.getLogger(__name__)

PROBE_TIMEOUT = aiohttp.ClientTimeout(total=2)
LIAR_QUARANTINE = 60.0


def rendezvous(key: str, peers: Iterable[str]) -> list[str]:
    """``peers`` ordered by their score for ``key``: the first is the owner, the next its heir."""

    def score(peer: str) -> int:
        return int.from_bytes(hashlib.sha256(f"{peer}|{key}".encode()).digest()[:8], "big")

    return sorted(peers, key=score, reverse=True)


class Peers:
    """The live peer set: DNS answers and listed peers, minus those that stopped answering."""

    def __init__(
        self,
        me: str,
        port: int,
        dns_name: str | None,
        listed: Iterable[str],
        session: aiohttp.ClientSession,
        interval: float = 2.0,
    ) -> None:
        self.me = me
        self.port = port
        self.dns_name = dns_name
        self.listed = frozenset(listed) - {me}
        self.session = session
        self.interval = interval
        self.known: frozenset[str] = self.listed
        self.live: frozenset[str] = frozenset()
        self._dead_until: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    def ranking(self, key: str) -> list[str]:
        """Live peers and this node, in ``key``'s rendezvous order."""
        return rendezvous(key, self.live | {self.me})

    def mark_bad(self, peer: str, lied: bool = False) -> None:
        """Stop asking ``peer`` (a transfer from it failed, or it ``lied``) for a while."""
        self._dead_until[peer] = time.monotonic() + (LIAR_QUARANTINE if lied else self.interval)
        self.live = self.live - {peer}
        what = "answered wrongly" if lied else "failed"
        log.warning("peer %s %s; blobs it owned move to their next peer", peer, what)

    def start(self) -> None:
        if self.dns_name or self.listed:
            self._task = asyncio.create_task(self._watch(), name="peers")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def refresh(self) -> None:
        """Look the peers up again and probe each one's ``/live``."""
        found = set(self.listed)
        if self.dns_name:
            found |= await self._resolve()
        self.known = frozenset(found - {self.me})
        answers = await asyncio.gather(*(self._probe(peer) for peer in self.known))
        now = time.monotonic()
        live = {peer for peer, ok in zip(self.known, answers, strict=True) if ok}
        live = {peer for peer in live if self._dead_until.get(peer, 0) <= now}
        if live != self.live:
            log.info("live peers: %s", ", ".join(sorted(live)) or "none")
        self.live = frozenset(live)

    async def _watch(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:  # a failed round must not stop the watch
                log.exception("peer refresh failed")
            await asyncio.sleep(self.interval)

    async def _resolve(self) -> set[str]:
        assert self.dns_name is not None
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(self.dns_name, self.port, type=socket.SOCK_STREAM)
        except OSError as error:
            log.warning("peer DNS name %s does not resolve: %s", self.dns_name, error)
            return set()
        return {_address(str(info[4][0]), self.port) for info in infos}

    async def _probe(self, peer: str) -> bool:
        try:
            async with self.session.get(f"http://{peer}/live", timeout=PROBE_TIMEOUT) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def advertised_address(explicit: str | None, port: int, toward: Iterable[str]) -> str:
    """This node as peers know it: ``explicit`` (POD_IP), else the address that routes to a peer."""
    if explicit:
        return _address(explicit, port)
    for peer in toward:
        host = peer.rsplit(":", 1)[0].strip("[]")
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect((host, 9))  # a UDP connect sends nothing; it only picks a route
                return _address(probe.getsockname()[0], port)
        except OSError:
            continue
    return _address("127.0.0.1", port)
