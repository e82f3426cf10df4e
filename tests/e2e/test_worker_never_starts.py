"""A worker that never starts (no GPU left for it on the node): the head gives up at its deadline
and says what is missing, instead of waiting forever or starting without it."""

from __future__ import annotations

from pathlib import Path

from groups import head_log_at_its_deadline, local_group, record

SCENARIO = "worker never starts"
WAIT_S = 20


def test_the_head_fails_at_its_deadline_naming_the_missing_worker(
    tiny_model: Path,
) -> None:
    sets = [f"group.waitTimeoutSeconds={WAIT_S}"]
    with local_group(SCENARIO, tiny_model, sets=sets, node_gpus=1, wait_ready=False) as group:
        log, failed_after = head_log_at_its_deadline(group, WAIT_S)
        assert "1 worker missing (1 of RAY_NODE_COUNT=2 nodes joined: " in log
        # the head pod is named (a pod's hostname is its name)
        assert "-predictor-" in log
        assert ", head))" in log
        record(
            SCENARIO,
            f"head exits naming the missing worker (deadline {WAIT_S} s)",
            failed_after,
        )
