"""mp groups (vLLM's own multi-node executor, no Ray) with real vLLM on CPU, pods in namespaces.

The head hands out node ranks over its status port; the worker runs its rank headless. Those that
start vLLM hold the machine-wide vLLM lock (the `vllm` mark). No fake GPU, as in the local
cluster's mp pods: there is no Ray to show it to, and vLLM's CPU platform runs mp as it is.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
from multinode_llm_testing.pod_processes import check_no_ray, processes_in
from multinode_llm_testing.waits import wait_until
from runtime_harness import HEAD_SVC, HTTP_PORT, Cluster, Pod

pytestmark = pytest.mark.timeout(900)

READY_TIMEOUT_S = 480  # ~75 s on an idle 2-core machine; shared machines are slower


def _group_env(model: Path, **overrides: str) -> dict[str, str]:
    return {
        "MULTINODE_LLM_EXECUTOR": "mp",
        "MULTINODE_LLM_GPU_MOCK": "0",  # the suite's default is on, for Ray
        # vLLM's mp executor binds each rank's threads to core 0 of its node: unbound, both
        # "nodes" share this machine's cores, as the local cluster's mp pods do.
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "RAY_NODE_COUNT": "2",
        "REQUEST_GPU_COUNT": "1",
        "TENSOR_PARALLEL_SIZE": "1",
        "PIPELINE_PARALLEL_SIZE": "2",
        "MODEL_DIR": str(model),
        "MODEL_NAME": "tiny",
        "GROUP_WAIT_TIMEOUT": "300",
        **overrides,
    }


@pytest.mark.vllm
def test_mp_group_serves_without_ray_and_its_head_exits_when_the_worker_is_killed(
    cluster: Cluster, tiny_model: Path, timing: list[tuple[str, float]]
) -> None:
    openai = pytest.importorskip("openai")
    start = time.monotonic()
    head, worker = cluster.start_group(
        _group_env(tiny_model),
        "--max-model-len",
        "256",
        ready_timeout_s=READY_TIMEOUT_S,
        what="the mp head to be ready",
    )
    timing.append(("mp head+worker (PP=2, TP=1): start -> head ready", time.monotonic() - start))
    status = head.get("/status")[1]
    assert status["facts"]["executor"] == "mp"
    assert (status["facts"]["nodes"], status["facts"]["gpus"]) == (2, 2)
    assert head.get("/startup")[0] == head.get("/live")[0] == 200
    assert worker.get("/ready") == (
        200,
        {
            "ok": True,
            "reason": f"rank 1 of the head at {HEAD_SVC}.default.svc.cluster.local:8081; "
            "vLLM (headless) runs",
            "phase": "serving",
        },
    )
    _assert_the_ranks_command_lines(head, worker)

    client = openai.OpenAI(
        base_url=f"http://{head.ip}:{HTTP_PORT}/v1", api_key="unused", timeout=120
    )
    assert [model.id for model in client.models.list()] == ["tiny"]
    chat = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0
    )
    assert chat.choices[0].finish_reason == "length"
    assert chat.usage is not None
    assert chat.usage.completion_tokens == 8
    assert head.get("/v2/health/ready", port=HTTP_PORT) == (200, {"ready": True})
    metrics = head.get("/metrics")[1]
    assert 'multinode_llm_group_nodes{role="head"} 2.0' in metrics
    assert 'multinode_llm_group_gpus_expected{role="head"} 2.0' in metrics
    assert 'multinode_llm_worker_joined{role="worker"} 1.0' in worker.get("/metrics")[1]
    for pod in (head, worker):
        check_no_ray(pod.name, pod.role, processes_in(pod.host.namespace))

    killed = time.monotonic()
    worker.kill()
    assert head.wait_exit(timeout=120) == 1
    timing.append(("mp: worker killed -> head exits non-zero", time.monotonic() - killed))
    last = head.log().splitlines()[-1]
    assert "exit 1: lost worker rank 1 (pod worker, " in last, last
    assert processes_in(head.host.namespace) == {}  # vLLM went with the supervisor


@pytest.mark.vllm
def test_mp_worker_exits_when_the_head_restarts_and_rejoins_the_new_epoch(
    cluster: Cluster, tiny_model: Path, timing: list[tuple[str, float]]
) -> None:
    head = cluster.start("head", "head", _group_env(tiny_model), "--max-model-len", "256")
    worker = cluster.start("worker", "worker", {**_group_env(tiny_model), "HEAD_SVC": HEAD_SVC})
    joined = wait_until(lambda: _rank(worker), 120, "the worker to get a rank", interval=0.1)
    assert joined == 1
    first_epoch = _epoch(worker)

    restarted = time.monotonic()
    cluster.restart(head)  # same pod, same address: a container restart, a new epoch
    assert worker.wait_exit(timeout=60) == 1
    timing.append(("mp: head restarted -> worker exits non-zero", time.monotonic() - restarted))
    last = worker.log().splitlines()[-1]
    assert re.search(r"exit 1: (the head at \S+ ended rank 1|the head's status port)", last), last
    assert processes_in(worker.host.namespace) == {}  # its vLLM went with it

    cluster.restart(worker)  # kubelet restarts the worker container: it joins the new epoch
    wait_until(lambda: _epoch(worker) not in (None, first_epoch), 120, "a rank in the new epoch")
    assert _rank(worker) == 1

    # The worker's vLLM dies: the worker says so to the head (a leave), and both exit at once.
    headless = wait_until(lambda: _headless_pid(worker), 60, "the worker's headless vLLM")
    died = time.monotonic()
    os.kill(headless, signal.SIGKILL)
    assert worker.wait_exit(timeout=60) == 1
    assert head.wait_exit(timeout=60) == 1
    timing.append(("mp: worker's vLLM killed -> head exits non-zero", time.monotonic() - died))
    assert "exit 1: vLLM (headless, rank 1) exited with code" in worker.log().splitlines()[-1]
    last = head.log().splitlines()[-1]
    assert "exit 1: worker rank 1 (pod worker, " in last, last
    assert ") left; exiting so that the head restarts" in last, last


@pytest.mark.vllm
def test_mp_head_without_its_worker_exits_at_the_deadline_naming_the_rank(
    cluster: Cluster, tiny_model: Path, timing: list[tuple[str, float]]
) -> None:
    start = time.monotonic()
    head = cluster.start("head", "head", _group_env(tiny_model, GROUP_WAIT_TIMEOUT="15"))
    wait_until(lambda: head.get("/live")[0] == 200, 30, "the head's status port", interval=0.1)
    assert head.get("/ready")[1]["reason"] == "vLLM's /health does not answer 200 yet"
    assert head.wait_exit(timeout=120) == 1
    elapsed = time.monotonic() - start
    timing.append(("mp head, PP=2, no worker: exit after GROUP_WAIT_TIMEOUT=15", elapsed))
    last = head.log().splitlines()[-1]
    assert (
        "exit 1: the group did not form within 15 s (--wait-timeout, GROUP_WAIT_TIMEOUT): "
        "rank 1 missing of --nnodes 2 (PIPELINE_PARALLEL_SIZE); joined workers: none; check that "
        "every worker pod runs with MULTINODE_LLM_EXECUTOR=mp and reaches the head's status port "
        f"at {head.ip}:8081"
    ) in last, last
    assert 15 <= elapsed < 60
    assert processes_in(head.host.namespace) == {}  # its vLLM (started at once) went with it


def test_mp_worker_without_a_head_exits_at_the_deadline(
    cluster: Cluster, timing: list[tuple[str, float]]
) -> None:
    start = time.monotonic()
    env = _group_env(Path("/nonexistent"), HEAD_SVC=HEAD_SVC, GROUP_WAIT_TIMEOUT="5")
    worker = cluster.start("worker", "worker", env)
    wait_until(lambda: worker.get("/live")[0] == 200, 30, "the worker's status port", interval=0.1)
    assert worker.get("/startup")[1]["reason"] == (
        f"waiting for a rank from the head at {HEAD_SVC}.default.svc.cluster.local:8081"
    )
    assert worker.wait_exit(timeout=60) == 1
    timing.append(
        ("mp worker without a head: exit after GROUP_WAIT_TIMEOUT=5", time.monotonic() - start)
    )
    last = worker.log().splitlines()[-1]
    assert "granted no rank within 5 s (--wait-timeout, GROUP_WAIT_TIMEOUT): " in last, last
    assert "its name does not resolve" in last  # no head pod: no address in the pod's hosts


def _headless_pid(worker: Pod) -> int | None:
    """The worker's vLLM: the process started as `python -m multinode_llm.serving.headless`."""
    for pid, command in processes_in(worker.host.namespace).items():
        if "multinode_llm.serving.headless" in command:
            return pid
    return None


def _rank(worker: Pod) -> int | None:
    status, body = worker.get("/status")
    return body["facts"].get("rank") if status == 200 and body["facts"] else None


def _epoch(worker: Pod) -> str | None:
    """The epoch of the worker's grant, from its log (the last 'joined as rank' line)."""
    found = re.findall(r"joined as rank \d+ of \d+ \(epoch (\w+),", worker.log())
    return found[-1] if found else None


def _assert_the_ranks_command_lines(head: Pod, worker: Pod) -> None:
    """Rank 0 is the OpenAI server, rank 1 vLLM's headless entry, both with mp's flags."""
    launch = next(line for line in head.log().splitlines() if "starting vLLM:" in line)
    assert "-m vllm.entrypoints.openai.api_server " in launch
    assert " --distributed-executor-backend mp " in launch
    assert f" --nnodes 2 --node-rank 0 --master-addr {head.ip} --master-port 29500 " in launch
    assert launch.endswith("--served-model-name tiny --max-model-len 256")
    started = next(line for line in worker.log().splitlines() if "rank 1): " in line)
    assert "-m multinode_llm.serving.headless " in started
    assert f" --nnodes 2 --node-rank 1 --master-addr {head.ip} --master-port 29500 " in started
    assert started.endswith("--served-model-name tiny --max-model-len 256")  # the head's flags
