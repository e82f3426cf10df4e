"""Requests to the upstream hub: the caller's credential and nothing else, redirects followed by
the cache, every read bounded.

Credentials: a request carries the caller's ``Authorization`` header and nothing of anyone else's.
The sessions keep no cookies (a session cookie the Hub set for one caller would ride along on
everyone's requests after it) and do not read the environment as aiohttp's ``trust_env`` would: it
sends ``~/.netrc``'s login for every request that has none, lending the cache's credential to
anonymous callers. Proxies are still taken from ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` (read
here, for the upstream only; peers are always reached directly).

Redirects: the Hub answers a file download with a redirect to a CDN on another host. Passing that
redirect to the client would be a cache bypass, so the cache follows it, and like every well-behaved
client it drops ``Authorization`` on a hop to another origin (the CDN URL is signed; the token must
not leak there). A ``HEAD`` stops at a cross-origin redirect: that response already carries the
file's facts (``X-Linked-Etag``, ``X-Linked-Size``, ``X-Repo-Commit``). A peer's redirect is never
followed (a peer answers with the bytes itself).

Bounds: every read must make progress within ``--upstream-timeout``; metadata answers are read whole
only up to ``MAX_METADATA`` bytes and within three timeouts; other bodies are streamed by their
readers (fills.py, routes.py), never held whole. Concurrent identical GETs and HEADs of one caller
share one request (coalesce.py).
"""

from __future__ import annotations

import asyncio
import logging
import urllib.request
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy

from multinode_llm.cache.auth import fingerprint
from multinode_llm.cache.coalesce import Coalescer
from multinode_llm.cache.metrics import Metrics

log = logging.getLogger(__name__)

MAX_REDIRECTS = 10
MAX_METADATA = 32 << 20  # bytes of one JSON answer (repo info, a tree page) read whole
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class UpstreamError(Exception):
    """Upstream gave no usable answer: the client gets a 502 with ``code``."""

    code = "BadUpstreamAnswer"


class UpstreamUnreachableError(UpstreamError):
    """No HTTP answer at all (connection refused, reset, timed out, too many redirects)."""

    code = "UpstreamUnreachable"


@dataclass(frozen=True)
class Reply:
    """An upstream answer whose body was read whole (metadata) or not at all (HEAD)."""

    status: int
    headers: CIMultiDictProxy[str]
    body: bytes = b""

    @property
    def ok(self) -> bool:
        return self.status < 400


def session(timeout: float, connect: float = 10.0) -> aiohttp.ClientSession:
    """A client session that sends nothing of the cache's own: no cookies, no netrc."""
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(
            total=None, sock_connect=min(connect, timeout), sock_read=timeout
        ),
        auto_decompress=False,
        trust_env=False,
        cookie_jar=aiohttp.DummyCookieJar(),
    )


def request_headers(
    authorization: str | None, extra: Mapping[str, str] | None = None
) -> CIMultiDict[str]:
    headers: CIMultiDict[str] = CIMultiDict({"Accept-Encoding": "identity"})
    if authorization:
        headers["Authorization"] = authorization
    headers.update(extra or {})
    return headers


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url``, as curl and requests read it."""
    parts = urlsplit(url)
    if urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return urllib.request.getproxies_environment().get(parts.scheme)


def describe(error: BaseException) -> str:
    """``error`` as a log or an error message may show it: aiohttp's repr of a response error
    holds the request's headers (the caller's token among them) and its str the whole URL (a
    signed CDN URL's query among them), so neither is used for those."""
    if isinstance(error, aiohttp.ClientResponseError):
        return f"{type(error).__name__}: {error.status}, {error.message}"
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def bare(url: str) -> str:
    """``url`` without its query: signed CDN URLs must not end up in logs or error messages."""
    return url.partition("?")[0]


def same_origin(a: str, b: str) -> bool:
    first, second = urlsplit(a), urlsplit(b)
    return (first.scheme, first.netloc) == (second.scheme, second.netloc)


@asynccontextmanager
async def following(
    client: aiohttp.ClientSession,
    method: str,
    url: str,
    headers: CIMultiDict[str],
    data: bytes | None = None,
    *,
    follow: bool = True,
    proxy: bool = False,
    timeout: aiohttp.ClientTimeout | None = None,
) -> AsyncIterator[aiohttp.ClientResponse]:
    """``method url``, with redirects followed by hand (``follow``); yields the final answer."""
    headers = CIMultiDict(headers)
    for _ in range(MAX_REDIRECTS + 1):
        try:
            response = await client.request(
                method,
                url,
                headers=headers,
                data=data,
                allow_redirects=False,
                proxy=proxy_for(url) if proxy else None,
                timeout=timeout or client.timeout,
            )
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            raise UpstreamUnreachableError(f"{method} {bare(url)}: {describe(error)}") from error
        try:
            location = response.headers.get("Location")
            if not follow or response.status not in _REDIRECTS or not location:
                yield response
                return
            try:
                target = urljoin(url, location)
            except ValueError as error:
                message = f"{method} {bare(url)}: bad Location {bare(location)!r}"
                raise UpstreamError(message) from error
            if not same_origin(url, target):
                if method == "HEAD":
                    yield response  # the Hub's own answer carries the file's facts
                    return
                headers.popall("Authorization", None)  # a signed CDN URL must not see the token
            if response.status in (301, 302, 303) and method not in ("GET", "HEAD"):
                method, data = "GET", None
            url = target
        finally:
            response.release()
    raise UpstreamUnreachableError(f"{method} {bare(url)}: more than {MAX_REDIRECTS} redirects")


async def read_limited(response: aiohttp.ClientResponse, limit: int, what: str) -> bytes:
    """The whole body of ``response``, refused (UpstreamError) past ``limit`` bytes."""
    if (response.content_length or 0) > limit:
        raise UpstreamError(
            f"{what}: upstream's answer of {response.content_length} bytes is too big"
        )
    body = bytearray()
    async for chunk in response.content.iter_any():
        body += chunk
        if len(body) > limit:
            raise UpstreamError(f"{what}: upstream's answer is over {limit} bytes")
    return bytes(body)


async def chunks(stream: aiohttp.StreamReader, size: int, timeout: float) -> AsyncIterator[bytes]:
    """``stream`` regrouped into pieces of ``size`` bytes (the last may be shorter), each of which
    must arrive within ``timeout`` seconds (a drip is a stall); when reading fails, what did arrive
    comes first, then the error."""
    ended = False
    while not ended:
        pieces: list[bytes] = []
        held, failure = 0, None
        try:
            async with asyncio.timeout(timeout):
                while held < size:
                    data = await stream.readany()
                    if not data:
                        ended = True
                        break
                    pieces.append(data)
                    held += len(data)
        except (aiohttp.ClientError, TimeoutError) as error:
            failure = error
        if pieces:
            yield b"".join(pieces)
        if failure is not None:
            raise failure


class Upstream:
    def __init__(
        self, base_url: str, client: aiohttp.ClientSession, metrics: Metrics, timeout: float
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.client = client
        self.metrics = metrics
        self._shared: Coalescer[Reply] = Coalescer()
        # A metadata answer is small: it has three read timeouts to arrive whole.
        self._metadata_timeout = aiohttp.ClientTimeout(
            total=3 * timeout, sock_connect=min(10.0, timeout), sock_read=timeout
        )

    async def head(self, path: str, authorization: str | None) -> Reply:
        """HEAD ``path`` (the file's facts), shared with the same caller's concurrent HEADs."""
        key = ("HEAD", fingerprint(authorization), path)
        return await self._shared.run(key, lambda: self._call("HEAD", path, authorization))

    async def call(
        self,
        method: str,
        path_and_query: str,
        authorization: str | None,
        body: bytes | None = None,
        content_type: str | None = None,
    ) -> Reply:
        """An API call whose answer is small (JSON), read whole; GETs are shared like HEADs."""
        if method != "GET":
            return await self._call(method, path_and_query, authorization, body, content_type)
        key = ("GET", fingerprint(authorization), path_and_query)
        return await self._shared.run(key, lambda: self._call("GET", path_and_query, authorization))

    async def _call(
        self,
        method: str,
        path_and_query: str,
        authorization: str | None,
        body: bytes | None = None,
        content_type: str | None = None,
    ) -> Reply:
        extra = {"Content-Type": content_type} if content_type else None
        what = f"{method} {bare(path_and_query)}"
        self.metrics.upstream_requests["meta"] += 1
        async with self._counting_failures("meta") as failed:
            try:
                async with following(
                    self.client,
                    method,
                    self.base_url + path_and_query,
                    request_headers(authorization, extra),
                    body,
                    proxy=True,
                    timeout=self._metadata_timeout,
                ) as response:
                    failed.answered(response.status)
                    if method == "HEAD":
                        return Reply(response.status, response.headers)
                    data = await read_limited(response, MAX_METADATA, what)
                    return Reply(response.status, response.headers, data)
            except (aiohttp.ClientError, TimeoutError) as error:
                raise UpstreamUnreachableError(f"{what}: {describe(error)}") from error

    @asynccontextmanager
    async def open(
        self,
        method: str,
        path_and_query: str,
        authorization: str | None,
        body: bytes | None = None,
        content_type: str | None = None,
        offset: int = 0,
        kind: str = "meta",
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """An answer whose body the caller streams (a blob from ``offset`` on, a pass-through)."""
        extra = {"Content-Type": content_type} if content_type else {}
        if offset:
            extra["Range"] = f"bytes={offset}-"
        self.metrics.upstream_requests[kind] += 1
        # The caller reads the body inside: its read errors pass through here and are counted.
        async with (
            self._counting_failures(kind) as failed,
            following(
                self.client,
                method,
                self.base_url + path_and_query,
                request_headers(authorization, extra),
                body,
                proxy=True,
            ) as response,
        ):
            failed.answered(response.status)
            yield response

    def body_broke(self, response: aiohttp.ClientResponse, kind: str = "meta") -> None:
        """Count a failure of ``open``'s answer whose body its reader caught and did not raise."""
        if response.status < 500:  # a 5xx was counted as it came
            self.metrics.upstream_errors[kind] += 1

    @asynccontextmanager
    async def _counting_failures(self, kind: str) -> AsyncIterator[_Failure]:
        """One upstream request: counted once in ``upstream_errors`` when it failed."""
        failure = _Failure()
        try:
            yield failure
        except (UpstreamUnreachableError, aiohttp.ClientError, TimeoutError):
            failure.failed = True
            raise
        finally:
            if failure.failed:
                self.metrics.upstream_errors[kind] += 1


@dataclass
class _Failure:
    failed: bool = False

    def answered(self, status: int) -> None:
        self.failed = self.failed or status >= 500
