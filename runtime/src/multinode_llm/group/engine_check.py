"""Whether the head's vLLM answers: ``/health`` is 200 and ``/v1/models`` lists the served name.

Both executors' head watches ask this once per tick; it remembers when the engine last answered,
so that the probes can tell a hung engine (silent for long) from one still starting.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from multinode_llm.config import HeadConfig
from multinode_llm.group.process import Child
from multinode_llm.serving.command import api_key, served_names, serves_tls

if TYPE_CHECKING:
    import aiohttp

ENGINE_TIMEOUT_S = 2.0


class EngineCheck:
    def __init__(self, config: HeadConfig) -> None:
        self.config = config
        self.answered_once = False
        self.last_ok = 0.0
        self._http: aiohttp.ClientSession | None = None
        key = api_key(config.vllm_args, os.environ)
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        # vLLM's own certificate names its Service, not 127.0.0.1: the head asks its own child
        # over loopback and checks no certificate.
        self._tls = serves_tls(config.vllm_args)
        scheme = "https" if self._tls else "http"
        self.base_url = f"{scheme}://127.0.0.1:{config.http_port}"

    async def check(self, engine: Child | None) -> tuple[bool, bool]:
        """(``/health`` is 200, ``/v1/models`` lists the served name); remembers an answer."""
        healthy, listed = await self._ask(engine)
        if healthy and listed:
            self.answered_once = True
            self.last_ok = time.monotonic()
        return healthy, listed

    def silent_s(self) -> float:
        """Seconds since the engine last answered; 0 before its first answer."""
        return time.monotonic() - self.last_ok if self.answered_once else 0.0

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def _ask(self, engine: Child | None) -> tuple[bool, bool]:
        if engine is None or engine.returncode is not None:
            return False, False
        import aiohttp  # imported once the engine runs, not by `multinode-llm probe`

        if self._http is None:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=ENGINE_TIMEOUT_S),
                connector=aiohttp.TCPConnector(ssl=False) if self._tls else None,
            )
        base = self.base_url
        try:
            async with self._http.get(f"{base}/health") as health:
                if health.status != 200:
                    return False, False
            async with self._http.get(f"{base}/v1/models", headers=self._headers) as models:
                if models.status != 200:
                    return True, False
                listing = await models.json()
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return False, False
        ids = {str(model.get("id")) for model in listing.get("data", [])}
        return True, bool(ids & set(served_names(self.config)))
