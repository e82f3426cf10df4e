"""KServe's protocol routes on vLLM's OpenAI server, as a pure ASGI middleware.

vLLM loads it by its documented extension point, ``--middleware multinode_llm.serving.kserve.
KServeProtocol``, and this module imports nothing of vLLM: each route is answered by calling vLLM's
own public routes in process (``/health``, ``/v1/models``, ``/v1/completions``, ``/metrics``), with
the caller's headers, so vLLM's ``--api-key`` guards them as it guards its own.

Routes added:
  KServe v1: GET /v1/models/{name} -> {"name", "ready"}
  KServe v2: GET /v2, /v2/health/live, /v2/health/ready, /v2/models/{name}, /v2/models/{name}/ready,
             POST /v2/models/{name}/generate and /generate_stream (the generate extension, mapped
             onto /v1/completions)
  GET /metrics: vLLM's ``vllm:*`` metrics followed by the supervisor's ``multinode_llm_*`` ones.

Every other request goes straight to vLLM after one string comparison: the OpenAI routes pay
nothing else (the benchmark compares their throughput with plain vLLM's).

A malformed request to a route of ours gets a 4xx JSON ``{"error"}`` naming the fault, and never
reaches vLLM: an exception here would be a 500 and a traceback in the log for anyone to cause.
Bodies are bounded (``MAX_BODY_BYTES``, 413) and so is their nesting (``MAX_DEPTH``); odd answers
from vLLM are a 502, or passed on as they are inside a stream that has already begun.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable, Collection, MutableMapping
from dataclasses import dataclass
from typing import Any

from multinode_llm import __version__

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

log = logging.getLogger(__name__)

_OURS = ("/v2", "/metrics", "/v1/models/")
_STATUS_URL_ENV = "MULTINODE_LLM_STATUS_URL"  # set by the head supervisor (serving.command)
_STATUS_TIMEOUT_S = 1.0

# A prompt that fills a million-token context is about 4 MiB of text.
MAX_BODY_BYTES = 16 << 20
# Far above any real generate request (vLLM's parameters, JSON schemas for structured output
# included), far below where Python's JSON parser runs out of stack (RecursionError, about 1,000).
MAX_DEPTH = 64

# What may follow a model's name in the path: verb -> (its method, what it answers).
Verbs = dict[str, tuple[str, str]]
_V1_VERBS: Verbs = {"": ("GET", "ready")}
_V2_VERBS: Verbs = {
    "": ("GET", "metadata"),
    "ready": ("GET", "ready"),
    "generate": ("POST", "generate"),  # the generate extension
    "generate_stream": ("POST", "generate_stream"),
}


class RequestError(Exception):
    """A request answered with ``status`` and the message, a 4xx naming what is wrong."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Response:
    """A whole HTTP response captured from the inner app."""

    def __init__(self) -> None:
        self.status = 500
        self.headers: Headers = []
        self.body = b""

    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass(frozen=True)
class Exchange:
    """One request to a route of ours: its scope, its receive and send channels."""

    scope: Scope
    receive: Receive
    send: Send

    @property
    def method(self) -> str:
        return str(self.scope["method"])


class KServeProtocol:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.status_url = os.environ.get(_STATUS_URL_ENV, "")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(_OURS):
            await self.app(scope, receive, send)
            return
        if not await self._route(Exchange(scope, receive, send)):
            await self.app(scope, receive, send)

    async def _route(self, ex: Exchange) -> bool:
        """Answer the request if a route of ours matches; False hands it to vLLM."""
        method, path = ex.method, ex.scope["path"].rstrip("/")
        if path == "/metrics" and method == "GET":
            await self._metrics(ex)
        elif path.startswith("/v1/models/") and method == "GET":
            await self._model_route(ex, path.removeprefix("/v1/models/"), _V1_VERBS)
        elif path != "/v2" and not path.startswith("/v2/"):
            return False
        elif method == "GET" and path == "/v2":
            body = {"name": "multinode-llm", "version": __version__, "extensions": ["generate"]}
            await _send_json(ex.send, 200, body)
        elif method == "GET" and path == "/v2/health/live":
            await _send_json(ex.send, 200, {"live": True})
        elif method == "GET" and path == "/v2/health/ready":
            ready = await self._ready(ex)
            await _send_json(ex.send, 200 if ready else 503, {"ready": ready})
        elif path.startswith("/v2/models/"):
            await self._model_route(ex, path.removeprefix("/v2/models/"), _V2_VERBS)
        else:
            await _not_found(ex)
        return True

    # Model routes: KServe v1 readiness, v2 metadata, readiness and generate -------------------

    async def _model_route(self, ex: Exchange, rest: str, verbs: Verbs) -> None:
        """``rest``: the path after ``/v1/models/`` or ``/v2/models/``, a name and a verb."""
        listing = await self._call(ex, "GET", "/v1/models", headers=_forwarded_headers(ex.scope))
        if listing.status != 200:
            await _relay(ex.send, listing)  # vLLM's answer, e.g. 401 without the API key
            return
        served = _model_ids(listing)
        name, verb = _split_model_path(rest, served, verbs)
        if name not in served:
            await _send_json(ex.send, 404, {"error": _unknown(name, listing)})
            return
        if verb not in verbs:
            await _not_found(ex)
            return
        method, action = verbs[verb]
        if ex.method != method:
            error = f"{ex.scope['path']} takes {method}, not {ex.method}"
            await _send_json(ex.send, 405, {"error": error}, [(b"allow", method.encode())])
        elif action == "ready":
            ready = await self._ready(ex)
            await _send_json(ex.send, 200 if ready else 503, {"name": name, "ready": ready})
        elif action == "metadata":
            await _send_json(ex.send, 200, _model_metadata(name))
        else:
            await self._generate(ex, name, stream=action == "generate_stream")

    async def _generate(self, ex: Exchange, name: str, stream: bool) -> None:
        try:
            body = await _read_body(ex)
            if body is None:
                return  # the client left before its body arrived: nobody to answer
            completion = _completion_request(_parse_json(body), name, stream)
        except RequestError as refused:
            await _send_json(ex.send, refused.status, {"error": str(refused)})
            return
        body = json.dumps(completion).encode()
        headers = [*_forwarded_headers(ex.scope), (b"content-type", b"application/json")]
        if stream:
            sub = _sub_scope(ex.scope, "POST", "/v1/completions", headers)
            await self.app(
                sub, _body_receiver(body, ex.receive), _GenerateStream(ex.send, name).send
            )
            return
        response = await self._call(ex, "POST", "/v1/completions", headers, body)
        if response.status != 200:
            await _send_json(ex.send, response.status, {"error": _error_text(response)})
            return
        answer = _generate_answer(name, response)
        if answer is None:
            odd = f"vLLM answered without a completion choice: {response.body[:200]!r}"
            await _send_json(ex.send, 502, {"error": odd})
            return
        await _send_json(ex.send, 200, answer)

    # Readiness and metrics ------------------------------------------------------------------

    async def _ready(self, ex: Exchange) -> bool:
        """The supervisor's readiness (engine and whole group) if it runs, else vLLM's /health."""
        if self.status_url:
            answer = await _http_get(f"{self.status_url}/ready")
            if answer is not None:
                return answer[0] == 200
        return (await self._call(ex, "GET", "/health", headers=[])).status == 200

    async def _metrics(self, ex: Exchange) -> None:
        # Ask for plain text: the supervisor's lines are appended to vLLM's body.
        headers = [(k, v) for k, v in ex.scope["headers"] if k.lower() != b"accept-encoding"]
        response = await self._call(ex, "GET", "/metrics", headers)
        body = response.body
        if response.status == 200 and self.status_url:
            answer = await _http_get(f"{self.status_url}/metrics")
            if answer is not None and answer[0] == 200:
                body = body.rstrip(b"\n") + b"\n" + answer[1]
        headers = [(k, v) for k, v in response.headers if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await _send(ex.send, response.status, headers, body)

    async def _call(
        self, ex: Exchange, method: str, path: str, headers: Headers, body: bytes = b""
    ) -> Response:
        """Call one of vLLM's routes in process and capture its whole answer."""
        response = Response()
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            if message["type"] == "http.response.start":
                response.status = message["status"]
                response.headers = list(message.get("headers", []))
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        sub = _sub_scope(ex.scope, method, path, headers)
        await self.app(sub, _body_receiver(body, ex.receive), capture)
        response.body = b"".join(chunks)
        return response


class _GenerateStream:
    """Turns vLLM's completion stream (SSE) into the generate_stream extension's events."""

    def __init__(self, send: Send, name: str) -> None:
        self._send = send
        self._name = name
        self._buffer = b""
        self._ok = True

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self._ok = message["status"] == 200
            await self._send(message)
            return
        if message["type"] != "http.response.body" or not self._ok:
            await self._send(message)
            return
        self._buffer += message.get("body", b"")
        more = message.get("more_body", False)
        if more:
            events, _, self._buffer = self._buffer.rpartition(b"\n\n")
        else:  # the stream ends: whatever is left is its last event, blank line or not
            events, self._buffer = self._buffer, b""
        out = b"".join(self._event(event) for event in events.split(b"\n\n") if event.strip())
        if out or not more:
            await self._send({"type": "http.response.body", "body": out, "more_body": more})

    def _event(self, event: bytes) -> bytes:
        event = event.strip()
        data = event.removeprefix(b"data:").strip()
        if data == b"[DONE]":
            return b""
        choice = _first_choice(_loads(data)) if event.startswith(b"data:") else None
        if choice is None:
            # Not a completion chunk (an error object, a comment): the stream has begun, so a
            # status can no longer say so; the client gets it as it is.
            return event + b"\n\n"
        out = {
            "model_name": self._name,
            "model_version": None,
            "id": choice.id,
            "text_output": choice.fields.get("text", ""),
            "details": {"finish_reason": choice.fields.get("finish_reason")},
        }
        return b"data: " + json.dumps(out).encode() + b"\n\n"


# Generate requests and answers -------------------------------------------------------------------


async def _read_body(ex: Exchange) -> bytes | None:
    """The request body, at most ``MAX_BODY_BYTES``; None when the client left first."""
    declared = dict(ex.scope["headers"]).get(b"content-length", b"")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise RequestError(413, f"the body is larger than {MAX_BODY_BYTES} bytes")
    chunks, size = [], 0
    while True:
        message = await ex.receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:  # a chunked body past the limit: read no further
            raise RequestError(413, f"the body is larger than {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _parse_json(body: bytes) -> Any:
    """The body as JSON text (RFC 8259: UTF-8, no NaN), nested at most ``MAX_DEPTH`` deep."""
    if not body.strip():
        raise RequestError(400, 'the body is empty: send a JSON object with a string "text_input"')
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise RequestError(400, f"the body is not valid UTF-8 (byte {error.start})") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:  # deeper than the parser's stack, so deeper than MAX_DEPTH too
        raise _too_deep() from None
    except ValueError as error:
        raise RequestError(400, f"the body is not JSON: {error}") from None
    _check_nesting(value)
    return value


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _too_deep() -> RequestError:
    return RequestError(400, f"the body nests deeper than {MAX_DEPTH} levels")


def _check_nesting(value: Any) -> None:
    """Refuse nesting past ``MAX_DEPTH`` and strings that are not text (lone surrogates).

    Iterative, since a recursive walk is what ``MAX_DEPTH`` guards against. A lone surrogate
    (``"\\ud800"``) is valid JSON but no UTF-8 can carry it: the tokenizer would fail on it.
    """
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise RequestError(400, "the body holds a string that is not valid UTF-8") from None
        elif isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                raise _too_deep()
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def _completion_request(request: Any, name: str, stream: bool) -> dict[str, Any]:
    """A /v1/completions body from a generate request: text_input plus its parameters."""
    if not isinstance(request, dict):
        raise RequestError(
            400, f'the body must be a JSON object with a string "text_input", not {_kind(request)}'
        )
    if "text_input" not in request:
        raise RequestError(400, 'the body has no "text_input"')
    if not isinstance(request["text_input"], str):
        raise RequestError(
            400, f'"text_input" must be a string, not {_kind(request["text_input"])}'
        )
    parameters = request.get("parameters")
    if not isinstance(parameters, dict | None):
        raise RequestError(400, f'"parameters" must be a JSON object, not {_kind(parameters)}')
    parameters = dict(parameters or {})
    if "max_new_tokens" in parameters:  # the Hugging Face name some generate clients use
        parameters.setdefault("max_tokens", parameters.pop("max_new_tokens"))
    parameters.pop("stream", None)
    return {**parameters, "model": name, "prompt": request["text_input"], "stream": stream}


def _kind(value: Any) -> str:
    """What a JSON value is, in JSON's words."""
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return kinds.get(type(value), "a number")


@dataclass(frozen=True)
class _Choice:
    id: Any
    fields: dict[str, Any]


def _loads(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def _first_choice(result: Any) -> _Choice | None:
    """The first choice of a completion (or of a stream chunk; none in a usage-only chunk)."""
    choices = result.get("choices") if isinstance(result, dict) else None
    if not isinstance(choices, list) or (choices and not isinstance(choices[0], dict)):
        return None
    return _Choice(result.get("id"), choices[0] if choices else {})


def _generate_answer(name: str, response: Response) -> dict[str, Any] | None:
    """The generate answer from vLLM's completion; None when it holds no choice."""
    result = _loads(response.body)
    choice = _first_choice(result)
    if choice is None or not choice.fields:
        return None
    return {
        "model_name": name,
        "model_version": None,
        "id": choice.id,
        "text_output": choice.fields.get("text", ""),
        "details": {
            "finish_reason": choice.fields.get("finish_reason"),
            "usage": result.get("usage"),
        },
    }


def _split_model_path(rest: str, served: list[str], verbs: Collection[str]) -> tuple[str, str]:
    """The model's name and the verb after it in ``rest``, e.g. ``Qwen/Qwen2.5-0.5B/ready``.

    KServe routes ``{model_name}`` as a FastAPI path parameter, which Starlette matches with
    ``[^/]+`` (python/kserve/kserve/protocol/rest/v1_endpoints.py, v2_endpoints.py and
    openai/endpoints.py at v0.18.1, unchanged to v0.20.0; Starlette matches the decoded path, so
    ``%2F`` does not help): there a name ends at the first ``/``, and a name holding one is not
    routed at all. vLLM's served names often hold one (``--served-model-name
    Qwen/Qwen2.5-0.5B-Instruct``, or the model ID by default). So a path reads as KServe reads it
    wherever KServe routes it, and beyond that as the served name it spells:

    1. the shortest served name followed by a known verb (KServe's reading when a name has no
       ``/``: a served ``a/ready`` cannot take ``/v2/models/a/ready`` from model ``a``);
    2. else the shortest served name the path begins with, and a verb we do not have (a 404);
    3. else a model not served, named without a known verb (a 404 naming it).
    """
    names = sorted((n for n in served if rest == n or rest.startswith(n + "/")), key=len)
    for name in names:
        if rest[len(name) + 1 :] in verbs:
            return name, rest[len(name) + 1 :]
    if names:
        return names[0], rest[len(names[0]) + 1 :]
    for verb in verbs:
        if verb and rest.endswith("/" + verb):
            return rest.removesuffix("/" + verb), verb
    return rest, ""


def _model_metadata(name: str) -> dict[str, Any]:
    """The v2 model metadata, with the generate extension's tensors."""
    return {
        "name": name,
        "versions": [],
        "platform": "vllm",
        "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1]}],
        "outputs": [{"name": "text_output", "datatype": "BYTES", "shape": [-1]}],
    }


def _model_ids(listing: Response) -> list[str]:
    try:
        return [str(model["id"]) for model in listing.json()["data"]]
    except (ValueError, KeyError, TypeError):
        return []


def _unknown(name: str, listing: Response) -> str:
    return f"model {name!r} is not served here; served: {', '.join(_model_ids(listing)) or 'none'}"


def _error_text(response: Response) -> str:
    try:
        error = response.json()
        detail = error.get("error", error) if isinstance(error, dict) else error
        return str(detail.get("message", detail) if isinstance(detail, dict) else detail)
    except ValueError:
        return response.body.decode(errors="replace")


def _forwarded_headers(scope: Scope) -> Headers:
    """The caller's headers minus those that describe its own body."""
    skip = {b"content-length", b"content-type", b"transfer-encoding", b"accept-encoding"}
    return [(k, v) for k, v in scope["headers"] if k.lower() not in skip]


def _sub_scope(scope: Scope, method: str, path: str, headers: Headers) -> Scope:
    # A copy of the caller's scope keeps what vLLM's handlers read from it (the app, its state).
    sub = dict(scope)
    sub.update(method=method, path=path, raw_path=path.encode(), query_string=b"", headers=headers)
    return sub


def _body_receiver(body: bytes, then: Receive) -> Receive:
    """Receive ``body`` first, then whatever the caller's connection says (its disconnect).

    vLLM's handlers listen for ``http.disconnect`` to cancel a request whose client went away, so
    after the body the inner app must hear the real client, not an invented disconnect.
    """
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return await then()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


async def _not_found(ex: Exchange) -> None:
    await _send_json(ex.send, 404, {"error": f"no route {ex.method} {ex.scope['path']}"})


async def _relay(send: Send, response: Response) -> None:
    await _send(send, response.status, response.headers, response.body)


async def _send_json(send: Send, status: int, body: Any, extra: Headers | None = None) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await _send(send, status, [*headers, *(extra or [])], data)


async def _send(send: Send, status: int, headers: Headers, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _http_get(url: str) -> tuple[int, bytes] | None:
    """GET a small answer from the supervisor; None when it does not answer in time."""
    import aiohttp  # vLLM's server has it; only these routes need it

    try:
        timeout = aiohttp.ClientTimeout(total=_STATUS_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as answer:
            return answer.status, await answer.read()
    except (aiohttp.ClientError, TimeoutError) as error:
        log.debug("the supervisor at %s did not answer: %s", url, error)
        return None
