"""The oldest supported KServe release, end to end: KServe 0.15.0 injects no node or GPU count, and
its webhooks and controller differ from the newest ones (the default release, which the other
group modules run). The cluster also holds KServe's built-in runtimes and a second release of the
chart, whose runtime passes the same webhook and whose pods wait for GPUs the node lacks.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from groups import LocalGroup, chat_once, local_group

SCENARIO = "KServe 0.15.0, PP=2, beside a second release"


@pytest.fixture(scope="module")
def group(tiny_model: Path) -> Iterator[LocalGroup]:
    # Two mocked GPUs: the first release's head and worker take them, the second release waits.
    with local_group(
        SCENARIO, tiny_model, kserve_version="0.15.0", also=["second"], node_gpus=2
    ) as running:
        yield running


def test_the_group_serves_on_kserve_0_15_0(group: LocalGroup) -> None:
    assert group.plan.kserve == "0.15.0"
    assert chat_once(group)


def test_the_supervisors_say_what_they_derived(group: LocalGroup) -> None:
    assert "derived RAY_NODE_COUNT=2 from PIPELINE_PARALLEL_SIZE" in group.log("head")
    assert "derived REQUEST_GPU_COUNT=1 from TENSOR_PARALLEL_SIZE" in group.log("worker")


def test_the_second_release_is_admitted_and_waits_for_gpus(group: LocalGroup) -> None:
    pods = group.status()["pods"]
    second = [p for p in pods if p["name"].startswith("second-")]
    assert len(second) == 2
    assert all("Insufficient nvidia.com/gpu" in p["pending"] for p in second)
    first = [p for p in pods if p["name"].startswith("local-")]
    assert all(p["ready"] for p in first)


def test_kserve_0_15_0_reports_the_serving_group_ready(group: LocalGroup) -> None:
    isvcs = {i["name"]: i for i in group.status()["inferenceservices"]}
    assert isvcs["local-multinode-llm"]["PredictorReady"]["status"] == "True"
    assert isvcs["local-multinode-llm"]["Ready"]["status"] == "True"
    assert isvcs["second-multinode-llm"]["PredictorReady"]["status"] == "False"
