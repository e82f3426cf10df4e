"""A small asynchronous client of the Kubernetes API (aiohttp): what the node agent and the volume
provisioner need, and nothing more. Paths are the API's own (``/api/v1/namespaces/NS/pods``).

It reads the same kubeconfig files ``pki.py`` writes (inline certificates) and speaks JSON:
get, list, create, merge- and JSON-patch, delete and watch (a stream of events, resumed from the
last resourceVersion it saw, relisted when the server says that is too old).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import ssl
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import yaml

log = logging.getLogger("multinode_llm_local.controlplane.api")
Obj = dict[str, Any]
WATCH_TIMEOUT_S = 240  # the server ends a watch after this; the client then resumes it


class ApiError(Exception):
    """The API server answered with an error status (``code``: 404, 409, ...)."""

    def __init__(self, code: int, method: str, path: str, body: str) -> None:
        self.code = code
        try:
            message = json.loads(body).get("message", body)
        except ValueError:
            message = body
        super().__init__(f"{method} {path}: {code} {message}"[:2000])


class Api:
    """One identity's connection to the API server (``async with Api.from_kubeconfig(path)``)."""

    def __init__(self, server: str, context: ssl.SSLContext) -> None:
        self.server = server.rstrip("/")
        self._context = context
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Api:
        config = yaml.safe_load(path.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        context = ssl.create_default_context(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
        )
        with tempfile.TemporaryDirectory() as tmp:  # ssl loads a client pair only from files
            cert, key = Path(tmp, "c.pem"), Path(tmp, "k.pem")
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            context.load_cert_chain(cert, key)
        return cls(cluster["server"], context)

    async def __aenter__(self) -> Api:
        connector = aiohttp.TCPConnector(ssl=self._context, limit=32)
        self._session = aiohttp.ClientSession(connector=connector)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("Api is used outside `async with`")
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
    ) -> Obj:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        timeout = aiohttp.ClientTimeout(total=60)
        async with self.session.request(
            method, self.server + path, data=data, headers=headers, params=params, timeout=timeout
        ) as response:
            text = await response.text()
            if response.status >= 400:
                raise ApiError(response.status, method, path, text)
            answer: Obj = json.loads(text) if text else {}
            return answer

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> Obj | None:
        """The object at ``path``, or None when there is none (404)."""
        try:
            return await self.request("GET", path, params=params)
        except ApiError as error:
            if error.code == 404:
                return None
            raise

    async def create(self, path: str, obj: Obj) -> Obj:
        return await self.request("POST", path, obj)

    async def merge_patch(self, path: str, patch: Obj) -> Obj:
        return await self.request("PATCH", path, patch, "application/merge-patch+json")

    async def delete(self, path: str, body: Obj | None = None) -> Obj | None:
        try:
            return await self.request("DELETE", path, body)
        except ApiError as error:
            if error.code == 404:
                return None
            raise

    async def watch(
        self, path: str, params: Mapping[str, str] | None = None
    ) -> AsyncIterator[tuple[str, Obj]]:
        """``("ADDED"|"MODIFIED"|"DELETED", object)`` for every object at ``path`` and every
        change after, forever: a list first (each as ADDED), then watches resumed from the last
        resourceVersion, relisted when the server answers 410 Gone."""
        while True:
            listed = await self.request("GET", path, params=params)
            version = listed["metadata"]["resourceVersion"]
            for item in listed.get("items") or []:
                yield "ADDED", item
            async for kind, obj in self._watch_from(path, params or {}, version):
                if kind == "RELIST":
                    break
                version = obj["metadata"].get("resourceVersion", version)
                yield kind, obj

    async def _watch_from(
        self, path: str, params: Mapping[str, str], version: str
    ) -> AsyncIterator[tuple[str, Obj]]:
        while True:
            query = {
                **params,
                "watch": "1",
                "resourceVersion": version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(WATCH_TIMEOUT_S),
            }
            timeout = aiohttp.ClientTimeout(total=WATCH_TIMEOUT_S + 30, sock_read=None)
            try:
                async with self.session.get(
                    self.server + path, params=query, timeout=timeout
                ) as response:
                    if response.status == 410:
                        yield "RELIST", {}
                        return
                    if response.status >= 400:
                        raise ApiError(response.status, "WATCH", path, await response.text())
                    async for line in response.content:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            if obj.get("code") == 410:
                                yield "RELIST", {}
                                return
                            raise ApiError(int(obj.get("code", 500)), "WATCH", path, str(obj))
                        version = obj.get("metadata", {}).get("resourceVersion", version)
                        if event["type"] != "BOOKMARK":
                            yield event["type"], obj
            except (aiohttp.ClientError, TimeoutError) as error:
                log.warning("watch of %s broke (%s): resuming", path, error)
                await asyncio.sleep(1)
