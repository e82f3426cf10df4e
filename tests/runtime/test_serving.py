"""A PP=2 group with real Ray and real vLLM (CPU build, GPUs mocked), asked with the openai client.

These start vLLM, so they hold the machine-wide vLLM lock (the `vllm` mark) for their duration.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

import pytest
from multinode_llm_testing.pod_processes import processes_in
from multinode_llm_testing.waits import wait_until
from runtime_harness import HTTP_PORT, Cluster, Pod

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

# vLLM 0.32 names its Ray actor RayWorkerProc.
RAY_WORKER_LINE = re.compile(r"^\(RayWorkerProc pid=\d+\) ", re.MULTILINE)
READY_TIMEOUT_S = 480  # ~80 s on an idle 2-core machine; shared machines are slower


def _group_env(model: Path) -> dict[str, str]:
    return {
        "RAY_NODE_COUNT": "2",
        "REQUEST_GPU_COUNT": "1",
        "TENSOR_PARALLEL_SIZE": "1",
        "PIPELINE_PARALLEL_SIZE": "2",
        "MODEL_DIR": str(model),
        "MODEL_NAME": "tiny",
        "GROUP_WAIT_TIMEOUT": "300",
    }


def test_head_without_its_worker_exits_at_the_deadline_naming_it(
    cluster: Cluster, tiny_model: Path, timing: list[tuple[str, float]]
) -> None:
    start = time.monotonic()
    head = cluster.start("head", "head", {**_group_env(tiny_model), "GROUP_WAIT_TIMEOUT": "20"})
    assert head.wait_exit(timeout=120) == 1
    elapsed = time.monotonic() - start
    timing.append(
        ("head, RAY_NODE_COUNT=2, no worker: non-zero exit (GROUP_WAIT_TIMEOUT=20)", elapsed)
    )
    log = head.log()
    assert "the group did not form within 20 s (--wait-timeout, GROUP_WAIT_TIMEOUT): " in log
    assert "1 worker missing (1 of RAY_NODE_COUNT=2 nodes joined: " in log
    assert ", head))" in log  # the joined node is named, with its address
    assert "1 of 2 GPUs missing" in log
    assert 20 <= elapsed < 60
    assert processes_in(head.host.namespace) == {}  # vLLM (started early) and Ray went with it


def test_group_serves_through_openai_and_loses_liveness_with_its_worker(
    cluster: Cluster, tiny_model: Path, timing: list[tuple[str, float]]
) -> None:
    openai = pytest.importorskip("openai")
    start = time.monotonic()
    head, worker = cluster.start_group(
        _group_env(tiny_model),
        "--max-model-len",
        "256",
        ready_timeout_s=READY_TIMEOUT_S,
        what="the head to be ready",
    )
    timing.append(("head+worker (PP=2): start -> head ready", time.monotonic() - start))
    status = head.get("/status")[1]
    assert status["facts"]["nodes"] == 2
    assert status["facts"]["gpus"] == 2
    assert head.get("/startup")[0] == head.get("/live")[0] == 200
    assert worker.get("/ready")[0] == 200
    _assert_arguments_passed_through(head)

    client = openai.OpenAI(
        base_url=f"http://{head.ip}:{HTTP_PORT}/v1", api_key="unused", timeout=120
    )
    assert [model.id for model in client.models.list()] == ["tiny"]
    completion = client.completions.create(
        model="tiny", prompt="hello world", max_tokens=8, temperature=0
    )
    assert completion.usage.completion_tokens == 8
    chat = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0
    )
    assert chat.choices[0].finish_reason == "length"
    assert isinstance(chat.choices[0].message.content, str)
    stream = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=6, stream=True
    )
    assert (
        len(
            [
                chunk
                for chunk in stream
                if chunk.choices and chunk.choices[0].delta.content is not None
            ]
        )
        >= 1
    )
    _assert_kserve_routes(head)
    # Each stage's vLLM worker writes to its own pod's log, relayed from Ray's worker files by
    # the supervisor (group/ray_logs.py): nothing is lost without Ray's log monitor.
    for pod in (head, worker):
        assert RAY_WORKER_LINE.search(pod.log()), f"no vLLM worker line in the {pod.name}'s log"

    killed = time.monotonic()
    worker.kill()
    wait_until(lambda: head.get("/live")[0] == 503, 60, "the head's liveness to fail", interval=0.1)
    timing.append(("worker killed -> head liveness false", time.monotonic() - killed))
    assert f"lost node(s) {worker.ip}" in head.get("/live")[1]["reason"]
    assert head.get("/ready")[0] == 503
    assert (
        head.wait_exit(timeout=180) == 1
    )  # vLLM's executor dies with its worker; the head follows
    timing.append(("worker killed -> head exits non-zero", time.monotonic() - killed))


def _assert_arguments_passed_through(head: Pod) -> None:
    """vLLM received TP/PP exactly as configured, the Ray backend, and the user's extra argument."""
    launch = next(line for line in head.log().splitlines() if "starting vLLM:" in line)
    assert " --tensor-parallel-size 1 --pipeline-parallel-size 2 " in launch
    assert " --distributed-executor-backend ray " in launch
    assert launch.endswith("--served-model-name tiny --max-model-len 256")
    # vLLM's own record of its configuration, so the flags were not only passed but taken.
    assert re.search(r"pipeline_parallel_size=2\b", head.log())
    assert re.search(r"tensor_parallel_size=1\b", head.log())


def _assert_kserve_routes(head: Pod) -> None:
    assert head.get("/v2/health/ready", port=HTTP_PORT) == (200, {"ready": True})
    assert head.get("/v2/health/live", port=HTTP_PORT) == (200, {"live": True})
    assert head.get("/v1/models/tiny", port=HTTP_PORT) == (200, {"name": "tiny", "ready": True})
    assert head.get("/v2/models/tiny/ready", port=HTTP_PORT) == (
        200,
        {"name": "tiny", "ready": True},
    )
    assert head.get("/v2/models/tiny", port=HTTP_PORT)[1]["name"] == "tiny"
    assert head.get("/v2/models/nope", port=HTTP_PORT)[0] == 404
    request = urllib.request.Request(
        f"http://{head.ip}:{HTTP_PORT}/v2/models/tiny/generate",
        data=json.dumps({"text_input": "hello", "parameters": {"max_tokens": 4}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as answer:
        generated = json.loads(answer.read())
    assert generated["model_name"] == "tiny"
    assert isinstance(generated["text_output"], str)
    assert generated["details"]["usage"]["completion_tokens"] == 4
    status, metrics = head.get("/metrics", port=HTTP_PORT)
    assert status == 200
    assert "vllm:" in metrics
    assert 'multinode_llm_probe_ok{probe="ready",role="head"} 1.0' in metrics
