"""A small, light load generator: a fixed number of POSTs over keep-alive HTTP/1.1, N at a time.

The machine has two cores that the servers under test need, so the client must cost little: raw
asyncio streams (no HTTP library), one connection per concurrent worker kept open for the whole
run, and only the token count read from each answer (to prove the output length was fixed).
Latency is per request, from the first byte sent to the last byte of the answer received.
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CountTokens = Callable[[Any], int]  # the completion tokens an answer reports
REQUEST_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Load:
    """What one run sends: ``count`` copies of one request, ``concurrency`` in flight at a time."""

    path: str
    body: dict[str, Any]
    count: int
    concurrency: int
    expected_tokens: int  # every answer must report exactly this many (temperature 0, ignore_eos)
    count_tokens: CountTokens


@dataclass(frozen=True)
class RunResult:
    seconds: float  # wall time of the whole run
    latencies: tuple[float, ...]

    @property
    def throughput(self) -> float:
        """Requests per second."""
        return len(self.latencies) / self.seconds

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies)

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 99)


def percentile(samples: tuple[float, ...] | list[float], pct: float) -> float:
    """Nearest-rank percentile: with fewer than 100 samples, p99 is the slowest one."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def run(host: str, port: int, load: Load) -> RunResult:
    return asyncio.run(_run(host, port, load))


async def _run(host: str, port: int, load: Load) -> RunResult:
    payload = _request_bytes(host, port, load.path, json.dumps(load.body).encode())
    remaining = list(range(load.count))
    latencies: list[float] = []
    connections = [await _Connection.open(host, port) for _ in range(load.concurrency)]

    async def worker(connection: _Connection) -> None:
        while remaining:
            remaining.pop()
            began = time.perf_counter()
            status, body = await asyncio.wait_for(connection.send(payload), REQUEST_TIMEOUT_S)
            latencies.append(time.perf_counter() - began)
            _check(load, status, body)

    began = time.perf_counter()
    try:
        await asyncio.gather(*(worker(connection) for connection in connections))
    finally:
        for connection in connections:
            connection.close()
    return RunResult(time.perf_counter() - began, tuple(latencies))


def _check(load: Load, status: int, body: bytes) -> None:
    if status != 200:
        raise RuntimeError(f"POST {load.path} answered {status}: {body[:500]!r}")
    tokens = load.count_tokens(json.loads(body))
    if tokens != load.expected_tokens:
        raise RuntimeError(
            f"POST {load.path} generated {tokens} tokens, not {load.expected_tokens}: the "
            "benchmark needs fixed output lengths (ignore_eos, temperature 0)"
        )


def _request_bytes(host: str, port: int, path: str, body: bytes) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class _Connection:
    """One keep-alive HTTP/1.1 connection: send a request, read one whole answer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, host: str, port: int) -> _Connection:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def send(self, request: bytes) -> tuple[int, bytes]:
        self.writer.write(request)
        await self.writer.drain()
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            return status, await self.reader.readexactly(int(headers["content-length"]))
        if headers.get("transfer-encoding", "").lower() == "chunked":
            return status, await self._chunked()
        raise ConnectionError(f"an answer with neither Content-Length nor chunks: {headers}")

    async def _chunked(self) -> bytes:
        parts = []
        while size := int((await self.reader.readline()).split(b";")[0], 16):
            parts.append(await self.reader.readexactly(size))
            await self.reader.readline()
        await self.reader.readline()  # the blank line after the last (empty) chunk
        return b"".join(parts)

    def close(self) -> None:
        self.writer.close()
