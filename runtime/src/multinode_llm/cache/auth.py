"""Who may read what: public repos for all, private and gated ones per caller, decided upstream.

A repo's visibility comes from upstream's own answer to an anonymous ``GET /api/{type}/{repo}``:
files are public when the repo is neither private nor gated; its listings are public when it is not
private. Anything else, including no answer, counts as restricted (fail closed).

For a restricted repo the caller's token is checked upstream (a HEAD of the file it asks for, with
its token) before any cached byte or listing goes out. Positive answers are remembered for a short
while, keyed by the sha256 of the Authorization header and the repo, never by the token itself, so
one identity's access never lends itself to another's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from multinode_llm.cache.paths import Repo
from multinode_llm.cache.upstream import Upstream, UpstreamUnreachableError

log = logging.getLogger(__name__)

Clock = Callable[[], float]


def fingerprint(authorization: str | None) -> str:
    """A stable name for a caller that does not reveal its token ("" for anonymous)."""
    if not authorization:
        return ""
    return hashlib.sha256(authorization.encode()).hexdigest()


@dataclass(frozen=True)
class Visibility:
    files_public: bool
    listing_public: bool

    @classmethod
    def from_repo_info(cls, info: object) -> Visibility:
        if not isinstance(info, dict):
            return RESTRICTED
        private = info.get("private") is not False
        gated = info.get("gated", False) not in (False, None)
        return cls(files_public=not private and not gated, listing_public=not private)


RESTRICTED = Visibility(files_public=False, listing_public=False)


class Decisions:
    """Short-lived "this caller may read this repo" answers; only grants are remembered."""

    def __init__(self, ttl: float, clock: Clock = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._until: dict[tuple[str, Repo], float] = {}

    def allowed(self, caller: str, repo: Repo) -> bool:
        until = self._until.get((caller, repo))
        if until is None:
            return False
        if until <= self.clock():
            del self._until[(caller, repo)]
            return False
        return True

    def grant(self, caller: str, repo: Repo) -> None:
        if len(self._until) > 100_000:  # bound the memory a stream of distinct tokens can take
            now = self.clock()
            self._until = {key: until for key, until in self._until.items() if until > now}
        self._until[(caller, repo)] = self.clock() + self.ttl


class Visibilities:
    """Each repo's visibility, asked of upstream anonymously and remembered for ``ttl`` seconds.

    When upstream cannot be reached the last answer stands (so public content stays servable while
    the Hub is down); with no last answer the repo is restricted.
    """

    def __init__(self, upstream: Upstream, ttl: float, clock: Clock = time.monotonic) -> None:
        self.upstream = upstream
        self.ttl = ttl
        self.clock = clock
        self._known: dict[Repo, tuple[Visibility, float]] = {}

    async def of(self, repo: Repo) -> Visibility:
        known = self._known.get(repo)
        if known and known[1] > self.clock():
            return known[0]
        try:
            reply = await self.upstream.call("GET", f"/api/{repo.type}/{repo.id}", None)
        except UpstreamUnreachableError as error:
            log.warning("visibility of %s unknown (%s); using the last answer", repo, error)
            return known[0] if known else RESTRICTED
        visibility = RESTRICTED
        if reply.status == 200:
            try:
                visibility = Visibility.from_repo_info(json.loads(reply.body))
            except ValueError:
                visibility = RESTRICTED
        self.learn(repo, visibility)
        return visibility

    def learn(self, repo: Repo, visibility: Visibility) -> None:
        """Record what an upstream answer (such as a revision call) said about ``repo``."""
        self._known[repo] = (visibility, self.clock() + self.ttl)
