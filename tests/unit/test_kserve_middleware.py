"""The KServe protocol routes, driven through ASGI against a stand-in for vLLM's app.

The stand-in (``FakeVllm``) answers the few public vLLM routes the middleware calls; the real vLLM
behind the middleware is exercised in tests/runtime.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from multinode_llm.serving.kserve import KServeProtocol, Receive, Scope, Send


class FakeVllm:
    """A FAKE of vLLM's OpenAI app: /health, /v1/models, /v1/completions, /metrics."""

    def __init__(
        self, healthy: bool = True, key: str | None = None, names: tuple[str, ...] = ("tiny",)
    ) -> None:
        self.healthy = healthy
        self.key = key
        self.names = names
        self.calls: list[tuple[str, str, bytes]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.calls.append((scope["method"], scope["path"], body))
        headers = dict(scope["headers"])
        if (
            self.key
            and scope["path"].startswith("/v1")
            and headers.get(b"authorization") != f"Bearer {self.key}".encode()
        ):
            await _reply(send, 401, {"error": "Unauthorized"})
        elif scope["path"] == "/health":
            await _reply(send, 200 if self.healthy else 503, {})
        elif scope["path"] == "/v1/models":
            models = [{"id": name, "object": "model"} for name in self.names]
            await _reply(send, 200, {"object": "list", "data": models})
        elif scope["path"] == "/v1/completions":
            if await _client_gone(receive):  # vLLM cancels requests whose client disconnected
                await _reply(send, 400, {"error": "the client disconnected"})
                return
            request = json.loads(body)
            if request.get("stream"):
                await send({"type": "http.response.start", "status": 200, "headers": []})
                for text in ("Hel", "lo"):
                    chunk = {"id": "c1", "choices": [{"text": text, "finish_reason": None}]}
                    data = b"data: " + json.dumps(chunk).encode() + b"\n\n"
                    await send({"type": "http.response.body", "body": data, "more_body": True})
                await send(
                    {"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False}
                )
                return
            text = f"echo:{request['prompt']}:{request.get('max_tokens')}"
            await _reply(
                send,
                200,
                {"id": "c1", "choices": [{"text": text, "finish_reason": "length"}], "usage": {}},
            )
        elif scope["path"] == "/metrics":
            await _reply(send, 200, "vllm:num_requests_running 0\n")
        else:
            await _reply(send, 404, {"detail": "Not Found"})


async def _client_gone(receive: Receive) -> bool:
    try:
        message = await asyncio.wait_for(receive(), timeout=0.05)
    except TimeoutError:
        return False
    return bool(message["type"] == "http.disconnect")


async def _reply(send: Send, status: int, body: Any) -> None:
    data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-length", str(len(data)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": data})


def call(
    app: Any, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else b""
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
    }
    out: dict[str, Any] = {"body": b""}

    received = False

    async def receive() -> dict[str, Any]:
        """The body once, then nothing: the client stays connected, as a real one does."""
        nonlocal received
        if received:
            await asyncio.Event().wait()
        received = True
        return {"type": "http.request", "body": data, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
        else:
            out["body"] += message.get("body", b"")

    asyncio.run(app(scope, receive, send))
    return out["status"], out["body"]


@pytest.fixture
def vllm(monkeypatch: pytest.MonkeyPatch) -> FakeVllm:
    monkeypatch.delenv("MULTINODE_LLM_STATUS_URL", raising=False)
    return FakeVllm()


def test_openai_routes_go_straight_through(vllm: FakeVllm) -> None:
    app = KServeProtocol(vllm)
    status, _body = call(app, "POST", "/v1/completions", {"prompt": "x", "model": "tiny"})
    assert status == 200
    assert [path for _m, path, _b in vllm.calls] == ["/v1/completions"]


def test_v2_health_and_server_metadata(vllm: FakeVllm) -> None:
    app = KServeProtocol(vllm)
    assert call(app, "GET", "/v2/health/live") == (200, b'{"live": true}')
    assert call(app, "GET", "/v2/health/ready") == (200, b'{"ready": true}')
    assert json.loads(call(app, "GET", "/v2")[1])["extensions"] == ["generate"]
    vllm.healthy = False
    assert call(app, "GET", "/v2/health/ready") == (503, b'{"ready": false}')


def test_model_ready_in_v1_and_v2(vllm: FakeVllm) -> None:
    app = KServeProtocol(vllm)
    assert json.loads(call(app, "GET", "/v1/models/tiny")[1]) == {"name": "tiny", "ready": True}
    assert json.loads(call(app, "GET", "/v2/models/tiny/ready")[1]) == {
        "name": "tiny",
        "ready": True,
    }
    metadata = json.loads(call(app, "GET", "/v2/models/tiny")[1])
    assert metadata["name"] == "tiny"
    assert metadata["inputs"][0]["name"] == "text_input"


def test_unknown_model_is_404_naming_what_is_served(vllm: FakeVllm) -> None:
    status, body = call(KServeProtocol(vllm), "GET", "/v2/models/other/ready")
    assert status == 404
    assert json.loads(body)["error"] == "model 'other' is not served here; served: tiny"
    assert call(KServeProtocol(vllm), "GET", "/v1/models/other")[0] == 404


def test_generate_maps_onto_completions(vllm: FakeVllm) -> None:
    request = {"text_input": "hi", "parameters": {"max_new_tokens": 5, "temperature": 0}}
    status, body = call(KServeProtocol(vllm), "POST", "/v2/models/tiny/generate", request)
    assert status == 200
    answer = json.loads(body)
    assert answer["model_name"] == "tiny"
    assert answer["text_output"] == "echo:hi:5"
    assert answer["details"]["finish_reason"] == "length"
    sent = json.loads(vllm.calls[-1][2])
    assert sent == {
        "max_tokens": 5,
        "temperature": 0,
        "model": "tiny",
        "prompt": "hi",
        "stream": False,
    }


def test_generate_stream_turns_completion_chunks_into_generate_events(vllm: FakeVllm) -> None:
    status, body = call(
        KServeProtocol(vllm), "POST", "/v2/models/tiny/generate_stream", {"text_input": "hi"}
    )
    assert status == 200
    events = [json.loads(line.removeprefix(b"data: ")) for line in body.split(b"\n\n") if line]
    assert [event["text_output"] for event in events] == ["Hel", "lo"]
    assert {event["model_name"] for event in events} == {"tiny"}


def test_generate_without_text_input_is_400(vllm: FakeVllm) -> None:
    status, body = call(KServeProtocol(vllm), "POST", "/v2/models/tiny/generate", {"prompt": "hi"})
    assert status == 400
    assert "text_input" in json.loads(body)["error"]


def test_api_key_still_guards_the_v2_model_routes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MULTINODE_LLM_STATUS_URL", raising=False)
    app = KServeProtocol(FakeVllm(key="secret"))
    assert call(app, "POST", "/v2/models/tiny/generate", {"text_input": "hi"})[0] == 401
    ok = call(
        app,
        "POST",
        "/v2/models/tiny/generate",
        {"text_input": "hi"},
        {"Authorization": "Bearer secret"},
    )
    assert ok[0] == 200


def test_metrics_keep_vllm_lines_when_no_supervisor_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MULTINODE_LLM_STATUS_URL", "http://127.0.0.1:9")  # nothing listens there
    status, body = call(KServeProtocol(FakeVllm()), "GET", "/metrics")
    assert status == 200
    assert body == b"vllm:num_requests_running 0\n"


def test_unknown_v2_route_is_404_and_other_paths_pass(vllm: FakeVllm) -> None:
    app = KServeProtocol(vllm)
    assert call(app, "GET", "/v2/nothing")[0] == 404
    assert call(app, "GET", "/v2models")[0] == 404  # not ours: vLLM's own 404
    assert vllm.calls[-1][1] == "/v2models"
