"""mp executor: a worker that never starts (no GPU left for it on the node) makes the head give up
at its deadline naming the missing rank, as the Ray head names the missing worker
(tests/e2e/test_worker_never_starts.py)."""

from __future__ import annotations

from pathlib import Path

from groups import head_log_at_its_deadline, local_group, record

SCENARIO = "mp worker never starts"
WAIT_S = 20


def test_the_head_fails_at_its_deadline_naming_the_missing_rank(tiny_model: Path) -> None:
    sets = ["group.executor=mp", f"group.waitTimeoutSeconds={WAIT_S}"]
    with local_group(SCENARIO, tiny_model, sets=sets, node_gpus=1, wait_ready=False) as group:
        log, failed_after = head_log_at_its_deadline(group, WAIT_S)
        assert "rank 1 missing of --nnodes 2 (PIPELINE_PARALLEL_SIZE); joined workers: none" in log
        # what the worker must reach
        status_port = f"{group.pod('head')['ip']}:8081"
        assert (
            f"with MULTINODE_LLM_EXECUTOR=mp and reaches the head's status port at {status_port}"
            in log
        )
        record(SCENARIO, f"head exits naming the missing rank (deadline {WAIT_S} s)", failed_after)
