"""What the probes answer, decided from facts the supervisor's monitor loop keeps fresh.

A probe request does no work: it reads the last ``Probes`` the monitor loop computed (about once a
second) from its facts. The rules (DEVELOPERS.md, "Probes"):

- head startup: the engine has answered (``/health`` and the served model listed) at least once;
- head readiness: the engine answers now, and every node of the group is alive;
- head liveness: Ray and vLLM run, the engine has not been silent for long, and no node of a formed
  group is lost (Ray workers cannot rejoin a running group, so a lost worker restarts the group);
- worker startup and readiness: joined the head's Ray cluster; liveness: raylet up, head reachable.

With the mp executor (``executor="mp"``) there is no Ray: the head's nodes are its rank roster's
fresh members, and a worker is joined once the head granted it a rank; its readiness also needs
its heartbeat fresh and its vLLM (headless) running.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from multinode_llm.health import restarts
from multinode_llm.health.restarts import zero_counts

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

# An engine whose /health has not answered for this long is considered hung, not busy.
ENGINE_SILENCE_LIMIT_S = 30.0


@dataclass(frozen=True)
class Check:
    ok: bool
    reason: str


@dataclass(frozen=True)
class Probes:
    startup: Check
    ready: Check
    live: Check


@dataclass(frozen=True)
class HeadFacts:
    executor: str = "ray"  # "mp": no Ray; the nodes are the rank roster's
    ray_running: bool = False
    engine_started: bool = False  # False while the head waits for the group before starting vLLM
    engine_running: bool = False
    engine_healthy: bool = False  # the last /health answered 200
    model_listed: bool = False  # the last /v1/models listed the served name
    engine_answered_once: bool = False
    engine_silent_s: float = 0.0  # since the last healthy answer (0 before the first)
    nodes: int = 0
    expected_nodes: int = 1
    gpus: int = 0
    expected_gpus: int = 1
    group_formed: bool = False  # the group was complete at least once
    lost_nodes: tuple[
        str, ...
    ] = ()  # IPs of nodes Ray lists dead or whose raylet stopped answering

    @property
    def group_whole(self) -> bool:
        return (
            self.nodes >= self.expected_nodes
            and self.gpus >= self.expected_gpus
            and not self.lost_nodes
        )


@dataclass(frozen=True)
class WorkerFacts:
    ray_started: bool = False  # False while the worker waits for the head's GCS to answer
    ray_running: bool = False
    joined: bool = False
    head_reachable: bool = False
    head: str = ""
    executor: str = "ray"  # "mp": the fields below replace ray_*
    rank: int | None = None  # mp: the node rank the head granted
    engine_started: bool = False  # mp: vLLM (headless) started after the join
    engine_running: bool = False

    @property
    def node_running(self) -> bool:
        """This pod's part of the group runs: its Ray node, or (mp) its headless vLLM."""
        return self.engine_running if self.executor == "mp" else self.ray_running


def head_probes(facts: HeadFacts) -> Probes:
    group = _group_check(facts)
    engine = _engine_answers(facts)
    startup = Check(True, "the engine has answered") if facts.engine_answered_once else engine
    ready = engine if not engine.ok else group
    return Probes(startup=startup, ready=ready, live=_head_live(facts, group))


def worker_probes(facts: WorkerFacts) -> Probes:
    if facts.executor == "mp":
        return _mp_worker_probes(facts)
    if not facts.ray_started:
        waiting = Check(False, f"waiting for the head's Ray GCS at {facts.head}")
        return Probes(startup=waiting, ready=waiting, live=Check(True, "waiting for the head"))
    if not facts.ray_running:
        down = Check(False, "the Ray node is not running")
        return Probes(startup=down, ready=down, live=down)
    if not facts.joined:
        waiting = Check(False, f"not joined to the head's Ray cluster at {facts.head} yet")
        return Probes(startup=waiting, ready=waiting, live=Check(True, "joining the head"))
    if not facts.head_reachable:
        lost = Check(False, f"the head's Ray GCS at {facts.head} does not answer")
        return Probes(startup=lost, ready=lost, live=lost)
    joined = Check(True, f"joined the head's Ray cluster at {facts.head}")
    return Probes(startup=joined, ready=joined, live=joined)


def _mp_worker_probes(facts: WorkerFacts) -> Probes:
    if facts.rank is None:
        waiting = Check(False, f"waiting for a rank from the head at {facts.head}")
        return Probes(startup=waiting, ready=waiting, live=Check(True, "waiting for the head"))
    if facts.engine_started and not facts.engine_running:
        down = Check(False, "vLLM (headless) is not running")
        return Probes(startup=down, ready=down, live=down)
    if not facts.head_reachable:
        lost = Check(False, f"the head at {facts.head} does not renew rank {facts.rank}'s lease")
        return Probes(startup=lost, ready=lost, live=lost)
    if not facts.engine_started:
        starting = Check(False, f"rank {facts.rank}: starting vLLM (headless)")
        return Probes(startup=starting, ready=starting, live=Check(True, "starting vLLM"))
    joined = Check(True, f"rank {facts.rank} of the head at {facts.head}; vLLM (headless) runs")
    return Probes(startup=joined, ready=joined, live=joined)


def _engine_answers(facts: HeadFacts) -> Check:
    if not facts.engine_running:
        return Check(False, "vLLM is not running")
    if not facts.engine_healthy:
        return Check(False, "vLLM's /health does not answer 200 yet")
    if not facts.model_listed:
        return Check(False, "vLLM does not list the served model yet")
    return Check(True, "vLLM answers and lists the served model")


def _group_check(facts: HeadFacts) -> Check:
    counts = f"{facts.nodes}/{facts.expected_nodes} nodes, {facts.gpus}/{facts.expected_gpus} GPUs"
    if facts.lost_nodes:
        return Check(False, f"{counts}; lost node(s) {', '.join(facts.lost_nodes)}")
    if not facts.group_whole:
        return Check(False, f"{counts}; the group is not complete")
    return Check(True, f"{counts}; vLLM answers and the group is complete")


def _head_live(facts: HeadFacts, group: Check) -> Check:
    if facts.executor == "ray" and not facts.ray_running:
        return Check(False, "the Ray head is not running")
    if facts.engine_started and not facts.engine_running:
        return Check(False, "vLLM is not running")
    if facts.engine_answered_once and facts.engine_silent_s > ENGINE_SILENCE_LIMIT_S:
        return Check(False, f"vLLM's /health has not answered for {facts.engine_silent_s:.0f} s")
    if facts.group_formed and not group.ok:
        return Check(False, group.reason)
    if facts.executor == "mp":
        running = "vLLM runs" if facts.engine_started else "starting vLLM"
    else:
        running = "Ray and vLLM run" if facts.engine_started else "Ray runs"
    return Check(True, running + ("; the group is complete" if facts.group_formed else ""))


@dataclass
class HealthState:
    """The supervisor's shared state: written by its monitor loop, read by the status server."""

    role: str
    phase: str = "starting"
    probes: Probes = field(
        default_factory=lambda: Probes(
            startup=Check(False, "starting"),
            ready=Check(False, "starting"),
            live=Check(True, "starting"),
        )
    )
    facts: HeadFacts | WorkerFacts | None = None
    started_at: float = field(default_factory=time.monotonic)
    # Tells a restarted supervisor from the one before it (workers watch the head's).
    boot_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    timeline: dict[str, float] = field(default_factory=dict)  # event -> seconds since start
    group_spec: str = ""  # the chart's hash of the group's spec (MULTINODE_LLM_GROUP_SPEC)
    # The head's compile-cache key (compile_cache.EntryKey): Ray workers read it from /status,
    # because only the head knows the staged commit, and vLLM's Ray executor gives every worker
    # the head's VLLM_CACHE_ROOT, so each pod must prepare the head's entry.
    compile_cache_key: dict[str, str] | None = None
    # Restarts of this pod's supervisor by cause (health/restarts.py); every cause from the start.
    restarts: dict[str, int] = field(default_factory=zero_counts)
    # This supervisor's own metrics registry, made at its first scrape (exposition.metrics):
    # several states in one process (the tests) never collide in prometheus_client's global one.
    registry: CollectorRegistry | None = field(default=None, init=False, repr=False, compare=False)

    def mark(self, event: str) -> None:
        """Record when an event first happened (Ray up, group complete, engine ready, ...)."""
        self.timeline.setdefault(event, round(time.monotonic() - self.started_at, 3))

    def update(self, facts: HeadFacts | WorkerFacts) -> None:
        self.facts = facts
        self.probes = head_probes(facts) if isinstance(facts, HeadFacts) else worker_probes(facts)

    def kill_cause(self) -> str | None:
        """Why kubelet is stopping this supervisor, if a probe that kills says so: the restart
        cause of a failing liveness (or startup) probe; None while both pass."""
        if isinstance(self.facts, HeadFacts):
            return _head_kill_cause(self.facts, self.probes)
        if isinstance(self.facts, WorkerFacts):
            return _worker_kill_cause(self.facts, self.probes)
        return None

    def status(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "boot_id": self.boot_id,
            "phase": self.phase,
            "probes": asdict(self.probes),
            "facts": asdict(self.facts) if self.facts is not None else {},
            "timeline_s": dict(self.timeline),
            "group_spec": self.group_spec,
            "compile_cache_key": self.compile_cache_key,
            "uptime_s": round(time.monotonic() - self.started_at, 3),
        }

    def checks(self) -> list[tuple[str, Check]]:
        """(probe name, its check) for startup, ready and live."""
        return [(probe, getattr(self.probes, probe)) for probe in ("startup", "ready", "live")]

    def engine_ready(self) -> bool:
        """Whether vLLM answers /health and lists the served model now (head only)."""
        return isinstance(self.facts, HeadFacts) and _engine_answers(self.facts).ok


def _head_kill_cause(facts: HeadFacts, probes: Probes) -> str | None:
    """The cause of the head's failing liveness or startup probe, in ``_head_live``'s order."""
    if not probes.live.ok:
        ray_gone = facts.executor == "ray" and not facts.ray_running
        if ray_gone or (facts.engine_started and not facts.engine_running):
            return restarts.ENGINE_EXITED
        if facts.engine_answered_once and facts.engine_silent_s > ENGINE_SILENCE_LIMIT_S:
            return restarts.ENGINE_HUNG
        return restarts.WORKER_LOST  # the only other way a head is not live: a lost node
    if not probes.startup.ok:  # kubelet's startup budget passed
        return restarts.ENGINE_HUNG if facts.group_formed else restarts.GROUP_TIMEOUT
    return None


def _worker_kill_cause(facts: WorkerFacts, probes: Probes) -> str | None:
    if not probes.live.ok:
        node_gone = not facts.node_running and (facts.executor != "mp" or facts.engine_started)
        return restarts.ENGINE_EXITED if node_gone else restarts.HEAD_LOST
    if not probes.startup.ok:
        return restarts.GROUP_TIMEOUT
    return None
