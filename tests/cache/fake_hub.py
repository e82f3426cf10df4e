"""A FAKE Hugging Face Hub origin for tests and benchmarks (the real Hub cannot be reached here).

It speaks the subset in ../shared/design/hf-hub-protocol.md the way the Hub does, including the
parts a cache must cope with: LFS downloads redirect to a "CDN" on another origin (which counts any
``Authorization`` header that reaches it), HEADs and tree entries carry Xet signals, tree listings
page with ABSOLUTE ``Link`` headers, private and gated repos refuse the wrong callers with the Hub's
error codes, and on demand bodies are throttled or corrupted. It counts every request and every blob
byte it sends, by kind and by file, so tests can assert what reached "upstream".

Run in a thread of the test process (``FakeHub.start()``), or alone for a benchmark:
``python -m tests.cache.fake_hub --host 127.0.0.1 --port 8070 --repo org/model DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote

from aiohttp import web

LFS_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")
CHUNK = 64 * 1024
BRANCHES = ("main", "refs/pr/1")  # every branch points at the one commit


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
    lfs_threshold: int = 10 * 1024
    # path -> (the content hashed, its sha256): hashing a large file on every request would
    # serialize the fake Hub's one event loop for seconds per request (hundreds of MiB).
    _sha256: dict[str, tuple[bytes, bytes]] = field(default_factory=dict, repr=False)

    def sha256(self, path: str) -> bytes:
        content = self.files[path]
        cached = self._sha256.get(path)
        if cached is None or cached[0] is not content:  # a file replaced is hashed again
            cached = self._sha256[path] = (content, hashlib.sha256(content).digest())
        return cached[1]

    @property
    def commit(self) -> str:
        digest = hashlib.sha1(usedforsecurity=False)
        for path in sorted(self.files):
            digest.update(path.encode() + b"\0" + self.sha256(path))
        return digest.hexdigest()

    def is_lfs(self, path: str) -> bool:
        return path.endswith(LFS_SUFFIXES) or len(self.files[path]) >= self.lfs_threshold

    def etag(self, path: str) -> str:
        content = self.files[path]
        return self.sha256(path).hex() if self.is_lfs(path) else git_sha1(content)

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

    def reset_counts(self) -> None:
        with self._lock:
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
        hub = web.Application()
        hub.router.add_route("*", "/{tail:.*}", self._hub)
        cdn = web.Application()
        cdn.router.add_get("/blobs/{sha256}", self._cdn)
        self._runner, self._cdn_runner = web.AppRunner(hub), web.AppRunner(cdn)
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

    def _count(self, kind: str, request: web.Request) -> None:
        with self._lock:
            self.requests[kind] += 1
            if "huggingface_hub" in request.headers.get("User-Agent", ""):
                self.client_requests += 1

    # -- the hub ---------------------------------------------------------------------------------

    async def _hub(self, request: web.Request) -> web.StreamResponse:
        parts = [unquote(part) for part in request.raw_path.partition("?")[0].split("/")[1:]]
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
            return web.json_response(self._info(repo))
        if action == "tree":
            return self._tree(request, repo, "/".join(rest[1:]))
        return _error(404, "EntryNotFound", f"fake hub has no API action {action}")

    def _info(self, repo: FakeRepo) -> dict[str, object]:
        return {
            "id": repo.repo_id,
            "sha": repo.commit,
            "private": repo.private,
            "gated": "manual" if repo.gated else False,
            "siblings": [{"rfilename": path} for path in sorted(repo.files)],
            "lastModified": "2025-01-01T00:00:00.000Z",
        }

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
                "oid": git_sha1(content),
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
                    entry["xetHash"] = hashlib.sha256(b"xet" + content).hexdigest()
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
        index = parts.index("resolve")
        repo_type = parts[0] if parts[0] in ("datasets", "spaces") else "models"
        repo_parts = parts[1:index] if repo_type != "models" else parts[:index]
        repo = self.repos.get((repo_type, "/".join(repo_parts)))
        if repo is None:
            return _error(401 if not _token(request) else 404, "RepoNotFound", "no such repo")
        if (refusal := self._refuse_files(request, repo)) is not None:
            return refusal
        revision, path = parts[index + 1], "/".join(parts[index + 2 :])
        if revision not in (repo.commit, *BRANCHES):
            return _error(404, "RevisionNotFound", f"no revision {revision}")
        commit = {"X-Repo-Commit": repo.commit}
        if path not in repo.files:
            return _error(404, "EntryNotFound", f"{path} is not in {repo.repo_id}", commit)
        content = repo.files[path]
        if repo.is_lfs(path):
            sha256, expires = repo.etag(path), int(time.time()) + 3600
            headers = {
                **commit,
                "Location": f"{self.cdn_url}/blobs/{sha256}?expires={expires}&path={quote(path)}",
                "X-Linked-Etag": f'"{sha256}"',
                "X-Linked-Size": str(len(content)),
                "ETag": f'"{git_sha1(content)}"',  # the pointer's: clients prefer X-Linked-Etag
            }
            if self.xet:
                headers["X-Xet-Hash"] = hashlib.sha256(b"xet" + content).hexdigest()
                token_route = f"/api/models/{repo.repo_id}/xet-read-token/{repo.commit}"
                headers["X-Xet-Refresh-Route"] = token_route
                headers["Link"] = (
                    f'<{self.url}{token_route}>; rel="xet-auth", '
                    f'<{self.cdn_url}/reconstruction/{sha256}>; rel="xet-reconstruction-info"'
                )
            return web.Response(status=302, headers=headers)
        headers = {**commit, "ETag": f'"{git_sha1(content)}"'}
        return await self._body(request, path, content, headers)

    def _refuse_listing(self, request: web.Request, repo: FakeRepo) -> web.Response | None:
        token = _token(request)
        if repo.private and token not in repo.readers:
            return _error(401 if not token else 404, "RepoNotFound", "Repository not found")
        return None

    def _refuse_files(self, request: web.Request, repo: FakeRepo) -> web.Response | None:
        token = _token(request)
        if repo.private and token not in repo.readers:
            return _error(401 if not token else 404, "RepoNotFound", "Repository not found")
        if repo.gated and token not in repo.readers:
            message = f"Access to model {repo.repo_id} is restricted. You must have access to it."
            return _error(401 if not token else 403, "GatedRepo", message)
        return None

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
        response = web.StreamResponse(status=status, headers=headers)
        response.headers["Accept-Ranges"] = "bytes"
        if status == 206:
            response.headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        response.content_length = end - start + 1
        await response.prepare(request)
        if request.method == "HEAD":
            return response
        with self._lock:
            self.blob_gets[path] += 1
        body = memoryview(content)[start : end + 1]
        if path in self.corrupt and body:
            flipped = bytearray(body)
            flipped[len(flipped) // 2] ^= 0xFF
            body = memoryview(flipped)
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

    async def _through_link(self, size: int) -> None:
        """Wait until the shared link has carried ``size`` more bytes after those queued before."""
        assert self.link_bytes_per_second
        now = time.monotonic()
        # One event loop runs every response: no lock needed around the link's clock.
        self._link_free_at = max(now, self._link_free_at) + size / self.link_bytes_per_second
        await asyncio.sleep(self._link_free_at - now)


def _token(request: web.Request) -> str:
    return request.headers.get("Authorization", "").removeprefix("Bearer ").strip()


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
