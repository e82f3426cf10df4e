"""Blob bodies on the wire: the kernel's sendfile from the store, Python only to start and finish.

Only verified bytes are ever sent to a client. A stored blob is sent with sendfile(2) from the event
loop's thread: the bytes go from the page cache to the socket without entering Python, which only
makes the next call each time the socket can take more (about once per socket buffer), as nginx
does. A transfer that moves no byte for ``STALL_TIMEOUT`` seconds (a client that stopped reading)
is dropped, and each byte sent is counted for the metrics. A client's request for a blob still
being filled waits for the fill to be verified before its status line, so a failed fill is answered
with a plain error (502, 507) and never with a cut body a client could resume into a wrong file. A
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
This module used to run sendfile in worker threads, one blocked in poll(2) per transfer; the kernel
does the copying either way, so the loop's one thread needs no helpers to keep many clients busy
(DEVELOPERS.md, "The Hub cache", has the figures against nginx).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from typing import BinaryIO

from aiohttp import HttpVersion11, web

from multinode_llm.cache.fills import Fill
from multinode_llm.cache.metrics import Metrics
from multinode_llm.cache.ranges import ByteRange

log = logging.getLogger(__name__)

STALL_TIMEOUT = 120.0  # seconds a client may read nothing before its transfer is dropped
INTERIM = 1.0  # seconds between interim responses to a client waiting for a fill
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
        sender = _KernelSend(transport, sock.fileno(), file.fileno(), offset, count)
        try:
            await sender.run()
        finally:
            metrics.served_bytes_total += sender.sent  # also what a dropped transfer sent
        sent = sender.sent
    if sent != count:
        raise ConnectionResetError(f"sent {sent} of {count} bytes")


class _KernelSend:
    """sendfile(2) from the event loop's thread: one call each time the socket can take more.

    The socket stays registered for writing for the whole transfer (the selector is level
    triggered: it reports the socket as long as it has room), so a turn of the loop costs one
    epoll_wait and one sendfile. The transport leaves the socket alone meanwhile: nothing else
    writes to it (the response is ours, its buffer empty) and reading is paused, as asyncio's own
    sendfile does. The transfer works on its own duplicates of the socket and the file, so a
    connection or file closed under it can never make it write into another connection or read
    from another file, and it stops once the transport is closing.
    """

    def __init__(
        self, transport: asyncio.Transport, sock_fd: int, file_fd: int, offset: int, count: int
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.transport = transport
        self.offset, self.count, self.sent = offset, count, 0
        self.done: asyncio.Future[None] = self.loop.create_future()
        self.moved = self.loop.time()  # when the socket last took a byte
        self.timer: asyncio.TimerHandle | None = None
        self.watching = False
        self.sock = os.dup(sock_fd)
        try:
            self.file = os.dup(file_fd)
        except OSError:
            os.close(self.sock)
            raise

    async def run(self) -> None:
        """Send it all, or raise: the socket's error, ConnectionResetError, TimeoutError."""
        was_reading = self.transport.is_reading()
        self.transport.pause_reading()
        try:
            self._write()  # most sockets take a first buffer's worth at once
            if not self.done.done():
                self.loop.add_writer(self.sock, self._write)
                self.watching = True
                self.timer = self.loop.call_at(self.moved + STALL_TIMEOUT, self._check_stall)
            await self.done
        finally:
            self._stop()  # also when the request's task was cancelled
            os.close(self.sock)
            os.close(self.file)
            if was_reading and not self.transport.is_closing():
                self.transport.resume_reading()

    def _write(self) -> None:
        if self.done.done():
            return
        if self.transport.is_closing():
            self._end(ConnectionResetError("the connection closed during a transfer"))
            return
        try:
            written = os.sendfile(
                self.sock, self.file, self.offset + self.sent, self.count - self.sent
            )
        except (BlockingIOError, InterruptedError):
            return  # the socket is full: wait for its room
        except OSError as error:
            self._end(error)
            return
        self.sent += written
        self.moved = self.loop.time()
        if written == 0 or self.sent == self.count:  # done, or the file ended early (_send says)
            self._end(None)

    def _check_stall(self) -> None:
        # One timer per transfer, moved on only when it fires, not once per sendfile.
        if self.loop.time() - self.moved >= STALL_TIMEOUT:
            self._end(TimeoutError(f"client read nothing for {STALL_TIMEOUT} s"))
        else:
            self.timer = self.loop.call_at(self.moved + STALL_TIMEOUT, self._check_stall)

    def _end(self, error: BaseException | None) -> None:
        self._stop()  # before the waiter wakes: no further sendfile may run
        if error is None:
            self.done.set_result(None)
        else:
            self.done.set_exception(error)

    def _stop(self) -> None:
        if self.watching:
            self.loop.remove_writer(self.sock)
            self.watching = False
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


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
