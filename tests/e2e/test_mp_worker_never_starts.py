"""mp executor: a worker that never starts (no GPU left for it on the node) makes the head give up
at its deadline naming the missing rank, as the Ray head names the missing worker
(tests/e2e/test_worker_never_starts.py)."""

from __future__ import annotations

import time
from pathlib import Path

from groups import local_group, record

SCENARIO = "mp worker never starts"
WAIT_S = 20


def test_the_head_fails_at_its_deadline_naming_the_missing_rank(tiny_model: Path) -> None:
    sets = ["group.executor=mp", f"group.waitTimeoutSeconds={WAIT_S}"]
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
        assert WAIT_S <= ran_for < WAIT_S + 60  # at its deadline, not before, not much later
        log = Path(last["log"]).read_text(errors="replace")
        assert f"did not form within {WAIT_S} s" in log
        assert "rank 1 missing of --nnodes 2 (PIPELINE_PARALLEL_SIZE); joined workers: none" in log
        # where to look for the worker, and what it must reach
        assert "kubectl get pods -l app=isvc." in log
        status_port = f"{group.pod('head')['ip']}:8081"
        assert (
            f"with MULTINODE_LLM_EXECUTOR=mp and reaches the head's status port at {status_port}"
            in log
        )
        assert not group.pod("head")["ready"]
        record(SCENARIO, f"head exits naming the missing rank (deadline {WAIT_S} s)", failed_after)
