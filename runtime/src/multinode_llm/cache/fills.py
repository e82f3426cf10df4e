"""Fills: a blob on its way in, hashed as it lands, readable as it grows, published only if right.

One fill per blob key however many requests want it (concurrent misses coalesce). A fill is a task
of its own, not part of any request, so a client that hangs up does not cancel it: the next client
finds the blob stored. Bytes land in a partial file that readers follow as it grows; the hash is
computed along the way and the blob is renamed into the store only if it matches its key.

Sources are tried in order (the blob's owner peer, maybe its heirs, then upstream). When one fails
mid-transfer the next continues from the byte where it stopped, with a Range request, so a peer
dying costs a retry, not a download.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import aiohttp

from multinode_llm.cache.metrics import Metrics
from multinode_llm.cache.store import BlobKey, Hash, Store, StoreFullError
from multinode_llm.cache.upstream import BadBlobResponseError, UpstreamUnreachableError

log = logging.getLogger(__name__)

CHUNK = 1 << 20  # bytes hashed and written per step; readers see progress at this grain
UPSTREAM_ATTEMPTS = 3


class FillFailedError(Exception):
    """The fill ended without a verified blob; ``status`` and ``headers`` answer waiting clients."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = dict(headers or {})


Opener = Callable[[int], AbstractAsyncContextManager[aiohttp.ClientResponse]]


@dataclass(frozen=True)
class Source:
    """Where a fill can get bytes: ``open(offset)`` yields a 200/206 response from that offset."""

    name: str
    open: Opener
    peer: str | None = None  # None: the upstream hub


@dataclass
class Fill:
    key: BlobKey
    size: int
    partial: Path
    fd: int
    written: int = 0
    answered: asyncio.Event = field(default_factory=asyncio.Event)  # a source started sending
    outcome: asyncio.Future[Path] = field(  # the verified partial file, or the failure
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    _progress: asyncio.Event = field(default_factory=asyncio.Event)

    def open_reader(self) -> BinaryIO:
        """A file object on the partial file, valid after it is renamed or the fill ends.

        Only while the fill runs: once it ends its descriptor is closed (``fd`` is -1), and the
        number may name whatever was opened since.
        """
        if self.fd < 0:
            raise RuntimeError(f"the fill of {self.key} has ended: open the stored blob instead")
        return os.fdopen(os.dup(self.fd), "rb", buffering=0)

    async def wait_for(self, offset: int) -> None:
        """Return once ``offset`` bytes are written; raise FillFailedError if it ends first."""
        while self.written < offset:
            if self.outcome.done():
                self.outcome.result()  # raises the failure
                return
            await self._progress.wait()

    async def wait_answered(self) -> None:
        """Return once a source answered (bytes are coming); raise FillFailedError if none did."""
        answered = asyncio.ensure_future(self.answered.wait())
        waiters: set[asyncio.Future[Any]] = {answered, self.outcome}
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            answered.cancel()
        if not self.answered.is_set():
            self.outcome.result()

    def advance(self, count: int) -> None:
        self.written += count
        self._wake()

    def finish(self, result: Path | BaseException) -> None:
        if isinstance(result, BaseException):
            self.outcome.set_exception(result)
            self.outcome.exception()  # mark retrieved: readers that care await it themselves
        else:
            self.outcome.set_result(result)
        self._wake()

    def _wake(self) -> None:
        event, self._progress = self._progress, asyncio.Event()
        event.set()


class Fills:
    """The fills in flight, one per blob key, and the work of running one."""

    def __init__(
        self, store: Store, metrics: Metrics, on_peer_failure: Callable[[str], None]
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.on_peer_failure = on_peer_failure
        self._active: dict[BlobKey, Fill] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._active)

    def get(self, key: BlobKey) -> Fill | None:
        return self._active.get(key)

    def start(self, key: BlobKey, size: int, sources: list[Source]) -> Fill:
        """Begin filling ``key`` (raises StoreFullError when it cannot fit)."""
        self.store.reserve(size)
        partial = self.store.new_partial(key)
        try:
            fd = os.open(partial, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as error:
            self.store.release(size)
            raise StoreFullError(f"cannot create {partial}: {error.strerror}") from error
        fill = Fill(key, size, partial, fd)
        self._active[key] = fill
        task = asyncio.create_task(self._run(fill, sources), name=f"fill {key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return fill

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(self, fill: Fill, sources: list[Source]) -> None:
        try:
            hasher = fill.key.hasher(fill.size)
            await self._ingest(fill, hasher, sources)
            digest = hasher.hexdigest()
            if digest != fill.key.digest:
                raise FillFailedError(
                    502,
                    f"upstream bytes for {fill.key} hash to {digest}: "
                    "refused, neither stored nor served",
                    {"X-Error-Code": "CorruptBlob"},
                )
            # Verified: readers may send their last bytes now, while the disk catches up (a
            # flush of many gigabytes can outlast a client's read timeout).
            fill.finish(fill.partial)
            await asyncio.get_running_loop().run_in_executor(None, os.fdatasync, fill.fd)
            self.store.publish(fill.key, fill.partial, fill.size)  # durable, then visible
            log.info("stored %s (%d bytes)", fill.key, fill.size)
        except BaseException as error:
            self.metrics.fills_failed_total += 1
            self.store.release(fill.size)
            fill.partial.unlink(missing_ok=True)
            failure = error if isinstance(error, FillFailedError) else _as_failure(error)
            log.warning("fill of %s failed: %s", fill.key, failure)
            if not fill.outcome.done():
                fill.finish(failure)
            if not isinstance(error, Exception):
                raise  # cancellation and exit go on
        finally:
            del self._active[fill.key]
            os.close(fill.fd)
            fill.fd = -1

    async def _ingest(self, fill: Fill, hasher: Hash, sources: list[Source]) -> None:
        problems: list[str] = []
        for source in sources:
            attempts = 1 if source.peer else UPSTREAM_ATTEMPTS
            for attempt in range(attempts):
                if fill.written == fill.size and fill.answered.is_set():
                    return
                try:
                    await self._copy(fill, hasher, source)
                except BadBlobResponseError as error:
                    if source.peer is None:
                        raise FillFailedError(error.status, str(error), error.headers) from error
                    problems.append(f"peer {source.name}: {error}")
                    break  # a peer that refuses will refuse again: next source
                except (
                    UpstreamUnreachableError,
                    aiohttp.ClientError,
                    TimeoutError,
                    ConnectionError,
                ) as error:
                    problems.append(f"{source.name} at byte {fill.written}: {error!r}")
                    if source.peer:
                        self.on_peer_failure(source.peer)
                        self.metrics.peer_retries_total += 1
                        break
                    await asyncio.sleep(0.5 * (attempt + 1))
                    continue
                if fill.written == fill.size:
                    return
                problems.append(f"{source.name} ended at byte {fill.written} of {fill.size}")
        raise FillFailedError(502, f"no source delivered {fill.key}: " + "; ".join(problems))

    async def _copy(self, fill: Fill, hasher: Hash, source: Source) -> None:
        loop = asyncio.get_running_loop()
        async with source.open(fill.written) as response:
            fill.answered.set()
            skip = fill.written if response.status == 200 else 0  # a source that ignored Range
            async for chunk in _chunks(response.content, CHUNK):
                if skip:
                    chunk, skip = chunk[skip:], max(0, skip - len(chunk))
                    if not chunk:
                        continue
                if fill.written + len(chunk) > fill.size:
                    raise FillFailedError(
                        502, f"{source.name} sent more than the {fill.size} bytes of {fill.key}"
                    )
                await loop.run_in_executor(None, _absorb, fill.fd, hasher, chunk, fill.written)
                if source.peer:
                    self.metrics.peer_bytes_total += len(chunk)
                else:
                    self.metrics.upstream_bytes_total += len(chunk)
                fill.advance(len(chunk))


def _absorb(fd: int, hasher: Hash, chunk: bytes, offset: int) -> None:
    """Hash and write one chunk (in a worker thread: both release the GIL for large buffers)."""
    hasher.update(chunk)
    view = memoryview(chunk)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


async def _chunks(stream: aiohttp.StreamReader, size: int) -> AsyncIterator[bytes]:
    """The stream regrouped into pieces of at least ``size`` bytes (the last may be shorter)."""
    pieces: list[bytes] = []
    held = 0
    while data := await stream.readany():
        pieces.append(data)
        held += len(data)
        if held >= size:
            yield b"".join(pieces)
            pieces, held = [], 0
    if pieces:
        yield b"".join(pieces)


def _as_failure(error: BaseException) -> FillFailedError:
    if isinstance(error, StoreFullError):
        return FillFailedError(507, str(error))
    if isinstance(error, OSError):
        return FillFailedError(507, f"writing to the store failed: {error}")
    return FillFailedError(502, f"fill failed: {error!r}")
