"""Blob bodies on the wire: the kernel's sendfile from the store, Python only to start and finish.

Only verified bytes are ever sent to a client. A stored blob is sent with sendfile(2): the bytes go
from the page cache to the socket without entering Python, which only makes the next call each time
the socket can take more (about once per socket buffer), from a sender loop, a thread with its own
epoll as an nginx worker has (one per transfer, up to ``SENDER_LOOPS``, one per core, so that a few
clients use every core), on a corked socket as nginx's ``tcp_nopush`` (full segments only). A
transfer that moves no byte for ``STALL_TIMEOUT`` seconds (a client that stopped reading) is
dropped, and each byte sent is counted for the metrics. A client's request for a blob still being
filled waits for the fill to be verified before its status line, so a failed fill is answered with
a plain error (502, 507) and never with a cut body a client could resume into a wrong file. A
peer's request (``send_filling``) is answered as the bytes land, since the peer hashes them itself:
its status line once the first byte it asked for is in, the blob's last byte once the fill is
verified, and the connection cut (never a clean short end) when the fill fails or starts over.
While either waits, an HTTP/1.1 client gets a ``100 Continue`` every ``INTERIM`` seconds: interim
responses every client skips (RFC 9110 15.2; Python's http.client, httpx, aiohttp, hyper and curl
do), which keep its read timeout from expiring during a long fill.

aiohttp's ``web.FileResponse`` is not used for stored blobs, though it does Range and sendfile. It
has no bound on a client that stops reading, puts its own entity tag (the file's mtime and size)
over the Hub's ``ETag`` and judges ``If-Match``/``If-None-Match`` against it (a client's
``If-Match`` with the Hub's tag would get 412), answers 416 where RFC 9110 says to ignore a Range
(another unit, several ranges, ``bytes=1-0``; ranges.py sends the whole file), and cannot count the
bytes it sent. asyncio's ``loop.sendfile``, which FileResponse uses, is only the fallback here (see
``_send``): it adds the socket to epoll and removes it again around every wait, and bounds nothing.
This module used to run sendfile in a pool of worker threads, each looping on sendfile until EAGAIN
and then blocking in poll(2): three system calls per socket buffer where a sender loop makes two.
On the event loop's own thread alone, eight clients at once got about 0.6x nginx's rate on the
loaded 2-core development machine (DEVELOPERS.md, "The Hub cache", has the figures).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import selectors
import socket
import threading
import time
from collections.abc import Mapping
from typing import BinaryIO

from aiohttp import HttpVersion11, web

from multinode_llm.cache.fills import Fill
from multinode_llm.cache.metrics import Metrics
from multinode_llm.cache.ranges import ByteRange

log = logging.getLogger(__name__)

STALL_TIMEOUT = 120.0  # seconds a client may read nothing before its transfer is dropped
INTERIM = 1.0  # seconds between interim responses to a client waiting for a fill
# Threads that run sendfile, at most: one per core, as nginx's `worker_processes auto`. More loops
# than cores only add context switches: eight clients on two cores cost 1.3-1.4x nginx's CPU per
# GB with a loop each, 0.8-0.9x with two (bench/cache_vs_nginx.py, 2026-12-03).
SENDER_LOOPS = os.cpu_count() or 1
SENDER_IDLE = 5.0  # seconds a sender loop waits for a transfer before it ends (and frees its fds)
# Bytes per call of asyncio's sendfile (the fallback), each call given STALL_TIMEOUT.
LOOP_PIECE = 8 << 20
_INTERIM_RESPONSE = b"HTTP/1.1 100 Continue\r\n\r\n"


_DISCONNECTS = (ConnectionError, TimeoutError)


async def start_body(
    request: web.Request, headers: Mapping[str, str], size: int, byte_range: ByteRange | None
) -> tuple[web.StreamResponse, int, int]:
    """Send status and headers for ``byte_range`` (or all) of a blob: (response, start, length)."""
    response = web.StreamResponse(status=206 if byte_range else 200, headers=headers)
    response.headers["Accept-Ranges"] = "bytes"
    response.headers["Content-Type"] = "application/octet-stream"
    if byte_range:
        response.headers["Content-Range"] = byte_range.content_range(size)
        start, length = byte_range.start, byte_range.length
    else:
        start, length = 0, size
    response.content_length = length
    await response.prepare(request)
    return response, start, length


async def send_stored(
    request: web.Request,
    response: web.StreamResponse,
    file: BinaryIO,
    start: int,
    length: int,
    metrics: Metrics,
) -> None:
    """Send ``length`` bytes of a stored blob from ``start``."""
    try:
        await _send(request, response, file, start, length, metrics)
        await response.write_eof()
    except _DISCONNECTS as error:
        log.debug("client left during a transfer of %d bytes: %r", length, error)
        if request.transport is not None:
            request.transport.abort()  # a body cut short must not look like a slow one


async def wait_verified(request: web.Request, fill: Fill) -> None:
    """Return once ``fill`` is verified, with interim responses meanwhile (or FillFailedError)."""
    while True:
        try:
            await asyncio.wait_for(asyncio.shield(fill.outcome), INTERIM)
            return
        except TimeoutError:
            if request.version >= HttpVersion11:  # HTTP/1.0 knows no interim responses
                await request.writer.write(_INTERIM_RESPONSE)


async def wait_landed(request: web.Request, fill: Fill, offset: int) -> None:
    """Return once ``fill`` holds the byte at ``offset`` (or is verified), with interim responses
    meanwhile; FillFailedError when it failed first, so the reader gets a plain error."""
    loop = asyncio.get_running_loop()
    next_interim = loop.time() + INTERIM
    while fill.written <= offset and not fill.outcome.done():
        try:
            async with asyncio.timeout_at(next_interim):
                await fill.moved()
        except TimeoutError:
            next_interim = loop.time() + INTERIM
            if request.version >= HttpVersion11:
                await request.writer.write(_INTERIM_RESPONSE)
    if fill.outcome.done():
        fill.outcome.result()


async def send_filling(
    request: web.Request,
    response: web.StreamResponse,
    file: BinaryIO,
    fill: Fill,
    start: int,
    length: int,
    metrics: Metrics,
) -> None:
    """Send ``length`` bytes of ``fill`` from ``start`` as they land, the last only once verified.

    The connection is cut (the reader sees an error, never a short body it could take for whole)
    when the fill fails or starts over, or when the client stops reading.
    """
    generation, sent, end = fill.generation, 0, start + length
    try:
        while sent < length:
            if fill.failed or fill.generation != generation:
                raise FillBrokeError(f"the fill of {fill.key} broke off at byte {fill.written}")
            # The blob's last byte waits for the verdict: a whole body means a verified one.
            landed = fill.size if fill.outcome.done() else min(fill.written, fill.size - 1)
            ready = min(landed, end) - (start + sent)
            if ready <= 0:
                await fill.moved()
                continue
            await _send(request, response, file, start + sent, ready, metrics)
            sent += ready
        await response.write_eof()
    except (*_DISCONNECTS, FillBrokeError) as error:
        log.debug("streaming %d bytes of a fill ended early: %r", length, error)
        if request.transport is not None:
            request.transport.abort()


class FillBrokeError(Exception):
    """The fill a reader follows failed or started over: what it sent so far is void."""


async def _send(
    request: web.Request,
    response: web.StreamResponse,
    file: BinaryIO,
    offset: int,
    count: int,
    metrics: Metrics,
) -> None:
    if count <= 0:
        return
    transport = request.transport
    if transport is None or transport.is_closing():
        raise ConnectionResetError("client connection closed")
    sock = transport.get_extra_info("socket")
    # Bytes the transport still holds (headers a full socket did not take) must go first: asyncio's
    # own sendfile waits for them, the kernel path cannot.
    if sock is None or transport.get_write_buffer_size():
        sent = await _send_in_loop(response, transport, file, offset, count)
        metrics.served_bytes_total += sent
    else:
        sent = await _send_by_kernel(
            transport, sock.fileno(), file.fileno(), offset, count, metrics
        )
    if sent != count:
        raise ConnectionResetError(f"sent {sent} of {count} bytes")


async def _send_by_kernel(
    transport: asyncio.Transport,
    sock_fd: int,
    file_fd: int,
    offset: int,
    count: int,
    metrics: Metrics,
) -> int:
    """Hand the transfer to a sender loop and wait for it: the bytes sent, or its error.

    The transport leaves the socket alone meanwhile: nothing else writes to it (the response is
    ours, its buffer empty) and reading is paused, as asyncio's own sendfile does.
    """
    transfer = _Transfer(asyncio.get_running_loop(), sock_fd, file_fd, offset, count)
    was_reading = transport.is_reading()
    transport.pause_reading()
    sender = _SENDERS.submit(transfer)
    try:
        await transfer.outcome
    finally:
        _SENDERS.release(sender, transfer)  # also ends the transfer if its task was cancelled
        metrics.served_bytes_total += transfer.sent  # also what a dropped transfer sent
        if was_reading and not transport.is_closing():
            transport.resume_reading()
    return transfer.sent


class _Transfer:
    """One body: ``count`` bytes of a file from ``offset``, to a socket, by sendfile(2).

    It works on its own duplicates of the socket and the file, which its sender loop closes, so a
    connection or file closed under it can never make it write into another connection or read
    from another file.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, sock_fd: int, file_fd: int, offset: int, count: int
    ) -> None:
        self.loop = loop
        self.outcome: asyncio.Future[None] = loop.create_future()
        self.offset, self.count, self.sent = offset, count, 0
        self.moved = time.monotonic()  # when the socket last took a byte
        self.stopped = False  # set by the event loop: end it now
        self.sock = os.dup(sock_fd)
        try:
            self.file = os.dup(file_fd)
        except OSError:
            os.close(self.sock)
            raise
        _cork(self.sock, True)

    def step(self) -> BaseException | bool | None:
        """One sendfile, as much as the socket takes: True while more is to come, else the end
        (None: all sent, or the file ended early, which ``_send`` reports)."""
        try:
            written = os.sendfile(
                self.sock, self.file, self.offset + self.sent, self.count - self.sent
            )
        except (BlockingIOError, InterruptedError):
            return True  # the socket is full: wait for its room
        except OSError as error:
            return error
        self.sent += written
        self.moved = time.monotonic()
        return True if written and self.sent < self.count else None

    def settle(self, error: BaseException | None) -> None:
        """In the event loop: the transfer's end (its waiter may have been cancelled already)."""
        if self.outcome.done():
            return
        if error is None:
            self.outcome.set_result(None)
        else:
            self.outcome.set_exception(error)


def _cork(fd: int, on: bool) -> None:
    """TCP_CORK on the socket while sendfile runs, off at its end (which sends what is left), as
    nginx's `tcp_nopush` does. aiohttp sets TCP_NODELAY, so without it every sendfile that the
    socket's room cut short sent a part-filled segment: one client got 0.7x nginx's rate for 1.4x
    its CPU per GB, corked 1.0x for 1.0x (bench/cache_vs_nginx.py, 2026-12-03)."""
    with contextlib.suppress(OSError):  # not TCP (a test's Unix socket): nothing to cork
        sock = socket.socket(fileno=fd)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, int(on))
        finally:
            sock.detach()


class _SendLoop:
    """A thread with its own epoll that runs sendfile for every transfer handed to it, as an
    nginx worker does: the socket stays registered for writing for the whole transfer (epoll is
    level triggered here: it reports the socket as long as it has room), so a turn costs one
    epoll_wait and one sendfile per ready socket, outside the GIL. A transfer whose socket took no
    byte for STALL_TIMEOUT seconds (a client that stopped reading) is dropped.
    """

    def __init__(self, name: str, senders: _Senders) -> None:
        self.senders = senders
        self.selector = selectors.DefaultSelector()
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_write, False)
        self.selector.register(self.wake_read, selectors.EVENT_READ, None)
        self.arrivals: collections.deque[_Transfer] = collections.deque()
        self.active: set[_Transfer] = set()
        self.load = 0  # transfers handed over and not released; changed under _Senders.lock
        self.next_check = self.busy = time.monotonic()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def submit(self, transfer: _Transfer) -> None:
        self.arrivals.append(transfer)
        self._wake()

    def stop(self, transfer: _Transfer) -> None:
        transfer.stopped = True
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # the pipe is full: it is awake already
            os.write(self.wake_write, b"\0")

    def _run(self) -> None:
        while not self._retired():
            try:
                self._turn()
            except Exception:  # a bug: logged, and the loop goes on serving its other transfers
                log.exception("sender loop failed in a turn")
        self.selector.close()
        os.close(self.wake_read)
        os.close(self.wake_write)

    def _retired(self) -> bool:
        """Idle for SENDER_IDLE: a burst's loops do not hold threads and descriptors for good."""
        if self.active or time.monotonic() - self.busy < SENDER_IDLE:
            return False
        return self.senders.retire(self)

    def _turn(self) -> None:
        for key, _ in self.selector.select(timeout=1.0):
            if key.data is None:
                self._take()
            elif key.data in self.active:  # not ended earlier in this turn: its fds are open
                ended = key.data.step()
                if ended is not True:
                    self._end(key.data, ended)
        if time.monotonic() >= self.next_check:
            self._check()

    def _take(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self.wake_read, 4096)
        while self.arrivals:
            transfer = self.arrivals.popleft()
            self.active.add(transfer)
            self.selector.register(transfer.sock, selectors.EVENT_WRITE, transfer)
        for transfer in [each for each in self.active if each.stopped]:
            self._end(transfer, ConnectionResetError("the transfer was stopped"))

    def _check(self) -> None:
        now = time.monotonic()
        self.next_check = now + 1.0
        if self.active:
            self.busy = now
        for transfer in [each for each in self.active if now - each.moved >= STALL_TIMEOUT]:
            self._end(transfer, TimeoutError(f"client read nothing for {STALL_TIMEOUT} s"))

    def _end(self, transfer: _Transfer, error: BaseException | None) -> None:
        self.busy = time.monotonic()
        self.active.discard(transfer)
        self.selector.unregister(transfer.sock)
        _cork(transfer.sock, False)
        os.close(transfer.sock)
        os.close(transfer.file)
        with contextlib.suppress(RuntimeError):  # the event loop closed meanwhile
            transfer.loop.call_soon_threadsafe(transfer.settle, error)


class _Senders:
    """The sender loops: one more whenever each has a transfer, up to SENDER_LOOPS, then shared.

    A loop per transfer lets the transfers of a few clients use every core (nginx runs a worker
    per core); past SENDER_LOOPS, a new transfer joins the loop with the fewest.
    """

    def __init__(self) -> None:
        self.loops: list[_SendLoop] = []
        # Held to hand a transfer over or to let a loop end, so that none ends holding one; also
        # guards caches in several event loops of one process (the tests).
        self.lock = threading.Lock()

    def submit(self, transfer: _Transfer) -> _SendLoop:
        with self.lock:
            loop = min(self.loops, key=lambda each: each.load, default=None)
            if loop is None or (loop.load and len(self.loops) < SENDER_LOOPS):
                loop = _SendLoop(f"sendfile-{len(self.loops)}", self)
                self.loops.append(loop)
            loop.load += 1
            loop.submit(transfer)
            return loop

    def release(self, loop: _SendLoop, transfer: _Transfer) -> None:
        with self.lock:  # the loop cannot retire before this stop: its pipe is still open
            loop.load -= 1
            if not transfer.outcome.done() or transfer.outcome.cancelled():
                loop.stop(transfer)

    def retire(self, loop: _SendLoop) -> bool:
        with self.lock:
            if loop.load or loop.arrivals:
                return False
            self.loops.remove(loop)
            return True


_SENDERS = _Senders()


async def _send_in_loop(
    response: web.StreamResponse,
    transport: asyncio.Transport,
    file: BinaryIO,
    offset: int,
    count: int,
) -> int:
    """The event loop's sendfile, a piece at a time, each piece bounded by STALL_TIMEOUT."""
    loop, sent = asyncio.get_running_loop(), 0
    while sent < count:
        piece = min(LOOP_PIECE, count - sent)
        async with asyncio.timeout(STALL_TIMEOUT):
            try:
                done = await loop.sendfile(transport, file, offset + sent, piece)
            except NotImplementedError:  # a transport without sendfile: copy through Python
                done = await _copy(response, file, offset + sent, piece)
        if done == 0:
            break
        sent += done
    return sent


async def _copy(response: web.StreamResponse, file: BinaryIO, offset: int, count: int) -> int:
    loop = asyncio.get_running_loop()
    sent = 0
    while sent < count:
        chunk = await loop.run_in_executor(
            None, _read_at, file, offset + sent, min(1 << 20, count - sent)
        )
        if not chunk:
            break
        await response.write(chunk)
        sent += len(chunk)
    return sent


def _read_at(file: BinaryIO, offset: int, count: int) -> bytes:
    return os.pread(file.fileno(), count, offset)
