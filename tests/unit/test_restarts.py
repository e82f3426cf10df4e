"""Restarts by cause: the file on the pod's scratch dir across runs, a run that ended without a
word, a corrupt or unwritable file, and a supervisor that records why it leaves (as it exits 1, or
as kubelet stops it for a failing probe), read back from the next run's /metrics."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from head_facts import SERVING
from multinode_llm.config import DEFAULT_SCRATCH_DIR, worker_config
from multinode_llm.group.supervisor import GroupError, Supervisor
from multinode_llm.health import restarts
from multinode_llm.health.restarts import CAUSES, RestartsFile
from multinode_llm.health.state import (
    ENGINE_SILENCE_LIMIT_S,
    HeadFacts,
    HealthState,
    WorkerFacts,
)
from prometheus_client.parser import text_string_to_metric_families


def _counts(**changed: float) -> dict[str, float]:
    return {**dict.fromkeys(CAUSES, 0), **changed}


def test_a_fresh_pod_starts_with_every_cause_at_zero_and_marks_its_run(tmp_path: Path) -> None:
    path = tmp_path / "scratch" / "restarts.json"  # the directory is made too
    record = RestartsFile.start(path)
    assert record.counts == _counts()
    saved = json.loads(path.read_text())
    assert saved == {"version": 1, "counts": _counts(), "last_run": "running"}
    assert [p.name for p in path.parent.iterdir()] == ["restarts.json"]  # no temporary left


def test_each_recorded_cause_is_counted_by_the_next_start(tmp_path: Path) -> None:
    path = tmp_path / "restarts.json"
    RestartsFile.start(path).leave(restarts.HEAD_LOST)
    second = RestartsFile.start(path)
    assert second.counts == _counts(head_lost=1)
    second.leave(restarts.HEAD_LOST)
    third = RestartsFile.start(path)
    assert third.counts == _counts(head_lost=2)
    third.leave(restarts.GROUP_TIMEOUT)
    assert RestartsFile.start(path).counts == _counts(head_lost=2, group_timeout=1)


def test_a_run_that_recorded_nothing_counts_as_unknown(tmp_path: Path) -> None:
    path = tmp_path / "restarts.json"
    RestartsFile.start(path).leave(restarts.ENGINE_EXITED)
    RestartsFile.start(path)  # SIGKILLed (OOM, liveness) before it could say why
    assert RestartsFile.start(path).counts == _counts(engine_exited=1, unknown=1)


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "",
        "[]",
        '{"version": 2, "counts": {}, "last_run": "running"}',
        json.dumps({"version": 1, "counts": {"head_lost": 1}, "last_run": "running"}),
        json.dumps({"version": 1, "counts": _counts(unknown=-1), "last_run": "running"}),
        json.dumps({"version": 1, "counts": _counts(unknown=True), "last_run": "running"}),
        json.dumps({"version": 1, "counts": _counts(unknown=1.5), "last_run": "running"}),
        json.dumps({"version": 1, "counts": _counts(), "last_run": "eaten by a grue"}),
        "\xff\xfe{}",  # written as Latin-1: not UTF-8
    ],
    ids=[
        "not JSON",
        "empty",
        "not an object",
        "another version",
        "causes missing",
        "negative",
        "boolean",
        "fraction",
        "unknown last run",
        "not UTF-8",
    ],
)
def test_a_corrupt_file_is_logged_and_counting_starts_again(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "restarts.json"
    path.write_bytes(text.encode("latin-1"))
    with caplog.at_level(logging.WARNING, logger="multinode_llm.health.restarts"):
        record = RestartsFile.start(path)
    assert record.counts == _counts()
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"the restarts file {path} is corrupt (")
    assert line.endswith("): counting restarts from 0 again")
    # Reset: the file is ours again, and the run after this one counts from it.
    assert json.loads(path.read_text())["last_run"] == "running"
    assert RestartsFile.start(path).counts == _counts(unknown=1)


def test_a_file_that_cannot_be_written_is_logged_and_the_run_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    path = blocker / "restarts.json"  # its directory cannot be made: a file is in the way
    with caplog.at_level(logging.WARNING, logger="multinode_llm.health.restarts"):
        record = RestartsFile.start(path)
        record.leave(restarts.WORKER_LOST)
    assert record.counts == _counts()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert lines[0].startswith(f"cannot read the restarts file {path}")
    assert all(line.startswith(f"cannot write the restarts file {path}") for line in lines[1:])


def test_a_failed_write_leaves_the_previous_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "restarts.json"
    record = RestartsFile.start(path)
    before = path.read_text()

    def no_rename(_source: object, _target: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_rename)
    record.leave(restarts.ENGINE_HUNG)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["restarts.json"]


def test_an_unknown_cause_is_a_programming_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown restart cause 'tired'"):
        RestartsFile.start(tmp_path / "restarts.json").leave("tired")


def test_the_file_lives_on_the_pods_scratch_dir_from_tmpdir() -> None:
    env = {"POD_IP": "10.0.0.3", "RAY_NODE_COUNT": "2", "REQUEST_GPU_COUNT": "1"}
    flags = {"head_address": "head"}
    assert worker_config(env, flags).node.scratch_dir == DEFAULT_SCRATCH_DIR == Path("/tmp")
    node = worker_config({**env, "TMPDIR": "/scratch/p1"}, flags).node
    assert node.restarts_file == Path("/scratch/p1/multinode-llm-restarts.json")


# Why kubelet stops a supervisor: the failing probe's cause -----------------------------------


@pytest.mark.parametrize(
    ("facts", "cause"),
    [
        (SERVING, None),
        (replace(SERVING, lost_nodes=("10.0.0.2",)), "worker_lost"),
        (replace(SERVING, engine_silent_s=ENGINE_SILENCE_LIMIT_S + 1), "engine_hung"),
        (replace(SERVING, engine_running=False), "engine_exited"),
        (replace(SERVING, ray_running=False), "engine_exited"),
        (HeadFacts(ray_running=True, nodes=1, expected_nodes=2), "group_timeout"),
        (
            replace(SERVING, engine_healthy=False, engine_answered_once=False),
            "engine_hung",  # the group formed; vLLM never answered within the startup budget
        ),
        (WorkerFacts(ray_started=True, ray_running=True, joined=True, head_reachable=True), None),
        (WorkerFacts(ray_started=True, ray_running=True, joined=True), "head_lost"),
        (WorkerFacts(ray_started=True, ray_running=False), "engine_exited"),
        (WorkerFacts(), "group_timeout"),  # never reached the head within the startup budget
    ],
    ids=[
        "serving head",
        "lost worker",
        "silent engine",
        "engine gone",
        "Ray gone",
        "group never formed",
        "engine never answered",
        "joined worker",
        "head silent",
        "worker's Ray gone",
        "head never reached",
    ],
)
def test_kill_cause_names_the_failing_probe(facts: HeadFacts | WorkerFacts, cause: str) -> None:
    state = HealthState(role="head" if isinstance(facts, HeadFacts) else "worker")
    state.update(facts)
    assert state.kill_cause() == cause


def test_no_facts_yet_is_no_cause() -> None:
    assert HealthState(role="head").kill_cause() is None


# A supervisor's runs in one pod ----------------------------------------------------------------


class _Scripted(Supervisor):
    """A supervisor whose group is a script: it fails with ``cause``, or serves ``facts`` until
    kubelet's SIGTERM (delivered by calling the loop's handler, as the signal would)."""

    def __init__(
        self, path: Path, failure: GroupError | None = None, facts: WorkerFacts | None = None
    ) -> None:
        super().__init__("worker", 0, path)
        self.server.host = "127.0.0.1"
        self.failure = failure
        self.facts = facts
        self.scraped = ""

    async def main(self) -> int:
        self.scraped = await asyncio.to_thread(_get, f"http://127.0.0.1:{self.server.port}/metrics")
        if self.failure is not None:
            raise self.failure
        assert self.facts is not None
        self.state.update(self.facts)
        asyncio.get_running_loop().call_soon(self._stop_requested, signal.SIGTERM)
        while True:
            await self.pause(1.0)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return str(answer.read().decode())


def _restarts(text: str) -> dict[str, float]:
    [family] = [f for f in text_string_to_metric_families(text) if f.name.endswith("restarts")]
    assert family.type == "counter"
    return {s.labels["cause"]: s.value for s in family.samples if s.labels["role"] == "worker"}


def test_a_supervisor_records_why_it_left_and_the_next_run_exports_it(tmp_path: Path) -> None:
    path = tmp_path / "multinode-llm-restarts.json"
    first = _Scripted(path, failure=GroupError("lost the head", cause=restarts.HEAD_LOST))
    assert asyncio.run(first.run()) == 1
    assert _restarts(first.scraped) == _counts()  # a fresh pod: every cause, at 0

    lost = WorkerFacts(ray_started=True, ray_running=True, joined=True, head="h:6379")
    second = _Scripted(path, facts=lost)  # its head went silent; kubelet stops it for liveness
    assert asyncio.run(second.run()) == 0
    assert _restarts(second.scraped) == _counts(head_lost=1)

    third = _Scripted(path, failure=GroupError("a refused snapshot", cause=None))
    assert asyncio.run(third.run()) == 1
    assert _restarts(third.scraped) == _counts(head_lost=2)

    fourth = _Scripted(path, failure=GroupError("Ray exited", cause=restarts.ENGINE_EXITED))
    assert asyncio.run(fourth.run()) == 1
    assert _restarts(fourth.scraped) == _counts(head_lost=2, unknown=1)  # the third said nothing
    assert json.loads(path.read_text())["last_run"] == "engine_exited"


def test_a_sigterm_with_every_probe_passing_records_nothing(tmp_path: Path) -> None:
    path = tmp_path / "multinode-llm-restarts.json"
    joined = WorkerFacts(ray_started=True, ray_running=True, joined=True, head_reachable=True)
    assert asyncio.run(_Scripted(path, facts=joined).run()) == 0
    assert json.loads(path.read_text())["last_run"] == "running"  # the next start: unknown
