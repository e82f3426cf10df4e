"""Pure logic of waiting for a group: counting nodes and GPUs, the words for it, the backoff,
and how often a wait says where it is."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

# A wait's progress line, repeated at most this often while nothing changes: often enough that
# `kubectl logs` of a pod that seems stuck shows it alive, seldom enough to keep the log short.
PROGRESS_EVERY_S = 10.0


@dataclass(frozen=True)
class RayNodeInfo:
    """One node as Ray's GCS lists it (from the public `ray.nodes()`)."""

    node_id: str
    ip: str
    alive: bool
    gpus: float
    raylet_port: int
    is_head: bool = False
    hostname: str = ""  # the pod's name in Kubernetes (a pod's hostname is its name)

    def describe(self) -> str:
        """How a person finds this node: 'x-predictor-abc (10.0.0.5, head)'."""
        role = ", head" if self.is_head else ""
        return f"{self.hostname or 'node'} ({self.ip}{role})"


@dataclass(frozen=True)
class GroupProgress:
    """How far the group is from what the head needs: ``nodes`` alive of ``expected_nodes``."""

    nodes: int
    expected_nodes: int
    gpus: int
    expected_gpus: int
    joined: tuple[str, ...] = ()  # RayNodeInfo.describe() of each live node

    @property
    def complete(self) -> bool:
        return self.nodes >= self.expected_nodes and self.gpus >= self.expected_gpus

    @property
    def missing_workers(self) -> int:
        return max(self.expected_nodes - self.nodes, 0)

    def line(self) -> str:
        """One progress line, e.g. '1/2 nodes, 2/4 GPUs; waiting for 1 worker'."""
        counts = f"{self.nodes}/{self.expected_nodes} nodes, {self.gpus}/{self.expected_gpus} GPUs"
        if self.complete:
            return f"{counts}; the group is complete"
        if self.missing_workers:
            return f"{counts}; waiting for {_workers(self.missing_workers)}"
        return f"{counts}; waiting for {self.expected_gpus - self.gpus} more GPUs to register"

    def missing(self) -> str:
        """What is missing, said so that someone can act on it."""
        parts = []
        if self.missing_workers:
            joined = f": {', '.join(self.joined)}" if self.joined else ""
            parts.append(
                f"{_workers(self.missing_workers)} missing ({self.nodes} of RAY_NODE_COUNT="
                f"{self.expected_nodes} nodes joined{joined})"
            )
        if self.gpus < self.expected_gpus:
            parts.append(
                f"{self.expected_gpus - self.gpus} of {self.expected_gpus} GPUs missing "
                f"(TENSOR_PARALLEL_SIZE x PIPELINE_PARALLEL_SIZE = {self.expected_gpus}, "
                f"{self.gpus} registered)"
            )
        return "; ".join(parts) or "nothing"


def progress(
    nodes: Sequence[RayNodeInfo], expected_nodes: int, expected_gpus: int
) -> GroupProgress:
    alive = [node for node in nodes if node.alive]
    return GroupProgress(
        nodes=len(alive),
        expected_nodes=expected_nodes,
        gpus=int(sum(node.gpus for node in alive)),
        expected_gpus=expected_gpus,
        joined=tuple(node.describe() for node in alive),
    )


def backoff(initial_s: float = 0.25, factor: float = 2.0, cap_s: float = 1.0) -> Iterator[float]:
    """Capped exponential delays: 0.25, 0.5, 1, 1, ... seconds.

    Short at first so that a group whose pods start together is noticed within a fraction of a
    second; capped at one second because the delay is how late a joining node (or, for a worker,
    the head's GCS) is noticed, while each check costs next to nothing (a TCP connect, or one
    sub-millisecond GCS call). With a 4 s cap the benchmark measured a worker noticed 3.1 s after
    it joined; KServe's own head polls every 2 s.
    """
    delay = initial_s
    while True:
        yield delay
        delay = min(delay * factor, cap_s)


@dataclass
class ProgressLog:
    """When a long wait should log where it is: at once, whenever its line changes, and every
    ``every_s`` while it does not."""

    every_s: float = PROGRESS_EVERY_S
    _line: str | None = None
    _at: float = -math.inf

    def due(self, line: str = "") -> bool:
        now = time.monotonic()
        if line == self._line and now - self._at < self.every_s:
            return False
        self._line, self._at = line, now
        return True


def _workers(count: int) -> str:
    return f"{count} worker" if count == 1 else f"{count} workers"
