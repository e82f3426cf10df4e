"""The status port under hostile clients: a connection flood at a low fd limit, half-sent and slow
requests, with kubelet's HTTP probe and the real exec probe asked meanwhile; and what it answers
to requests that are not probes.

The real server runs alone in its own process (``status_server_main.py``) with RLIMIT_NOFILE 256,
as in a pod with a low ``ulimit -n``; the flood comes from this process over real sockets.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from multinode_llm_testing.ports import free_port
from multinode_llm_testing.waits import wait_until

HELPER = Path(__file__).with_name("status_server_main.py")
NOFILE = 256
PROBE_TIMEOUT_S = 5.0  # the chart's timeoutSeconds of every probe on port 8081
CLOSE_DEADLINE_S = 10.0  # a connection that never completes its request is closed by then
CONNECT_TIMEOUT_S = 3.0
PROBES = ("startup", "ready", "live")

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@dataclass(frozen=True)
class Server:
    pid: int
    port: int

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))


@pytest.fixture
def server() -> Iterator[Server]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(HELPER), str(port), str(NOFILE)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            assert selector.select(timeout=30), "the status server did not start within 30 s"
        assert process.stdout.readline().strip() == "listening"
        yield Server(process.pid, port)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _http_probe(port: int, probe: str) -> tuple[int | str, float]:
    """What kubelet's httpGet probe does: one GET, Connection: close, the probe's timeout."""
    start = time.monotonic()
    url = f"http://127.0.0.1:{port}/{probe}"
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S) as answer:
            return int(answer.status), time.monotonic() - start
    except OSError as error:
        return f"{type(error).__name__}: {error}", time.monotonic() - start


def _exec_probe(port: int, probe: str) -> tuple[int | str, float]:
    """What kubelet's exec probe does: run `multinode-llm probe ...` with the probe's timeout."""
    command = Path(sys.executable).with_name("multinode-llm")
    if not command.exists():
        pytest.skip(f"the console script {command} is not installed")
    start = time.monotonic()
    try:
        done = subprocess.run(
            [str(command), "probe", probe, "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return "timed out", time.monotonic() - start
    return (done.returncode if done.returncode == 0 else done.stderr), time.monotonic() - start


Answers = list[tuple[str, int | str, float]]  # (which probe, 200 or exit 0 or the error, seconds)


async def _ask_probes(port: int, probes: tuple[str, ...]) -> Answers:
    """Kubelet's HTTP probe and the exec probe, one after the other, off the flood's event loop."""
    answers = []
    for probe in probes:
        answers.append((f"GET /{probe}", *await asyncio.to_thread(_http_probe, port, probe)))
        answers.append((f"exec {probe}", *await asyncio.to_thread(_exec_probe, port, probe)))
    return answers


async def _connect(port: int, payload: bytes) -> Connection | None:
    try:
        connection = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), CONNECT_TIMEOUT_S
        )
    except (OSError, TimeoutError):
        return None
    connection[1].write(payload)
    return connection


async def _flood(port: int, idle: int, half_sent: int) -> list[Connection]:
    half = b"GET /live HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: flood"  # never ends its head
    return [*await _flood_with(port, b"", idle), *await _flood_with(port, half, half_sent)]


async def _flood_with(port: int, payload: bytes, count: int) -> list[Connection]:
    opened = await asyncio.gather(*(_connect(port, payload) for _ in range(count)))
    return [connection for connection in opened if connection is not None]


async def _closed_by_peer(connection: Connection) -> None:
    """Returns when the server has closed the connection (EOF or reset)."""
    try:
        while await connection[0].read(65536):
            pass
    except ConnectionError:
        pass


async def _still_open(connections: list[Connection], deadline_s: float) -> int:
    """How many of the connections the server has not closed within the deadline."""
    waits = [asyncio.create_task(_closed_by_peer(connection)) for connection in connections]
    _done, pending = await asyncio.wait(waits, timeout=deadline_s)
    for wait in pending:
        wait.cancel()
    return len(pending)


def _close(connections: list[Connection]) -> None:
    for _reader, writer in connections:
        writer.transport.abort()


def test_probes_are_answered_under_a_connection_flood_and_the_flood_is_closed(
    server: Server,
) -> None:
    baseline = server.fds()

    async def scenario() -> tuple[int, Answers, int]:
        flood = await _flood(server.port, idle=300, half_sent=1000)
        try:
            answers = await _ask_probes(server.port, PROBES)
            return len(flood), answers, await _still_open(flood, CLOSE_DEADLINE_S)
        finally:
            _close(flood)

    opened, answers, still_open = asyncio.run(scenario())
    assert opened > NOFILE, f"only {opened} flood connections were opened: no flood"
    failed = [answer for answer in answers if answer[1] not in (200, 0)]
    assert not failed, f"probes failed under a flood of {opened} connections: {failed}"
    assert max(elapsed for _name, _result, elapsed in answers) < PROBE_TIMEOUT_S
    assert still_open == 0, f"{still_open} idle or half-sent connections are still open"
    wait_until(
        lambda: server.fds() <= baseline + 2,
        10,
        f"the server's fds to fall back from {server.fds()} to about {baseline} after the flood",
    )


def test_probes_are_answered_while_a_flood_is_opening(server: Server) -> None:
    async def scenario() -> Answers:
        flood: list[Connection] = []
        stop = asyncio.Event()

        async def keep_opening() -> None:
            while not stop.is_set():
                flood.extend(await _flood(server.port, idle=50, half_sent=50))

        opener = asyncio.create_task(keep_opening())
        try:
            answers = await _ask_probes(server.port, PROBES * 2)
            assert len(flood) > NOFILE, f"only {len(flood)} flood connections were opened"
            return answers
        finally:
            stop.set()
            await opener
            _close(flood)

    failed = [answer for answer in asyncio.run(scenario()) if answer[1] not in (200, 0)]
    assert not failed, f"probes failed while a flood was opening: {failed}"


def test_a_slowloris_client_is_closed_though_it_keeps_sending(server: Server) -> None:
    async def scenario() -> float:
        start = time.monotonic()
        connection = await _connect(server.port, b"G")
        assert connection is not None
        reader, writer = connection
        try:
            for byte in b"ET /live HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200:
                if time.monotonic() - start > CLOSE_DEADLINE_S:
                    break
                try:  # the server closing the connection ends the trickle at once
                    if await asyncio.wait_for(reader.read(1), timeout=0.5) == b"":
                        return time.monotonic() - start
                except TimeoutError:
                    writer.write(bytes([byte]))
                except ConnectionError:
                    return time.monotonic() - start
            return float("inf")
        finally:
            writer.transport.abort()

    elapsed = asyncio.run(scenario())
    assert elapsed <= CLOSE_DEADLINE_S, "a client sending a header byte every 0.5 s stays open"


def test_idle_half_sent_and_short_bodied_connections_are_closed_by_the_timeouts(
    server: Server,
) -> None:
    """Too few to be shed: only the header and body timeouts can close them."""
    short_body = b"GET /live HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789"

    async def scenario() -> tuple[int, int]:
        flood = await _flood(server.port, idle=10, half_sent=20)
        flood += await _flood_with(server.port, short_body, 5)
        try:
            return len(flood), await _still_open(flood, CLOSE_DEADLINE_S)
        finally:
            _close(flood)

    opened, still_open = asyncio.run(scenario())
    assert opened == 35
    assert still_open == 0, f"{still_open} of {opened} idle or half-sent connections stay open"


# What the port answers besides probes (one raw exchange each) -----------------------------------


def _exchange(port: int, data: bytes) -> bytes:
    """Send ``data``, then read until the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=CLOSE_DEADLINE_S) as client:
        client.sendall(data)
        answer = b""
        try:
            while chunk := client.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass  # the server closes at once after a refusal; what it sent first was read
        return answer


def _status_line(answer: bytes) -> bytes:
    return answer.split(b"\r\n", 1)[0]


@pytest.mark.parametrize(
    ("request_bytes", "status", "phrase"),
    [
        (b"GET /nothing HTTP/1.1\r\nConnection: close\r\n\r\n", b"404", b"no route /nothing"),
        (b"POST /live HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", b"405", b"GET"),
        (b"GET /live HTTP/1.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", b"431", b"8192"),
        (b"GET /live HTTP/1.1\r\nContent-Length: 100000\r\n\r\n", b"413", b"65536"),
        (b"GET /live HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", b"411", b"chunked"),
        (b"GET /live HTTP/1.1\r\nContent-Length: -1\r\n\r\n", b"400", b"Content-Length"),
        (b"GET /live HTTP/1.1\r\nContent-Length: \xc2\xb2\r\n\r\n", b"400", b"Content-Length"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", b"400", b"request line"),
        (b"GET live\r\n\r\n", b"400", b"request line"),
        (b"GET /live HTTP/1.1\r\nno colon here\r\n\r\n", b"400", b"header line"),
    ],
    ids=[
        "unknown path",
        "POST",
        "huge head",
        "huge body",
        "chunked body",
        "negative length",
        "non-ASCII length",
        "TLS hello",
        "HTTP/0.9",
        "broken header",
    ],
)
def test_a_bad_request_gets_a_4xx_json_error_and_is_closed(
    server: Server, request_bytes: bytes, status: bytes, phrase: bytes
) -> None:
    answer = _exchange(server.port, request_bytes)
    assert _status_line(answer).split(b" ")[1] == status, answer[:200]
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"Content-Type: application/json" in head
    assert phrase in body
    assert (b"Allow: GET, HEAD" in head) == (status == b"405")


def test_keep_alive_head_and_a_small_body(server: Server) -> None:
    two = (
        b"GET /ready HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
        b"HEAD /status HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    answer = _exchange(server.port, two)
    assert answer.count(b"HTTP/1.1 200 OK") == 3
    assert b'"reason": "2/2 nodes' in answer
    assert b'"boot_id"' not in answer  # HEAD: headers only
    assert b'multinode_llm_group_lost_nodes{role="head"} 0.0\n' in answer
    # The whole body arrived: the last family is the restarts counter, its last cause unknown.
    assert answer.endswith(b'multinode_llm_restarts_total{cause="unknown",role="head"} 0.0\n')


def test_stop_closes_every_connection() -> None:
    """In process: stop() returns with no connection or task of the server left."""
    from multinode_llm.health.server import StatusServer
    from multinode_llm.health.state import HealthState

    async def scenario() -> tuple[int, int, int]:
        server = StatusServer(HealthState(role="worker"), 0, host="127.0.0.1")
        await server.start()
        assert server.port != 0
        flood = await _flood(server.port, idle=5, half_sent=5)
        before = len(asyncio.all_tasks())
        await server.stop()
        still_open = await _still_open(flood, 2.0)
        _close(flood)
        return before, len(asyncio.all_tasks()), still_open

    before, after, still_open = asyncio.run(scenario())
    assert still_open == 0
    assert after == 1, f"{after - 1} tasks left after stop() ({before} before)"
