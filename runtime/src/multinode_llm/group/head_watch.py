"""The head's monitor: the facts its probes answer from, refreshed once per tick.

Nodes come from Ray's GCS (`ray.nodes()`); a node of the formed group is lost when Ray lists it
dead, or sooner, when its raylet stops accepting connections (Ray itself takes tens of seconds of
missed health checks to declare a node dead; a refused connection says it in milliseconds). The
engine answers when vLLM's ``/health`` is 200 and ``/v1/models`` lists the served name.
"""

from __future__ import annotations

import asyncio
import logging

from multinode_llm.config import HeadConfig
from multinode_llm.group.cluster import ClusterView
from multinode_llm.group.engine_check import EngineCheck
from multinode_llm.group.process import Child
from multinode_llm.group.progress import GroupProgress, RayNodeInfo, progress
from multinode_llm.group.supervisor import GroupError, port_open
from multinode_llm.health import restarts
from multinode_llm.health.state import HeadFacts, HealthState

log = logging.getLogger("multinode_llm.head")

GCS_FAILURES_TOLERATED = 3  # consecutive ticks without an answer from Ray's GCS


class GroupWatch:
    def __init__(self, config: HeadConfig, state: HealthState, view: ClusterView) -> None:
        self.config = config
        self.state = state
        self.view = view
        self.members: dict[str, str] | None = None  # node id -> IP, once the group formed
        self.gcs_failures = 0
        self.last_nodes: list[RayNodeInfo] = []
        self.engine = EngineCheck(config)

    async def refresh(self, engine: Child | None) -> GroupProgress:
        nodes = await self._nodes()
        now = progress(nodes, self.config.node.node_count, self.config.parallel.gpus)
        for node in nodes:
            if node.alive:
                self.state.mark(f"node_joined:{node.ip}")
        lost = await self._lost(nodes) if self.members is not None else ()
        if self.members is None and now.complete:
            self.members = {node.node_id: node.ip for node in nodes if node.alive}
            self.state.mark("group_complete")
        healthy, listed = await self.engine.check(engine)
        if healthy and listed:
            self.state.mark("engine_ready")
        self.state.update(
            HeadFacts(
                ray_running=True,  # the supervisor exits as soon as it is not
                engine_started=engine is not None,
                engine_running=engine is not None and engine.returncode is None,
                engine_healthy=healthy,
                model_listed=listed,
                engine_answered_once=self.engine.answered_once,
                engine_silent_s=round(self.engine.silent_s(), 1),
                nodes=now.nodes,
                expected_nodes=now.expected_nodes,
                gpus=now.gpus,
                expected_gpus=now.expected_gpus,
                group_formed=self.members is not None,
                lost_nodes=lost,
            )
        )
        if self.state.probes.ready.ok:
            self.state.mark("ready")
        return now

    async def close(self) -> None:
        await self.engine.close()

    async def _nodes(self) -> list[RayNodeInfo]:
        try:
            self.last_nodes = await self.view.nodes()
            self.gcs_failures = 0
        except Exception as error:  # Ray raises its own types; any failure to answer counts
            self.gcs_failures += 1
            log.warning("Ray's GCS did not answer (%d in a row): %s", self.gcs_failures, error)
            if self.gcs_failures >= GCS_FAILURES_TOLERATED:
                raise GroupError(
                    f"the Ray head's GCS stopped answering: {error}", cause=restarts.ENGINE_EXITED
                ) from error
        return self.last_nodes

    async def _lost(self, nodes: list[RayNodeInfo]) -> tuple[str, ...]:
        """IPs of the group's nodes that Ray lists dead or whose raylet refuses connections."""
        assert self.members is not None
        alive = {node.node_id: node for node in nodes if node.alive}
        lost = [ip for node_id, ip in self.members.items() if node_id not in alive]
        others = [
            alive[node_id]
            for node_id in self.members
            if node_id in alive and not alive[node_id].is_head
        ]
        answers = await asyncio.gather(*(port_open(node.ip, node.raylet_port) for node in others))
        lost += [node.ip for node, answered in zip(others, answers, strict=True) if not answered]
        return tuple(sorted(lost))
