"""Counting a group's nodes and GPUs, and the words said about it."""

from __future__ import annotations

from itertools import islice

import pytest
from multinode_llm.group.progress import ProgressLog, RayNodeInfo, backoff, progress


def _node(ip: str, gpus: float, alive: bool = True) -> RayNodeInfo:
    return RayNodeInfo(node_id=ip, ip=ip, alive=alive, gpus=gpus, raylet_port=6380)


def test_one_of_two_nodes_waits_for_one_worker() -> None:
    now = progress([_node("10.0.0.1", 2)], expected_nodes=2, expected_gpus=4)
    assert not now.complete
    assert now.line() == "1/2 nodes, 2/4 GPUs; waiting for 1 worker"
    assert now.missing().startswith(
        "1 worker missing (1 of RAY_NODE_COUNT=2 nodes joined: node (10.0.0.1))"
    )
    assert "2 of 4 GPUs missing" in now.missing()


def test_the_missing_message_names_the_nodes_that_joined() -> None:
    head = RayNodeInfo("h", "10.0.0.1", True, 1, 6380, is_head=True, hostname="llm-predictor-abc")
    worker = RayNodeInfo("w", "10.0.0.2", True, 1, 6380, hostname="llm-predictor-worker-x")
    now = progress([head, worker], expected_nodes=3, expected_gpus=3)
    assert now.missing().startswith(
        "1 worker missing (2 of RAY_NODE_COUNT=3 nodes joined: llm-predictor-abc (10.0.0.1, head), "
        "llm-predictor-worker-x (10.0.0.2))"
    )


def test_dead_nodes_do_not_count() -> None:
    now = progress([_node("a", 1), _node("b", 1, alive=False)], expected_nodes=3, expected_gpus=3)
    assert now.line() == "1/3 nodes, 1/3 GPUs; waiting for 2 workers"


def test_enough_nodes_but_too_few_gpus_is_not_complete() -> None:
    now = progress([_node("a", 1), _node("b", 0)], expected_nodes=2, expected_gpus=2)
    assert not now.complete
    assert now.line() == "2/2 nodes, 1/2 GPUs; waiting for 1 more GPUs to register"
    assert now.missing().startswith("1 of 2 GPUs missing")


def test_complete_group() -> None:
    now = progress([_node("a", 4), _node("b", 4)], expected_nodes=2, expected_gpus=8)
    assert now.complete
    assert now.line() == "2/2 nodes, 8/8 GPUs; the group is complete"


def test_backoff_grows_exponentially_and_is_capped() -> None:
    assert list(islice(backoff(), 5)) == [0.25, 0.5, 1.0, 1.0, 1.0]
    assert list(islice(backoff(1, 3, 10), 4)) == [1, 3, 9, 10]


def test_a_wait_logs_at_once_on_each_new_line_and_every_period_between(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    monkeypatch.setattr("multinode_llm.group.progress.time.monotonic", lambda: clock[0])
    log = ProgressLog(every_s=10)
    said = []
    for at, line in [(100, "a"), (105, "a"), (106, "b"), (115, "b"), (116, "b"), (117, "b")]:
        clock[0] = at
        said.append(log.due(line))
    assert said == [True, False, True, False, True, False]
