"""Blob bodies on the wire: the kernel's sendfile from the store, Python only to start and finish.

Only verified bytes are ever sent to a client. A stored blob is sent with sendfile(2): the bytes go
from the page cache to the socket without entering Python, from worker threads so that many
transfers use every core. A client's request for a blob still being filled waits for the fill to be
verified before its status line, so a failed fill is answered with a plain error (502, 507) and
never with a cut body a client could resume into a wrong file. A peer's request (``send_filling``)
is answered as the bytes land, since the peer hashes them itself: its status line once the first
byte it asked for is in, the blob's last byte once the fill is verified, and the connection cut
(never a clean short end) when the fill fails or starts over. While either waits, an HTTP/1.1 client
gets a ``100 Continue`` every ``INTERIM`` seconds: interim responses every client skips (RFC 9110
15.2; Python's http.client, httpx, aiohttp, hyper and curl do), which keep its read timeout from
expiring during a long fill.

aiohttp's ``web.FileResponse`` is not used for stored blobs, though it does Range and sendfile. It
sends from the event loop's one thread with no bound on a client that stops reading (here: the
worker threads and ``STALL_TIMEOUT``), puts its own entity tag (the file's mtime and size) over the
Hub's ``ETag`` and judges ``If-Match``/``If-None-Match`` against it (a client's ``If-Match`` with
the Hub's tag would get 412), answers 416 where RFC 9110 says to ignore a Range (another unit,
several ranges, ``bytes=1-0``; ranges.py sends the whole file), and cannot count the bytes it sent.
Measured on the 2-core development machine, eight concurrent warm downloads of a 256 MiB blob got
about 15% less from it (DEVELOPERS.md, "The Hub cache").
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO

from aiohttp import HttpVersion11, web

from multinode_llm.cache.fills import Fill
from multinode_llm.cache.metrics import Metrics
from multinode_llm.cache.ranges import ByteRange

log = logging.getLogger(__name__)

STALL_TIMEOUT = 120.0  # seconds a client may read nothing before its transfer is dropped
INTERIM = 1.0  # seconds between interim responses to a client waiting for a fill
LOOP_PIECE = 8 << 20  # bytes per event-loop sendfile, each given STALL_TIMEOUT
_POLL_MS = 1000
_INTERIM_RESPONSE = b"HTTP/1.1 100 Continue\r\n\r\n"


class _Senders:
    """Threads for sendfile; when all are busy, a transfer runs in the event loop, not a queue."""

    def __init__(self, threads: int) -> None:
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="sendfile")
        self.threads = threads
        self.busy = 0

    @property
    def available(self) -> bool:
        return self.busy < self.threads


_SENDERS = _Senders(32)
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
    if sock is not None and not transport.get_write_buffer_size() and _SENDERS.available:
        sent = await _send_in_thread(transport, sock.fileno(), file, offset, count)
    else:
        sent = await _send_in_loop(response, transport, file, offset, count)
    metrics.served_bytes_total += sent
    if sent != count:
        raise ConnectionResetError(f"sent {sent} of {count} bytes")


async def _send_in_thread(
    transport: asyncio.Transport, sock_fd: int, file: BinaryIO, offset: int, count: int
) -> int:
    """sendfile(2) from a worker thread, so that transfers to many clients use every core.

    The event loop's own ``loop.sendfile`` runs each transfer's syscalls on the loop's one thread;
    here the thread blocks in poll(2) while the socket is full. The loop leaves the socket alone
    meanwhile: nothing else writes to it (the response is ours) and reading is paused, as
    ``loop.sendfile`` does too. The thread works on its own duplicates of the socket and the
    file, so a connection or file closed under it can never make it write into another
    connection or read from another file.
    """
    was_reading = transport.is_reading()
    transport.pause_reading()
    stop = threading.Event()
    sock_copy, file_copy = os.dup(sock_fd), os.dup(file.fileno())
    loop = asyncio.get_running_loop()
    _SENDERS.busy += 1
    try:
        return await loop.run_in_executor(
            _SENDERS.pool, _sendfile_blocking, sock_copy, file_copy, offset, count, stop
        )
    finally:
        _SENDERS.busy -= 1
        stop.set()  # also ends the thread's work if this coroutine was cancelled
        if was_reading and not transport.is_closing():
            transport.resume_reading()


def _sendfile_blocking(
    sock_fd: int, file_fd: int, offset: int, count: int, stop: threading.Event
) -> int:
    poller = select.poll()
    poller.register(sock_fd, select.POLLOUT)
    sent, stalled = 0, 0.0
    try:
        while sent < count and not stop.is_set():
            try:
                written = os.sendfile(sock_fd, file_fd, offset + sent, count - sent)
            except BlockingIOError:
                if poller.poll(_POLL_MS):
                    stalled = 0.0
                else:
                    stalled += _POLL_MS / 1000
                    if stalled >= STALL_TIMEOUT:
                        raise TimeoutError(f"client read nothing for {STALL_TIMEOUT} s") from None
                continue
            if written == 0:  # the file ended early
                break
            sent += written
        return sent
    finally:
        os.close(sock_fd)
        os.close(file_fd)


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
