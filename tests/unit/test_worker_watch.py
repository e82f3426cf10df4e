"""The Ray worker's watch of its head: a head whose GCS refuses connections is lost at once.

No Ray starts: the head's GCS is a listening socket on 127.0.0.2 (closed to make it refuse), the
worker's own Ray node a stand-in that runs; the head's status port answers nothing.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest
from multinode_llm.config import worker_config
from multinode_llm.group import supervisor
from multinode_llm.group.process import Child
from multinode_llm.group.supervisor import Deadline, GroupError
from multinode_llm.group.worker import HEAD_LOSS_GRACE_S, LOST_HEAD_STOP_GRACE_S, WorkerSupervisor
from multinode_llm.health.server import StatusServer
from multinode_llm.health.state import HeadFacts, HealthState, WorkerFacts
from multinode_llm_testing.ports import free_port

HEAD_IP = "127.0.0.2"


class RunningRay:
    """A `ray start` that keeps running."""

    returncode: int | None = None


def _worker(gcs_port: int) -> WorkerSupervisor:
    env = {
        "POD_IP": "127.0.0.3",
        "RAY_PORT": str(gcs_port),
        "RAY_NODE_COUNT": "2",
        "REQUEST_GPU_COUNT": "1",
        "HEAD_SVC": "unused",
    }
    overrides = {"status_port": free_port(HEAD_IP), "head_address": HEAD_IP}
    return WorkerSupervisor(worker_config(env, overrides))


async def _gcs() -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(lambda _r, writer: writer.close(), HEAD_IP, 0)
    return server, int(server.sockets[0].getsockname()[1])


def test_a_head_whose_gcs_answers_is_reachable() -> None:
    async def main() -> None:
        gcs, port = await _gcs()
        worker = _worker(port)
        try:
            assert await worker._check_head(HEAD_IP)
        finally:
            gcs.close()
            await worker.cleanup()

    asyncio.run(main())


def test_a_head_whose_gcs_refuses_connections_is_lost_at_once() -> None:
    async def main() -> None:
        gcs, port = await _gcs()
        worker = _worker(port)
        try:
            gcs.close()
            await gcs.wait_closed()
            started = time.monotonic()
            ray: Child = RunningRay()  # type: ignore[assignment]
            worker.facts = replace(worker.facts, joined=True)  # as after its first ticks
            with pytest.raises(GroupError) as lost:
                await asyncio.wait_for(worker._monitor(ray, HEAD_IP), HEAD_LOSS_GRACE_S)
            assert time.monotonic() - started < 1.0  # not after the grace for a silent head
            assert lost.value.cause == "head_lost"
            assert str(lost.value).startswith(
                f"lost the head: its Ray GCS at {HEAD_IP}:{port} refuses connections"
            )
            assert worker.ray_stop_grace_s == LOST_HEAD_STOP_GRACE_S  # no drain through it
            assert not worker.state.probes.live.ok  # while Ray stops
        finally:
            await worker.cleanup()

    asyncio.run(main())


def test_a_silent_head_is_only_unreachable_until_its_grace_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A GCS that does not answer in time may be a busy head: HEAD_LOSS_GRACE_S decides."""

    async def silent(*_args: object, **_kwargs: object) -> None:
        await asyncio.sleep(60)

    async def main() -> None:
        worker = _worker(free_port(HEAD_IP))
        monkeypatch.setattr(supervisor, "CONNECT_TIMEOUT_S", 0.05)
        monkeypatch.setattr(asyncio, "open_connection", silent)
        try:
            assert not await worker._check_head(HEAD_IP)
            ray: Child = RunningRay()  # type: ignore[assignment]
            with pytest.raises(TimeoutError):  # still watching, well inside the grace
                await asyncio.wait_for(worker._monitor(ray, HEAD_IP), HEAD_LOSS_GRACE_S / 2)
            assert isinstance(worker.state.facts, WorkerFacts)
            assert not worker.state.facts.head_reachable  # the probes say so meanwhile
        finally:
            await worker.cleanup()

    asyncio.run(main())


def test_a_worker_waits_for_the_next_run_of_a_head_whose_group_is_formed_or_failing() -> None:
    """A restarted worker must not join the head run that lost its previous run: that head is
    about to exit, and would take this run down with it (one more restart, a longer back-off)."""

    async def main() -> None:
        gcs, port = await _gcs()
        worker = _worker(port)
        head = HealthState(role="head")
        status = StatusServer(head, worker.config.node.status_port)
        status.host = HEAD_IP
        await status.start()
        try:
            head.phase = "serving"
            head.update(HeadFacts(group_formed=True))
            with pytest.raises(GroupError) as waited:
                await worker._wait_for_head(Deadline(0.5))
            assert "formed its group without this pod and is about to restart" in str(waited.value)
            head.phase = "failed"
            with pytest.raises(
                GroupError, match=r"is stopping after a failure \(phase failed\); waiting"
            ):
                await worker._wait_for_head(Deadline(0.5))
            head.phase = "waiting for the group"  # the head's next run
            head.update(HeadFacts(group_formed=False))
            assert await worker._wait_for_head(Deadline(5)) == HEAD_IP
        finally:
            await status.stop()
            gcs.close()
            await worker.cleanup()

    asyncio.run(main())
