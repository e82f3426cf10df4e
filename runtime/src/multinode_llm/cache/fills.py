"""Fills: a blob on its way in, hashed as it lands, readable only once its hash matched its key.

One fill per blob key however many requests want it (concurrent misses coalesce). A fill is a task
of its own, not part of any request, so a client that hangs up does not cancel it: the next client
finds the blob stored. Bytes land in a partial file; a client's reader waits for the fill's outcome
and sends only verified bytes (responses.py), so no client ever holds a byte of a blob that then
fails its hash, and none can assemble a wrong file from a cut body and a resumed range. A peer's
reader (which verifies every byte itself) follows the partial file as it grows (``written``,
``moved``): it gets the blob's last byte only once the fill is verified, and is cut off when the
fill fails or starts over (``generation``), so a node downloading from its owner is never a whole
file behind.

Sources are tried in order (the blob's owner peer, maybe its heirs, then upstream). When one fails
mid-transfer the next continues from the byte where it stopped, with a Range request, so a peer
dying costs a retry, not a download. A peer is trusted no more than upstream: one that answers
wrongly (a status other than 200/206, a length that is not the blob's, more bytes than the blob) is
dropped and left out for a while (peers.py), and bytes that fail the hash start the fill over from
upstream, every peer that fed them left out (a hash says the blob is wrong, not which source lied).
Upstream gets ``UPSTREAM_ATTEMPTS`` tries, so one flipped byte costs a retry, not a download.

Every attempt ends: each ``CHUNK`` must arrive within ``--upstream-timeout`` seconds, the whole
attempt (waiting for the answer included: a peer may be filling the blob itself first) within that
timeout per ``CHUNK`` of the blob, and a source may not send more than the blob's size.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import aiohttp

from multinode_llm.cache.metrics import Metrics
from multinode_llm.cache.store import BlobKey, Hash, Store, StoreFullError
from multinode_llm.cache.upstream import UpstreamError, chunks, describe

log = logging.getLogger(__name__)

CHUNK = 1 << 20  # bytes hashed and written per step; also the unit of the minimum rate
UPSTREAM_ATTEMPTS = 3
_ERROR_HEADERS = ("X-Error-Code", "X-Error-Message")


class FillFailedError(Exception):
    """The fill ended without a verified blob; ``status`` and ``headers`` answer waiting clients."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = dict(headers or {})


class SourceError(Exception):
    """One source failed one attempt. ``lied``: it answered, wrongly (rather than went away);
    ``final``: upstream refused the file (a 4xx the client should see), so no retry helps."""

    def __init__(
        self,
        message: str,
        *,
        lied: bool = False,
        final: bool = False,
        status: int = 502,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.lied, self.final, self.status = lied, final, status
        self.headers = dict(headers or {})


Opener = Callable[[int], AbstractAsyncContextManager[aiohttp.ClientResponse]]


@dataclass(frozen=True)
class Source:
    """Where a fill can get bytes: ``open(offset)`` yields the answer to a GET from ``offset``."""

    name: str
    open: Opener
    peer: str | None = None  # None: the upstream hub


@dataclass
class Fill:
    key: BlobKey
    size: int
    partial: Path
    fd: int
    hasher: Hash
    written: int = 0
    fed_by: set[str] = field(default_factory=set)  # peers whose bytes are in since the last start
    generation: int = 0  # start-overs so far: bytes a reader took before one are void
    outcome: asyncio.Future[None] = field(  # done once verified; or the failure
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    _moved: asyncio.Event = field(default_factory=asyncio.Event)

    async def moved(self) -> None:
        """Return at the fill's next change: more bytes written, a start-over, its end."""
        await self._moved.wait()

    def notify_readers(self) -> None:
        self._moved.set()
        self._moved = asyncio.Event()

    @property
    def failed(self) -> bool:
        return self.outcome.done() and (
            self.outcome.cancelled() or self.outcome.exception() is not None
        )

    def open_reader(self) -> BinaryIO:
        """A file object on the partial file, which stays the blob's after its rename.

        Only while the fill runs: once it ends its descriptor is closed (``fd`` is -1), and the
        number may name whatever was opened since.
        """
        if self.fd < 0:
            raise RuntimeError(f"the fill of {self.key} has ended: open the stored blob instead")
        return os.fdopen(os.dup(self.fd), "rb", buffering=0)

    def start_over(self) -> set[str]:
        """Forget the bytes so far (they failed the hash); the peers that fed any of them."""
        liars, self.fed_by = self.fed_by, set()
        self.written, self.hasher = 0, self.key.hasher(self.size)
        self.generation += 1
        self.notify_readers()
        return liars


class Fills:
    """The fills in flight, one per blob key, and the work of running one."""

    def __init__(
        self,
        store: Store,
        metrics: Metrics,
        on_bad_peer: Callable[[str, bool], None],
        timeout: float,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.on_bad_peer = on_bad_peer  # (peer, lied)
        self.timeout = timeout
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
            raise self.store.full_error(error) from error
        fill = Fill(key, size, partial, fd, key.hasher(size))
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
            await self._ingest(fill, sources)
            # Verified: readers may send now, while the disk catches up (a flush of many
            # gigabytes can outlast a client's read timeout).
            fill.outcome.set_result(None)
            fill.notify_readers()
            await asyncio.get_running_loop().run_in_executor(None, os.fdatasync, fill.fd)
            self.store.publish(fill.key, fill.partial, fill.size)  # durable, then visible
            log.info("stored %s (%d bytes)", fill.key, fill.size)
        except BaseException as error:
            self.metrics.fills_failed_total += 1
            self.store.release(fill.size)
            fill.partial.unlink(missing_ok=True)
            failure = _as_failure(error)
            log.warning("fill of %s failed: %s", fill.key, failure)
            if not fill.outcome.done():
                fill.outcome.set_exception(failure)
                fill.outcome.exception()  # retrieved: readers that care await it themselves
            fill.notify_readers()
            if not isinstance(error, Exception):
                raise  # cancellation and exit go on
        finally:
            del self._active[fill.key]
            os.close(fill.fd)
            fill.fd = -1

    async def _ingest(self, fill: Fill, sources: list[Source]) -> None:
        problems: list[str] = []
        for source in sources:
            for attempt in range(1 if source.peer else UPSTREAM_ATTEMPTS):
                try:
                    await self._attempt(fill, source)
                except SourceError as failure:
                    problems.append(f"{source.name}: {failure}")
                    if failure.final:
                        raise FillFailedError(
                            failure.status, str(failure), failure.headers
                        ) from None
                    if source.peer:
                        self._drop(source.peer, failure.lied)
                        break
                    await asyncio.sleep(0.5 * (attempt + 1))
                    continue
                digest = fill.hasher.hexdigest()
                if digest == fill.key.digest:
                    return
                self.metrics.corrupt_total += 1
                problems.append(f"the bytes from {source.name} and before hash to {digest}")
                for liar in fill.start_over():
                    self._drop(liar, lied=True)
                if source.peer:
                    break
        raise FillFailedError(
            502,
            f"no source delivered {fill.key} intact: " + "; ".join(problems),
            {"X-Error-Code": "CorruptBlob" if "hash to" in problems[-1] else "FillFailed"},
        )

    def _drop(self, peer: str, lied: bool) -> None:
        self.metrics.peer_retries_total += 1
        self.on_bad_peer(peer, lied)

    async def _attempt(self, fill: Fill, source: Source) -> None:
        """Bytes from ``source`` from ``fill.written`` to the end, or a SourceError."""
        offset = fill.written
        try:
            async with asyncio.timeout(self.timeout * (1 + fill.size / CHUNK)):
                async with source.open(offset) as response:
                    skip = _check_answer(response, fill, offset, source.peer is None)
                    async for chunk in chunks(response.content, CHUNK, self.timeout):
                        if skip:  # a source that ignored Range: its first bytes are known
                            chunk, skip = chunk[skip:], max(0, skip - len(chunk))
                            if not chunk:
                                continue
                        if fill.written + len(chunk) > fill.size:
                            raise SourceError(f"sent more than the {fill.size} bytes", lied=True)
                        await self._absorb(fill, chunk, source)
        except (aiohttp.ClientError, TimeoutError, ConnectionError, UpstreamError) as error:
            raise SourceError(f"failed at byte {fill.written}: {describe(error)}") from error
        if fill.written < fill.size:
            raise SourceError(f"ended at byte {fill.written} of {fill.size}")

    async def _absorb(self, fill: Fill, chunk: bytes, source: Source) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, _absorb, fill.fd, fill.hasher, chunk, fill.written)
        except OSError as error:  # the store's disk, not the source: the fill cannot go on
            raise self.store.full_error(error) from error
        fill.written += len(chunk)
        fill.notify_readers()
        if source.peer:
            fill.fed_by.add(source.peer)
            self.metrics.peer_bytes_total += len(chunk)
        else:
            self.metrics.upstream_bytes_total += len(chunk)


def _check_answer(response: aiohttp.ClientResponse, fill: Fill, offset: int, upstream: bool) -> int:
    """How many leading bytes to skip; SourceError unless this is the blob from ``offset``."""
    if response.status not in (200, 206):
        headers = {
            name: response.headers[name] for name in _ERROR_HEADERS if name in response.headers
        }
        raise SourceError(
            f"answered {response.status}",
            lied=not upstream and 300 <= response.status < 400,  # peers answer with the bytes
            final=upstream and 400 <= response.status < 500,
            status=response.status,
            headers=headers,
        )
    skip, expected = (offset, fill.size) if response.status == 200 else (0, fill.size - offset)
    wanted_range = f"bytes {offset}-{fill.size - 1}/{fill.size}"
    if response.status == 206 and response.headers.get("Content-Range") != wanted_range:
        got = response.headers.get("Content-Range")
        raise SourceError(f"answered Content-Range {got!r} for {wanted_range!r}", lied=True)
    if response.content_length is not None and response.content_length != expected:
        raise SourceError(
            f"declared {response.content_length} bytes where the blob has {expected}", lied=True
        )
    return skip


def _absorb(fd: int, hasher: Hash, chunk: bytes, offset: int) -> None:
    """Hash and write one chunk (in a worker thread: both release the GIL for large buffers)."""
    hasher.update(chunk)
    view = memoryview(chunk)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _as_failure(error: BaseException) -> FillFailedError:
    if isinstance(error, FillFailedError):
        return error
    if isinstance(error, StoreFullError):
        return FillFailedError(507, str(error), {"X-Error-Code": "StoreFull"})
    if isinstance(error, OSError):
        return FillFailedError(507, f"writing to the store failed: {error.strerror}")
    return FillFailedError(502, f"fill failed: {describe(error)}")
