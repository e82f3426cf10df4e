"""What every serving group must answer: the assertions shared by the PP=2 TP=1 and TP=2 suites."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from groups import LocalGroup


def get(group: LocalGroup, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(group.base_url + path, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def post(group: LocalGroup, path: str, body: dict[str, Any]) -> tuple[int, str]:
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


def check_models(group: LocalGroup) -> None:
    import openai

    client = openai.OpenAI(base_url=group.plan.url, api_key="unused", timeout=60)
    assert [model.id for model in client.models.list().data] == ["tiny-llama"]


def check_completion(group: LocalGroup) -> None:
    import openai

    client = openai.OpenAI(base_url=group.plan.url, api_key="unused", timeout=120)
    reply = client.completions.create(
        model="tiny-llama", prompt="Pipelines are", max_tokens=12, temperature=0
    )
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 12
    assert reply.choices[0].finish_reason == "length"
    again = client.completions.create(
        model="tiny-llama", prompt="Pipelines are", max_tokens=12, temperature=0
    )
    assert (
        again.choices[0].text == reply.choices[0].text
    )  # greedy decoding across both stages is stable


def check_streaming_chat(group: LocalGroup) -> None:
    import openai

    client = openai.OpenAI(base_url=group.plan.url, api_key="unused", timeout=120)
    stream = client.chat.completions.create(
        model="tiny-llama",
        messages=[{"role": "user", "content": "Count to three."}],
        max_tokens=10,
        stream=True,
    )
    chunks = list(stream)
    finished = [
        c.choices[0].finish_reason
        for c in chunks
        if c.choices and c.choices[0].finish_reason
    ]
    pieces = [
        c.choices[0].delta.content
        for c in chunks
        if c.choices and c.choices[0].delta.content
    ]
    assert len(pieces) >= 2  # tokens arrive one by one, not as one body
    assert finished == ["length"]


def check_metrics(group: LocalGroup) -> None:
    status, body = get(group, "/metrics")
    assert status == 200
    assert "vllm:num_requests_running" in body
    assert "multinode_llm_" in body  # the supervisor's own metrics follow vLLM's


def check_v2(group: LocalGroup) -> None:
    status, body = get(group, "/v2/health/ready")
    assert (status, json.loads(body)) == (200, {"ready": True})
    status, body = get(group, "/v2/models/tiny-llama")
    assert status == 200
    assert json.loads(body)["name"] == "tiny-llama"
    status, body = get(group, "/v2/models/tiny-llama/ready")
    assert status == 200
    status, body = post(
        group,
        "/v2/models/tiny-llama/generate",
        {"text_input": "Hello", "parameters": {"max_tokens": 5}},
    )
    assert status == 200, body
    assert json.loads(body)["model_name"] == "tiny-llama"
    status, body = get(group, "/v2/models/absent")
    assert status == 404


def check_ray(group: LocalGroup, tensor: int) -> None:
    nodes = group.ray_nodes()
    pod_ips = sorted(p["ip"] for p in group.status()["pods"])
    assert (
        sorted(n["ip"] for n in nodes) == pod_ips
    )  # one Ray node per pod, each at its pod's IP
    assert [n["gpus"] for n in nodes] == [tensor] * len(
        pod_ips
    )  # mocked from each pod's GPU limit
