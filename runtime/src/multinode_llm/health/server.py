"""The supervisor's status port (8081): probe answers, metrics and status from ``HealthState``.

Each request only reads the state the supervisor's monitor loop keeps fresh, so a probe costs an
HTTP round trip (about 10 ms), never a Python start-up or a Ray import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multinode_llm.health.state import Check, HealthState

if TYPE_CHECKING:
    from aiohttp import web

PROBES = ("startup", "ready", "live")


class StatusServer:
    def __init__(self, state: HealthState, port: int, host: str = "0.0.0.0") -> None:  # noqa: S104 - kubelet probes the pod IP
        self.state = state
        self.port = port
        self.host = host
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        from aiohttp import web  # keeps importing the supervisors (and the CLI) fast

        app = web.Application()
        app.router.add_get(f"/{{probe:{'|'.join(PROBES)}}}", self._probe)
        app.router.add_get("/status", self._status)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _probe(self, request: web.Request) -> web.Response:
        from aiohttp import web

        check: Check = getattr(self.state.probes, request.match_info["probe"])
        body = {"ok": check.ok, "reason": check.reason, "phase": self.state.phase}
        return web.json_response(body, status=200 if check.ok else 503)

    async def _status(self, _request: web.Request) -> web.Response:
        from aiohttp import web

        return web.json_response(self.state.status())

    async def _metrics(self, _request: web.Request) -> web.Response:
        from aiohttp import web

        return web.Response(text=self.state.metrics(), content_type="text/plain", charset="utf-8")
