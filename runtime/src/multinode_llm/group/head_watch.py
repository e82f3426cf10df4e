"""The head's monitor: the facts its probes answer from, refreshed once per tick.

Nodes come from Ray's GCS (`ray.nodes()`); a node of the formed group is lost when Ray lists it
dead, or sooner, when its raylet refuses connections (Ray itself takes tens of seconds of missed
health checks to declare a node dead; a refused connection says it in milliseconds). A lost node
ends the group at once: Ray workers cannot rejoin a running group, and vLLM's Ray executor only
exits seconds later, so the head exits itself (GroupError, cause ``worker_lost``), kubelet
restarts it, and the group forms again, as the mp head does (group/mp_head.py). The engine
answers when vLLM's ``/health`` is 200 and ``/v1/models`` lists the served name.
"""

from __future__ import annotations

import asyncio
import logging

from multinode_llm.config import HeadConfig
from multinode_llm.group.cluster import ClusterView
from multinode_llm.group.engine_check import EngineCheck
from multinode_llm.group.process import Child
from multinode_llm.group.progress import GroupProgress, RayNodeInfo, progress
from multinode_llm.group.supervisor import GroupError, refuses
from multinode_llm.health import restarts
from multinode_llm.health.state import HeadFacts, HealthState

log = logging.getLogger("multinode_llm.head")

GCS_FAILURES_TOLERATED = 3  # consecutive ticks without an answer from Ray's GCS


class GroupWatch:
    def __init__(self, config: HeadConfig, state: HealthState, view: ClusterView) -> None:
        self.config = config
        self.state = state
        self.view = view
        self.members: dict[str, RayNodeInfo] | None = None  # by node id, once the group formed
        self.gcs_failures = 0
        self.last_nodes: list[RayNodeInfo] = []
        self.engine = EngineCheck(config)

    async def refresh(self, engine: Child | None) -> GroupProgress:
        """This tick's progress; GroupError once a node of the formed group is lost."""
        nodes = await self._nodes()
        now = progress(nodes, self.config.node.node_count, self.config.parallel.gpus)
        for node in nodes:
            if node.alive:
                self.state.mark(f"node_joined:{node.ip}")
        (healthy, listed), lost = await asyncio.gather(self.engine.check(engine), self._lost(nodes))
        if self.members is None and now.complete:
            self.members = {node.node_id: node for node in nodes if node.alive}
            self.state.mark("group_complete")
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
                lost_nodes=tuple(sorted(node.ip for node, _why in lost)),
            )
        )
        if lost:  # after the update: the probes say why while the head stops its children
            raise _lost_error(lost)
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

    async def _lost(self, nodes: list[RayNodeInfo]) -> list[tuple[RayNodeInfo, str]]:
        """The formed group's nodes that are lost, each with why: Ray lists it dead (final: Ray
        never revives a node id), or its raylet refuses connections (nothing listens there).

        The first of either counts, as the mp head acts on its first refused status port: both
        are conclusive, never transient. A raylet that merely does not answer in time may be a
        busy node: Ray's own health checks decide about it (they list it dead in the end).
        """
        if self.members is None:
            return []
        alive = {node.node_id: node for node in nodes if node.alive}
        lost = [
            (node, "Ray lists it dead") for key, node in self.members.items() if key not in alive
        ]
        others = [alive[key] for key in self.members if key in alive and not alive[key].is_head]
        refused = await asyncio.gather(*(refuses(node.ip, node.raylet_port) for node in others))
        lost += [
            (node, f"its raylet {node.ip}:{node.raylet_port} refuses connections")
            for node, gone in zip(others, refused, strict=True)
            if gone
        ]
        return lost


def _lost_error(lost: list[tuple[RayNodeInfo, str]]) -> GroupError:
    what = "; ".join(
        f"lost {'the head node' if node.is_head else 'worker'} {node.describe()}: {why}"
        for node, why in lost
    )
    return GroupError(
        f"{what}; exiting so that the head restarts and the group forms again (Ray workers "
        "cannot rejoin a running group)",
        cause=restarts.WORKER_LOST,
    )
