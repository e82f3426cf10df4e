"""Pipeline parallel 2, tensor parallel 1: a head and a worker pod serve, and the group heals.

One group serves every test of this module (starting one takes a minute or more); the tests that
kill a pod come last and each waits until the group serves again before the next one runs.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from groups import LocalGroup, local_group, record, serves_now
from multinode_llm_local import cluster
from multinode_llm_local.chart import find_chart
from multinode_llm_local.kserve import releases
from multinode_llm_testing import serving_checks as checks

SCENARIO = "PP=2 TP=1"
RECOVERY_S = 600


@pytest.fixture(scope="module")
def group(tiny_model: Path) -> Iterator[LocalGroup]:
    with local_group(SCENARIO, tiny_model) as running:
        yield running


def test_two_pods_one_head_one_worker_are_ready(group: LocalGroup) -> None:
    pods = group.status()["pods"]
    assert sorted(p["role"] for p in pods) == ["head", "worker"]
    assert all(p["ready"] and p["phase"] == "Running" for p in pods)
    assert all(p["gpus"] == 1 for p in pods)


def test_models_lists_the_served_model(group: LocalGroup) -> None:
    checks.check_models(group)


def test_completions_come_from_both_pipeline_stages(group: LocalGroup) -> None:
    checks.check_completion(group)


def test_chat_streams_token_by_token(group: LocalGroup) -> None:
    checks.check_streaming_chat(group)


def test_metrics_carry_vllm_and_the_supervisor(group: LocalGroup) -> None:
    checks.check_metrics(group)


def test_kserve_v2_endpoints_answer(group: LocalGroup) -> None:
    checks.check_v2(group)


def test_ray_shows_two_nodes_with_one_gpu_each(group: LocalGroup) -> None:
    group.check_ray(tensor=1)


def test_kserve_reports_the_serving_group_as_its_release_does(group: LocalGroup) -> None:
    """The default release (0.19.0) never reports a multi-node group Ready (kserve#5703)."""
    release = releases.get(group.plan.kserve)
    [isvc] = group.status()["inferenceservices"]
    expected = "Unknown" if release.controller.readiness == "stuck" else "True"
    assert isvc["PredictorReady"]["status"] == expected


def _await_group(group: LocalGroup, spec: str | None = None) -> subprocess.CompletedProcess[str]:
    """The chart's readiness Job, as rendered for this group, run against its forwarded Service
    (the Job's own URL is the predictor Service's in-cluster name; tests/chart checks it)."""
    objects = cluster.render(
        find_chart(), [cluster.DEFAULT_VALUES], [], group.plan.release, group.plan.namespace
    )
    job = next(d for d in objects if d["kind"] == "Job" and "-ready-" in d["metadata"]["name"])
    args = list(job["spec"]["template"]["spec"]["containers"][0]["args"])
    args[1] = group.base_url
    if spec is not None:
        args[args.index("--group-spec") + 1] = spec
    args[args.index("--timeout") + 1] = "120" if spec is None else "3"
    argv = [sys.executable, "-m", "multinode_llm", *args, "--interval", "1"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)


def test_the_charts_readiness_job_ends_on_this_group_and_only_on_its_spec(
    group: LocalGroup,
) -> None:
    done = _await_group(group)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "serves 'tiny-llama'" in done.stdout
    other = _await_group(group, spec="000000000000")
    assert other.returncode == 1
    assert "not 000000000000" in other.stderr


def test_a_killed_worker_restarts_the_group_without_a_manual_step(
    group: LocalGroup,
) -> None:
    head_before = group.pod("head")
    worker_before = group.pod("worker")
    group.kill("worker")
    started = time.monotonic()
    # What kubelet's liveness probe asks, asked directly and first: the head exits on its own about
    # a second after the loss (its watch sees the raylet refuse connections), before its 10 s
    # liveness period comes round, and a restarted head is not liveness-probed until its startup
    # probe passes, so a kubelet Liveness event never comes: the head's own exit is what heals.
    # The pod's Ready condition stays false until the group is back, so it is checked after.
    # /live answers 503 while the head stops its children, then nothing until it restarts.
    unlive = group.wait(
        lambda: group.status_code("head", "/live") != 200, 120, "the head's /live to fail"
    )
    group.wait(lambda: not group.pod("head")["ready"], 120, "the head to go unready")
    unready = time.monotonic() - started
    group.wait(
        lambda: group.pod("head")["restarts"] > head_before["restarts"],
        RECOVERY_S,
        "the head to restart (the group restarts as one)",
    )
    restarted = time.monotonic() - started
    how = group.pod("head")["containers"][0]["last_state"]["reason"]
    last = group.log("head", previous=True).splitlines()[-1]
    assert "exit 1: lost worker " in last, last  # the head's own watch, not vLLM's executor
    group.wait(
        lambda: group.pod("head")["ready"] and group.pod("worker")["ready"],
        RECOVERY_S,
        "the group to be Ready again",
    )
    group.wait(lambda: serves_now(group), 120, "a completion to succeed")
    recovered = time.monotonic() - started
    assert group.pod("worker")["restarts"] > worker_before["restarts"]
    print(f"the head restarted after the worker was killed: {how}")
    record(SCENARIO, "killed worker -> head unready", unready)
    record(SCENARIO, "killed worker -> head /live fails", unlive)
    record(SCENARIO, f"killed worker -> head restarted ({how})", restarted)
    record(SCENARIO, "killed worker -> serving again", recovered)
    group.check_ray(tensor=1)


def test_a_killed_head_gets_its_workers_back(group: LocalGroup) -> None:
    worker_before = group.pod("worker")
    killed_at = group.kill("head")
    started = time.monotonic()
    group.wait(lambda: _exited_since(group, "worker", killed_at), 120, "the worker to leave")
    left = time.monotonic() - started
    # The head's GCS refused connections, or its restarted supervisor showed a new boot id,
    # whichever the worker saw first: no grace for a silent head, no minute of Ray's raylet.
    last = group.log("worker", previous=True).splitlines()[-1]
    assert "refuses connections" in last or "restarted (a new Ray cluster)" in last, last
    group.wait(
        lambda: group.pod("head")["ready"] and group.pod("worker")["ready"],
        RECOVERY_S,
        "the group to be Ready again",
    )
    group.wait(lambda: serves_now(group), 120, "a completion to succeed")
    recovered = time.monotonic() - started
    assert group.pod("worker")["restarts"] > worker_before["restarts"]
    record(SCENARIO, "killed head -> worker exited", left)
    record(SCENARIO, "killed head -> serving again", recovered)
    group.check_ray(tensor=1)  # the worker rejoined the new head


def _exited_since(group: LocalGroup, role: str, when: float) -> bool:
    """Whether the ``role`` pod's container has exited since ``when`` (kubelet's lastState)."""
    last = group.pod(role)["containers"][0]["last_state"]
    return last is not None and last["finished_at"] >= when
