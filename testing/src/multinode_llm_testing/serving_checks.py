"""What every serving group must answer, wherever it runs: the assertions the local cluster's e2e
suite (tests/e2e) and the kind suite (tests/kind) share. A group is anything with ``base_url``
(the head Service, without ``/v1``)."""

from __future__ import annotations

import http.client
import json
import urllib.request
from typing import Any, Protocol


class Reachable(Protocol):
    @property
    def base_url(self) -> str: ...


class Served(Reachable, Protocol):
    @property
    def model(self) -> str: ...


def get(group: Reachable, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(group.base_url + path, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def post(group: Reachable, path: str, body: dict[str, Any]) -> tuple[int, str]:
    request = urllib.request.Request(
        group.base_url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def answers(group: Served) -> bool:
    """Whether one short completion comes back now: what a test waits on while a group heals.
    Any failure (refused, reset, timed out, not 200) is a "not yet"."""
    body = {"model": group.model, "prompt": "Hi", "max_tokens": 2, "temperature": 0}
    try:
        status, _ = post(group, "/v1/completions", body)
    except (OSError, ValueError, http.client.HTTPException):
        return False
    return status == 200


def check_models(group: Served) -> None:
    import openai

    client = openai.OpenAI(base_url=group.base_url + "/v1", api_key="unused", timeout=60)
    assert [model.id for model in client.models.list().data] == [group.model]


def check_completion(group: Served) -> None:
    import openai

    client = openai.OpenAI(base_url=group.base_url + "/v1", api_key="unused", timeout=120)
    reply = client.completions.create(
        model=group.model, prompt="Pipelines are", max_tokens=12, temperature=0
    )
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 12
    assert reply.choices[0].finish_reason == "length"
    again = client.completions.create(
        model=group.model, prompt="Pipelines are", max_tokens=12, temperature=0
    )
    assert (
        again.choices[0].text == reply.choices[0].text
    )  # greedy decoding across both stages is stable


def check_streaming_chat(group: Served) -> None:
    import openai

    client = openai.OpenAI(base_url=group.base_url + "/v1", api_key="unused", timeout=120)
    stream = client.chat.completions.create(
        model=group.model,
        messages=[{"role": "user", "content": "Count to three."}],
        max_tokens=10,
        stream=True,
    )
    chunks = list(stream)
    finished = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert len(pieces) >= 2  # tokens arrive one by one, not as one body
    assert finished == ["length"]


def check_metrics(group: Served) -> None:
    status, body = get(group, "/metrics")
    assert status == 200
    assert "vllm:num_requests_running" in body
    assert "multinode_llm_" in body  # the supervisor's own metrics follow vLLM's


def check_v2(group: Served) -> None:
    status, body = get(group, "/v2/health/ready")
    assert (status, json.loads(body)) == (200, {"ready": True})
    status, body = get(group, f"/v2/models/{group.model}")
    assert status == 200
    assert json.loads(body)["name"] == group.model
    status, body = get(group, f"/v2/models/{group.model}/ready")
    assert status == 200
    status, body = post(
        group,
        f"/v2/models/{group.model}/generate",
        {"text_input": "Hello", "parameters": {"max_tokens": 5}},
    )
    assert status == 200, body
    assert json.loads(body)["model_name"] == group.model
    status, body = get(group, "/v2/models/absent")
    assert status == 404


def check_ray(nodes: list[dict[str, Any]], pod_ips: list[str], tensor: int) -> None:
    """One alive Ray node per pod, at its pod's IP, with GPUs mocked from the pod's GPU limit."""
    assert sorted(n["ip"] for n in nodes) == sorted(pod_ips)
    assert [n["gpus"] for n in nodes] == [tensor] * len(pod_ips)


# Run inside the head pod: the alive Ray nodes as JSON on a line starting with NODES=.
RAY_NODES_SCRIPT = (
    "import json, ray; ray.init(address='auto', logging_level='ERROR'); "
    "print('NODES=' + json.dumps([{'ip': n['NodeManagerAddress'], 'gpus': "
    "n['Resources'].get('GPU', 0)} for n in ray.nodes() if n['Alive']]))"
)


def parse_ray_nodes(output: str) -> list[dict[str, Any]]:
    line = next(line for line in output.splitlines() if line.startswith("NODES="))
    nodes: list[dict[str, Any]] = json.loads(line.removeprefix("NODES="))
    return nodes
