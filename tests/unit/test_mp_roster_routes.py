"""The mp head's rank roster over HTTP: the real status server and routes, a head without vLLM.

The head supervisor is built but never run (nothing starts a process): its status server is
started on a free port, and its "engine" is set by hand where the roster needs one to be running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from multinode_llm.config import head_config, worker_config
from multinode_llm.group.mp_head import MpHeadSupervisor, RosterWatch
from multinode_llm.group.mp_worker import MpWorkerSupervisor
from multinode_llm.group.supervisor import Deadline, GroupError
from multinode_llm_testing.ports import free_port

ENV = {
    "MULTINODE_LLM_EXECUTOR": "mp",
    "PIPELINE_PARALLEL_SIZE": "3",
    "TENSOR_PARALLEL_SIZE": "2",
    "RAY_NODE_COUNT": "3",
    "REQUEST_GPU_COUNT": "2",
    "MODEL_NAME": "big",
    "MODEL_DIR": "/mnt/models",
    "POD_IP": "127.0.0.1",
}

Post = Callable[[str, Any], Awaitable[tuple[int, dict[str, Any]]]]


@contextlib.asynccontextmanager
async def _head() -> AsyncIterator[tuple[MpHeadSupervisor, Post]]:
    """A head supervisor with its status server started on a free port, and a POST client."""
    supervisor = MpHeadSupervisor(
        head_config(ENV, {"status_port": free_port(), "vllm_args": ["--x", "1"]})
    )
    await supervisor.server.start()
    try:
        async with aiohttp.ClientSession() as session:

            async def send(path: str, body: Any) -> tuple[int, dict[str, Any]]:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                url = f"http://127.0.0.1:{supervisor.server.port}{path}"
                async with session.post(url, data=data) as answer:
                    return answer.status, await answer.json(content_type=None)

            yield supervisor, send
    finally:
        await supervisor.server.stop()


def _run(scenario: Callable[[MpHeadSupervisor, Post], Awaitable[None]]) -> None:
    async def main() -> None:
        async with _head() as (head, post):
            await scenario(head, post)

    asyncio.run(main())


def _join(instance: str, ip: str = "127.0.0.1", pod: str = "") -> dict[str, Any]:
    return {"instance": instance, "pod_ip": ip, "pod_name": pod or f"w-{instance}"}


def test_no_rank_before_rank_zero_runs() -> None:
    async def scenario(head: MpHeadSupervisor, post: Post) -> None:
        assert await post("/group/join", _join("a")) == (
            503,
            {"error": "the head is not handing out ranks yet"},
        )

    _run(scenario)


def test_a_join_gets_its_rank_the_master_and_the_heads_vllm_arguments() -> None:
    async def scenario(head: MpHeadSupervisor, post: Post) -> None:
        head.engine = object()  # type: ignore[assignment]  # rank 0 "runs"
        status, grant = await post("/group/join", _join("a"))
        assert status == 200
        assert (grant["rank"], grant["nnodes"], grant["epoch"]) == (1, 3, head.roster.epoch)
        assert (grant["master_addr"], grant["master_port"]) == ("127.0.0.1", 29500)
        args = grant["engine_args"]
        assert args[args.index("--node-rank") + 1] == "1"
        assert args[args.index("--distributed-executor-backend") + 1] == "mp"
        assert args[-2:] == ["--x", "1"]  # the head's own vLLM arguments
        assert await post("/group/join", _join("a")) == (200, grant)  # idempotent
        assert (await post("/group/join", _join("b")))[1]["rank"] == 2
        status, refused = await post("/group/join", _join("c"))
        assert status == 409
        assert "rank 1 (pod w-a, 127.0.0.1), rank 2 (pod w-b, 127.0.0.1)" in refused["error"]
        assert "node_joined:127.0.0.1" in head.state.timeline

    _run(scenario)


def test_heartbeats_renew_the_holders_lease_only() -> None:
    async def scenario(head: MpHeadSupervisor, post: Post) -> None:
        head.engine = object()  # type: ignore[assignment]
        _status, grant = await post("/group/join", _join("a"))
        beat = {"epoch": grant["epoch"], "rank": 1, "instance": "a"}
        assert await post("/group/heartbeat", beat) == (200, {"epoch": head.roster.epoch})
        status, gone = await post("/group/heartbeat", {**beat, "epoch": "old"})
        assert status == 410
        assert "start over" in gone["error"]
        assert (await post("/group/heartbeat", {**beat, "instance": "b"}))[0] == 410
        assert (await post("/group/heartbeat", {"rank": "1"}))[0] == 400
        assert (await post("/group/heartbeat", b"\xff not json"))[0] == 400

    _run(scenario)


def test_a_leave_ends_the_epoch_and_the_watch_exits_naming_the_rank() -> None:
    async def scenario(head: MpHeadSupervisor, post: Post) -> None:
        head.engine = object()  # type: ignore[assignment]
        _status, grant = await post("/group/join", _join("a", pod="worker-7"))
        leave = {"epoch": grant["epoch"], "rank": 1, "instance": "a", "reason": "its vLLM exited"}
        assert (await post("/group/leave", leave))[0] == 200
        heartbeat = {key: leave[key] for key in ("epoch", "rank", "instance")}
        assert (await post("/group/heartbeat", heartbeat))[0] == 410
        watch = RosterWatch(head.config, head.state, head.roster)
        with pytest.raises(GroupError) as lost:
            await watch.refresh(None)
        assert str(lost.value).startswith("worker rank 1 (pod worker-7, 127.0.0.1) left; exiting")
        assert lost.value.cause == "worker_lost"

    _run(scenario)


def test_the_watch_counts_fresh_members_and_loses_one_whose_port_refuses() -> None:
    async def scenario(head: MpHeadSupervisor, post: Post) -> None:
        head.engine = object()  # type: ignore[assignment]
        # Rank 1's status port is this head's own (it answers); rank 2's is a closed port.
        await post("/group/join", {**_join("a"), "status_port": head.server.port})
        watch = RosterWatch(head.config, head.state, head.roster)
        progress = await watch.refresh(None)
        assert not progress.complete
        assert progress.line() == "2/3 nodes; waiting for rank 2"
        facts = head.state.status()["facts"]
        assert (facts["executor"], facts["nodes"], facts["gpus"], facts["expected_gpus"]) == (
            "mp",
            2,
            4,
            6,
        )
        assert head.state.probes.ready.reason == "vLLM is not running"
        closed = await _closed_port()
        await post("/group/join", {**_join("b"), "status_port": closed})
        started = time.monotonic()
        with pytest.raises(GroupError) as lost:
            await watch.refresh(None)
        assert time.monotonic() - started < 2.0  # at once, not after the lease
        assert (
            f"lost worker rank 2 (pod w-b, 127.0.0.1): its status port 127.0.0.1:{closed} "
            "refuses connections" in str(lost.value)
        )

    _run(scenario)


def test_get_routes_still_answer_and_other_posts_are_refused() -> None:
    async def scenario(head: MpHeadSupervisor, post: Post) -> None:
        assert (await post("/ready", {}))[0] == 405
        url = f"http://127.0.0.1:{head.server.port}/live"
        async with aiohttp.ClientSession() as session, session.get(url) as answer:
            assert answer.status == 200

    _run(scenario)


async def _closed_port() -> int:
    server = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)
    port = int(server.sockets[0].getsockname()[1])
    server.close()
    await server.wait_closed()
    return port


WORKER_ENV = {**ENV, "POD_IP": "127.0.0.3", "POD_NAME": "worker-0", "HEAD_SVC": "unused"}


def test_a_worker_joins_and_starts_over_when_the_head_restarts() -> None:
    """The worker side of the protocol against the real routes: the head on 127.0.0.2, the worker
    on 127.0.0.3, one status port number for both (as in pods); no vLLM starts."""

    async def main() -> None:
        port = free_port("127.0.0.2")
        config = head_config({**ENV, "POD_IP": "127.0.0.2"}, {"status_port": port})
        first = MpHeadSupervisor(config)
        first.server.host = "127.0.0.2"
        first.engine = object()  # type: ignore[assignment]
        worker = MpWorkerSupervisor(
            worker_config(WORKER_ENV, {"status_port": port, "head_address": "127.0.0.2"})
        )
        worker.server.host = "127.0.0.3"
        await worker.server.start()
        await first.server.start()
        try:
            grant = await worker._join(Deadline(10))
            assert (grant.rank, grant.nnodes, grant.epoch) == (1, 3, first.roster.epoch)
            assert grant.master_addr == "127.0.0.2"
            assert worker.state.probes.ready.reason == "rank 1: starting vLLM (headless)"
            assert await worker._heartbeat(grant)
            await first.server.stop()
            with pytest.raises(GroupError, match="refuses connections") as refused:
                await worker._heartbeat(grant)
            assert refused.value.cause == "head_lost"
            second = MpHeadSupervisor(config)  # the head's container restarted: a new epoch
            second.server.host = "127.0.0.2"
            await second.server.start()
            try:
                with pytest.raises(GroupError, match=r"ended rank 1: rank 1 of epoch \w+ is not"):
                    await worker._heartbeat(grant)
            finally:
                await second.server.stop()
        finally:
            await worker.cleanup()  # closes its HTTP client; it holds no rank to leave
            await worker.server.stop()
            await first.server.stop()

    asyncio.run(main())


def test_a_worker_gives_up_at_the_deadline_saying_what_the_head_answered() -> None:
    async def main() -> None:
        port = free_port("127.0.0.2")
        head = MpHeadSupervisor(head_config({**ENV, "POD_IP": "127.0.0.2"}, {"status_port": port}))
        head.server.host = "127.0.0.2"  # its vLLM never starts: no ranks are handed out
        worker = MpWorkerSupervisor(
            worker_config(WORKER_ENV, {"status_port": port, "head_address": "127.0.0.2"})
        )
        worker.server.host = "127.0.0.3"
        await head.server.start()
        try:
            with pytest.raises(GroupError) as late:
                await worker._join(Deadline(1.5))
        finally:
            await worker.cleanup()
            await head.server.stop()
        assert str(late.value) == (
            f"the head at 127.0.0.2:{port} granted no rank within 2 s (--wait-timeout, "
            "GROUP_WAIT_TIMEOUT): it answered 503: the head is not handing out ranks yet; check "
            "that the head pod runs with MULTINODE_LLM_EXECUTOR=mp and that HEAD_SVC names it"
        )
        assert late.value.cause == "group_timeout"

    asyncio.run(main())
