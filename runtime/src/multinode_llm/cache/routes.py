"""The Hub protocol subset clients use, answered from the cache where the Hub's rules allow.

- ``HEAD|GET /{prefix}{repo}/resolve/{rev}/{path}``: the file's facts (commit, ETag, size) and its
  bytes, 200 or 206/416. Facts are asked upstream once per (repo, commit, path); a ref is asked
  again after ``ref_ttl``. Bytes come from the store, a fill in flight, a peer or upstream (see
  fills.py).
- ``GET /api/{type}/{repo}[/revision/{rev}]``: always upstream (it resolves a ref), Xet stripped.
- ``GET /api/{type}/{repo}/tree/{rev}[/{path}]``: cached per commit, pagination links rewritten.
- ``/api/{type}/{repo}/xet-read-token/...``: 404, so no client goes around the cache.
- ``POST /api/{type}/{repo}/paths-info/{rev}`` and any other GET under a valid path: passed through
  upstream with the caller's token. Writes (PUT, DELETE, other POSTs) get 405: the cache only reads.

Peers speak the same protocol to each other. A request from a peer (header ``PEER_HEADER``) is
authorized like any other but never forwarded to a third peer, so owners go upstream and no request
can loop between nodes that disagree about who owns a blob.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiohttp import web

from multinode_llm.cache import paths
from multinode_llm.cache.auth import Decisions, Visibilities, Visibility, fingerprint
from multinode_llm.cache.fills import Fill, FillFailedError, Fills, Source
from multinode_llm.cache.metadata import FileFacts, Metadata, TreePage
from multinode_llm.cache.metrics import Metrics
from multinode_llm.cache.paths import ApiTarget, FileTarget, is_commit
from multinode_llm.cache.peers import Peers
from multinode_llm.cache.ranges import UnsatisfiableRangeError, parse_range
from multinode_llm.cache.responses import send_following, send_stored, start_body
from multinode_llm.cache.sanitize import next_link, passed_headers, strip_xet_json
from multinode_llm.cache.store import BlobKey, Store, StoreFullError
from multinode_llm.cache.upstream import Reply, Upstream, UpstreamUnreachableError, fetch_following

log = logging.getLogger(__name__)

PEER_HEADER = "X-Multinode-Llm-Peer"


@dataclass
class Hub:
    store: Store
    metadata: Metadata
    upstream: Upstream
    visibilities: Visibilities
    decisions: Decisions
    peers: Peers
    fills: Fills
    metrics: Metrics
    peer_session: aiohttp.ClientSession

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw_path = request.raw_path.partition("?")[0]
        try:
            target = paths.parse(raw_path)
        except paths.BadPathError as bad:
            return error(400, "BadRequest", str(bad))
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
        except UpstreamUnreachableError as unreachable:
            return error(502, "UpstreamUnreachable", str(unreachable))

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
        """The file's commit, ETag and size, once the caller may read it; or the error to answer."""
        repo, caller = target.repo, fingerprint(authorization)
        commit, fresh = (
            (target.revision, True)
            if is_commit(target.revision)
            else self.metadata.ref(repo, target.revision)
        )
        facts = self.metadata.file(repo, commit, target.path) if commit else None
        if facts and fresh and await self._may_read(caller, target):
            return facts
        # One upstream HEAD answers three questions: the ref, the caller's right, the file's facts.
        try:
            reply = await self.upstream.head(target.url_path(), authorization)
        except UpstreamUnreachableError as unreachable:
            if facts and await self._may_read(caller, target):
                return facts  # the Hub is down: the last known ref stands
            return error(502, "UpstreamUnreachable", str(unreachable))
        if reply.status >= 500 and facts and await self._may_read(caller, target):
            return facts  # the Hub is failing: likewise
        if not reply.ok:
            return relay_error(reply)
        learned = facts_from_head(reply)
        if isinstance(learned, str):
            return error(502, "BadUpstreamHead", f"HEAD {target.url_path()} upstream: {learned}")
        self.decisions.grant(caller, repo)
        if authorization is None:  # anyone may read it: remembered for when the Hub is down
            self.visibilities.learn(repo, Visibility(files_public=True, listing_public=True))
        if not is_commit(target.revision):
            self.metadata.set_ref(repo, target.revision, learned.commit)
        self.metadata.set_file(repo, target.path, learned)
        return learned

    async def _may_read(self, caller: str, target: FileTarget) -> bool:
        if self.decisions.allowed(caller, target.repo):
            return True
        return (await self.visibilities.of(target.repo)).files_public

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
        fill = self._join_or_start(
            key, target, facts, authorization, PEER_HEADER in request.headers
        )
        if isinstance(fill, web.Response):
            return fill
        # The reader's descriptor is taken now, before any await: the fill closes its own when it
        # ends, and its number may then name any file or socket opened since.
        with fill.open_reader() as file:
            try:
                await fill.wait_answered()
            except FillFailedError as failure:
                return error(
                    failure.status,
                    failure.headers.get("X-Error-Code", "FillFailed"),
                    str(failure),
                    {**headers, **failure.headers},
                )
            response, start, length = await start_body(request, headers, facts.size, byte_range)
            await send_following(request, response, fill, file, start, length, self.metrics)
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
            opener = partial(
                fetch_following,
                self.peer_session,
                f"http://{peer}{path}",
                authorization,
                extra={PEER_HEADER: self.peers.me},
            )
            chain.append(Source(f"peer {peer}", opener, peer))
        chain.append(Source("upstream", partial(self.upstream.open_blob, path, authorization)))
        return chain

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
        """Repo info at a revision: always upstream (it resolves a ref); it teaches visibility."""
        reply = await self.upstream.call(
            "GET", target.url_path() + _query(request), request.headers.get("Authorization")
        )
        body = reply.body
        if reply.status == 200 and (info := parse_json(body)) is not None:
            self.visibilities.learn(target.repo, Visibility.from_repo_info(info))
            if target.revision and isinstance(info, dict) and is_commit(str(info.get("sha", ""))):
                self.metadata.set_ref(target.repo, target.revision, str(info["sha"]))
            body = json.dumps(strip_xet_json(info)).encode()
        return web.Response(
            status=reply.status, body=body, headers=passed_headers(reply.headers, _base(request))
        )

    async def tree(self, request: web.Request, target: ApiTarget) -> web.StreamResponse:
        """A tree listing page: from the cache for a commit the caller may list, else upstream."""
        assert target.revision is not None
        authorization = request.headers.get("Authorization")
        query = urlencode(sorted(request.query.items()))
        cacheable = is_commit(target.revision)
        if cacheable and await self._may_list(target, authorization):
            page = self.metadata.tree(target.repo, target.revision, target.path, query)
            if page:
                return tree_response(page, _base(request))
        reply = await self.upstream.call("GET", f"{target.url_path()}?{query}", authorization)
        if reply.status != 200:
            return web.Response(
                status=reply.status,
                body=reply.body,
                headers=passed_headers(reply.headers, _base(request)),
            )
        listing = parse_json(reply.body)
        if listing is None:
            return error(
                502, "BadUpstreamTree", f"upstream's listing of {target.url_path()} is not JSON"
            )
        page = TreePage(
            json.dumps(strip_xet_json(listing)).encode(), next_link(reply.headers.get("Link"))
        )
        if cacheable:
            self.metadata.set_tree(target.repo, target.revision, target.path, query, page)
        return tree_response(page, _base(request))

    async def _may_list(self, target: ApiTarget, authorization: str | None) -> bool:
        if self.decisions.allowed(fingerprint(authorization), target.repo):
            return True
        return (await self.visibilities.of(target.repo)).listing_public

    async def passthrough(self, request: web.Request, path: str) -> web.StreamResponse:
        body = await request.read() if request.can_read_body else None
        reply = await self.upstream.call(
            request.method,
            path + _query(request),
            request.headers.get("Authorization"),
            body,
            request.headers.get("Content-Type"),
        )
        payload = reply.body
        is_json = reply.headers.get("Content-Type", "").startswith("application/json")
        if is_json and (parsed := parse_json(payload)) is not None:
            payload = json.dumps(strip_xet_json(parsed)).encode()
        return web.Response(
            status=reply.status, body=payload, headers=passed_headers(reply.headers, _base(request))
        )


def parse_json(body: bytes) -> Any:
    """``body`` parsed, or None when it is not JSON."""
    try:
        return json.loads(body)
    except ValueError:
        return None


def facts_from_head(reply: Reply) -> FileFacts | str:
    """A file's facts from an upstream HEAD (X-Linked-* win); a string says what is missing."""
    headers = reply.headers
    commit = headers.get("X-Repo-Commit")
    etag = headers.get("X-Linked-Etag") or headers.get("ETag")
    size = headers.get("X-Linked-Size")
    if size is None and reply.status == 200:
        size = headers.get("Content-Length")
    if not commit or not etag or size is None or not size.isdigit():
        got = f"got {commit!r}, {etag!r}, {size!r}"
        return f"answer {reply.status} lacks X-Repo-Commit, an ETag or a size ({got})"
    return FileFacts(commit=commit, etag=etag.removeprefix("W/").strip('"'), size=int(size))


def tree_response(page: TreePage, base_url: str) -> web.Response:
    response = web.Response(body=page.body, content_type="application/json")
    if page.next_link:
        response.headers["Link"] = f'<{base_url}{page.next_link}>; rel="next"'
    return response


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
    return f"?{request.query_string}" if request.query_string else ""


def _base(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"
