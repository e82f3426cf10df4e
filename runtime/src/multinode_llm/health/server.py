"""The supervisor's status port (8081): probe answers, metrics and status from ``HealthState``.

Each request only reads the state the supervisor's monitor loop keeps fresh, so a probe costs an
HTTP round trip (about 10 ms), never a Python start-up or a Ray import.

A small HTTP/1.1 server on asyncio streams, standard library only, because the port must keep
answering kubelet while anyone who can reach the pod floods it: a flood of idle or half-sent
connections once held every file descriptor (at ``ulimit -n`` 256), kubelet's probes timed out and
a healthy group was restarted. So:

- a request head must arrive within ``header_timeout_s`` of the connection opening (or of the
  previous answer on a kept-alive one), a body within ``body_timeout_s``: slow clients are closed;
- heads and bodies are bounded (431, 413); only GET and HEAD are answered (405), and POST on the
  routes a supervisor registers (``post_routes``: the mp head's rank roster, ``/group/*``);
- at most ``max_connections`` are open, well below the fd limit: a new connection sheds the one
  that has waited longest for its request, so a probe (which sends its request at once) is
  answered even while the flood keeps coming.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import resource
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from multinode_llm.health.state import HealthState

PROBES = ("startup", "ready", "live")
_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_ACCEPT_RETRY_S = 0.5

log = logging.getLogger(__name__)

# A POST route: the request body in, (status, JSON body) out. It runs on the server's event loop,
# between two awaits, so it sees and changes the supervisor's state atomically.
PostHandler = Callable[[bytes], tuple[HTTPStatus, Any]]


def _default_max_connections() -> int:
    # A quarter of the fd limit leaves the supervisor's own pipes, sockets and logs their fds.
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(8, min(128, soft // 4)) if soft != resource.RLIM_INFINITY else 128


@dataclass(frozen=True)
class Limits:
    # A probe's whole request is one small write sent right after connecting; 5 s is the chart's
    # probe timeoutSeconds, and well above the 1 s between a worker's keep-alive polls of /status.
    header_timeout_s: float = 5.0
    body_timeout_s: float = 5.0
    write_timeout_s: float = 5.0
    max_head_bytes: int = 8192
    max_body_bytes: int = 65536  # only POST routes read a body (small JSON); others ignore it
    max_connections: int = field(default_factory=_default_max_connections)


class HttpError(Exception):
    """A request the server answers with ``status`` and then closes the connection."""

    def __init__(self, status: HTTPStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass
class _Connection:
    writer: asyncio.StreamWriter
    busy: bool = False  # between a complete request head and the end of its answer


@dataclass(frozen=True)
class _Request:
    method: str
    path: str
    keep_alive: bool
    body: bytes = b""


@dataclass(frozen=True)
class _Answer:
    status: HTTPStatus
    content_type: str
    body: bytes


class StatusServer:
    def __init__(
        self,
        state: HealthState,
        port: int,
        host: str = "0.0.0.0",  # noqa: S104 - kubelet probes the pod IP
        limits: Limits | None = None,
        post_routes: Mapping[str, PostHandler] | None = None,
    ) -> None:
        self.state = state
        self.post_routes = dict(post_routes or {})
        self.port = port
        self.host = host
        self.limits = limits or Limits()
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        # Insertion order is the order in which connections last began to wait for a request.
        self._connections: dict[asyncio.Task[None], _Connection] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        family, kind, proto, _name, address = socket.getaddrinfo(
            self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        listener = socket.socket(family, kind, proto)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(address)
            # A long queue: under a flood a probe waits its turn there rather than having its
            # SYN dropped (a retransmission costs it a second of its timeout).
            listener.listen(1024)
            listener.setblocking(False)
        except OSError:
            listener.close()
            raise
        self._listener = listener
        self.port = listener.getsockname()[1]  # the one picked when port was 0
        self._accepting = asyncio.create_task(self._accept())

    async def stop(self) -> None:
        if self._accepting is None or self._listener is None:
            return
        self._accepting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._accepting
        self._listener.close()
        for connection in self._connections.values():
            connection.writer.transport.abort()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._accepting = self._listener = None

    async def _accept(self) -> None:
        """Accept one connection per turn of the event loop (see ``_admit``), whatever happens."""
        assert self._listener is not None
        loop = asyncio.get_running_loop()
        while True:
            try:
                client, _address = await loop.sock_accept(self._listener)
            except (ConnectionError, InterruptedError):
                continue  # the client left before it was accepted
            except OSError as error:
                # Out of fds: one of ours frees one; else others hold them, and accept waits.
                if error.errno not in _OUT_OF_FDS or not self._shed_one():
                    log.warning("the status port cannot accept connections: %s", error)
                    await asyncio.sleep(_ACCEPT_RETRY_S)
                continue
            await self._admit(client)

    async def _admit(self, client: socket.socket) -> None:
        """Serve ``client`` within the connection limit, shedding the longest waiting one.

        A probe sends its request right after connecting and is answered a few loop turns later;
        since at most one connection is accepted per turn (``open_connection`` takes one), a
        flood cannot shed a probe before it is read unless ``max_connections`` newer ones arrive
        first. asyncio's own accept loop takes up to 100 at once and did shed probes so.
        """
        if len(self._connections) >= self.limits.max_connections and not self._shed_one():
            client.close()  # every connection is busy answering: refuse this one at once
            return
        try:
            reader, writer = await asyncio.open_connection(
                sock=client, limit=self.limits.max_head_bytes
            )
        except OSError:
            client.close()
            return
        # drain() then returns only once the kernel has every byte: closing after it cuts nothing.
        writer.transport.set_write_buffer_limits(high=0)
        connection = _Connection(writer)
        task = asyncio.create_task(self._serve(reader, connection))
        self._connections[task] = connection
        self._tasks.add(task)  # shed ones too, until they end: stop() waits for every one
        task.add_done_callback(self._tasks.discard)

    def _answer(self, request: _Request) -> _Answer:
        if request.method == "POST":
            try:
                status, body = self.post_routes[request.path](request.body)
            except Exception:  # a handler's bug must cost one request, not the status port
                log.exception("POST %s failed", request.path)
                return _json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error"})
            return _json(status, body)
        path = request.path
        name = path.removeprefix("/")
        if name in PROBES:
            check = getattr(self.state.probes, name)
            body = {"ok": check.ok, "reason": check.reason, "phase": self.state.phase}
            return _json(HTTPStatus.OK if check.ok else HTTPStatus.SERVICE_UNAVAILABLE, body)
        if name == "status":
            return _json(HTTPStatus.OK, self.state.status())
        if name == "metrics":
            # Imported here: the exec probe's CLI imports this module, and prometheus_client
            # would add about 50 ms to every probe.
            from multinode_llm.health import exposition

            text = exposition.metrics(self.state).encode()
            return _Answer(HTTPStatus.OK, "text/plain; version=0.0.4; charset=utf-8", text)
        return _json(HTTPStatus.NOT_FOUND, {"error": f"no route {path}"})

    # One connection ---------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, connection: _Connection) -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            await self._answer_requests(task, reader, connection)
        except HttpError as error:
            connection.busy = True  # the answer to a refused request is not shed half-written
            with contextlib.suppress(OSError, TimeoutError):
                await self._write(connection.writer, _json(error.status, {"error": str(error)}))
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            pass  # the client left, or was too slow: nothing to answer
        finally:
            self._connections.pop(task, None)
            connection.writer.transport.abort()

    def _shed_one(self) -> bool:
        """Close the connection that has waited longest for a request; False if all are busy."""
        for task, connection in self._connections.items():
            if not connection.busy:
                del self._connections[task]
                connection.writer.transport.abort()  # frees its fd now; its task ends on EOF
                return True
        return False

    async def _answer_requests(
        self, task: asyncio.Task[None], reader: asyncio.StreamReader, connection: _Connection
    ) -> None:
        while request := await self._read_request(reader):
            connection.busy = True
            answer = self._answer(request)
            await self._write(connection.writer, answer, request.keep_alive, request.method)
            if not request.keep_alive:
                return
            connection.busy = False
            # To the back of the line: it waits for its next request from now on.
            self._connections[task] = self._connections.pop(task)

    async def _read_request(self, reader: asyncio.StreamReader) -> _Request | None:
        try:
            async with asyncio.timeout(self.limits.header_timeout_s):
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as error:
            if error.partial:
                raise
            return None
        except asyncio.LimitOverrunError as error:
            raise HttpError(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                f"the request head is larger than {self.limits.max_head_bytes} bytes",
            ) from error
        request, headers = _parse_head(head)
        body = await self._read_body(reader, headers)
        if request.method == "POST" and request.path in self.post_routes:
            return _Request(request.method, request.path, request.keep_alive, body)
        if request.method not in ("GET", "HEAD"):
            raise HttpError(
                HTTPStatus.METHOD_NOT_ALLOWED, f"{request.method} is not allowed: use GET or HEAD"
            )
        return request

    async def _read_body(self, reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
        if "transfer-encoding" in headers:
            raise HttpError(HTTPStatus.LENGTH_REQUIRED, "chunked request bodies are not accepted")
        length = headers.get("content-length", "0")
        if not (length.isascii() and length.isdigit()):
            raise HttpError(HTTPStatus.BAD_REQUEST, f"Content-Length {length!r} is not a number")
        if int(length) > self.limits.max_body_bytes:
            raise HttpError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"the body is larger than {self.limits.max_body_bytes} bytes",
            )
        async with asyncio.timeout(self.limits.body_timeout_s):
            return await reader.readexactly(int(length))

    async def _write(
        self,
        writer: asyncio.StreamWriter,
        answer: _Answer,
        keep_alive: bool = False,
        method: str = "GET",
    ) -> None:
        head = (
            f"HTTP/1.1 {answer.status.value} {answer.status.phrase}\r\n"
            f"Content-Type: {answer.content_type}\r\n"
            f"Content-Length: {len(answer.body)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n"
        )
        if answer.status is HTTPStatus.METHOD_NOT_ALLOWED:
            head += "Allow: GET, HEAD\r\n"
        head += "\r\n"
        writer.write(head.encode("latin-1") + (answer.body if method != "HEAD" else b""))
        async with asyncio.timeout(self.limits.write_timeout_s):  # a client that never reads
            await writer.drain()


def _parse_head(head: bytes) -> tuple[_Request, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1") or not parts[1].startswith("/"):
        raise HttpError(HTTPStatus.BAD_REQUEST, f"not an HTTP/1.1 request line: {lines[0][:100]!r}")
    headers: dict[str, str] = {}
    for line in filter(None, lines[1:]):
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise HttpError(HTTPStatus.BAD_REQUEST, f"not a header line: {line[:100]!r}")
        headers[name.lower()] = value.strip()
    tokens = {token.strip().lower() for token in headers.get("connection", "").split(",")}
    keep_alive = "keep-alive" in tokens if parts[2] == "HTTP/1.0" else "close" not in tokens
    return _Request(parts[0], parts[1].partition("?")[0], keep_alive), headers


def _json(status: HTTPStatus, body: Any) -> _Answer:
    return _Answer(status, "application/json; charset=utf-8", json.dumps(body).encode())
