"""The store: verified blobs named by their content hash, and metadata, evicted LRU first.

Layout under the store directory::

    blobs/sha256/<hex>     LFS files, by the sha256 the Hub gives as their ETag
    blobs/gitsha1/<hex>    small (git) files, by their git blob sha1
    partial/               blobs being filled; emptied at start-up
    meta/                  immutable metadata (see metadata.py), written whole or not at all

Blobs and metadata share one least-recently-used order and one limit, ``--max-store-size``, and
the store also keeps its disk from filling: before a fill starts or a metadata file is written,
entries are evicted until the bytes fit under the limit and in the filesystem's free space. A blob
that cannot fit is refused (StoreFullError, a 507 that says why); metadata that cannot is simply not
kept (it is a cache of upstream answers).

A blob enters ``blobs/`` only by an atomic rename after its hash was verified, so a reader never
sees a half-written or unverified file there. Eviction unlinks files; a reader that already opened
one keeps reading it (the inode lives until closed), so eviction never breaks a transfer.
"""

from __future__ import annotations

import errno
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
HEADROOM = 64 << 20  # free disk kept for metadata and the filesystem (at most 1% of a small disk)


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
    """Blobs and metadata files on disk and their use order; sizes are kept in memory, so no
    request stats a file."""

    def __init__(self, root: Path, max_bytes: int | None) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.blobs = root / "blobs"
        self.partial = root / "partial"
        self.meta = root / "meta"
        # Every entry by its path under root ("blobs/sha256/<hex>", "meta/ab/<name>"), LRU first.
        self._sizes: OrderedDict[str, int] = OrderedDict()
        self.used = 0  # bytes of the entries
        self.reserved = 0  # bytes promised to fills in flight
        self.evictions = 0  # blobs evicted
        self.blob_count = 0
        self._meta_failing = False

    def open(self) -> None:
        """Create the layout, drop what a crash left half done, learn what is stored."""
        for directory in (self.blobs / "sha256", self.blobs / "gitsha1", self.partial, self.meta):
            directory.mkdir(parents=True, exist_ok=True)
        for leftover in [*self.partial.iterdir(), *self.meta.rglob("*.tmp")]:
            leftover.unlink(missing_ok=True)
        found: list[tuple[float, str, int]] = []
        for path in [*self.blobs.glob("*/*"), *self.meta.glob("*/*")]:
            stat = path.stat()
            found.append((stat.st_mtime, str(path.relative_to(self.root)), stat.st_size))
        for _, name, size in sorted(found):
            self._add(name, size)
        try:
            self._make_room(0)
        except StoreFullError as full:  # the disk is full of others' files: serve what we have
            log.warning("%s", full)
        log.info("store %s holds %d entries, %d bytes", self.root, len(self._sizes), self.used)

    def path(self, key: BlobKey) -> Path:
        return self.blobs / key.algorithm / key.digest

    def lookup(self, key: BlobKey) -> tuple[Path, int] | None:
        """The path and size of a stored blob, marking it most recently used; None if absent."""
        size = self._touch(f"blobs/{key.algorithm}/{key.digest}")
        return None if size is None else (self.path(key), size)

    def reserve(self, size: int) -> None:
        """Make room for a fill of ``size`` bytes (raises StoreFullError, saying why, if none)."""
        if self.max_bytes is not None and size > self.max_bytes - self.reserved:
            raise StoreFullError(
                f"a blob of {size} bytes does not fit in --max-store-size {self.max_bytes} "
                f"({self.reserved} bytes already promised to fills in flight): raise the limit"
            )
        self._make_room(size)
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
        self._add(f"blobs/{key.algorithm}/{key.digest}", size)
        return final

    def read_meta(self, name: str) -> bytes | None:
        """The metadata file ``name`` (under meta/), marking it used; None if there is none."""
        if self._touch(f"meta/{name}") is None:
            return None
        try:
            return (self.meta / name).read_bytes()
        except OSError:
            return None

    def write_meta(self, name: str, data: bytes) -> None:
        """Keep ``data`` as the metadata file ``name`` if there is room; otherwise do without."""
        entry = f"meta/{name}"
        final = self.root / entry
        temporary = final.with_name(f"{final.name}.{secrets.token_hex(4)}.tmp")
        try:
            self._make_room(len(data) - self._sizes.get(entry, 0))
            final.parent.mkdir(exist_ok=True)
            temporary.write_bytes(data)
            os.replace(temporary, final)  # readers see the old file or the new one, never half
        except (OSError, StoreFullError) as error:
            temporary.unlink(missing_ok=True)
            if not self._meta_failing:
                log.warning("metadata is not kept while the store has no room: %s", error)
            self._meta_failing = True
            return
        self._meta_failing = False
        self._add(entry, len(data))

    def full_error(self, error: OSError) -> StoreFullError:
        """What to tell a client when writing a blob failed with ``error``."""
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            return StoreFullError(
                f"the disk of the store {self.root} filled up during the fill "
                f"({self._free()} bytes free now): give the store a larger volume, or set "
                "--max-store-size below the volume's size"
            )
        return StoreFullError(f"writing to the store {self.root} failed: {error.strerror}")

    def _touch(self, entry: str) -> int | None:
        size = self._sizes.get(entry)
        if size is not None:
            self._sizes.move_to_end(entry)
        return size

    def _add(self, entry: str, size: int) -> None:
        known = self._sizes.get(entry)
        self.used += size - (known or 0)
        if known is None and entry.startswith("blobs/"):
            self.blob_count += 1
        self._sizes[entry] = size
        self._sizes.move_to_end(entry)

    def _free(self) -> int:
        stat = os.statvfs(self.root)
        return stat.f_bavail * stat.f_frsize

    def _headroom(self) -> int:
        stat = os.statvfs(self.root)
        return min(HEADROOM, stat.f_blocks * stat.f_frsize // 100)

    def _make_room(self, incoming: int) -> None:
        """Evict until ``incoming`` more bytes fit under the limit and on the disk.

        Bytes promised to fills in flight count as still to come (some may already be on disk:
        an overestimate, on the safe side).
        """
        limit = self.max_bytes
        over_limit = self.used + self.reserved + incoming - limit if limit is not None else 0
        short_on_disk = incoming + self.reserved + self._headroom() - self._free()
        while max(over_limit, short_on_disk) > 0 and self._sizes:
            entry, size = self._sizes.popitem(last=False)
            (self.root / entry).unlink(missing_ok=True)
            self.used -= size
            over_limit, short_on_disk = over_limit - size, short_on_disk - size
            if entry.startswith("blobs/"):
                self.blob_count -= 1
                self.evictions += 1
                log.info("evicted %s (%d bytes) to make room for %d bytes", entry, size, incoming)
        if over_limit > 0:
            raise StoreFullError(
                f"{incoming} bytes do not fit in --max-store-size {limit} ({self.reserved} bytes "
                "promised to fills in flight): raise the limit"
            )
        if short_on_disk > 0:
            raise StoreFullError(
                f"the store {self.root} has {self._free()} bytes free on its disk, not enough "
                f"for {incoming} bytes ({self.reserved} promised to fills in flight) even with "
                "nothing else stored: give the store a larger volume, or set --max-store-size "
                "below the volume's size"
            )

    def __len__(self) -> int:
        return self.blob_count


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
