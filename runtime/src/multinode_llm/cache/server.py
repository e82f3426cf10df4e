"""The cache's process: components wired together, one aiohttp server, health and metrics.

``/live`` answers 200 while the event loop turns. ``/ready`` answers 200 once the store is open and
writable (upstream is not required: a warm cache serves while the Hub is down). ``/metrics`` is
Prometheus text (see metrics.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

from multinode_llm.cache.auth import Decisions, Visibilities
from multinode_llm.cache.fills import Fills
from multinode_llm.cache.metadata import Metadata
from multinode_llm.cache.metrics import Metrics
from multinode_llm.cache.peers import Peers, advertised_address
from multinode_llm.cache.routes import Hub
from multinode_llm.cache.store import Store
from multinode_llm.cache.upstream import Upstream

log = logging.getLogger(__name__)

UPSTREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=60)
PEER_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=3, sock_read=30)
Handler = Callable[[web.Request], Awaitable[web.Response]]


@dataclass(frozen=True)
class Settings:
    upstream: str
    store: Path
    port: int
    host: str = "0.0.0.0"  # noqa: S104 - a cache serves its node's pods and its peers
    peers_dns: str | None = None
    peers: tuple[str, ...] = ()
    advertise_address: str | None = None
    max_store_bytes: int | None = None
    ref_ttl: float = 30.0
    auth_ttl: float = 60.0
    peer_interval: float = 2.0


async def serve(settings: Settings) -> None:
    """Run the cache until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with running(settings) as site:
        log.info("cache on %s, upstream %s, store %s", site.name, settings.upstream, settings.store)
        await stop.wait()
    log.info("cache stopped")


@contextlib.asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[web.TCPSite]:
    """The cache serving on its port for the duration of the ``async with``."""
    metrics = Metrics()
    store = Store(settings.store, settings.max_store_bytes)
    store.open()
    # trust_env: HTTPS_PROXY/NO_PROXY apply to the Hub (clusters that reach it through a proxy);
    # peers are always reached directly.
    upstream_session = aiohttp.ClientSession(
        timeout=UPSTREAM_TIMEOUT, auto_decompress=False, trust_env=True
    )
    peer_session = aiohttp.ClientSession(timeout=PEER_TIMEOUT, auto_decompress=False)
    upstream = Upstream(settings.upstream, upstream_session, metrics)
    toward = [
        *settings.peers,
        *([f"{settings.peers_dns}:{settings.port}"] if settings.peers_dns else []),
    ]
    me = advertised_address(settings.advertise_address, settings.port, toward)
    peers = Peers(
        me, settings.port, settings.peers_dns, settings.peers, peer_session, settings.peer_interval
    )
    fills = Fills(store, metrics, peers.mark_dead)
    hub = Hub(
        store=store,
        metadata=Metadata(store.meta, settings.ref_ttl),
        upstream=upstream,
        visibilities=Visibilities(upstream, settings.auth_ttl),
        decisions=Decisions(settings.auth_ttl),
        peers=peers,
        fills=fills,
        metrics=metrics,
        peer_session=peer_session,
    )
    _register_gauges(metrics, store, peers, fills)
    app = web.Application()
    app.router.add_get("/live", _live)
    app.router.add_get("/ready", partial_ready(store))
    app.router.add_get("/metrics", partial_metrics(metrics))
    app.router.add_route("*", "/{tail:.*}", hub.handle)
    runner = web.AppRunner(
        app,
        access_log=log if log.isEnabledFor(logging.DEBUG) else None,
        shutdown_timeout=5,  # well inside a pod's grace period; clients resume elsewhere
    )
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, reuse_address=True)
    await site.start()
    peers.start()
    try:
        yield site
    finally:
        await peers.stop()
        await runner.cleanup()
        await fills.stop()
        await upstream_session.close()
        await peer_session.close()


def _register_gauges(metrics: Metrics, store: Store, peers: Peers, fills: Fills) -> None:
    metrics.gauge("store_bytes", "bytes of verified blobs in the store", lambda: store.used)
    metrics.gauge("store_blobs", "blobs in the store", lambda: len(store))
    metrics.gauge("store_limit_bytes", "--max-store-size (0: none)", lambda: store.max_bytes or 0)
    metrics.gauge("evictions", "blobs evicted since start", lambda: store.evictions)
    metrics.gauge("fills_in_flight", "blobs being filled now", lambda: len(fills))
    metrics.gauge("peers_live", "peers answering, this node included", lambda: len(peers.live) + 1)


async def _live(request: web.Request) -> web.Response:
    del request
    return web.json_response({"live": True})


def partial_ready(store: Store) -> Handler:
    async def ready(request: web.Request) -> web.Response:
        del request
        if not os.access(store.partial, os.W_OK):
            return web.json_response(
                {"ready": False, "reason": f"store {store.root} is not writable"}, status=503
            )
        return web.json_response({"ready": True, "blobs": len(store), "bytes": store.used})

    return ready


def partial_metrics(metrics: Metrics) -> Handler:
    async def render(request: web.Request) -> web.Response:
        del request
        return web.Response(text=metrics.render(), content_type="text/plain", charset="utf-8")

    return render
