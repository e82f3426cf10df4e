"""Requests to the upstream hub: the caller's token forwarded, redirects followed by the cache.

The Hub answers a file download with a redirect to a CDN on another host. Passing that redirect to
the client would be a cache bypass, so the cache follows it, and like every well-behaved client it
drops ``Authorization`` on a hop to another origin (the CDN URL is signed; the token must not leak
there). A ``HEAD`` stops at a cross-origin redirect: that response already carries the file's facts
(``X-Linked-Etag``, ``X-Linked-Size``, ``X-Repo-Commit``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy

from multinode_llm.cache.metrics import Metrics

log = logging.getLogger(__name__)

MAX_REDIRECTS = 10
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class UpstreamUnreachableError(Exception):
    """No HTTP answer at all (connection refused, reset, timed out)."""


@dataclass(frozen=True)
class Reply:
    """An upstream answer whose body was read whole (metadata) or not at all (HEAD)."""

    status: int
    headers: CIMultiDictProxy[str]
    body: bytes = b""

    @property
    def ok(self) -> bool:
        return self.status < 400


class BadBlobResponseError(Exception):
    """A blob GET answered with something other than the bytes asked for."""

    def __init__(self, status: int, headers: Mapping[str, str], message: str) -> None:
        super().__init__(message)
        self.status = status
        self.headers = dict(headers)


def request_headers(
    authorization: str | None, extra: Mapping[str, str] | None = None
) -> CIMultiDict[str]:
    headers: CIMultiDict[str] = CIMultiDict({"Accept-Encoding": "identity"})
    if authorization:
        headers["Authorization"] = authorization
    headers.update(extra or {})
    return headers


def _bare(url: str) -> str:
    """``url`` without its query: signed CDN URLs must not end up in logs or error messages."""
    return url.partition("?")[0]


def same_origin(a: str, b: str) -> bool:
    first, second = urlsplit(a), urlsplit(b)
    return (first.scheme, first.netloc) == (second.scheme, second.netloc)


class Upstream:
    def __init__(self, base_url: str, session: aiohttp.ClientSession, metrics: Metrics) -> None:
        self.base_url = base_url.rstrip("/")
        self.session = session
        self.metrics = metrics

    async def head(self, path: str, authorization: str | None) -> Reply:
        """HEAD ``path``, following same-origin redirects and stopping at a cross-origin one."""
        url = self.base_url + path
        headers = request_headers(authorization)
        for _ in range(MAX_REDIRECTS):
            self.metrics.upstream_requests["meta"] += 1
            try:
                async with self.session.head(
                    url, headers=headers, allow_redirects=False
                ) as response:
                    location = response.headers.get("Location")
                    if response.status not in _REDIRECTS or not location:
                        return Reply(response.status, response.headers)
                    target = urljoin(url, location)
                    if not same_origin(url, target):
                        return Reply(response.status, response.headers)
                    url = target
            except (aiohttp.ClientError, TimeoutError) as error:
                raise UpstreamUnreachableError(f"HEAD {_bare(url)}: {error!r}") from error
        raise UpstreamUnreachableError(f"HEAD {path}: more than {MAX_REDIRECTS} redirects")

    async def call(
        self,
        method: str,
        path_and_query: str,
        authorization: str | None,
        body: bytes | None = None,
        content_type: str | None = None,
    ) -> Reply:
        """An API call (small JSON): redirects followed, the whole body read."""
        extra = {"Content-Type": content_type} if content_type else None
        self.metrics.upstream_requests["meta"] += 1
        try:
            async with self.session.request(
                method,
                self.base_url + path_and_query,
                headers=request_headers(authorization, extra),
                data=body,
                allow_redirects=True,
            ) as response:
                return Reply(response.status, response.headers, await response.read())
        except (aiohttp.ClientError, TimeoutError) as error:
            raise UpstreamUnreachableError(f"{method} {path_and_query}: {error!r}") from error

    @asynccontextmanager
    async def open_blob(
        self, path: str, authorization: str | None, offset: int
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """GET a file's bytes from ``offset`` on, following redirects (auth kept in origin)."""
        self.metrics.upstream_requests["blob"] += 1
        async with fetch_following(
            self.session, self.base_url + path, authorization, offset
        ) as response:
            yield response


@asynccontextmanager
async def fetch_following(
    session: aiohttp.ClientSession,
    url: str,
    authorization: str | None,
    offset: int,
    extra: Mapping[str, str] | None = None,
) -> AsyncIterator[aiohttp.ClientResponse]:
    """GET ``url`` (Range from ``offset``), redirects followed by hand; yields a 200 or 206."""
    headers = request_headers(authorization, extra)
    if offset:
        headers["Range"] = f"bytes={offset}-"
    for _ in range(MAX_REDIRECTS):
        try:
            response = await session.get(url, headers=headers, allow_redirects=False)
        except (aiohttp.ClientError, TimeoutError) as error:
            raise UpstreamUnreachableError(f"GET {_bare(url)}: {error!r}") from error
        try:
            location = response.headers.get("Location")
            if response.status in _REDIRECTS and location:
                target = urljoin(url, location)
                if not same_origin(url, target):
                    headers.popall("Authorization", None)  # a signed CDN URL must not see the token
                url = target
                continue
            _check_blob_status(response, offset)
            yield response
            return
        finally:
            response.release()
    raise UpstreamUnreachableError(f"GET {_bare(url)}: more than {MAX_REDIRECTS} redirects")


def _check_blob_status(response: aiohttp.ClientResponse, offset: int) -> None:
    if response.status == 200 or (response.status == 206 and offset):
        if response.status == 206:
            content_range = response.headers.get("Content-Range", "")
            if not content_range.startswith(f"bytes {offset}-"):
                raise BadBlobResponseError(
                    502, {}, f"asked for bytes from {offset}, got Content-Range {content_range!r}"
                )
        return
    raise BadBlobResponseError(
        response.status,
        {k: v for k, v in response.headers.items() if k in ("X-Error-Code", "X-Error-Message")},
        f"GET {response.url.with_query(None)} answered {response.status}",
    )
