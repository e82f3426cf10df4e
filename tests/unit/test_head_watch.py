"""The Ray head's watch: a node of the formed group that is lost ends the group at once.

Ray's node table is a stand-in (no Ray starts); the worker's raylet is a real listening socket on
127.0.0.2, closed to make it refuse connections.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest
from multinode_llm.config import head_config
from multinode_llm.group import supervisor
from multinode_llm.group.head_watch import GroupWatch
from multinode_llm.group.progress import RayNodeInfo
from multinode_llm.group.supervisor import GroupError
from multinode_llm.health.state import HeadFacts, HealthState

ENV = {
    "PIPELINE_PARALLEL_SIZE": "2",
    "TENSOR_PARALLEL_SIZE": "1",
    "RAY_NODE_COUNT": "2",
    "REQUEST_GPU_COUNT": "1",
    "MODEL_NAME": "tiny",
    "MODEL_DIR": "/mnt/models",
    "POD_IP": "127.0.0.1",
}
WORKER_IP = "127.0.0.2"


class TableView:
    """What `ray.nodes()` answers, set by the test."""

    address = "127.0.0.1:6379"

    def __init__(self, nodes: list[RayNodeInfo]) -> None:
        self.table = nodes

    async def nodes(self) -> list[RayNodeInfo]:
        return list(self.table)


def _nodes(raylet_port: int, worker_alive: bool = True) -> list[RayNodeInfo]:
    head = RayNodeInfo("h", "127.0.0.1", True, 1.0, 1, is_head=True, hostname="tiny-head")
    worker = RayNodeInfo("w", WORKER_IP, worker_alive, 1.0, raylet_port, hostname="tiny-worker")
    return [head, worker]


Scenario = Callable[[GroupWatch, TableView, HealthState, asyncio.Server], Awaitable[None]]


def _run(scenario: Scenario) -> None:
    async def main() -> None:
        raylet = await asyncio.start_server(lambda _r, writer: writer.close(), WORKER_IP, 0)
        port = int(raylet.sockets[0].getsockname()[1])
        state = HealthState(role="head")
        view = TableView(_nodes(port))
        watch = GroupWatch(head_config(ENV, {}), state, view)  # type: ignore[arg-type]
        try:
            assert (await watch.refresh(None)).complete
            assert watch.members is not None  # the group formed
            await scenario(watch, view, state, raylet)
        finally:
            raylet.close()
            await watch.close()

    asyncio.run(main())


def _facts(state: HealthState) -> HeadFacts:
    assert isinstance(state.facts, HeadFacts)
    return state.facts


def test_a_formed_group_whose_nodes_answer_goes_on() -> None:
    async def scenario(
        watch: GroupWatch, _view: TableView, state: HealthState, _raylet: asyncio.Server
    ) -> None:
        for _tick in range(3):
            await watch.refresh(None)
        assert _facts(state).lost_nodes == ()
        assert state.probes.live.ok

    _run(scenario)


def test_a_node_ray_lists_dead_ends_the_group_at_once() -> None:
    async def scenario(
        watch: GroupWatch, view: TableView, state: HealthState, raylet: asyncio.Server
    ) -> None:
        view.table = _nodes(int(raylet.sockets[0].getsockname()[1]), worker_alive=False)
        with pytest.raises(GroupError) as lost:
            await watch.refresh(None)
        assert lost.value.cause == "worker_lost"
        assert str(lost.value).startswith(
            f"lost worker tiny-worker ({WORKER_IP}): Ray lists it dead; exiting so that"
        )
        # The probes say why while the head stops its children.
        assert _facts(state).lost_nodes == (WORKER_IP,)
        assert not state.probes.ready.ok
        assert state.probes.live.reason.endswith(f"lost node(s) {WORKER_IP}")

    _run(scenario)


def test_a_raylet_that_refuses_connections_ends_the_group_at_once() -> None:
    async def scenario(
        watch: GroupWatch, _view: TableView, state: HealthState, raylet: asyncio.Server
    ) -> None:
        port = int(raylet.sockets[0].getsockname()[1])
        raylet.close()
        await raylet.wait_closed()
        started = time.monotonic()
        with pytest.raises(GroupError) as lost:
            await watch.refresh(None)
        assert time.monotonic() - started < 1.0  # not Ray's tens of seconds of health checks
        assert lost.value.cause == "worker_lost"
        assert (
            f"lost worker tiny-worker ({WORKER_IP}): its raylet {WORKER_IP}:{port} refuses "
            "connections" in str(lost.value)
        )
        assert _facts(state).lost_nodes == (WORKER_IP,)

    _run(scenario)


def test_a_raylet_that_only_times_out_is_left_to_rays_health_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A busy or flooded node may miss one connect: only a refusal (nothing listens) counts."""

    async def silent(*_args: object, **_kwargs: object) -> None:
        await asyncio.sleep(60)

    async def scenario(
        watch: GroupWatch, _view: TableView, state: HealthState, _raylet: asyncio.Server
    ) -> None:
        monkeypatch.setattr(supervisor, "CONNECT_TIMEOUT_S", 0.05)
        monkeypatch.setattr(asyncio, "open_connection", silent)
        await watch.refresh(None)
        assert _facts(state).lost_nodes == ()
        assert state.probes.live.ok

    _run(scenario)


def test_a_dead_node_before_the_group_formed_is_only_waited_for() -> None:
    async def main() -> None:
        state = HealthState(role="head")
        view = TableView(_nodes(1, worker_alive=False))
        watch = GroupWatch(head_config(ENV, {}), state, view)  # type: ignore[arg-type]
        progress = await watch.refresh(None)
        assert not progress.complete
        assert watch.members is None
        assert _facts(state).lost_nodes == ()
        await watch.close()

    asyncio.run(main())
