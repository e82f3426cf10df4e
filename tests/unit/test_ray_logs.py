"""The supervisor's relay of Ray's log files into the pod's log (group/ray_logs.py)."""

from __future__ import annotations

import asyncio
import io
import os
import time
from pathlib import Path

import pytest
from multinode_llm.group import ray_logs
from multinode_llm.group.ray_logs import LogRelay

WORKER_OUT = "worker-1f2e3d-01000000-4242.out"
WORKER_ERR = "worker-1f2e3d-01000000-4242.err"


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    directory = tmp_path / "session_2026-12-05_23-00-00_000000_1" / "logs"
    directory.mkdir(parents=True)
    (tmp_path / "session_latest").symlink_to(directory.parent)
    return directory


def _relay(logs: Path) -> tuple[LogRelay, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return LogRelay(logs.parent.parent, out, err), out, err


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(text)


def test_a_workers_lines_carry_its_actor_and_pid_and_no_metadata(logs: Path) -> None:
    relay, out, err = _relay(logs)
    _append(logs / WORKER_OUT, ":job_id:01000000\n:actor_name:RayWorkerProc\nloading\n")
    # Ray writes the actor's name to both of its files.
    _append(logs / WORKER_ERR, ":actor_name:RayWorkerProc\nwarning: slow\n")
    relay.poll()
    assert out.getvalue() == "(RayWorkerProc pid=4242) loading\n"
    assert err.getvalue() == "(RayWorkerProc pid=4242) warning: slow\n"


def test_lines_before_a_name_carry_the_pid_and_a_task_renames(logs: Path) -> None:
    relay, out, _err = _relay(logs)
    _append(logs / WORKER_OUT, "early\n:task_name:probe\nlate\n")
    relay.poll()
    assert out.getvalue() == "(pid=4242) early\n(probe pid=4242) late\n"


def test_an_unfinished_line_waits_for_its_end(logs: Path) -> None:
    relay, out, _err = _relay(logs)
    _append(logs / WORKER_OUT, "one\ntw")
    relay.poll()
    assert out.getvalue() == "(pid=4242) one\n"
    _append(logs / WORKER_OUT, "o\n")
    relay.poll()
    relay.poll()  # nothing new: nothing twice
    assert out.getvalue() == "(pid=4242) one\n(pid=4242) two\n"


def test_a_line_without_end_is_sent_once_past_the_longest(logs: Path) -> None:
    relay, out, _err = _relay(logs)
    _append(logs / WORKER_OUT, "x" * (ray_logs.LONGEST_LINE + 1))
    relay.poll()
    assert out.getvalue() == f"(pid=4242) {'x' * (ray_logs.LONGEST_LINE + 1)}\n"


def test_a_rotated_or_truncated_file_is_read_from_its_start(logs: Path) -> None:
    relay, out, _err = _relay(logs)
    path = logs / WORKER_OUT
    _append(path, "first run of a long line\n")
    relay.poll()
    path.rename(logs / f"{WORKER_OUT}.1")  # Ray's rotation: a new file under the old name
    _append(path, "after rotation\n")
    relay.poll()
    path.write_text("cut\n", encoding="utf-8")  # shorter than what was read: truncated
    relay.poll()
    assert out.getvalue().splitlines()[1:] == ["(pid=4242) after rotation", "(pid=4242) cut"]


def test_rays_own_errors_go_to_stderr_and_other_files_stay(logs: Path) -> None:
    relay, out, err = _relay(logs)
    _append(logs / "raylet.err", "Killing worker: out of memory\n")
    _append(logs / "gcs_server.err", "GCS failed\n")
    _append(logs / "raylet.out", "routine\n")
    _append(logs / "python-core-worker-1f2e3d_4242.log", "core worker detail\n")
    relay.poll()
    assert out.getvalue() == ""
    assert sorted(err.getvalue().splitlines()) == [
        "(gcs_server) GCS failed",
        "(raylet) Killing worker: out of memory",
    ]


def test_files_from_an_earlier_run_of_the_pod_are_left_alone(logs: Path) -> None:
    old = logs / WORKER_OUT
    _append(old, "from the last container\n")
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    relay, out, _err = _relay(logs)
    relay.poll()
    assert out.getvalue() == ""


def test_no_session_yet_is_nothing_to_relay(tmp_path: Path) -> None:
    relay = LogRelay(tmp_path, io.StringIO(), io.StringIO())
    relay.poll()
    assert relay.tails == {}


def test_stopping_the_relay_sends_the_last_lines(logs: Path) -> None:
    async def scenario() -> str:
        relay, out, _err = _relay(logs)
        task = asyncio.create_task(relay.run())
        await asyncio.sleep(0)  # its first pass: nothing yet
        _append(logs / WORKER_OUT, "last words\n")
        await ray_logs.stop(task)
        return out.getvalue()

    assert asyncio.run(scenario()) == "(pid=4242) last words\n"
