"""What the cache knows about repos besides blobs, keyed as the Hub's immutability allows.

| entry | key | lifetime |
|---|---|---|
| ref -> commit | (repo, revision) | ``ref_ttl`` seconds; older only while upstream is down |
| file facts | (repo, commit, path) -> etag, size | immutable: kept on disk |
| tree page | (repo, commit, path, query) -> JSON, next link | immutable: kept on disk |

Nothing is keyed by URL: ``/resolve/main`` moves and CDN URLs expire.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from multinode_llm.cache.auth import Clock
from multinode_llm.cache.paths import Repo


@dataclass(frozen=True)
class FileFacts:
    commit: str
    etag: str  # unquoted: a sha256 (LFS) or git blob sha1
    size: int


@dataclass(frozen=True)
class TreePage:
    body: bytes  # JSON, xetHash removed
    next_link: str | None  # path and query of the next page, relative to the cache's base URL


class Metadata:
    def __init__(self, directory: Path, ref_ttl: float, clock: Clock = time.monotonic) -> None:
        self.directory = directory
        self.ref_ttl = ref_ttl
        self.clock = clock
        self._refs: dict[tuple[Repo, str], tuple[str, float]] = {}
        self._files: dict[tuple[Repo, str, str], FileFacts] = {}

    def ref(self, repo: Repo, revision: str) -> tuple[str | None, bool]:
        """The commit ``revision`` pointed at last, and whether that answer is still fresh."""
        known = self._refs.get((repo, revision))
        if known is None:
            return None, False
        return known[0], known[1] > self.clock()

    def set_ref(self, repo: Repo, revision: str, commit: str) -> None:
        self._refs[(repo, revision)] = (commit, self.clock() + self.ref_ttl)

    def file(self, repo: Repo, commit: str, path: str) -> FileFacts | None:
        key = (repo, commit, path)
        facts = self._files.get(key)
        if facts is None and (stored := self._read("file", key)) is not None:
            facts = self._files[key] = FileFacts(**stored)
        return facts

    def set_file(self, repo: Repo, path: str, facts: FileFacts) -> None:
        key = (repo, facts.commit, path)
        self._files[key] = facts
        self._write("file", key, asdict(facts))

    def tree(self, repo: Repo, commit: str, path: str, query: str) -> TreePage | None:
        stored = self._read("tree", (repo, commit, path, query))
        if stored is None:
            return None
        return TreePage(stored["body"].encode(), stored["next_link"])

    def set_tree(self, repo: Repo, commit: str, path: str, query: str, page: TreePage) -> None:
        record = {"body": page.body.decode(), "next_link": page.next_link}
        self._write("tree", (repo, commit, path, query), record)

    def _file_for(self, kind: str, key: tuple[Any, ...]) -> Path:
        name = hashlib.sha256(repr((kind, *map(str, key))).encode()).hexdigest()
        return self.directory / name[:2] / f"{kind}-{name}.json"

    def _read(self, kind: str, key: tuple[Any, ...]) -> dict[str, Any] | None:
        try:
            record: dict[str, Any] = json.loads(self._file_for(kind, key).read_text())
        except (OSError, ValueError):
            return None
        return record

    def _write(self, kind: str, key: tuple[Any, ...], record: dict[str, Any]) -> None:
        path = self._file_for(kind, key)
        path.parent.mkdir(exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(record))
        os.replace(temporary, path)  # readers see the old file or the new one, never half of one
