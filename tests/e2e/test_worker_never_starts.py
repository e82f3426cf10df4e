"""A worker that never starts (no GPU left for it on the node): the head gives up at its deadline
and says what is missing, instead of waiting forever or starting without it."""

from __future__ import annotations

import time
from pathlib import Path

from groups import local_group, record

SCENARIO = "worker never starts"
WAIT_S = 20


def test_the_head_fails_at_its_deadline_naming_the_missing_worker(
    tiny_model: Path,
) -> None:
    sets = [f"group.waitTimeoutSeconds={WAIT_S}"]
    with local_group(SCENARIO, tiny_model, sets=sets, node_gpus=1, wait_ready=False) as group:
        worker = group.pod("worker")
        assert worker["phase"] == "Pending"
        assert worker["pending"] == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
        started = time.monotonic()
        group.wait(
            lambda: group.pod("head")["containers"][0]["last_state"] is not None,
            WAIT_S + 120,
            "the head to exit",
        )
        failed_after = time.monotonic() - started
        last = group.pod("head")["containers"][0]["last_state"]
        assert last["exit_code"] != 0
        ran_for = last["finished_at"] - last["started_at"]
        assert (
            WAIT_S <= ran_for < WAIT_S + 60
        )  # it gave up at its deadline, not before, not much later
        log = Path(last["log"]).read_text(errors="replace")
        assert f"did not form within {WAIT_S} s" in log
        assert "1 worker missing (1 of RAY_NODE_COUNT=2 nodes joined: " in log
        # the head pod is named (a pod's hostname is its name), and where to look for the worker
        assert "-predictor-" in log
        assert ", head))" in log
        assert "kubectl get pods -l app=isvc." in log
        assert not group.pod("head")["ready"]
        record(
            SCENARIO,
            f"head exits naming the missing worker (deadline {WAIT_S} s)",
            failed_after,
        )
