"""Pipeline parallel 2, tensor parallel 2: two pods with two mocked GPUs each serve."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from groups import LocalGroup, local_group
from multinode_llm_testing import serving_checks as checks

SCENARIO = "PP=2 TP=2"


@pytest.fixture(scope="module")
def group(tiny_model: Path) -> Iterator[LocalGroup]:
    with local_group(SCENARIO, tiny_model, sets=["parallelism.tensor=2"]) as running:
        yield running


def test_each_pod_gets_two_gpus(group: LocalGroup) -> None:
    pods = group.status()["pods"]
    assert sorted(p["role"] for p in pods) == ["head", "worker"]
    assert all(p["gpus"] == 2 for p in pods)


def test_models_lists_the_served_model(group: LocalGroup) -> None:
    checks.check_models(group)


def test_completions(group: LocalGroup) -> None:
    checks.check_completion(group)


def test_chat_streams_token_by_token(group: LocalGroup) -> None:
    checks.check_streaming_chat(group)


def test_metrics(group: LocalGroup) -> None:
    checks.check_metrics(group)


def test_kserve_v2_endpoints_answer(group: LocalGroup) -> None:
    checks.check_v2(group)


def test_ray_shows_two_nodes_with_two_gpus_each(group: LocalGroup) -> None:
    group.check_ray(tensor=2)
