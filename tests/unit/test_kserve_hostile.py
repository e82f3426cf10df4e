"""Malformed KServe requests, odd answers from vLLM, and model names with a ``/``.

Every malformed request to a route the middleware owns must get a 4xx JSON error naming what is
wrong, never an exception (which the ASGI server turns into a 500 and a traceback in the log), and
must not reach vLLM. The stand-in for vLLM is ``FakeVllm`` (tests/unit/test_kserve_middleware.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from multinode_llm.serving.kserve import (
    MAX_BODY_BYTES,
    MAX_DEPTH,
    KServeProtocol,
    Receive,
    Scope,
    Send,
)
from test_kserve_middleware import FakeVllm

GENERATE_ROUTES = ("/v2/models/tiny/generate", "/v2/models/tiny/generate_stream")
QWEN = "Qwen/Qwen2.5-0.5B-Instruct"


class Answer:
    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.body = b""

    def error(self) -> str:
        assert self.headers.get(b"content-type") == b"application/json", self.headers
        return str(json.loads(self.body)["error"])


def ask(
    app: Any,
    method: str,
    path: str,
    chunks: tuple[bytes, ...] = (b"",),
    headers: tuple[tuple[bytes, bytes], ...] = (),
) -> tuple[Answer, int]:
    """One request through ASGI, its body in ``chunks``; also says how many chunks were read."""
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": list(headers),
    }
    answer, read = Answer(), 0

    async def receive() -> dict[str, Any]:
        nonlocal read
        if read == len(chunks):
            await asyncio.Event().wait()  # the client stays connected, as a real one does
        read += 1
        return {"type": "http.request", "body": chunks[read - 1], "more_body": read < len(chunks)}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer.status = message["status"]
            answer.headers = dict(message.get("headers", []))
        else:
            answer.body += message.get("body", b"")

    asyncio.run(app(scope, receive, send))
    return answer, read


def _nested(depth: int) -> bytes:
    return b'{"text_input": "hi", "parameters": {"a": ' + b"[" * depth + b"]" * depth + b"}}"


MALFORMED: dict[str, tuple[bytes, int, str]] = {
    # name: (body, status, a phrase the error must contain)
    "empty": (b"", 400, "empty"),
    "whitespace only": (b" \r\n\t", 400, "empty"),
    "not JSON": (b"text_input=hi", 400, "not JSON"),
    "truncated JSON": (b'{"text_input": "hi"', 400, "not JSON"),
    "a NUL byte": (b"\x00", 400, "not JSON"),
    "invalid UTF-8": (b'{"text_input": "\xff\xfe"}', 400, "UTF-8"),
    "UTF-16": ('{"text_input": "hi"}'.encode("utf-16"), 400, "UTF-8"),
    "a lone surrogate escape": (b'{"text_input": "\\ud800"}', 400, "UTF-8"),
    "an array": (b'["hi"]', 400, "JSON object"),
    "a string": (b'"hi"', 400, "JSON object"),
    "null": (b"null", 400, "JSON object"),
    "no text_input": (b'{"prompt": "hi"}', 400, '"text_input"'),
    "text_input a number": (b'{"text_input": 5}', 400, '"text_input"'),
    "text_input null": (b'{"text_input": null}', 400, '"text_input"'),
    "text_input a list": (b'{"text_input": ["hi"]}', 400, '"text_input"'),
    "parameters a list of pairs": (
        b'{"text_input": "hi", "parameters": ["ab"]}',
        400,
        "parameters",
    ),
    "parameters a string": (b'{"text_input": "hi", "parameters": "ab"}', 400, "parameters"),
    "parameters a number": (b'{"text_input": "hi", "parameters": 5}', 400, "parameters"),
    "parameters true": (b'{"text_input": "hi", "parameters": true}', 400, "parameters"),
    "NaN": (b'{"text_input": "hi", "parameters": {"temperature": NaN}}', 400, "NaN"),
    "Infinity": (b'{"text_input": "hi", "parameters": {"top_p": -Infinity}}', 400, "Infinity"),
    "nested 100,000 deep": (b"[" * 100_000, 400, "deeper than"),
    "parameters nested 5,000 deep": (_nested(5_000), 400, "deeper than"),
    "parameters nested past the limit": (_nested(MAX_DEPTH), 400, "deeper than"),
}


@pytest.fixture
def vllm(monkeypatch: pytest.MonkeyPatch) -> FakeVllm:
    monkeypatch.delenv("MULTINODE_LLM_STATUS_URL", raising=False)
    return FakeVllm()


def _completions(vllm: FakeVllm) -> list[bytes]:
    return [body for _method, path, body in vllm.calls if path == "/v1/completions"]


@pytest.mark.parametrize("route", GENERATE_ROUTES)
@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_generate_body_is_a_4xx_naming_the_fault(
    vllm: FakeVllm, caplog: pytest.LogCaptureFixture, route: str, case: str
) -> None:
    body, status, phrase = MALFORMED[case]
    caplog.set_level(logging.WARNING)
    answer, _read = ask(KServeProtocol(vllm), "POST", route, (body,))
    assert answer.status == status
    assert phrase in answer.error()
    assert not _completions(vllm), "a malformed request reached vLLM"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("route", GENERATE_ROUTES)
def test_parameters_nested_within_the_limit_pass(vllm: FakeVllm, route: str) -> None:
    answer, _read = ask(KServeProtocol(vllm), "POST", route, (_nested(MAX_DEPTH - 3),))
    assert answer.status == 200
    assert (
        json.loads(_completions(vllm)[0])["a"]
        == json.loads(_nested(MAX_DEPTH - 3))["parameters"]["a"]
    )


@pytest.mark.parametrize("route", GENERATE_ROUTES)
def test_a_body_declared_too_large_is_413_before_it_is_read(vllm: FakeVllm, route: str) -> None:
    length = (b"content-length", str(MAX_BODY_BYTES + 1).encode())
    chunks = (b"x" * (1 << 20),) * (MAX_BODY_BYTES // (1 << 20) + 1)
    answer, read = ask(KServeProtocol(vllm), "POST", route, chunks, (length,))
    assert answer.status == 413
    assert f"{MAX_BODY_BYTES} bytes" in answer.error()
    assert read == 0
    assert not _completions(vllm)


@pytest.mark.parametrize("route", GENERATE_ROUTES)
def test_a_chunked_body_past_the_limit_is_413_and_no_longer_read(
    vllm: FakeVllm, route: str
) -> None:
    chunk = b"x" * (1 << 20)
    chunks = (b'{"text_input": "', *(chunk,) * (MAX_BODY_BYTES // len(chunk) + 4), b'"}')
    answer, read = ask(KServeProtocol(vllm), "POST", route, chunks)
    assert answer.status == 413
    assert "larger than" in answer.error()
    assert read <= MAX_BODY_BYTES // len(chunk) + 2, "the body was read past the limit"
    assert not _completions(vllm)


@pytest.mark.parametrize(
    "path", ["/v1/models/tiny", "/v2/models/tiny", "/v2/models/tiny/ready", "/v2/health/ready"]
)
def test_get_routes_ignore_a_hostile_body(vllm: FakeVllm, path: str) -> None:
    answer, _read = ask(KServeProtocol(vllm), "GET", path, (b"[" * 100_000,))
    assert answer.status == 200


class OddVllm(FakeVllm):
    """A FAKE vLLM whose /v1/completions answers 200 with ``answer`` (a body or SSE events)."""

    def __init__(self, answer: bytes | list[bytes]) -> None:
        super().__init__()
        self.answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] != "/v1/completions":
            await super().__call__(scope, receive, send)
            return
        await receive()
        if isinstance(self.answer, bytes):
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": self.answer})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for event in self.answer:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


@pytest.mark.parametrize(
    "odd",
    [b'{"id": "c1", "choices": []}', b'{"id": "c1"}', b'{"choices": ["x"]}', b"not json", b"[]"],
)
def test_a_completion_without_a_choice_is_502_not_an_exception(
    monkeypatch: pytest.MonkeyPatch, odd: bytes
) -> None:
    monkeypatch.delenv("MULTINODE_LLM_STATUS_URL", raising=False)
    answer, _read = ask(
        KServeProtocol(OddVllm(odd)), "POST", GENERATE_ROUTES[0], (b'{"text_input": "hi"}',)
    )
    assert answer.status == 502
    assert "vLLM" in answer.error()


@pytest.mark.parametrize(
    "odd",
    [
        b"data: not json\n\n",
        b'data: {"choices": "x"}\n\n',
        b'data: {"choices": [5]}\n\n',
        b"data: [1, 2]\n\n",
        b": a comment\n\n",
    ],
)
def test_odd_stream_events_are_passed_on_not_raised(
    monkeypatch: pytest.MonkeyPatch, odd: bytes
) -> None:
    monkeypatch.delenv("MULTINODE_LLM_STATUS_URL", raising=False)
    good = b'data: {"id": "c1", "choices": [{"text": "ok", "finish_reason": "stop"}]}\n\n'
    vllm = OddVllm([odd, good, b"data: [DONE]\n\n"])
    answer, _read = ask(
        KServeProtocol(vllm), "POST", GENERATE_ROUTES[1], (b'{"text_input": "hi"}',)
    )
    assert answer.status == 200
    events = [e for e in answer.body.split(b"\n\n") if e]
    assert json.loads(events[-1].removeprefix(b"data: "))["text_output"] == "ok"
    assert len(events) == 2


def test_a_stream_cut_without_a_final_blank_line_keeps_its_last_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MULTINODE_LLM_STATUS_URL", raising=False)
    last = b'data: {"id": "c1", "choices": [{"text": "end", "finish_reason": "stop"}]}'
    answer, _read = ask(
        KServeProtocol(OddVllm([last])), "POST", GENERATE_ROUTES[1], (b'{"text_input": "hi"}',)
    )
    assert json.loads(answer.body.removeprefix(b"data: "))["text_output"] == "end"


# Model names with a "/" -------------------------------------------------------------------------


@pytest.fixture
def qwen(monkeypatch: pytest.MonkeyPatch) -> FakeVllm:
    monkeypatch.delenv("MULTINODE_LLM_STATUS_URL", raising=False)
    return FakeVllm(names=(QWEN, "tiny"))


@pytest.mark.parametrize("path", [f"/v2/models/{QWEN}/ready", f"/v1/models/{QWEN}"])
def test_readiness_of_a_model_named_with_a_slash(qwen: FakeVllm, path: str) -> None:
    answer, _read = ask(KServeProtocol(qwen), "GET", path)
    assert (answer.status, json.loads(answer.body)) == (200, {"name": QWEN, "ready": True})


def test_metadata_of_a_model_named_with_a_slash(qwen: FakeVllm) -> None:
    answer, _read = ask(KServeProtocol(qwen), "GET", f"/v2/models/{QWEN}")
    assert answer.status == 200
    assert json.loads(answer.body)["name"] == QWEN


def test_generate_with_a_model_named_with_a_slash(qwen: FakeVllm) -> None:
    answer, _read = ask(
        KServeProtocol(qwen), "POST", f"/v2/models/{QWEN}/generate", (b'{"text_input": "hi"}',)
    )
    assert answer.status == 200
    assert json.loads(answer.body)["model_name"] == QWEN
    assert json.loads(_completions(qwen)[0])["model"] == QWEN


def test_generate_stream_with_a_model_named_with_a_slash(qwen: FakeVllm) -> None:
    answer, _read = ask(
        KServeProtocol(qwen),
        "POST",
        f"/v2/models/{QWEN}/generate_stream",
        (b'{"text_input": "hi"}',),
    )
    assert answer.status == 200
    events = [json.loads(e.removeprefix(b"data: ")) for e in answer.body.split(b"\n\n") if e]
    assert {event["model_name"] for event in events} == {QWEN}
    assert json.loads(_completions(qwen)[0])["model"] == QWEN


def test_a_path_kserve_routes_keeps_kserve_meaning(monkeypatch: pytest.MonkeyPatch) -> None:
    """KServe reads /v2/models/a/ready as the readiness of a, whatever else is served."""
    monkeypatch.delenv("MULTINODE_LLM_STATUS_URL", raising=False)
    app = KServeProtocol(FakeVllm(names=("a/ready", "a")))
    assert json.loads(ask(app, "GET", "/v2/models/a/ready")[0].body)["name"] == "a"
    assert json.loads(ask(app, "GET", "/v2/models/a/ready/ready")[0].body)["name"] == "a/ready"


def test_an_unknown_model_with_a_slash_is_404_naming_it(qwen: FakeVllm) -> None:
    answer, _read = ask(KServeProtocol(qwen), "GET", "/v2/models/Qwen/Other/ready")
    assert answer.status == 404
    assert answer.error() == f"model 'Qwen/Other' is not served here; served: {QWEN}, tiny"
    answer, _read = ask(KServeProtocol(qwen), "GET", "/v1/models/Qwen/Other")
    assert answer.status == 404
    assert "'Qwen/Other'" in answer.error()


def test_a_known_route_with_the_wrong_method_is_405(qwen: FakeVllm) -> None:
    answer, _read = ask(KServeProtocol(qwen), "GET", f"/v2/models/{QWEN}/generate")
    assert answer.status == 405
    assert answer.headers[b"allow"] == b"POST"
    assert "POST" in answer.error()


def test_an_unknown_verb_of_a_served_model_is_404(qwen: FakeVllm) -> None:
    answer, _read = ask(KServeProtocol(qwen), "POST", f"/v2/models/{QWEN}/infer")
    assert answer.status == 404
    assert answer.error() == f"no route POST /v2/models/{QWEN}/infer"


def test_kserve_v1_predict_is_left_to_vllm(qwen: FakeVllm) -> None:
    answer, _read = ask(KServeProtocol(qwen), "POST", "/v1/models/tiny:predict", (b"{}",))
    assert answer.status == 404
    assert qwen.calls[-1][1] == "/v1/models/tiny:predict"
