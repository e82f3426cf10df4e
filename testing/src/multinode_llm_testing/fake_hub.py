"""A FAKE Hugging Face Hub origin for tests and benchmarks (the real Hub cannot be reached here).

It speaks the subset in docs/hub-protocol.md the way the Hub does, including the
parts a cache must cope with: LFS downloads redirect to a "CDN" on another origin (which counts any
``Authorization`` header that reaches it), HEADs and tree entries carry Xet signals, tree listings
page with ABSOLUTE ``Link`` headers, private and gated repos refuse the wrong callers with the Hub's
error codes (a gated repo's ``ungated`` files, like the Hub's README, are anyone's), repo info
answers only the ``expand``ed fields, credentials count from a Bearer token, Basic auth (the token
as password, as a netrc sends it) or the session cookie the Hub sets, and on demand bodies are
throttled or broken (see ``FAULTS``). It counts every request and every blob byte it sends, by kind
and by file, so tests can assert what reached "upstream".

With ``direct=True`` it answers file GETs itself (no CDN) and ``/live``: a peer cache as a hostile
test sees one, lying with the same faults.

Run in a thread of the test process (``FakeHub.start()``), or alone for a benchmark:
``python -m multinode_llm_testing.fake_hub --host 127.0.0.1 --port 8070 --repo org/model DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote

from aiohttp import web

LFS_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")
CHUNK = 64 * 1024
BRANCHES = ("main", "refs/pr/1")  # every branch points at the one commit
SESSION_COOKIE = "hub_session"
# What a file body can be made to do (FakeHub.fault): each is something a real upstream or a broken
# proxy between has done.
FAULTS = frozenset(
    {
        "corrupt",  # one byte flipped in the middle
        "cut",  # half the body, then the connection is reset
        "short",  # Content-Length of the whole, one byte less sent, then the connection closes
        "long",  # five bytes more than the file, framed consistently
        "chunked-garbage",  # a chunk size that is not hex; the connection stays open
        "chunked-stall",  # a chunk shorter than its size line says; the connection stays open
        "drip",  # one byte every drip_interval seconds
        "hang",  # headers never come
        "garbled",  # a head no HTTP parser takes (Content-Length: nope)
        "redirect-loop",  # a 302 to the same URL, forever
    }
)


def git_sha1(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content, usedforsecurity=False).hexdigest()


@dataclass
class FakeRepo:
    repo_id: str
    files: dict[str, bytes]
    repo_type: str = "models"
    private: bool = False
    gated: bool = False
    readers: set[str] = field(default_factory=set)  # tokens that may read a private or gated repo
    ungated: set[str] = field(default_factory=set)  # files of a gated repo anyone may read
    lfs_threshold: int = 10 * 1024
    # (kind, path) -> (the content hashed, its digest): hashing a large file on every request
    # would serialize the fake Hub's one event loop for seconds per request (hundreds of MiB).
    _digests: dict[tuple[str, str], tuple[bytes, bytes]] = field(default_factory=dict, repr=False)

    def _digest(self, kind: str, path: str) -> bytes:
        content = self.files[path]
        cached = self._digests.get((kind, path))
        if cached is None or cached[0] is not content:  # a file replaced is hashed again
            if kind == "sha256":
                digest = hashlib.sha256(content).digest()
            elif kind == "xet":
                digest = hashlib.sha256(b"xet" + content).digest()
            else:
                digest = bytes.fromhex(git_sha1(content))
            cached = self._digests[(kind, path)] = (content, digest)
        return cached[1]

    def sha256(self, path: str) -> bytes:
        return self._digest("sha256", path)

    def git_oid(self, path: str) -> str:
        """``path``'s git blob sha1 (every tree page and HEAD names it)."""
        return self._digest("gitsha1", path).hex()

    def xet_hash(self, path: str) -> str:
        """The fake Xet hash of ``path`` (tree entries and HEADs carry it)."""
        return self._digest("xet", path).hex()

    @property
    def commit(self) -> str:
        digest = hashlib.sha1(usedforsecurity=False)
        for path in sorted(self.files):
            digest.update(path.encode() + b"\0" + self.sha256(path))
        return digest.hexdigest()

    def is_lfs(self, path: str) -> bool:
        return path.endswith(LFS_SUFFIXES) or len(self.files[path]) >= self.lfs_threshold

    def etag(self, path: str) -> str:
        return self.sha256(path).hex() if self.is_lfs(path) else self.git_oid(path)

    @property
    def size(self) -> int:
        return sum(len(content) for content in self.files.values())


class FakeHub:
    """The fake origin and its fake CDN, on two ports of ``host`` (two origins)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        cdn_port: int = 0,
        page_size: int = 3,
    ) -> None:
        self.host = host
        self.port = port
        self.cdn_port = cdn_port
        self.page_size = page_size
        self.repos: dict[tuple[str, str], FakeRepo] = {}
        self.requests: Counter[str] = (
            Counter()
        )  # by kind: revision, tree, head, get, cdn, xet-token...
        self.blob_gets: Counter[str] = Counter()  # by file path: GETs whose body was file bytes
        self.blob_bytes: Counter[str] = Counter()  # by file path: file bytes sent
        self.auth_at_cdn = 0  # CDN requests that carried Authorization: must stay 0
        self.client_requests = (
            0  # requests with huggingface_hub's user agent: the cache was bypassed
        )
        self.bytes_per_second: float | None = None  # throttle each blob body on its own
        # Throttle all blob bodies together, as one uplink shared by every connection (FIFO by
        # chunk): the upstream of a benchmark where N downloaders split a fixed bandwidth.
        self.link_bytes_per_second: float | None = None
        self._link_free_at = 0.0  # when the shared link has sent everything queued on it
        self.corrupt: set[str] = set()  # paths served with one byte flipped
        self._faults: dict[str, tuple[str, int | None]] = {}  # path -> (fault, times left)
        self.drip_interval = 0.5
        self.head_headers: dict[str, dict[str, str]] = {}  # path -> headers a HEAD answers instead
        self.tree_body: bytes | None = None  # what every tree listing answers instead
        self.head_delay = 0.0  # seconds each file HEAD waits before its answer
        self.large: dict[str, int] = {}  # raw path -> size of a generated octet-stream body
        self.session_cookies = (
            False  # set a session cookie for a caller it let in (as browsers get)
        )
        self.outage = False  # every connection is reset before an answer
        self.failing: int | None = None  # every request answered with this status (a 5xx)
        self.direct = False
        # method, raw path, Authorization, Cookie: what each request carried
        self.requests_seen: list[tuple[str, str, str | None, str | None]] = []
        self.xet = True
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._cdn_runner: web.AppRunner | None = None

    # -- set-up ----------------------------------------------------------------------------------

    def add(self, repo: FakeRepo) -> FakeRepo:
        self.repos[(repo.repo_type, repo.repo_id)] = repo
        return repo

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def cdn_url(self) -> str:
        return f"http://{self.host}:{self.cdn_port}"

    def fault(self, path: str, kind: str, times: int | None = None) -> None:
        """Break the bodies of ``path`` the ``kind`` way (FAULTS), ``times`` times or always."""
        assert kind in FAULTS, kind
        self._faults[path] = (kind, times)

    def clear_faults(self) -> None:
        self._faults.clear()
        self.corrupt.clear()

    def _take_fault(self, path: str) -> str | None:
        with self._lock:
            if path in self.corrupt:
                return "corrupt"
            kind, times = self._faults.get(path, (None, None))
            if kind is not None and times is not None:
                if times <= 1:
                    del self._faults[path]
                else:
                    self._faults[path] = (kind, times - 1)
            return kind

    def reset_counts(self) -> None:
        with self._lock:
            self.requests_seen.clear()
            self.requests.clear()
            self.blob_gets.clear()
            self.blob_bytes.clear()
            self.auth_at_cdn = 0
            self.client_requests = 0

    def start(self) -> FakeHub:
        """Serve from a thread of this process; returns once both origins listen."""
        ready = threading.Event()

        def main() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=main, name="fake-hub", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the fake hub did not start within 10 s")
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        future = asyncio.run_coroutine_threadsafe(self._stop(), self._loop)
        future.result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop = self._thread = None

    async def _start(self) -> None:
        hub = web.Application(middlewares=[self._outages])
        hub.router.add_get("/live", self._live)
        hub.router.add_route("*", "/{tail:.*}", self._hub)
        cdn = web.Application(middlewares=[self._outages])
        cdn.router.add_get("/blobs/{sha256}", self._cdn)
        # Handlers end with their client, so a hanging or dripping answer never outlives a test.
        self._runner = web.AppRunner(hub, handler_cancellation=True, shutdown_timeout=1)
        self._cdn_runner = web.AppRunner(cdn, handler_cancellation=True, shutdown_timeout=1)
        for runner in (self._runner, self._cdn_runner):
            await runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        cdn_site = web.TCPSite(self._cdn_runner, self.host, self.cdn_port)
        await site.start()
        await cdn_site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.cdn_port = cdn_site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _stop(self) -> None:
        for runner in (self._runner, self._cdn_runner):
            if runner:
                await runner.cleanup()

    @web.middleware
    async def _outages(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        with self._lock:
            self.requests_seen.append(
                (
                    request.method,
                    request.raw_path,
                    request.headers.get("Authorization"),
                    request.headers.get("Cookie"),
                )
            )
        if self.outage and request.transport is not None:
            request.transport.abort()
            raise ConnectionResetError("fake hub outage")
        if self.failing is not None:
            return _error(self.failing, "Unavailable", "the fake hub is failing on purpose")
        return await handler(request)

    async def _live(self, request: web.Request) -> web.Response:
        del request
        return web.json_response({"live": True})

    def _count(self, kind: str, request: web.Request) -> None:
        with self._lock:
            self.requests[kind] += 1
            if "huggingface_hub" in request.headers.get("User-Agent", ""):
                self.client_requests += 1

    # -- the hub ---------------------------------------------------------------------------------

    async def _hub(self, request: web.Request) -> web.StreamResponse:
        parts = [unquote(part) for part in request.raw_path.partition("?")[0].split("/")[1:]]
        if (size := self.large.get(request.raw_path)) is not None:
            self._count("large", request)
            return await self._large(request, size)
        if parts[:1] == ["api"]:
            return await self._api(request, parts[1:])
        if "resolve" in parts:
            return await self._resolve(request, parts)
        self._count("other", request)
        return _error(404, "EntryNotFound", f"fake hub has no route {request.path}")

    async def _api(self, request: web.Request, parts: list[str]) -> web.StreamResponse:
        if parts == ["whoami-v2"]:
            self._count("whoami", request)
            token = _token(request)
            return (
                web.json_response({"name": token})
                if token
                else _error(401, "Unauthorized", "no token")
            )
        if len(parts) < 3 or (parts[0], "/".join(parts[1:3])) not in self.repos:
            self._count("api-unknown", request)
            return _error(404, "RepoNotFound", "no such repo")
        repo = self.repos[(parts[0], "/".join(parts[1:3]))]
        action, rest = (parts[3], parts[4:]) if len(parts) > 3 else ("", [])
        self._count(action or "revision", request)
        if action == "xet-read-token":
            return web.json_response(
                {"accessToken": "fake", "exp": 0, "casUrl": "http://127.0.0.1:9"}
            )
        if (refusal := self._refuse_listing(request, repo)) is not None:
            return refusal
        revision = rest[0] if rest else "main"
        if revision not in (repo.commit, *BRANCHES):
            return _error(404, "RevisionNotFound", f"no revision {revision}")
        if action in ("", "revision"):
            return self._let_in(request, web.json_response(self._info(repo, request)))
        if action == "tree":
            if self.tree_body is not None:
                return web.Response(body=self.tree_body, content_type="application/json")
            return self._let_in(request, self._tree(request, repo, "/".join(rest[1:])))
        return _error(404, "EntryNotFound", f"fake hub has no API action {action}")

    def _info(self, repo: FakeRepo, request: web.Request) -> dict[str, object]:
        info: dict[str, object] = {
            "id": repo.repo_id,
            "sha": repo.commit,
            "private": repo.private,
            "gated": "manual" if repo.gated else False,
            "siblings": [{"rfilename": path} for path in sorted(repo.files)],
            "lastModified": "2025-01-01T00:00:00.000Z",
        }
        # As the Hub does: ?expand=a&expand=b answers the id and those fields only.
        expand = [value for item in request.query.getall("expand", []) for value in item.split(",")]
        if expand:
            return {key: value for key, value in info.items() if key == "id" or key in expand}
        return info

    def _tree(self, request: web.Request, repo: FakeRepo, under: str) -> web.Response:
        entries: list[dict[str, object]] = []
        directories = sorted({p.rsplit("/", 1)[0] for p in repo.files if "/" in p})
        for directory in directories:
            if directory.startswith(under):
                entries.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": directory})
        for path in sorted(repo.files):
            if not path.startswith(under):
                continue
            content = repo.files[path]
            entry: dict[str, object] = {
                "type": "file",
                "oid": repo.git_oid(path),
                "size": len(content),
                "path": path,
            }
            if repo.is_lfs(path):
                entry["lfs"] = {
                    "oid": repo.etag(path),
                    "size": len(content),
                    "pointerSize": 134,
                }
                if self.xet:
                    entry["xetHash"] = repo.xet_hash(path)
            entries.append(entry)
        start = int(request.query.get("cursor", "0"))
        page = entries[start : start + self.page_size]
        response = web.json_response(page)
        if start + self.page_size < len(entries):
            recursive = request.query.get("recursive", "false")
            query = f"recursive={recursive}&expand=false&cursor={start + self.page_size}"
            response.headers["Link"] = f'<{self.url}{request.path}?{query}>; rel="next"'
        return response

    async def _resolve(self, request: web.Request, parts: list[str]) -> web.StreamResponse:
        self._count("head" if request.method == "HEAD" else "get", request)
        if request.method == "HEAD" and self.head_delay:
            await asyncio.sleep(self.head_delay)
        index = parts.index("resolve")
        repo_type = parts[0] if parts[0] in ("datasets", "spaces") else "models"
        repo_parts = parts[1:index] if repo_type != "models" else parts[:index]
        repo = self.repos.get((repo_type, "/".join(repo_parts)))
        if repo is None:
            return _error(401 if not _token(request) else 404, "RepoNotFound", "no such repo")
        revision, path = parts[index + 1], "/".join(parts[index + 2 :])
        if (refusal := self._refuse_files(request, repo, path)) is not None:
            return refusal
        if revision not in (repo.commit, *BRANCHES):
            return _error(404, "RevisionNotFound", f"no revision {revision}")
        commit = {"X-Repo-Commit": repo.commit}
        if path not in repo.files:
            return _error(404, "EntryNotFound", f"{path} is not in {repo.repo_id}", commit)
        content = repo.files[path]
        if request.method == "HEAD" and path in self.head_headers:
            return web.Response(status=200, headers={**commit, **self.head_headers[path]})
        if self._faults.get(path, ("",))[0] == "redirect-loop":
            return web.Response(status=302, headers={"Location": request.path})
        if repo.is_lfs(path) and not self.direct:
            sha256, expires = repo.etag(path), int(time.time()) + 3600
            headers = {
                **commit,
                "Location": f"{self.cdn_url}/blobs/{sha256}?expires={expires}&path={quote(path)}",
                "X-Linked-Etag": f'"{sha256}"',
                "X-Linked-Size": str(len(content)),
                "ETag": f'"{repo.git_oid(path)}"',  # the pointer's: clients prefer X-Linked-Etag
            }
            if self.xet:
                headers["X-Xet-Hash"] = repo.xet_hash(path)
                token_route = f"/api/models/{repo.repo_id}/xet-read-token/{repo.commit}"
                headers["X-Xet-Refresh-Route"] = token_route
                headers["Link"] = (
                    f'<{self.url}{token_route}>; rel="xet-auth", '
                    f'<{self.cdn_url}/reconstruction/{sha256}>; rel="xet-reconstruction-info"'
                )
            return self._let_in(request, web.Response(status=302, headers=headers))
        headers = {**commit, "ETag": f'"{repo.etag(path)}"'}
        if repo.is_lfs(path):
            headers["X-Linked-Etag"] = headers["ETag"]
        return self._let_in(request, await self._body(request, path, content, headers))

    def _refuse_listing(self, request: web.Request, repo: FakeRepo) -> web.Response | None:
        token = _token(request)
        if repo.private and token not in repo.readers:
            return _error(401 if not token else 404, "RepoNotFound", "Repository not found")
        return None

    def _refuse_files(
        self, request: web.Request, repo: FakeRepo, path: str = ""
    ) -> web.Response | None:
        token = _token(request)
        if repo.private and token not in repo.readers:
            return _error(401 if not token else 404, "RepoNotFound", "Repository not found")
        if repo.gated and token not in repo.readers and path not in repo.ungated:
            message = f"Access to model {repo.repo_id} is restricted. You must have access to it."
            return _error(401 if not token else 403, "GatedRepo", message)
        return None

    def _let_in(self, request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
        """``response``, with the session cookie a Hub sets for a caller it knows, if enabled."""
        token = _token(request)
        if self.session_cookies and token and not response.prepared:
            response.set_cookie(SESSION_COOKIE, token)
        return response

    # -- the CDN ---------------------------------------------------------------------------------

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        self._count("cdn", request)
        if "Authorization" in request.headers:
            with self._lock:
                self.auth_at_cdn += 1
        if int(request.query.get("expires", "0")) < time.time():
            return web.Response(status=403, text="signature expired")
        sha256 = request.match_info["sha256"]
        for repo in self.repos.values():
            for path, content in repo.files.items():
                if repo.is_lfs(path) and repo.etag(path) == sha256:
                    return await self._body(request, path, content, {"ETag": f'"{sha256}"'})
        return web.Response(status=404)

    async def _body(
        self, request: web.Request, path: str, content: bytes, headers: dict[str, str]
    ) -> web.StreamResponse:
        """A file body with Range support, throttled and corrupted as configured."""
        size = len(content)
        start, end, status = 0, size - 1, 200
        if (header := request.headers.get("Range", "")).startswith("bytes="):
            first, _, last = header[6:].partition("-")
            start = int(first) if first else max(0, size - int(last))
            end = min(int(last), size - 1) if first and last else size - 1
            if start >= size:
                return web.Response(status=416, headers={"Content-Range": f"bytes */{size}"})
            status = 206
        fault = self._take_fault(path) if request.method == "GET" else None
        if fault in ("hang", "garbled", "chunked-garbage", "chunked-stall"):
            with self._lock:
                self.blob_gets[path] += 1
            return await self._broken(request, fault, content[start : end + 1], status, headers)
        response = web.StreamResponse(status=status, headers=headers)
        response.headers["Accept-Ranges"] = "bytes"
        if status == 206:
            response.headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        body = memoryview(content)[start : end + 1]
        response.content_length = len(body) + (5 if fault == "long" else 0)
        self._let_in(request, response)
        await response.prepare(request)
        if request.method == "HEAD":
            return response
        with self._lock:
            self.blob_gets[path] += 1
        if fault == "corrupt" and body:
            flipped = bytearray(body)
            flipped[len(flipped) // 2] ^= 0xFF
            body = memoryview(flipped)
        elif fault == "long":
            body = memoryview(bytes(body) + b"extra")
        elif fault == "drip":
            for offset in range(len(body)):
                await response.write(bytes(body[offset : offset + 1]))
                await asyncio.sleep(self.drip_interval)
        elif fault in ("cut", "short"):
            kept = len(body) // 2 if fault == "cut" else len(body) - 1
            await response.write(bytes(body[:kept]))
            assert request.transport is not None
            if fault == "cut":
                request.transport.abort()
            else:
                request.transport.close()
            return response
        began = time.monotonic()
        for offset in range(0, len(body), CHUNK):
            await response.write(bytes(body[offset : offset + CHUNK]))
            with self._lock:
                self.blob_bytes[path] += min(CHUNK, len(body) - offset)
            if self.bytes_per_second:
                ahead = (offset + CHUNK) / self.bytes_per_second - (time.monotonic() - began)
                if ahead > 0:
                    await asyncio.sleep(ahead)
            if self.link_bytes_per_second:
                await self._through_link(min(CHUNK, len(body) - offset))
        await response.write_eof()
        return response

    async def _broken(
        self,
        request: web.Request,
        fault: str,
        body: bytes,
        status: int,
        headers: dict[str, str],
    ) -> web.StreamResponse:
        """Bytes no HTTP library would write: sent raw, then the connection held open."""
        transport = request.transport
        assert transport is not None
        if fault == "garbled":
            transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n")
        elif fault != "hang":
            head = [f"HTTP/1.1 {status} OK", "Transfer-Encoding: chunked"]
            head += [f"{name}: {value}" for name, value in headers.items()]
            half = body[: len(body) // 2]
            if fault == "chunked-garbage":
                framing = b"%x\r\n%s\r\nzz-not-hex\r\n" % (len(half), half)
            else:
                framing = b"%x\r\n%s" % (len(body), half)  # promises all, sends half
            transport.write("\r\n".join(head).encode() + b"\r\n\r\n" + framing)
        for _ in range(1200):  # two minutes at most; the test's client gives up long before
            if transport.is_closing():
                break
            await asyncio.sleep(0.1)
        transport.abort()
        raise ConnectionResetError("fake hub: broken body abandoned")

    async def _large(self, request: web.Request, size: int) -> web.StreamResponse:
        """``size`` generated bytes, written a block at a time (never held whole here)."""
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.content_length = size
        await response.prepare(request)
        block = bytes(range(256)) * 4096  # 1 MiB
        for offset in range(0, size, len(block)):
            await response.write(block[: size - offset])
        await response.write_eof()
        return response

    async def _through_link(self, size: int) -> None:
        """Wait until the shared link has carried ``size`` more bytes after those queued before."""
        assert self.link_bytes_per_second
        now = time.monotonic()
        # One event loop runs every response: no lock needed around the link's clock.
        self._link_free_at = max(now, self._link_free_at) + size / self.link_bytes_per_second
        await asyncio.sleep(self._link_free_at - now)


def _token(request: web.Request) -> str:
    """The caller's credential: a Bearer token, Basic auth's password (what a netrc sends, as git
    does with a token), or the session cookie."""
    authorization = request.headers.get("Authorization", "")
    if authorization.startswith("Basic "):
        decoded = base64.b64decode(authorization.removeprefix("Basic ")).decode()
        return decoded.partition(":")[2]
    if authorization:
        return authorization.removeprefix("Bearer ").strip()
    return request.cookies.get(SESSION_COOKIE, "")


def _error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    return web.json_response(
        {"error": message},
        status=status,
        headers={**(headers or {}), "X-Error-Code": code, "X-Error-Message": message},
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description="serve a directory as repo(s) of a FAKE Hub (tests, benchmarks)"
    )
    parser.add_argument("directory", type=Path)
    parser.add_argument("--repo", default="org/model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8070)
    parser.add_argument("--cdn-port", type=int, default=8071)
    args = parser.parse_args()
    files = {
        str(p.relative_to(args.directory)): p.read_bytes()
        for p in args.directory.rglob("*")
        if p.is_file()
    }
    hub = FakeHub(args.host, args.port, args.cdn_port)
    hub.add(FakeRepo(args.repo, files))
    hub.start()
    print(
        f"fake hub {hub.url} (CDN {hub.cdn_url}) serving {args.repo}: {len(files)} files",
        flush=True,
    )
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        hub.stop()


if __name__ == "__main__":
    main()
