"""The blob store: verified, immutable files named by their content hash, evicted LRU first.

Layout under the store directory::

    blobs/sha256/<hex>     LFS files, by the sha256 the Hub gives as their ETag
    blobs/gitsha1/<hex>    small (git) files, by their git blob sha1
    partial/               blobs being filled; emptied at start-up
    meta/                  immutable metadata (see metadata.py)

A blob enters ``blobs/`` only by an atomic rename after its hash was verified, so a reader never
sees a half-written or unverified file there. Eviction unlinks files; a reader that already opened
one keeps reading it (the inode lives until closed), so eviction never breaks a transfer.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")


class Hash(Protocol):
    def update(self, data: bytes, /) -> None: ...
    def hexdigest(self) -> str: ...


@dataclass(frozen=True)
class BlobKey:
    """What a blob is called everywhere: ``sha256:<hex>`` or ``gitsha1:<hex>``; never a URL."""

    algorithm: str  # "sha256" | "gitsha1"
    digest: str  # lowercase hex

    def __str__(self) -> str:
        return f"{self.algorithm}:{self.digest}"

    @classmethod
    def from_etag(cls, etag: str) -> BlobKey | None:
        """The key an upstream ETag names: a sha256 for LFS files, a git blob sha1 otherwise."""
        value = etag.strip().removeprefix("W/").strip('"').lower()
        if _SHA256.match(value):
            return cls("sha256", value)
        if _SHA1.match(value):
            return cls("gitsha1", value)
        return None

    def hasher(self, size: int) -> Hash:
        """A hash object that, fed the blob's bytes, ends at ``digest`` when they are right."""
        if self.algorithm == "sha256":
            return hashlib.sha256()
        # Git names a blob by the sha1 of a header and the content, not of the content alone.
        hasher = hashlib.sha1(usedforsecurity=False)
        hasher.update(b"blob %d\0" % size)
        return hasher


class StoreFullError(Exception):
    """No room for a blob even after evicting everything not in use."""


class Store:
    """Blobs on disk and their use order; sizes are known in memory, so no request stats a file."""

    def __init__(self, root: Path, max_bytes: int | None) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.blobs = root / "blobs"
        self.partial = root / "partial"
        self.meta = root / "meta"
        self._sizes: OrderedDict[BlobKey, int] = OrderedDict()  # least recently used first
        self.used = 0
        self.reserved = 0  # bytes promised to fills in flight
        self.evictions = 0

    def open(self) -> None:
        """Create the layout, drop leftovers of fills a crash interrupted, learn what is stored."""
        for directory in (self.blobs / "sha256", self.blobs / "gitsha1", self.partial, self.meta):
            directory.mkdir(parents=True, exist_ok=True)
        for leftover in self.partial.iterdir():
            leftover.unlink(missing_ok=True)
        found: list[tuple[float, BlobKey, int]] = []
        for algorithm in ("sha256", "gitsha1"):
            for entry in os.scandir(self.blobs / algorithm):
                stat = entry.stat()
                found.append((stat.st_mtime, BlobKey(algorithm, entry.name), stat.st_size))
        for _, key, size in sorted(found, key=lambda item: item[0]):
            self._sizes[key] = size
            self.used += size
        self._evict_until(0)
        log.info("store %s holds %d blobs, %d bytes", self.root, len(self._sizes), self.used)

    def path(self, key: BlobKey) -> Path:
        return self.blobs / key.algorithm / key.digest

    def lookup(self, key: BlobKey) -> tuple[Path, int] | None:
        """The path and size of a stored blob, marking it most recently used; None if absent."""
        size = self._sizes.get(key)
        if size is None:
            return None
        self._sizes.move_to_end(key)
        return self.path(key), size

    def reserve(self, size: int) -> None:
        """Make room for a fill of ``size`` bytes, evicting the least recently used blobs."""
        if self.max_bytes is not None and size > self.max_bytes - self.reserved:
            raise StoreFullError(
                f"a blob of {size} bytes does not fit in --max-store-size {self.max_bytes} "
                f"({self.reserved} bytes already promised to fills in flight): raise the limit"
            )
        self._evict_until(size)
        self.reserved += size

    def release(self, size: int) -> None:
        self.reserved -= size

    def new_partial(self, key: BlobKey) -> Path:
        return self.partial / f"{key.algorithm}-{key.digest}-{secrets.token_hex(4)}"

    def publish(self, key: BlobKey, partial: Path, size: int) -> Path:
        """Move a verified fill into place (atomically) and count it; its reservation ends."""
        final = self.path(key)
        os.replace(partial, final)
        self.release(size)
        if key not in self._sizes:
            self.used += size
        self._sizes[key] = size
        self._evict_until(0)
        return final

    def _evict_until(self, incoming: int) -> None:
        if self.max_bytes is None:
            return
        while self._sizes and self.used + self.reserved + incoming > self.max_bytes:
            key, size = self._sizes.popitem(last=False)
            self.path(key).unlink(missing_ok=True)
            self.used -= size
            self.evictions += 1
            log.info("evicted %s (%d bytes) to stay under %d bytes", key, size, self.max_bytes)

    def __len__(self) -> int:
        return len(self._sizes)


_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)b?$")


def parse_size(text: str) -> int:
    """Bytes from ``500G``, ``1.5Ti``, ``200Mi``, ``10GB`` or a number; ValueError otherwise."""
    match = _SIZE.match(text.strip().lower())
    if not match:
        raise ValueError(
            f"{text!r} is not a size: write a number of bytes or one such as 500Gi or 2T"
        )
    number, unit, binary = match.groups()
    if binary and not unit:
        raise ValueError(
            f"{text!r} is not a size: write a number of bytes or one such as 500Gi or 2T"
        )
    factor = 1024 ** ("kmgt".index(unit) + 1) if binary else _UNITS[unit]
    return int(float(number) * factor)
