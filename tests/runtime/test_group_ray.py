"""Head and worker supervisors with real Ray, each in its own network namespace; no vLLM starts."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
from multinode_llm_testing.pod_processes import processes_in
from multinode_llm_testing.waits import wait_until
from runtime_harness import HEAD_SVC, Cluster

pytestmark = pytest.mark.timeout(300)

# A Ray worker's command: renamed ``ray::IDLE`` once started, Ray's setup_worker.py before (only
# as argv[1]: the raylet's own command line names that script as an argument).
RAY_WORKER = re.compile(r"\[[^]]*\] (ray::IDLE|\S+ \S*/ray/_private/workers/setup_worker\.py )")

# A group of three whose third pod never comes: the head waits and never starts vLLM.
WAITING_GROUP = {
    "RAY_NODE_COUNT": "3",
    "REQUEST_GPU_COUNT": "1",
    "TENSOR_PARALLEL_SIZE": "1",
    "PIPELINE_PARALLEL_SIZE": "3",
    "MODEL_DIR": "/tmp",
    "MODEL_NAME": "tiny",
    "GROUP_WAIT_TIMEOUT": "300",
}


def _facts(pod: object) -> dict[str, object]:
    status, body = pod.get("/status")  # type: ignore[attr-defined]
    return body["facts"] if status == 200 else {}


def _probe(cluster: Cluster, pod_name: str, probe: str) -> int:
    """`multinode-llm probe PROBE` run inside the pod, as an exec probe would be."""
    host = cluster.network.hosts[pod_name]
    argv = host.command([sys.executable, "-m", "multinode_llm", "probe", probe])
    return subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode


def test_worker_gives_up_when_no_head_answers(
    cluster: Cluster, timing: list[tuple[str, float]]
) -> None:
    start = time.monotonic()
    worker = cluster.start(
        "worker", "worker", {**WAITING_GROUP, "HEAD_SVC": HEAD_SVC, "GROUP_WAIT_TIMEOUT": "5"}
    )
    wait_until(lambda: worker.get("/live")[0] == 200, 30, "the worker's status port", interval=0.1)
    assert worker.get("/startup")[1]["reason"] == (
        "waiting for the head's Ray GCS at tiny-head-1.default.svc.cluster.local:6379"
    )
    assert worker.wait_exit(timeout=60) == 1
    elapsed = time.monotonic() - start
    timing.append(("worker without a head: exit after GROUP_WAIT_TIMEOUT=5", elapsed))
    log = worker.log()
    assert "tiny-head-1.default.svc.cluster.local:6379 did not answer within 5 s" in log
    assert "check that the head pod runs" in log


def test_waiting_head_answers_probes_and_stops_cleanly(cluster: Cluster) -> None:
    head = cluster.start(
        "head",
        "head",
        {**WAITING_GROUP, "RAY_NODE_COUNT": "2", "PIPELINE_PARALLEL_SIZE": "2"},
        "--no-early-engine-start",
    )
    wait_until(lambda: _facts(head).get("nodes") == 1, 120, "the Ray head to register itself")
    assert head.get("/startup")[0] == 503
    assert head.get("/ready")[0] == 503
    assert head.get("/live") == (
        200,
        {"ok": True, "reason": "Ray runs", "phase": "waiting for the group"},
    )
    assert _probe(cluster, "head", "live") == 0
    assert _probe(cluster, "head", "ready") == 1
    assert "1/2 nodes, 1/2 GPUs; waiting for 1 worker" in head.log()
    metrics = head.get("/metrics")[1]
    assert 'multinode_llm_group_nodes{role="head"} 1' in metrics
    # The supervisor's driver has been connected for the probes' seconds: Ray started no idle
    # workers for it (they would take CPU from vLLM's start and stay; group/ray_node.py).
    assert _ray_workers(head.host.namespace) == []
    assert head.stop(timeout=60) == 0
    assert processes_in(head.host.namespace) == {}  # Ray went with the supervisor


def test_worker_joins_and_exits_when_the_head_is_killed(
    cluster: Cluster, timing: list[tuple[str, float]]
) -> None:
    head = cluster.start("head", "head", WAITING_GROUP, "--no-early-engine-start")
    worker = cluster.start("worker", "worker", {**WAITING_GROUP, "HEAD_SVC": HEAD_SVC})
    wait_until(lambda: _facts(head).get("nodes") == 2, 180, "the worker to join the head")
    assert "2/3 nodes, 2/3 GPUs; waiting for 1 worker" in head.log()
    wait_until(lambda: worker.get("/ready")[0] == 200, 60, "the worker to be ready")
    assert worker.get("/live")[0] == 200
    assert worker.get("/startup")[1]["reason"] == (
        "joined the head's Ray cluster at tiny-head-1.default.svc.cluster.local:6379"
    )
    assert _probe(cluster, "worker", "ready") == 0
    assert head.get("/status")[1]["timeline_s"].get(f"node_joined:{worker.ip}") is not None

    killed = time.monotonic()
    head.kill()
    wait_until(
        lambda: worker.get("/live")[0] == 503, 30, "the worker's liveness to fail", interval=0.1
    )
    unlive = time.monotonic() - killed
    assert worker.wait_exit(timeout=60) == 1
    exited = time.monotonic() - killed
    timing.append(("head killed -> worker liveness false", unlive))
    timing.append(("head killed -> worker exits non-zero", exited))
    # The GCS refuses connections at once (the head's namespace stays): no 5 s grace, no minute
    # of Ray's raylet waiting for a GCS that will not come back.
    assert exited < 5.0
    assert "lost the head: its Ray GCS at 10.231.0.2:6379 refuses connections" in worker.log()
    assert processes_in(worker.host.namespace) == {}


# A driver in the head's pod that runs one task on the worker's node; the task speaks on both of
# its streams. Ray starts the task's Python worker on that node for this job.
SPEAK_ON_THE_WORKER = """
import sys, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address=sys.argv[1])
alive = [n for n in ray.nodes() if n["Alive"]]
node = next(n["NodeID"] for n in alive if n["NodeManagerAddress"] == sys.argv[2])
@ray.remote(num_cpus=0)
def speak():
    print("said on the worker's node", flush=True)
    print("warned on the worker's node", file=sys.stderr, flush=True)
there = NodeAffinitySchedulingStrategy(node, soft=False)
ray.get(speak.options(scheduling_strategy=there).remote())
"""


def test_a_ray_workers_output_shows_in_its_own_pods_log(cluster: Cluster) -> None:
    head = cluster.start("head", "head", WAITING_GROUP, "--no-early-engine-start")
    worker = cluster.start("worker", "worker", {**WAITING_GROUP, "HEAD_SVC": HEAD_SVC})
    # The GCS's view, not the worker's /ready: that opens with the raylet's port, which can come
    # before the GCS lists the node alive (the driver then found no node, CI, 6 Dec).
    wait_until(lambda: _facts(head).get("nodes") == 2, 180, "the worker's node alive in the GCS")
    driver = head.host.command(
        [sys.executable, "-c", SPEAK_ON_THE_WORKER, f"{head.ip}:6379", worker.ip]
    )
    ran = subprocess.run(driver, capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr
    # Ray's log monitor does not run (group/ray_node.py): the worker's supervisor relays the
    # task's lines into the worker pod's log, each with the task's name and its process.
    said = re.compile(r"^\(speak pid=\d+\) said on the worker's node$", re.MULTILINE)
    warned = re.compile(r"^\(speak pid=\d+\) warned on the worker's node$", re.MULTILINE)
    wait_until(lambda: said.search(worker.log()), 30, "the task's line in the worker's log")
    wait_until(lambda: warned.search(worker.log()), 30, "the task's stderr in the worker's log")
    assert "on the worker's node" not in head.log()
    for pod in (head, worker):
        monitors = [c for c in processes_in(pod.host.namespace).values() if "log_monitor" in c]
        assert monitors == [], pod.name


def _ray_workers(namespace: str) -> list[str]:
    """Ray's Python workers in the namespace, by their commands (``processes_in``)."""
    return [c for c in processes_in(namespace).values() if RAY_WORKER.match(c)]


def test_worker_exits_when_the_head_restarts_faster_than_its_grace(
    cluster: Cluster, timing: list[tuple[str, float]]
) -> None:
    head = cluster.start("head", "head", WAITING_GROUP, "--no-early-engine-start")
    worker = cluster.start("worker", "worker", {**WAITING_GROUP, "HEAD_SVC": HEAD_SVC})
    wait_until(lambda: worker.get("/ready")[0] == 200, 180, "the worker to join the head")
    restarted = time.monotonic()
    cluster.restart(head)  # same pod, same address: a container restart, not a new pod
    assert worker.wait_exit(timeout=60) == 1
    timing.append(("head restarted -> worker exits non-zero", time.monotonic() - restarted))
    log = worker.log()
    assert "the head at 10.231.0.2 restarted (a new Ray cluster)" in log or "lost the head" in log


def test_head_exits_when_its_ray_dies(cluster: Cluster, timing: list[tuple[str, float]]) -> None:
    head = cluster.start(
        "head", "head", {**WAITING_GROUP, "RAY_NODE_COUNT": "2"}, "--no-early-engine-start"
    )
    wait_until(lambda: _facts(head).get("nodes") == 1, 120, "the Ray head to register itself")
    processes = processes_in(head.host.namespace)
    gcs = [pid for pid, command in processes.items() if "gcs_server" in command]
    assert len(gcs) == 1
    killed = time.monotonic()
    os.kill(gcs[0], signal.SIGKILL)
    assert head.wait_exit(timeout=60) == 1
    timing.append(("Ray GCS killed -> head exits non-zero", time.monotonic() - killed))
    # Whichever the supervisor sees first ends it, and both name the engine's end: `ray start
    # --head` exiting once its GCS is gone, or the GCS failing its polls in a row (head_watch.py).
    last = head.log().splitlines()[-1]
    assert (
        "exit 1: the Ray head exited with code" in last
        or "exit 1: the Ray head's GCS stopped answering" in last
    ), last
    # On the second path the supervisor stops `ray start --block`, and Ray's own processes follow
    # their GCS out within seconds; none may stay.
    wait_until(
        lambda: processes_in(head.host.namespace) == {},
        30,
        "the head's Ray processes to leave its pod",
    )
