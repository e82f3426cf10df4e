"""What the probes answer in each state of a head and a worker."""

from __future__ import annotations

from dataclasses import replace

from head_facts import SERVING
from multinode_llm.health import exposition
from multinode_llm.health.state import (
    ENGINE_SILENCE_LIMIT_S,
    HeadFacts,
    HealthState,
    WorkerFacts,
    head_probes,
    worker_probes,
)

WAITING = HeadFacts(
    ray_running=True,
    engine_started=True,
    engine_running=True,
    nodes=1,
    expected_nodes=2,
    gpus=1,
    expected_gpus=2,
)


def _answers(facts: HeadFacts) -> tuple[bool, bool, bool]:
    probes = head_probes(facts)
    return probes.startup.ok, probes.ready.ok, probes.live.ok


def test_head_waiting_for_workers_is_live_but_not_started() -> None:
    assert _answers(WAITING) == (False, False, True)
    assert head_probes(WAITING).startup.reason == "vLLM's /health does not answer 200 yet"


def test_head_with_engine_up_but_model_not_listed_is_not_ready() -> None:
    facts = replace(SERVING, model_listed=False, engine_answered_once=False)
    assert _answers(facts) == (False, False, True)
    assert "does not list the served model" in head_probes(facts).ready.reason


def test_serving_head_passes_every_probe() -> None:
    assert _answers(SERVING) == (True, True, True)


def test_lost_worker_makes_the_head_unready_and_unlive() -> None:
    facts = replace(SERVING, lost_nodes=("10.0.0.3",))
    assert _answers(facts) == (True, False, False)
    assert head_probes(facts).live.reason == "2/2 nodes, 2/2 GPUs; lost node(s) 10.0.0.3"


def test_fewer_nodes_than_expected_after_forming_is_unlive() -> None:
    assert _answers(replace(SERVING, nodes=1, gpus=1)) == (True, False, False)


def test_engine_silent_too_long_is_unlive_but_briefly_silent_is_live() -> None:
    assert not head_probes(
        replace(SERVING, engine_healthy=False, engine_silent_s=ENGINE_SILENCE_LIMIT_S + 1)
    ).live.ok
    brief = replace(SERVING, engine_healthy=False, engine_silent_s=3)
    assert _answers(brief) == (True, False, True)


def test_head_that_starts_vllm_after_the_group_is_live_while_waiting() -> None:
    facts = HeadFacts(ray_running=True, nodes=1, expected_nodes=2, gpus=1, expected_gpus=2)
    assert _answers(facts) == (False, False, True)
    assert head_probes(facts).live.reason == "Ray runs"


def test_dead_engine_or_ray_is_unlive() -> None:
    assert head_probes(replace(SERVING, engine_running=False)).live.reason == "vLLM is not running"
    assert (
        head_probes(replace(SERVING, ray_running=False)).live.reason
        == "the Ray head is not running"
    )


def test_worker_states() -> None:
    joining = worker_probes(WorkerFacts(ray_started=True, ray_running=True, head="h:6379"))
    assert (joining.startup.ok, joining.ready.ok, joining.live.ok) == (False, False, True)
    joined = worker_probes(
        WorkerFacts(
            ray_started=True, ray_running=True, joined=True, head_reachable=True, head="h:6379"
        )
    )
    assert (joined.startup.ok, joined.ready.ok, joined.live.ok) == (True, True, True)
    lost = worker_probes(
        WorkerFacts(
            ray_started=True, ray_running=True, joined=True, head_reachable=False, head="h:6379"
        )
    )
    assert (lost.ready.ok, lost.live.ok) == (False, False)
    assert lost.live.reason == "the head's Ray GCS at h:6379 does not answer"
    down = worker_probes(WorkerFacts(ray_started=True, ray_running=False))
    assert not down.live.ok
    waiting = worker_probes(WorkerFacts(head="h:6379"))
    assert (waiting.startup.ok, waiting.ready.ok, waiting.live.ok) == (False, False, True)
    assert waiting.startup.reason == "waiting for the head's Ray GCS at h:6379"


def test_state_keeps_first_event_times_and_exposes_metrics() -> None:
    state = HealthState(role="head")
    state.mark("group_complete")
    first = state.timeline["group_complete"]
    state.mark("group_complete")
    assert state.timeline["group_complete"] == first
    state.update(SERVING)
    text = exposition.metrics(state)
    assert 'multinode_llm_probe_ok{probe="live",role="head"} 1.0' in text
    assert 'multinode_llm_group_nodes{role="head"} 2.0' in text
    assert 'multinode_llm_event_seconds{event="group_complete",role="head"}' in text
    status = state.status()
    assert status["probes"]["ready"]["ok"] is True
    assert status["facts"]["nodes"] == 2


def test_the_group_spec_is_exported_only_when_the_chart_set_one() -> None:
    state = HealthState(role="head")
    assert "multinode_llm_group_info" not in exposition.metrics(state)
    state.group_spec = "0123abcd"
    info = 'multinode_llm_group_info{group_spec="0123abcd",role="head"} 1.0'
    assert info in exposition.metrics(state)
    assert state.status()["group_spec"] == "0123abcd"


MP_SERVING = replace(SERVING, executor="mp", ray_running=False)
MP_WORKER = WorkerFacts(
    executor="mp",
    head="h:8081",
    rank=1,
    joined=True,
    head_reachable=True,
    engine_started=True,
    engine_running=True,
)


def test_an_mp_head_runs_without_ray() -> None:
    assert _answers(MP_SERVING) == (True, True, True)
    assert head_probes(MP_SERVING).live.reason == "vLLM runs; the group is complete"
    stopped = replace(MP_SERVING, engine_running=False)
    assert not head_probes(stopped).live.ok
    state = HealthState(role="head")
    state.update(stopped)
    assert state.kill_cause() == "engine_exited"
    state.update(replace(MP_SERVING, nodes=1, gpus=1))  # a rank lost after the group formed
    assert state.kill_cause() == "worker_lost"


def test_mp_worker_states() -> None:
    waiting = replace(MP_WORKER, rank=None, joined=False, engine_started=False)
    assert worker_probes(waiting).startup.reason == "waiting for a rank from the head at h:8081"
    assert worker_probes(waiting).live.ok
    starting = replace(MP_WORKER, engine_started=False, engine_running=False)
    assert worker_probes(starting).ready.reason == "rank 1: starting vLLM (headless)"
    assert worker_probes(MP_WORKER).ready == worker_probes(MP_WORKER).live
    assert (
        worker_probes(MP_WORKER).ready.reason
        == "rank 1 of the head at h:8081; vLLM (headless) runs"
    )
    state = HealthState(role="worker")
    state.update(replace(MP_WORKER, engine_running=False))
    assert (state.probes.live.reason, state.kill_cause()) == (
        "vLLM (headless) is not running",
        "engine_exited",
    )
    state.update(replace(MP_WORKER, head_reachable=False))
    assert state.kill_cause() == "head_lost"
    assert 'multinode_llm_head_reachable{role="worker"} 0.0' in exposition.metrics(state)
    assert 'multinode_llm_worker_joined{role="worker"} 1.0' in exposition.metrics(state)
    state.update(replace(MP_WORKER, engine_running=False))
    assert 'multinode_llm_worker_joined{role="worker"} 0.0' in exposition.metrics(state)
