"""Who may read what: the Hub decides, for each caller and each file, and nothing else does.

A file's bytes or facts go to a caller only while that caller holds a *grant* for exactly that
file: the Hub answered the caller's own request for it (a HEAD with the caller's own
``Authorization``) with success within the last ``--auth-ttl`` seconds. A listing likewise needs a
grant for (repo, commit), earned by a successful repo info or tree call with the caller's
credential. Nothing else grants anything: not repo info fields (a client shapes those with
``?expand=``, and a missing ``gated`` is not "not gated"), not another caller's answer, not a peer,
and not a credential of the cache's own (it has none: see upstream.py).

Grants are keyed by the sha256 of the Authorization header, never the token itself. An anonymous
caller's grant makes that one file (or listing) *known public*; an anonymous refusal unmakes it.
That knowledge is used only when the Hub cannot be asked: known-public files are served to anyone,
everything else is refused (fail closed).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from multinode_llm.cache.lru import Lru
from multinode_llm.cache.paths import Repo

Clock = Callable[[], float]
LISTING = ""  # the "path" of a repo's listing grants: no file has an empty path
MAX_GRANTS = 200_000  # bounds the memory a stream of distinct tokens can take


def fingerprint(authorization: str | None) -> str:
    """A stable name for a caller that does not reveal its token ("" for anonymous)."""
    if not authorization:
        return ""
    return hashlib.sha256(authorization.encode()).hexdigest()


Subject = tuple[Repo, str, str]  # repo, commit, file path (or LISTING)


class Grants:
    """The Hub's recent "yes" to each caller for each file, and which files are known public."""

    def __init__(self, ttl: float, clock: Clock = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._until: Lru[tuple[str, Subject], float] = Lru(MAX_GRANTS)
        self._public: Lru[Subject, bool] = Lru(MAX_GRANTS)

    def allowed(self, caller: str, repo: Repo, commit: str, path: str) -> bool:
        """Whether the Hub let ``caller`` read it less than ``ttl`` seconds ago."""
        until = self._until.get((caller, (repo, commit, path)))
        return until is not None and until > self.clock()

    def grant(self, caller: str, repo: Repo, commit: str, path: str) -> None:
        """The Hub just let ``caller`` read it."""
        self._until.put((caller, (repo, commit, path)), self.clock() + self.ttl)
        if caller == "":
            self._public.put((repo, commit, path), True)

    def refuse(self, caller: str, repo: Repo, commit: str, path: str) -> None:
        """The Hub just refused ``caller``."""
        self._until.pop((caller, (repo, commit, path)))
        if caller == "":
            self._public.pop((repo, commit, path))

    def public(self, repo: Repo, commit: str, path: str) -> bool:
        """Whether an anonymous caller was last let read it (what stands while the Hub is down)."""
        return self._public.get((repo, commit, path)) is not None
