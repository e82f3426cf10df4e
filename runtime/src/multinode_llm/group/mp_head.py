"""`multinode-llm head --executor mp`: vLLM's own multi-node executor, no Ray.

1. Open the rank roster on the status port (``POST /group/join``, ``/group/heartbeat``,
   ``/group/leave``; group/roster.py holds the rules) and start vLLM at once as node rank 0, the
   master (``--nnodes PP --node-rank 0 --master-addr POD_IP --master-port MASTER_PORT``): its
   imports and model loading overlap the workers' joins, and its rank-0 process waits for theirs.
2. Wait until every rank 1..PP-1 is held by a worker whose heartbeat is fresh, with the deadline
   (GROUP_WAIT_TIMEOUT) naming the missing ranks and the pods that did join.
3. Watch: exit 1 when vLLM exits, or when a member is lost (its lease lapses, it leaves, its pod
   starts a new worker run, or its status port refuses connections): its rank is never handed
   out again in this epoch, so the head restarts and every worker starts over with a new epoch.

The shared steps (staged model, the engine's start, the wait and monitor loops, the children's
checks) are HeadSupervisor's; this class supplies the roster and its watch.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from multinode_llm.config import HeadConfig
from multinode_llm.group.engine_check import EngineCheck
from multinode_llm.group.head import HeadSupervisor, Progress
from multinode_llm.group.process import Child
from multinode_llm.group.roster import (
    DEFAULT_LEASE_S,
    HEARTBEAT_PATH,
    JOIN_PATH,
    LEAVE_PATH,
    Joined,
    Member,
    Roster,
)
from multinode_llm.group.supervisor import GroupError, refuses
from multinode_llm.health import restarts
from multinode_llm.health.server import PostHandler
from multinode_llm.health.state import HeadFacts, HealthState
from multinode_llm.serving.command import engine_arguments

log = logging.getLogger("multinode_llm.head")


class MpHeadSupervisor(HeadSupervisor):
    def __init__(self, config: HeadConfig) -> None:
        super().__init__(config)
        self.roster = Roster(nnodes=config.parallel.pipeline, lease_s=DEFAULT_LEASE_S)
        self.server.post_routes.update(RosterRoutes(self).routes())

    async def main(self) -> int:
        deadline = await self.prepare()
        self.log.info(
            "epoch %s: vLLM's mp executor over %d nodes, master %s:%d",
            self.roster.epoch,
            self.roster.nnodes,
            self.config.node.pod_ip,
            self.config.node.master_port,
        )
        self.state.phase = "starting vLLM"
        await self.start_engine()  # rank 0 first: workers get ranks once it runs
        watch = self.watch = RosterWatch(self.config, self.state, self.roster)
        await self.wait_for_group(watch, deadline)
        return await self.monitor(watch)

    def where_to_look(self) -> str:
        pods = "every worker pod"
        if self.config.isvc_name:  # KServe labels worker pods app=isvc.<name>-predictor-worker
            pods += f" (kubectl get pods -l app=isvc.{self.config.isvc_name}-predictor-worker)"
        node = self.config.node
        return (
            f"check that {pods} runs with MULTINODE_LLM_EXECUTOR=mp and reaches the head's "
            f"status port at {node.pod_ip}:{node.status_port}"
        )

    def ranks_open(self) -> bool:
        """Whether joins are answered: once rank 0's vLLM runs (the model path is final)."""
        return self.engine is not None


class RosterRoutes:
    """The roster's HTTP side: JSON in, JSON out, on the status server's event loop."""

    def __init__(self, head: MpHeadSupervisor) -> None:
        self.head = head
        self.roster = head.roster

    def routes(self) -> dict[str, PostHandler]:
        return {JOIN_PATH: self.join, HEARTBEAT_PATH: self.heartbeat, LEAVE_PATH: self.leave}

    def join(self, body: bytes) -> tuple[HTTPStatus, Any]:
        request = _object(body)
        instance, pod_ip = request.get("instance"), request.get("pod_ip")
        if not isinstance(instance, str) or not instance or not _is_ip(pod_ip):
            return _error(HTTPStatus.BAD_REQUEST, 'a join needs {"instance", "pod_ip"}')
        if not self.head.ranks_open():
            return _error(HTTPStatus.SERVICE_UNAVAILABLE, "the head is not handing out ranks yet")
        status_port = request.get("status_port", self.head.config.node.status_port)
        outcome = self.roster.join(
            instance,
            str(pod_ip),
            str(request.get("pod_name") or ""),
            status_port if isinstance(status_port, int) else self.head.config.node.status_port,
            time.monotonic(),
        )
        if not isinstance(outcome, Joined):
            log.warning("refused a join from %s: %s", pod_ip, outcome.reason)
            return _error(HTTPStatus.CONFLICT, outcome.reason)
        return HTTPStatus.OK, self._grant(outcome.member)

    def heartbeat(self, body: bytes) -> tuple[HTTPStatus, Any]:
        request = _object(body)
        epoch, rank, instance = request.get("epoch"), request.get("rank"), request.get("instance")
        if not isinstance(epoch, str) or not isinstance(rank, int) or not isinstance(instance, str):
            return _error(HTTPStatus.BAD_REQUEST, 'a heartbeat needs {"epoch", "rank", "instance"}')
        if not self.roster.heartbeat(epoch, rank, instance, time.monotonic()):
            return _error(
                HTTPStatus.GONE,
                f"rank {rank} of epoch {epoch} is not held by this instance here (the head's "
                f"epoch is {self.roster.epoch}): start over",
            )
        return HTTPStatus.OK, {"epoch": self.roster.epoch}

    def leave(self, body: bytes) -> tuple[HTTPStatus, Any]:
        request = _object(body)
        epoch, rank, instance = request.get("epoch"), request.get("rank"), request.get("instance")
        if not isinstance(epoch, str) or not isinstance(rank, int) or not isinstance(instance, str):
            return _error(HTTPStatus.BAD_REQUEST, 'a leave needs {"epoch", "rank", "instance"}')
        member = self.roster.leave(epoch, rank, instance, time.monotonic())
        if member is None:
            return _error(HTTPStatus.GONE, f"rank {rank} of epoch {epoch} is not held here")
        reason = request.get("reason")
        log.warning("worker %s left: %s", member.describe(), reason or "no reason given")
        return HTTPStatus.OK, {"epoch": self.roster.epoch}

    def _grant(self, member: Member) -> dict[str, Any]:
        config = self.head.config
        self.head.state.mark(f"node_joined:{member.pod_ip}")
        log.info("granted %s of epoch %s", member.describe(), self.roster.epoch)
        return {
            "epoch": self.roster.epoch,
            "rank": member.rank,
            "nnodes": self.roster.nnodes,
            "master_addr": config.node.pod_ip,
            "master_port": config.node.master_port,
            # The workers get none of the ISVC's arguments from KServe: the head hands each its
            # vLLM command line, the head's own with this rank (serving/command.py).
            "engine_args": engine_arguments(config, node_rank=member.rank),
            # Only the head knows the staged commit: every rank uses the head's entry.
            "compile_cache_key": self.head.state.compile_cache_key,
        }


@dataclass(frozen=True)
class RosterProgress:
    complete: bool
    summary: str
    what_is_missing: str

    def line(self) -> str:
        return self.summary

    def missing(self) -> str:
        return self.what_is_missing


class RosterWatch:
    """The mp head's facts, once per tick: the roster's members, their leases, the engine."""

    def __init__(self, config: HeadConfig, state: HealthState, roster: Roster) -> None:
        self.config = config
        self.state = state
        self.roster = roster
        self.engine = EngineCheck(config)
        self.formed = False

    async def refresh(self, engine: Child | None) -> Progress:
        await self._check_members()
        now = time.monotonic()
        fresh = self.roster.fresh(now)
        complete = self.roster.complete(now)
        if complete and not self.formed:
            self.formed = True
            self.state.mark("group_complete")
        healthy, listed = await self.engine.check(engine)
        if healthy and listed:
            self.state.mark("engine_ready")
        tensor, nodes = self.config.parallel.tensor, 1 + len(fresh)
        self.state.update(
            HeadFacts(
                executor="mp",
                engine_started=engine is not None,
                engine_running=engine is not None and engine.returncode is None,
                engine_healthy=healthy,
                model_listed=listed,
                engine_answered_once=self.engine.answered_once,
                engine_silent_s=round(self.engine.silent_s(), 1),
                nodes=nodes,
                expected_nodes=self.roster.nnodes,
                gpus=tensor * nodes,
                expected_gpus=self.config.parallel.gpus,
                group_formed=self.formed,
            )
        )
        if self.state.probes.ready.ok:
            self.state.mark("ready")
        return RosterProgress(complete, self.roster.line(now), self.roster.missing(now))

    async def close(self) -> None:
        await self.engine.close()

    async def _check_members(self) -> None:
        """GroupError when a member is gone: its rank cannot be handed out again this epoch."""
        if self.roster.ended is not None:
            raise _lost(self.roster.ended)
        now = time.monotonic()
        for member in self.roster.lapsed(now):
            self.roster.end(f"worker {member.describe()} sent no heartbeat", now)
            raise _lost(
                f"lost worker {member.describe()}: no heartbeat for {self.roster.lease_s:.0f} s"
            )
        # A refused connection says a pod is gone in milliseconds, long before its lease lapses.
        members = list(self.roster.members.values())
        refusals = await asyncio.gather(*(refuses(m.pod_ip, m.status_port) for m in members))
        for member, refused in zip(members, refusals, strict=True):
            if refused:
                self.roster.end(f"worker {member.describe()} stopped answering", now)
                raise _lost(
                    f"lost worker {member.describe()}: its status port "
                    f"{member.pod_ip}:{member.status_port} refuses connections"
                )


def _lost(what: str) -> GroupError:
    return GroupError(
        f"{what}; exiting so that the head restarts with a new epoch and every worker starts over",
        cause=restarts.WORKER_LOST,
    )


def _object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object; {} for anything else (every field is then missing)."""
    try:
        value = json.loads(body.decode("utf-8"))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _is_ip(value: object) -> bool:
    try:
        ipaddress.ip_address(str(value))
    except ValueError:
        return False
    return isinstance(value, str)


def _error(status: HTTPStatus, message: str) -> tuple[HTTPStatus, dict[str, str]]:
    return status, {"error": message}
