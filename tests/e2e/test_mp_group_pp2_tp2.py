"""The mp executor, pipeline parallel 2, tensor parallel 2: two pods of two mocked GPUs each form
one vLLM engine without Ray (as tests/e2e/test_group_pp2_tp2.py does with Ray)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from groups import LocalGroup, chat_once, check_no_ray, local_group
from multinode_llm_testing import serving_checks as checks

SCENARIO = "mp PP=2 TP=2"


@pytest.fixture(scope="module")
def group(tiny_model: Path) -> Iterator[LocalGroup]:
    sets = ["group.executor=mp", "parallelism.tensor=2"]
    with local_group(SCENARIO, tiny_model, sets=sets) as running:
        yield running


def test_each_pod_gets_two_gpus(group: LocalGroup) -> None:
    pods = group.status()["pods"]
    assert sorted(p["role"] for p in pods) == ["head", "worker"]
    assert all(p["gpus"] == 2 for p in pods)
    facts = group.status_json("head")["facts"]
    assert (facts["executor"], facts["nodes"], facts["gpus"]) == ("mp", 2, 4)


def test_a_chat_completion_answers_through_the_openai_client(group: LocalGroup) -> None:
    checks.check_models(group)
    assert chat_once(group)
    checks.check_streaming_chat(group)


def test_no_ray_process_runs_in_the_group(group: LocalGroup) -> None:
    check_no_ray(group)
