"""The mp executor (vLLM's own multi-node executor, no Ray), pipeline parallel 2, tensor parallel
1: the chart's head and worker pods serve, no Ray process runs, and the group heals as the Ray
group does (tests/e2e/test_group_pp2_tp1.py, whose assertions these mirror).

One group serves every test of this module (a start costs a minute or more on two cores); the
tests that kill a pod come last and each waits until the group serves again.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from groups import LocalGroup, chat_once, check_no_ray, local_group, record, serves_now
from multinode_llm_testing import serving_checks as checks

SCENARIO = "mp PP=2 TP=1"
RECOVERY_S = 600


@pytest.fixture(scope="module")
def group(tiny_model: Path) -> Iterator[LocalGroup]:
    with local_group(SCENARIO, tiny_model, sets=["group.executor=mp"]) as running:
        yield running


def test_two_pods_one_head_one_worker_are_ready(group: LocalGroup) -> None:
    pods = group.status()["pods"]
    assert sorted(p["role"] for p in pods) == ["head", "worker"]
    assert all(p["ready"] and p["phase"] == "Running" for p in pods)
    assert all(p["gpus"] == 1 for p in pods)


def test_a_chat_completion_answers_through_the_openai_client(group: LocalGroup) -> None:
    checks.check_models(group)
    assert chat_once(group)
    checks.check_completion(group)  # greedy decoding across both stages is stable


def test_kserve_v2_endpoints_answer_through_the_middleware(group: LocalGroup) -> None:
    checks.check_v2(group)


def test_metrics_carry_vllm_and_the_supervisor(group: LocalGroup) -> None:
    checks.check_metrics(group)


def test_no_ray_process_runs_in_the_group(group: LocalGroup) -> None:
    check_no_ray(group)


def test_the_head_gave_the_worker_rank_1_and_counts_both_nodes(group: LocalGroup) -> None:
    head = group.status_json("head")["facts"]
    assert head["executor"] == "mp"
    assert (head["nodes"], head["expected_nodes"], head["gpus"]) == (2, 2, 2)
    worker = group.status_json("worker")["facts"]
    assert (worker["executor"], worker["rank"], worker["engine_running"]) == ("mp", 1, True)


def test_a_killed_worker_restarts_the_group_without_a_manual_step(
    group: LocalGroup,
) -> None:
    worker_before = group.pod("worker")
    killed_at = time.time()
    group.kill_netns("worker")
    started = time.monotonic()
    # The Ray head answers /live 503 for some seconds before it leaves; the mp head sees the
    # worker's status port refuse connections and exits 1 within about a second, so what is
    # awaited is the exit itself (kubelet restarts it at once, before a /live probe could fail).
    group.wait(lambda: _exited_since(group, "head", killed_at), 120, "the head to leave")
    left = time.monotonic() - started
    last = group.pod("head")["containers"][0]["last_state"]
    assert last["exit_code"] == 1, last
    # Either the worker's status port refused first, or its restarted container (kubelet restarts
    # it at once) joined from the same pod first: both end the epoch naming rank 1.
    assert re.search(r"exit 1: (lost )?worker rank 1 \(pod ", group.log("head", previous=True))
    group.wait(lambda: not group.pod("head")["ready"], 120, "the head to go unready")
    unready = time.monotonic() - started
    group.wait(
        lambda: group.pod("head")["ready"] and group.pod("worker")["ready"],
        RECOVERY_S,
        "the group to be Ready again",
    )
    group.wait(lambda: serves_now(group), 120, "a completion to succeed")
    recovered = time.monotonic() - started
    assert group.pod("worker")["restarts"] > worker_before["restarts"]
    record(SCENARIO, "killed worker -> head left (exit 1)", left)
    record(SCENARIO, "killed worker -> head unready", unready)
    record(SCENARIO, "killed worker -> serving again", recovered)
    check_no_ray(group)


def test_a_killed_head_makes_the_worker_start_over(group: LocalGroup) -> None:
    # A worker that holds no rank yet waits for one (it has nothing to leave): start from a group
    # that serves, whatever the test before left.
    group.wait(
        lambda: group.pod("head")["ready"] and group.pod("worker")["ready"],
        RECOVERY_S,
        "the group to be Ready before its head is killed",
    )
    first_epoch = _epoch(group.log("worker"))
    killed_at = time.time()
    group.kill_netns("head")
    started = time.monotonic()
    group.wait(lambda: _exited_since(group, "worker", killed_at), 120, "the worker to leave")
    left = time.monotonic() - started
    last = group.pod("worker")["containers"][0]["last_state"]
    assert last["exit_code"] == 1, last
    group.wait(
        lambda: group.pod("head")["ready"] and group.pod("worker")["ready"],
        RECOVERY_S,
        "the group to be Ready again",
    )
    group.wait(lambda: serves_now(group), 120, "a completion to succeed")
    recovered = time.monotonic() - started
    assert _epoch(group.log("worker")) not in (None, first_epoch)  # it joined the new head
    record(SCENARIO, "killed head -> worker left (exit 1)", left)
    record(SCENARIO, "killed head -> serving again", recovered)
    check_no_ray(group)


def _exited_since(group: LocalGroup, role: str, when: float) -> bool:
    """Whether the ``role`` pod's container has exited since ``when`` (kubelet's lastState)."""
    last = group.pod(role)["containers"][0]["last_state"]
    return last is not None and last["finished_at"] >= when


def _epoch(log: str) -> str | None:
    """The epoch of the worker's last grant, from its log."""
    found = re.findall(r"joined as rank \d+ of \d+ \(epoch (\w+),", log)
    return found[-1] if found else None
