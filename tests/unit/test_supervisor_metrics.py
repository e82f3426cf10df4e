"""The supervisors' group metrics on the status port: each family's value for given facts and
timeline, read over loopback from the real status server and parsed with prometheus_client's
parser (which proves the exposition is valid text format)."""

from __future__ import annotations

import asyncio
import urllib.request
from dataclasses import replace

import pytest
from head_facts import SERVING
from multinode_llm.health.restarts import CAUSES
from multinode_llm.health.server import StatusServer
from multinode_llm.health.state import HeadFacts, HealthState, WorkerFacts
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

JOINED = WorkerFacts(
    ray_started=True, ray_running=True, joined=True, head_reachable=True, head="h:6379"
)


def _scrape(state: HealthState) -> tuple[str, str]:
    """(Content-Type, body) of GET /metrics from a real status server on 127.0.0.1."""

    async def scenario() -> tuple[str, str]:
        server = StatusServer(state, 0, host="127.0.0.1")
        await server.start()
        try:
            return await asyncio.to_thread(_get, f"http://127.0.0.1:{server.port}/metrics")
        finally:
            await server.stop()

    return asyncio.run(scenario())


def _get(url: str) -> tuple[str, str]:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return answer.headers["Content-Type"], answer.read().decode()


def _parse(text: str) -> tuple[dict[str, str], Samples]:
    """(family name -> type, (sample name, sorted labels) -> value)."""
    types: dict[str, str] = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            assert isinstance(sample, Sample)
            samples[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return types, samples


def _value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def _head(facts: HeadFacts | None, *events: str) -> HealthState:
    state = HealthState(role="head")
    for event in events:
        state.mark(event)
    if facts is not None:
        state.update(facts)
    return state


def test_a_serving_heads_metrics_are_valid_text_with_every_family() -> None:
    state = _head(SERVING, "ray_head_up", "node_joined:10.0.0.2", "group_complete")
    state.group_spec = "0123abcd"
    content_type, text = _scrape(state)
    assert content_type.startswith("text/plain; version=0.0.4")
    types, samples = _parse(text)
    assert types == {
        "multinode_llm_probe_ok": "gauge",
        "multinode_llm_event_seconds": "gauge",
        "multinode_llm_group_info": "gauge",
        "multinode_llm_group_nodes": "gauge",
        "multinode_llm_group_nodes_expected": "gauge",
        "multinode_llm_group_gpus": "gauge",
        "multinode_llm_group_gpus_expected": "gauge",
        "multinode_llm_group_lost_nodes": "gauge",
        "multinode_llm_engine_ready": "gauge",
        "multinode_llm_group_formation_seconds": "gauge",
        "multinode_llm_restarts": "counter",  # the parser names a counter's family without _total
    }
    assert _value(samples, "multinode_llm_engine_ready", role="head") == 1
    formed = _value(samples, "multinode_llm_group_formation_seconds", role="head")
    assert formed == state.timeline["group_complete"]
    assert _value(samples, "multinode_llm_group_info", role="head", group_spec="0123abcd") == 1
    event = _value(
        samples, "multinode_llm_event_seconds", role="head", event="node_joined:10.0.0.2"
    )
    assert event == state.timeline["node_joined:10.0.0.2"]
    for cause in CAUSES:  # every cause from the first start, so that increase() sees the first one
        assert _value(samples, "multinode_llm_restarts_total", role="head", cause=cause) == 0
    # The names the chart's alerts and the existing tests read stay as they were (prometheus_client
    # sorts the labels and writes values as floats).
    assert 'multinode_llm_probe_ok{probe="live",role="head"} 1.0\n' in text
    assert 'multinode_llm_group_nodes{role="head"} 2.0\n' in text


def test_the_formation_time_is_absent_until_the_group_is_first_complete() -> None:
    waiting = replace(SERVING, nodes=1, gpus=1, group_formed=False, engine_healthy=False)
    state = _head(waiting, "ray_head_up")
    _types, samples = _parse(_scrape(state)[1])
    assert "multinode_llm_group_formation_seconds" not in {name for name, _ in samples}
    assert _value(samples, "multinode_llm_engine_ready", role="head") == 0
    state.mark("group_complete")
    seconds = state.timeline["group_complete"]
    state.update(waiting)  # a node lost later: the group's first formation time stays
    _types, samples = _parse(_scrape(state)[1])
    assert _value(samples, "multinode_llm_group_formation_seconds", role="head") == seconds


@pytest.mark.parametrize(
    ("facts", "ready"),
    [
        (None, 0),  # before the first refresh (waiting for the model download)
        (replace(SERVING, engine_running=False), 0),
        (replace(SERVING, engine_healthy=False), 0),
        (replace(SERVING, model_listed=False), 0),
        (replace(SERVING, lost_nodes=("10.0.0.2",)), 1),  # the engine answers, the group is short
        (SERVING, 1),
    ],
    ids=["no facts", "not running", "unhealthy", "model not listed", "lost worker", "serving"],
)
def test_engine_ready_is_whether_vllm_answers_and_lists_the_model_now(
    facts: HeadFacts | None, ready: int
) -> None:
    _types, samples = _parse(_scrape(_head(facts))[1])
    assert _value(samples, "multinode_llm_engine_ready", role="head") == ready


@pytest.mark.parametrize(
    ("facts", "joined", "reachable"),
    [
        (None, 0, 0),
        (WorkerFacts(head="h:6379"), 0, 0),
        (replace(JOINED, joined=False), 0, 1),
        (JOINED, 1, 1),
        (replace(JOINED, head_reachable=False), 1, 0),
        (replace(JOINED, ray_running=False), 0, 1),
    ],
    ids=["no facts", "waiting for the head", "joining", "joined", "head silent", "Ray down"],
)
def test_worker_joined_and_head_reachable(
    facts: WorkerFacts | None, joined: int, reachable: int
) -> None:
    state = HealthState(role="worker")
    if facts is not None:
        state.update(facts)
    types, samples = _parse(_scrape(state)[1])
    assert _value(samples, "multinode_llm_worker_joined", role="worker") == joined
    assert _value(samples, "multinode_llm_head_reachable", role="worker") == reachable
    assert "multinode_llm_engine_ready" not in types  # head-only families stay on the head
    assert "multinode_llm_group_nodes" not in types


def test_restart_counts_are_exported_by_cause() -> None:
    state = HealthState(role="worker")
    state.restarts = {**state.restarts, "head_lost": 2, "unknown": 1}
    _types, samples = _parse(_scrape(state)[1])
    assert _value(samples, "multinode_llm_restarts_total", role="worker", cause="head_lost") == 2
    assert _value(samples, "multinode_llm_restarts_total", role="worker", cause="unknown") == 1
    assert _value(samples, "multinode_llm_restarts_total", role="worker", cause="engine_hung") == 0


def test_label_values_are_escaped() -> None:
    state = HealthState(role="head")
    state.group_spec = 'a"b\\c\nd'
    _types, samples = _parse(_scrape(state)[1])
    assert _value(samples, "multinode_llm_group_info", role="head", group_spec='a"b\\c\nd') == 1
