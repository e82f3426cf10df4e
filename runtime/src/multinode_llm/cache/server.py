"""The cache's process: components wired together, one aiohttp server, health and metrics.

``/live`` answers 200 while the event loop turns. ``/ready`` answers 200 once the store is open and
writable (upstream is not required: a warm cache serves while the Hub is down). ``/metrics`` is
Prometheus text (see metrics.py).

Connections: a client has ``--client-timeout`` seconds to send a request's head once it connected
or its last answer ended (aiohttp's keep-alive timer, which runs before the first request too from
aiohttp 3.14.4 on), and as long again for a body; at most ``--max-connections`` are held
(``LimitedSite``). A malformed request is answered 400 by aiohttp and logged as one debug line, and
a client that hangs up is not an error: neither can be used to flood the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from multinode_llm.cache import upstream as upstream_client
from multinode_llm.cache.auth import Grants
from multinode_llm.cache.fills import Fills
from multinode_llm.cache.metadata import Metadata
from multinode_llm.cache.metrics import CONTENT_TYPE, Metrics
from multinode_llm.cache.peers import Peers, advertised_address
from multinode_llm.cache.routes import Hub, error
from multinode_llm.cache.store import Store
from multinode_llm.cache.upstream import Upstream

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SPARE_DESCRIPTORS = 512  # beyond the connections: fills, upstream and peer sockets, the store
_REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\n"
    b"Connection: close\r\n\r\n"
)


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
    upstream_timeout: float = 30.0
    client_timeout: float = 60.0
    max_connections: int = 1000


async def serve(settings: Settings) -> None:
    """Run the cache until SIGTERM or SIGINT."""
    # A connection may hold a blob open besides its socket.
    _allow_descriptors(2 * settings.max_connections + SPARE_DESCRIPTORS)
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
    upstream_session = upstream_client.session(settings.upstream_timeout)
    peer_session = upstream_client.session(settings.upstream_timeout, connect=3.0)
    upstream = Upstream(settings.upstream, upstream_session, metrics, settings.upstream_timeout)
    toward = [
        *settings.peers,
        *([f"{settings.peers_dns}:{settings.port}"] if settings.peers_dns else []),
    ]
    me = advertised_address(settings.advertise_address, settings.port, toward)
    peers = Peers(
        me, settings.port, settings.peers_dns, settings.peers, peer_session, settings.peer_interval
    )
    fills = Fills(store, metrics, peers.mark_bad, settings.upstream_timeout)
    hub = Hub(
        store=store,
        metadata=Metadata(store, settings.ref_ttl),
        upstream=upstream,
        grants=Grants(settings.auth_ttl),
        peers=peers,
        fills=fills,
        metrics=metrics,
        peer_session=peer_session,
        upstream_timeout=settings.upstream_timeout,
        client_timeout=settings.client_timeout,
    )
    _register_gauges(metrics, store, peers, fills)
    busy: set[object] = set()  # transports of connections with a request in progress
    app = web.Application(middlewares=[_guard(busy)])
    app.router.add_get("/live", _live)
    app.router.add_get("/ready", partial_ready(store))
    app.router.add_get("/metrics", partial_metrics(metrics))
    app.router.add_route("*", "/{tail:.*}", hub.handle)
    runner = web.AppRunner(
        app,
        access_log=log if log.isEnabledFor(logging.DEBUG) else None,
        logger=_RequestLog(logging.getLogger("aiohttp.server"), {}),
        keepalive_timeout=settings.client_timeout,
        lingering_time=min(2.0, settings.client_timeout),  # for the rest of a refused body
        shutdown_timeout=5,  # well inside a pod's grace period; clients resume elsewhere
    )
    await runner.setup()
    site = LimitedSite(
        runner, settings.host, settings.port, settings.max_connections, busy, metrics
    )
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


class LimitedSite(web.TCPSite):
    """A TCP site that holds at most ``limit`` connections.

    A connection past the limit takes the place of the oldest one still waiting for a request (idle
    between requests, or slow to send one); when every connection is busy, the new one is answered
    503 and closed. Probes send their request as soon as they connect, so a flood of idle
    connections cannot starve them.
    """

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        limit: int,
        busy: set[object],
        metrics: Metrics,
    ) -> None:
        super().__init__(runner, host, port, reuse_address=True)
        self.limit, self.busy, self.metrics = limit, busy, metrics
        # asyncio accepts a burst of connections before any of them is "made" (and so listed in
        # server.connections): those of the current burst are counted here.
        self._arriving: list[web.RequestHandler] = []

    async def start(self) -> None:
        # TCPSite.start with our protocol factory in place of the server's own.
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._accept, self._host, self._port, reuse_address=True
        )

    def _accept(self) -> asyncio.BaseProtocol:
        server = self._runner.server
        assert server is not None
        # A listed handler without a transport is closing already.
        open_ = [handler for handler in server.connections if handler.transport is not None]
        if len(open_) + len(self._arriving) >= self.limit:
            self.metrics.connections_shed_total += 1
            idle = next((h for h in open_ if h.transport not in self.busy), None)
            if idle is None:
                return _Refused()
            idle.force_close()
        handler = server()
        if not self._arriving:
            asyncio.get_running_loop().call_soon(self._arriving.clear)  # after this burst
        self._arriving.append(handler)
        return handler


class _Refused(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(_REFUSAL)
        transport.close()


def _guard(busy: set[object]) -> Callable[..., Any]:
    """Marks connections busy while they hold a request; turns a client that hung up into
    nothing and a bug into a 500 with one logged traceback, instead of aiohttp's own."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        busy.add(transport)
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except ConnectionError as gone:  # the client left mid-answer: nothing left to tell it
            log.debug("%s %s: the client left (%r)", request.method, request.path, gone)
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=204)  # never sent: the connection is gone
        except Exception:
            log.exception("%s %s failed", request.method, request.path)
            if request.writer.output_size and request.transport is not None:
                request.transport.abort()  # an answer was begun: a second one would corrupt it
            return error(500, "InternalError", "the cache failed on this request: see its log")
        finally:
            busy.discard(transport)

    return guard


class _RequestLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's server log, with a malformed request logged as what it is, the client's mistake:
    one debug line, not an error with a traceback that anyone could repeat to flood the log."""

    def exception(self, msg: Any, *args: Any, exc_info: Any = True, **kwargs: Any) -> None:
        if isinstance(exc_info, HttpProcessingError | ConnectionError):
            self.debug(f"{msg}: %s", *args, exc_info)
            return
        super().exception(msg, *args, exc_info=exc_info, **kwargs)


def _allow_descriptors(wanted: int) -> None:
    """Raise the soft limit on open files to what ``--max-connections`` needs, if allowed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= wanted:
        return
    granted = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (granted, hard))
    if granted < wanted:
        log.warning(
            "open files are limited to %d: --max-connections needs about %d", granted, wanted
        )


def _register_gauges(metrics: Metrics, store: Store, peers: Peers, fills: Fills) -> None:
    metrics.gauge("store_bytes", "bytes of blobs and metadata in the store", lambda: store.used)
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
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    return render
