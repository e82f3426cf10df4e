"""``multinode-llm await-group``: the chart's readiness Job ends when, and only when, the new group
serves.

Against a stand-in for the group's Service (a stdlib HTTP server answering /metrics, /v1/models
and /v1/completions as the head does; the real head is tested in tests/e2e), so that every way a
group can be not-yet-serving is one test.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from multinode_llm.cli import main
from multinode_llm.health import await_group

SPEC = "5f3a9c0d1e2b"


@dataclass
class Group:
    """What the stand-in answers; tests change it between tries."""

    spec: str = SPEC
    models: list[str] = field(default_factory=lambda: ["served"])
    tokens: int = 1
    fail: int = 0  # answer every request with this status, when set
    requests: list[str] = field(default_factory=list)


def _handler(group: Group) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                info = f'multinode_llm_group_info{{group_spec="{group.spec}",role="head"}} 1.0'
                self._answer(f"vllm:num_requests_running 0\n{info}\n".encode())
            else:
                self._answer(json.dumps({"data": [{"id": m} for m in group.models]}).encode())

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            asked = json.loads(self.rfile.read(length))
            assert asked["max_tokens"] == 1
            usage = {"completion_tokens": group.tokens}
            self._answer(json.dumps({"choices": [{"text": "x"}], "usage": usage}).encode())

        def _answer(self, body: bytes) -> None:
            group.requests.append(f"{self.command} {self.path}")
            self.send_response(group.fail or 200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            del format, args

    return Handler


@pytest.fixture
def served() -> Iterator[tuple[str, Group]]:
    group = Group()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(group))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", group
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_a_serving_group_of_the_right_spec_is_ready(served: tuple[str, Group]) -> None:
    url, group = served
    assert await_group.check(url, "served", SPEC) == ""
    assert group.requests == ["GET /metrics", "GET /v1/models", "POST /v1/completions"]


def test_the_old_group_a_rolling_update_keeps_serving_is_not_the_new_one(
    served: tuple[str, Group],
) -> None:
    url, group = served
    group.spec = "0ld0ld0ld0ld"
    reason = await_group.check(url, "served", SPEC)
    assert "runs spec 0ld0ld0ld0ld, not 5f3a9c0d1e2b" in reason
    assert group.requests == ["GET /metrics"]  # no completion is sent to the old group


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"models": []}, "/v1/models lists [], not 'served'"),
        ({"tokens": 0}, "a completion returned no token"),
        ({"fail": 503}, "/metrics answered 503"),
    ],
)
def test_each_way_of_not_serving_yet_is_named(
    served: tuple[str, Group], change: dict[str, object], expected: str
) -> None:
    url, group = served
    for name, value in change.items():
        setattr(group, name, value)
    assert expected in await_group.check(url, "served", SPEC)


def test_nothing_listening_is_not_serving_yet() -> None:
    reason = await_group.check("http://127.0.0.1:9", "served", SPEC)
    assert "does not serve yet" in reason


def test_a_url_whose_connection_hangs_is_left_after_the_connect_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A listener whose accept queue is full drops new SYNs, as a ClusterIP drops what is sent to
    a port the Service does not have: the try gives up there after CONNECT_TIMEOUT_S, not after
    the request's timeout, and names that nothing answers."""
    monkeypatch.setattr(await_group, "CONNECT_TIMEOUT_S", 0.5)
    monkeypatch.setattr(await_group, "REQUEST_TIMEOUT_S", 120.0)
    with contextlib.ExitStack() as stack:
        listener = stack.enter_context(socket.socket())
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        for _ in range(4):  # fill the queue; these are never accepted
            waiting = stack.enter_context(socket.socket())
            waiting.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                waiting.connect(("127.0.0.1", port))
        started = time.monotonic()
        reason = await_group.check(f"http://127.0.0.1:{port}", "served", SPEC)
        took = time.monotonic() - started
    assert reason.endswith(await_group.UNREACHABLE), reason
    assert "timed out" in reason, reason
    assert took < 30, f"{took:.1f} s: the request's timeout, not the connect timeout"


def test_wait_ends_once_the_new_group_serves(
    served: tuple[str, Group], capsys: pytest.CaptureFixture[str]
) -> None:
    url, group = served
    group.spec = "0ld0ld0ld0ld"
    tries: list[float] = []

    def roll_out(seconds: float) -> None:  # the rollout completes while the Job waits
        tries.append(seconds)
        group.spec = SPEC

    assert await_group.wait([url], "served", SPEC, timeout=60, interval=2, sleep=roll_out) == 0
    assert tries == [2]
    out = capsys.readouterr().out
    assert "waiting: the head at" in out
    assert f"runs spec {SPEC} and serves 'served'" in out


def test_wait_fails_past_its_deadline_naming_why(
    served: tuple[str, Group], capsys: pytest.CaptureFixture[str]
) -> None:
    url, group = served
    group.models = ["other"]
    assert await_group.wait([url], "served", SPEC, timeout=0.01, interval=0.01) == 1
    assert "did not serve within 0 s: /v1/models lists ['other']" in capsys.readouterr().err


def test_the_first_url_that_answers_is_the_one_asked(served: tuple[str, Group]) -> None:
    """A headless predictor Service (KServe's serviceClusterIPNone) answers on the container
    port only: port 80 refuses, and the next URL is asked in the same try."""
    url, group = served
    asked, reason = await_group.check_any(["http://127.0.0.1:9", url], "served", SPEC)
    assert (asked, reason) == (url, "")
    group.models = []
    asked, reason = await_group.check_any([url, "http://127.0.0.1:9"], "served", SPEC)
    assert asked == url
    assert "/v1/models lists []" in reason  # an answering group's reason, not the next URL's
    asked, reason = await_group.check_any(["http://127.0.0.1:9"], "served", SPEC)
    assert "nothing answers there" in reason


def test_with_every_each_url_is_a_group_and_all_must_serve(
    served: tuple[str, Group], capsys: pytest.CaptureFixture[str]
) -> None:
    """A LeaderWorkerSet's groups, each head by its own name: one group up is not enough."""
    url, _ = served
    other = "http://127.0.0.1:9"
    asked, reason = await_group.check_every([url, other], "served", SPEC)
    assert asked == other
    assert reason.endswith("(1 of 2 groups serve)"), reason
    assert await_group.check_every([url, url], "served", SPEC) == ("", "")
    args = ["await-group", "--every", url, url, "--model", "served", "--group-spec", SPEC]
    assert main(args) == 0
    assert "serves 'served' at all 2 groups" in capsys.readouterr().out


def test_the_command_line_runs_it_and_refuses_bad_durations(
    served: tuple[str, Group], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = served
    assert main(["await-group", url + "/", "--model", "served", "--group-spec", SPEC]) == 0
    both = ["await-group", "http://127.0.0.1:9", url, "--model", "served", "--group-spec", SPEC]
    assert main(both) == 0
    assert main(["await-group", url, "--model", "m", "--group-spec", SPEC, "--timeout", "0"]) != 0
    assert "--timeout and --interval must be positive" in capsys.readouterr().err
