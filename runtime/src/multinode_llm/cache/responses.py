"""Blob bodies on the wire: the kernel's sendfile from the store, Python only to start and finish.

A stored blob is sent with sendfile(2): the bytes go from the page cache to the socket without
entering Python, from worker threads so that many transfers use every core. A blob still being
filled is sent the same way, a stretch at a time as the fill grows, except for its last byte, which
waits for the blob's hash to check out: if it does not, the connection is cut, so no client ever
completes a download of unverified bytes.
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

from aiohttp import web

from multinode_llm.cache.fills import Fill, FillFailedError
from multinode_llm.cache.metrics import Metrics
from multinode_llm.cache.ranges import ByteRange

log = logging.getLogger(__name__)

FOLLOW_STEP = 4 << 20  # a reader of a fill waits for this much more before the next sendfile
STALL_TIMEOUT = 120.0  # seconds a client may read nothing before its transfer is dropped
_POLL_MS = 1000


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
_DISCONNECTS = (ConnectionError, TimeoutError, asyncio.CancelledError)


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
    except _DISCONNECTS:
        log.debug("client left during a transfer of %d bytes", length)


async def send_following(
    request: web.Request,
    response: web.StreamResponse,
    fill: Fill,
    file: BinaryIO,
    start: int,
    length: int,
    metrics: Metrics,
) -> None:
    """Send ``length`` bytes from ``start`` of a blob still filling (``file``, from
    ``fill.open_reader()``); the last byte once verified."""
    last = start + length - 1  # held back until the hash checks out
    try:
        position = start
        while position < last:
            await fill.wait_for(min(position + FOLLOW_STEP, last))
            ready = min(fill.written, last) - position
            await _send(request, response, file, position, ready, metrics)
            position += ready
        await asyncio.shield(fill.outcome)
        if length:
            await _send(request, response, file, last, 1, metrics)
        await response.write_eof()
    except FillFailedError as failure:
        log.warning("cutting a transfer of %s: %s", fill.key, failure)
        if request.transport is not None:
            request.transport.abort()  # the client sees a short body, never a bad complete one
    except _DISCONNECTS:
        log.debug("client left during a transfer of %s", fill.key)


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
        try:
            sent = await asyncio.get_running_loop().sendfile(transport, file, offset, count)
        except NotImplementedError:  # a transport without sendfile: copy through Python
            sent = await _copy(response, file, offset, count)
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
