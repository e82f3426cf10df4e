"""What the cache knows about repos besides blobs, keyed as the Hub's immutability allows.

| entry | key | lifetime |
|---|---|---|
| ref -> commit | (repo, revision) | ``ref_ttl`` seconds; older only while upstream is down |
| file facts | (repo, commit, path) -> etag, size | immutable: kept in the store's ``meta/`` |
| tree page | (repo, commit, path, query) -> JSON, next link | immutable: kept in ``meta/`` |

Nothing is keyed by URL: ``/resolve/main`` moves and CDN URLs expire. Files in ``meta/`` count
toward the store's limit and are evicted with the blobs (store.py); the tables in memory are
bounded too. None of this says who may read what (auth.py does).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from multinode_llm.cache.auth import Clock
from multinode_llm.cache.lru import Lru
from multinode_llm.cache.paths import Repo
from multinode_llm.cache.store import Store

MEMORY_ENTRIES = 100_000  # refs and file facts kept in memory (about 30 MB at most)


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
    def __init__(self, store: Store, ref_ttl: float, clock: Clock = time.monotonic) -> None:
        self.store = store
        self.ref_ttl = ref_ttl
        self.clock = clock
        self._refs: Lru[tuple[Repo, str], tuple[str, float]] = Lru(MEMORY_ENTRIES)
        self._files: Lru[tuple[Repo, str, str], FileFacts] = Lru(MEMORY_ENTRIES)

    def ref(self, repo: Repo, revision: str) -> tuple[str | None, bool]:
        """The commit ``revision`` pointed at last, and whether that answer is still fresh."""
        known = self._refs.get((repo, revision))
        if known is None:
            return None, False
        return known[0], known[1] > self.clock()

    def set_ref(self, repo: Repo, revision: str, commit: str) -> None:
        self._refs.put((repo, revision), (commit, self.clock() + self.ref_ttl))

    def file(self, repo: Repo, commit: str, path: str) -> FileFacts | None:
        key = (repo, commit, path)
        facts = self._files.get(key)
        if facts is None and (stored := self._read("file", key)) is not None:
            try:
                facts = FileFacts(str(stored["commit"]), str(stored["etag"]), int(stored["size"]))
            except (KeyError, TypeError, ValueError):
                return None
            self._files.put(key, facts)
        return facts

    def set_file(self, repo: Repo, path: str, facts: FileFacts) -> None:
        key = (repo, facts.commit, path)
        self._files.put(key, facts)
        self._write("file", key, asdict(facts))

    def tree(self, repo: Repo, commit: str, path: str, query: str) -> TreePage | None:
        stored = self._read("tree", (repo, commit, path, query))
        if stored is None:
            return None
        return TreePage(str(stored["body"]).encode(), stored.get("next_link"))

    def set_tree(self, repo: Repo, commit: str, path: str, query: str, page: TreePage) -> None:
        record = {"body": page.body.decode(), "next_link": page.next_link}
        self._write("tree", (repo, commit, path, query), record)

    @staticmethod
    def _name(kind: str, key: tuple[Any, ...]) -> str:
        digest = hashlib.sha256(repr((kind, *map(str, key))).encode()).hexdigest()
        return f"{digest[:2]}/{kind}-{digest}.json"

    def _read(self, kind: str, key: tuple[Any, ...]) -> dict[str, Any] | None:
        data = self.store.read_meta(self._name(kind, key))
        if data is None:
            return None
        try:
            record = json.loads(data)
        except ValueError:
            return None
        return record if isinstance(record, dict) else None

    def _write(self, kind: str, key: tuple[Any, ...], record: dict[str, Any]) -> None:
        self.store.write_meta(self._name(kind, key), json.dumps(record).encode())
