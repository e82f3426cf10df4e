"""The Hub protocol subset clients use, answered from the cache where the Hub's rules allow.

The subset, and what the clients rely on in it: docs/hub-protocol.md.

- ``HEAD|GET /{prefix}{repo}/resolve/{rev}/{path}``: the file's facts (commit, ETag, size) and its
  bytes, 200 or 206/416. Whether the caller may have them is asked upstream, with the caller's own
  credential (a HEAD of that file, which also gives its facts), unless the Hub said yes to that
  caller for that file within ``--auth-ttl`` (auth.py); a ref is asked again after ``ref_ttl``.
  Bytes come from the store or a fill (a peer or upstream, fills.py), and only once verified;
  a peer's request is answered as the fill's bytes land (it verifies them itself, responses.py).
- ``GET /api/{type}/{repo}[/revision/{rev}]``: always upstream (it resolves a ref), Xet stripped.
- ``GET /api/{type}/{repo}/tree/{rev}[/{path}]``: cached per commit for callers the Hub let list
  it, pagination links rewritten; only the query parameters the Hub reads are kept and sent, so
  junk parameters cannot multiply entries.
- ``/api/{type}/{repo}/xet-read-token/...``: 404, so no client goes around the cache.
- ``POST /api/{type}/{repo}/paths-info/{rev}`` and any other GET under a valid path: passed through
  upstream with the caller's token, streamed. Writes (PUT, DELETE, other POSTs) get 405.

Bad input gets a 4xx naming what was wrong; an upstream that cannot be reached or answers nonsense
gets a 502, a full store a 507. Peers speak the same protocol to each other. A request from a peer
(header ``PEER_HEADER``, which anyone can send) is authorized like any other, with the caller's
token the asking peer forwarded (see DEVELOPERS.md, "Tokens between peers"), and never forwarded
to a third peer, so owners go upstream and no request can loop between nodes that disagree about
who owns a blob.
"""

from __future__ import annotations

import asyncio
import logging
import re
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from urllib.parse import urlencode

import aiohttp
from aiohttp import web

from multinode_llm.cache import paths
from multinode_llm.cache.auth import LISTING, Grants, fingerprint
from multinode_llm.cache.fills import CHUNK, Fill, FillFailedError, Fills, Opener, Source
from multinode_llm.cache.metadata import FileFacts, Metadata, TreePage
from multinode_llm.cache.metrics import Metrics
from multinode_llm.cache.paths import ApiTarget, FileTarget, is_commit
from multinode_llm.cache.peers import Peers
from multinode_llm.cache.ranges import UnsatisfiableRangeError, parse_range
from multinode_llm.cache.responses import (
    send_filling,
    send_stored,
    start_body,
    wait_landed,
    wait_verified,
)
from multinode_llm.cache.sanitize import clean_json, next_link, passed_headers
from multinode_llm.cache.store import BlobKey, Store, StoreFullError
from multinode_llm.cache.upstream import (
    MAX_METADATA,
    Reply,
    Upstream,
    UpstreamError,
    UpstreamUnreachableError,
    chunks,
    describe,
    following,
    read_limited,
    request_headers,
)

log = logging.getLogger(__name__)

PEER_HEADER = "X-Multinode-Llm-Peer"
TREE_PARAMETERS = frozenset({"recursive", "expand", "cursor", "limit"})  # what the Hub reads
_SIZE = re.compile(r"^[0-9]{1,18}$")
_CREDENTIALS = re.compile(r"^[\x20-\x7e]*$")  # printable ASCII, as RFC 9110 credentials are


@dataclass
class Hub:
    store: Store
    metadata: Metadata
    upstream: Upstream
    grants: Grants
    peers: Peers
    fills: Fills
    metrics: Metrics
    peer_session: aiohttp.ClientSession
    upstream_timeout: float
    client_timeout: float

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw_path = request.raw_path.partition("?")[0]
        try:
            target = paths.parse(raw_path)
        except paths.BadPathError as bad:
            return error(400, "BadRequest", str(bad))
        if not _CREDENTIALS.match(request.headers.get("Authorization", "")):
            message = "the Authorization header is not printable ASCII: send 'Bearer <token>'"
            return error(400, "BadRequest", message)
        try:
            if isinstance(target, FileTarget):
                if request.method not in ("GET", "HEAD"):
                    return error(
                        405, "MethodNotAllowed", f"{request.method} is not served on resolve URLs"
                    )
                return await self.resolve(request, target)
            if isinstance(target, ApiTarget):
                return await self.api(request, target)
            if request.method not in ("GET", "HEAD"):
                return read_only(request)
            return await self.passthrough(request, target.raw_path)
        except UpstreamError as failure:
            return error(502, failure.code, str(failure))

    # -- files ---------------------------------------------------------------------------------

    async def resolve(self, request: web.Request, target: FileTarget) -> web.StreamResponse:
        authorization = request.headers.get("Authorization")
        facts = await self._facts(target, authorization)
        if isinstance(facts, web.StreamResponse):
            return facts
        headers = {"X-Repo-Commit": facts.commit, "ETag": f'"{facts.etag}"'}
        if request.method == "HEAD":
            response = web.StreamResponse(headers=headers)
            response.headers["Accept-Ranges"] = "bytes"
            response.headers["Content-Type"] = "application/octet-stream"
            response.content_length = facts.size
            await response.prepare(request)
            return response
        return await self._blob(request, target, facts, headers, authorization)

    async def _facts(
        self, target: FileTarget, authorization: str | None
    ) -> FileFacts | web.Response:
        """The file's commit, ETag and size, once the Hub let the caller read it; or the error."""
        repo, caller = target.repo, fingerprint(authorization)
        commit, fresh = (
            (target.revision, True)
            if is_commit(target.revision)
            else self.metadata.ref(repo, target.revision)
        )
        known = self.metadata.file(repo, commit, target.path) if commit else None
        if known and fresh and self.grants.allowed(caller, repo, known.commit, target.path):
            return known
        # One upstream HEAD, with the caller's credential, answers three questions: the ref, the
        # caller's right to the file and the file's facts.
        try:
            reply = await self.upstream.head(target.url_path(), authorization)
        except UpstreamError as failure:
            return self._without_upstream(target, known, failure)
        if reply.status >= 500:
            answered = UpstreamError(f"HEAD {target.url_path()} upstream answered {reply.status}")
            return self._without_upstream(target, known, answered)
        if not reply.ok:
            if commit:
                self.grants.refuse(caller, repo, commit, target.path)
            return relay_error(reply)
        learned = facts_from_head(reply)
        if isinstance(learned, str):
            return error(502, "BadUpstreamHead", f"HEAD {target.url_path()} upstream: {learned}")
        self.grants.grant(caller, repo, learned.commit, target.path)
        if not is_commit(target.revision):
            self.metadata.set_ref(repo, target.revision, learned.commit)
        if learned != known:
            self.metadata.set_file(repo, target.path, learned)
        return learned

    def _without_upstream(
        self, target: FileTarget, known: FileFacts | None, failure: UpstreamError
    ) -> FileFacts | web.Response:
        """The Hub cannot be asked: only a file it let anyone read is served (fail closed)."""
        if known and self.grants.public(target.repo, known.commit, target.path):
            return known  # the last known ref and facts stand
        message = (
            f"{failure}; while the Hub cannot be asked, the cache serves only files the Hub "
            "let anyone read"
        )
        return error(502, failure.code, message)

    async def _blob(
        self,
        request: web.Request,
        target: FileTarget,
        facts: FileFacts,
        headers: dict[str, str],
        authorization: str | None,
    ) -> web.StreamResponse:
        key = BlobKey.from_etag(facts.etag)
        if key is None:
            message = (
                f"upstream ETag {facts.etag!r} is neither a sha256 nor a git sha1: unverifiable"
            )
            return error(502, "UnverifiableBlob", message)
        try:
            byte_range = parse_range(request.headers.get("Range"), facts.size)
        except UnsatisfiableRangeError:
            return error(
                416,
                "RangeNotSatisfiable",
                f"the file has {facts.size} bytes",
                {**headers, "Content-Range": f"bytes */{facts.size}"},
            )
        if request.headers.get("Range"):
            self.metrics.range_requests_total += 1
        stored = self.store.lookup(key)
        if stored:
            path, size = stored
            if size != facts.size:
                return error(
                    502, "SizeMismatch", f"upstream says {facts.size} bytes, {key} has {size}"
                )
            self.metrics.hits_total += 1
            with path.open("rb", buffering=0) as file:
                response, start, length = await start_body(request, headers, size, byte_range)
                await send_stored(request, response, file, start, length, self.metrics)
            return response
        from_peer = PEER_HEADER in request.headers
        fill = self._join_or_start(key, target, facts, authorization, from_peer)
        if isinstance(fill, web.Response):
            return fill
        # The reader's descriptor is taken now, before any await: the fill closes its own when it
        # ends, and its number may then name any file or socket opened since.
        with fill.open_reader() as file:
            try:
                if from_peer:  # a peer verifies every byte itself: it gets them as they land
                    await wait_landed(request, fill, byte_range.start if byte_range else 0)
                else:
                    await wait_verified(request, fill)
            except FillFailedError as failure:
                return error(
                    failure.status,
                    failure.headers.get("X-Error-Code", "FillFailed"),
                    str(failure),
                    {**headers, **failure.headers},
                )
            response, start, length = await start_body(request, headers, facts.size, byte_range)
            if from_peer:
                await send_filling(request, response, file, fill, start, length, self.metrics)
            else:
                await send_stored(request, response, file, start, length, self.metrics)
        return response

    def _join_or_start(
        self,
        key: BlobKey,
        target: FileTarget,
        facts: FileFacts,
        authorization: str | None,
        from_peer: bool,
    ) -> Fill | web.Response:
        fill = self.fills.get(key)
        if fill:
            self.metrics.coalesced_total += 1
            return fill
        try:
            fill = self.fills.start(
                key,
                facts.size,
                self._sources(key, target.url_path(facts.commit), authorization, from_peer),
            )
        except StoreFullError as full:
            return error(507, "StoreFull", str(full))
        self.metrics.misses_total += 1
        return fill

    def _sources(
        self, key: BlobKey, path: str, authorization: str | None, from_peer: bool
    ) -> list[Source]:
        """The blob's owner (and heirs up to this node), then upstream; for peers: upstream only."""
        chain: list[Source] = []
        for peer in [] if from_peer else self.peers.ranking(str(key)):
            if peer == self.peers.me:
                break
            chain.append(Source(f"peer {peer}", self._peer_opener(peer, path, authorization), peer))

        def from_upstream(offset: int) -> AbstractAsyncContextManager[aiohttp.ClientResponse]:
            return self.upstream.open("GET", path, authorization, offset=offset, kind="blob")

        chain.append(Source("upstream", from_upstream))
        return chain

    def _peer_opener(self, peer: str, path: str, authorization: str | None) -> Opener:
        """GETs of ``path`` from ``peer``: marked as a peer's, its redirects not followed."""

        def open_at(offset: int) -> AbstractAsyncContextManager[aiohttp.ClientResponse]:
            extra = {PEER_HEADER: self.peers.me}
            if offset:
                extra["Range"] = f"bytes={offset}-"
            headers = request_headers(authorization, extra)
            return following(
                self.peer_session, "GET", f"http://{peer}{path}", headers, follow=False
            )

        return open_at

    # -- API -----------------------------------------------------------------------------------

    async def api(self, request: web.Request, target: ApiTarget) -> web.StreamResponse:
        if target.action == "xet-read-token":
            return error(
                404, "EntryNotFound", "this cache serves file bytes itself: no Xet tokens here"
            )
        if request.method == "GET" and target.action in ("", "revision"):
            return await self.revision(request, target)
        if request.method == "GET" and target.action == "tree" and target.revision:
            return await self.tree(request, target)
        if request.method not in ("GET", "HEAD") and not (
            request.method == "POST" and target.action == "paths-info"  # a read, despite POST
        ):
            return read_only(request)
        return await self.passthrough(request, target.url_path())

    async def revision(self, request: web.Request, target: ApiTarget) -> web.StreamResponse:
        """Repo info at a revision: always upstream (it resolves a ref). A 200 lets the caller
        list the repo at that commit; nothing in it says who may read files."""
        authorization = request.headers.get("Authorization")
        reply = await self.upstream.call("GET", target.url_path() + _query(request), authorization)
        body = reply.body
        if reply.status == 200:
            cleaned = clean_json(reply.body)
            if cleaned is None:
                return bad_json(target.url_path())
            info, body = cleaned
            sha = str(info.get("sha", "")) if isinstance(info, dict) else ""
            if is_commit(sha):
                self.grants.grant(fingerprint(authorization), target.repo, sha, LISTING)
                if target.revision:
                    self.metadata.set_ref(target.repo, target.revision, sha)
        return web.Response(
            status=reply.status, body=body, headers=passed_headers(reply.headers, _base(request))
        )

    async def tree(self, request: web.Request, target: ApiTarget) -> web.StreamResponse:
        """A tree listing page: from the cache for a commit the caller may list, else upstream."""
        assert target.revision is not None
        authorization = request.headers.get("Authorization")
        repo, caller = target.repo, fingerprint(authorization)
        query = urlencode(sorted((k, v) for k, v in request.query.items() if k in TREE_PARAMETERS))
        commit = target.revision if is_commit(target.revision) else None
        stored = self.metadata.tree(repo, commit, target.path, query) if commit else None
        if stored and commit and self.grants.allowed(caller, repo, commit, LISTING):
            return tree_response(stored, _base(request))
        try:
            reply = await self.upstream.call("GET", f"{target.url_path()}?{query}", authorization)
        except UpstreamError:
            if stored and commit and self.grants.public(repo, commit, LISTING):
                return tree_response(stored, _base(request))  # the Hub is down; anyone may list
            raise
        if reply.status != 200:
            if commit and reply.status < 500:
                self.grants.refuse(caller, repo, commit, LISTING)
            return web.Response(
                status=reply.status,
                body=reply.body,
                headers=passed_headers(reply.headers, _base(request)),
            )
        cleaned = clean_json(reply.body)
        if cleaned is None:
            return bad_json(target.url_path())
        page = TreePage(cleaned[1], next_link(reply.headers.get("Link")))
        if commit:
            self.grants.grant(caller, repo, commit, LISTING)
            self.metadata.set_tree(repo, commit, target.path, query, page)
        return tree_response(page, _base(request))

    async def passthrough(self, request: web.Request, path: str) -> web.StreamResponse:
        """Upstream's answer, JSON cleaned of Xet (read whole, bounded), anything else streamed."""
        body = await self._request_body(request)
        if isinstance(body, web.Response):
            return body
        what = f"{request.method} {path}"
        try:
            async with self.upstream.open(
                request.method,
                path + _query(request),
                request.headers.get("Authorization"),
                body,
                request.headers.get("Content-Type"),
            ) as reply:
                headers = passed_headers(reply.headers, _base(request))
                if not reply.headers.get("Content-Type", "").startswith("application/json"):
                    return await self._stream(request, reply, headers)
                payload = await read_limited(reply, MAX_METADATA, what)
        except (aiohttp.ClientError, TimeoutError) as failure:
            raise UpstreamUnreachableError(f"{what}: {describe(failure)}") from failure
        cleaned = clean_json(payload)
        return web.Response(
            status=reply.status, body=cleaned[1] if cleaned else payload, headers=headers
        )

    async def _stream(
        self, request: web.Request, reply: aiohttp.ClientResponse, headers: dict[str, str]
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=reply.status, headers=headers)
        if reply.content_length is not None:
            response.content_length = reply.content_length
        await response.prepare(request)
        try:
            async for chunk in chunks(reply.content, CHUNK, self.upstream_timeout):
                await response.write(chunk)
            await response.write_eof()
        except ConnectionResetError:
            raise  # the client left (server.py's guard): not upstream's doing
        except (aiohttp.ClientError, TimeoutError) as failure:
            self.upstream.body_broke(reply)
            log.info("upstream's body for %s broke off: %s", request.path, describe(failure))
            if request.transport is not None:
                request.transport.abort()  # the client sees the body cut, as upstream cut it
        return response

    async def _request_body(self, request: web.Request) -> bytes | web.Response | None:
        """The client's request body, bounded by aiohttp's client_max_size and the timeout."""
        if not request.can_read_body:
            return None
        try:
            async with asyncio.timeout(self.client_timeout):
                return await request.read()
        except web.HTTPRequestEntityTooLarge as large:
            return error(413, "PayloadTooLarge", f"the request body is too large: {large.text}")
        except TimeoutError:
            response = error(
                408,
                "RequestTimeout",
                f"the request body did not arrive within {self.client_timeout} s",
            )
            response.force_close()
            return response


def facts_from_head(reply: Reply) -> FileFacts | str:
    """A file's facts from an upstream HEAD (X-Linked-* win); a string says what is missing."""
    headers = reply.headers
    commit = headers.get("X-Repo-Commit", "")
    etag = headers.get("X-Linked-Etag") or headers.get("ETag")
    size = headers.get("X-Linked-Size")
    if size is None and reply.status == 200:
        size = headers.get("Content-Length")
    if not is_commit(commit) or not etag or size is None or not _SIZE.match(size):
        got = f"got {commit!r}, {etag!r}, {size[:40] if size else size!r}"
        return f"answer {reply.status} lacks a commit, an ETag or a size in bytes ({got})"
    return FileFacts(commit=commit, etag=etag.removeprefix("W/").strip('"'), size=int(size))


def tree_response(page: TreePage, base_url: str) -> web.Response:
    response = web.Response(body=page.body, content_type="application/json")
    if page.next_link:
        response.headers["Link"] = f'<{base_url}{page.next_link}>; rel="next"'
    return response


def bad_json(path: str) -> web.Response:
    message = f"upstream's answer for {path} is not JSON (or nests too deep to be sane)"
    return error(502, "BadUpstreamJson", message)


def read_only(request: web.Request) -> web.Response:
    message = (
        f"{request.method} is not served: the cache only reads; send changes to the Hub itself"
    )
    return error(405, "MethodNotAllowed", message)


def relay_error(reply: Reply) -> web.Response:
    """Upstream's refusal, as the client would have had it (codes, message, the commit for 404s)."""
    headers = {
        name: reply.headers[name]
        for name in ("X-Error-Code", "X-Error-Message", "X-Repo-Commit")
        if name in reply.headers
    }
    message = headers.get("X-Error-Message", f"upstream answered {reply.status}")
    return web.json_response({"error": message}, status=reply.status, headers=headers)


def error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    # Header values must be Latin-1; file names need not be.
    one_line = " ".join(message.split()).encode("ascii", "backslashreplace").decode()
    response_headers = {**(headers or {}), "X-Error-Code": code, "X-Error-Message": one_line[:1000]}
    return web.json_response({"error": one_line}, status=status, headers=response_headers)


def _query(request: web.Request) -> str:
    raw = request.rel_url.raw_query_string
    return f"?{raw}" if raw else ""


def _base(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"
