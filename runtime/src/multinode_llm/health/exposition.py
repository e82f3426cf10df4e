"""The supervisor's ``/metrics``: a ``HealthState`` as Prometheus metric families.

prometheus_client renders them; the families are built from the state at each scrape by a collector
in a registry of the supervisor's own (not the library's global one, which every state in one
process would share). docs/monitoring.md lists the names, types and labels; the chart's alerts and
dashboard read them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from multinode_llm.health.state import HeadFacts, HealthState, WorkerFacts


def metrics(state: HealthState) -> str:
    """The text exposition of ``state``, from its registry (made at the first scrape)."""
    if state.registry is None:
        state.registry = registry(state)
    return render(state.registry)


def registry(state: HealthState) -> CollectorRegistry:
    """A registry that exports ``state`` as it is at each scrape."""
    registry = CollectorRegistry()
    registry.register(_Exporter(state))
    return registry


def render(registry: CollectorRegistry) -> str:
    """The text format (version 0.0.4) of everything in ``registry``."""
    return generate_latest(registry).decode()


class _Exporter(Collector):
    def __init__(self, state: HealthState) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        return families(self.state)


def families(state: HealthState) -> Iterator[Metric]:
    """The state's metric families, as they are now."""
    role = state.role
    probes = [((role, probe), int(check.ok)) for probe, check in state.checks()]
    yield _gauge("probe_ok", "1 if the supervisor's probe passes, else 0.", "probe", probes)
    yield _gauge(
        "event_seconds",
        "When an event of the group first happened, in seconds since the supervisor started.",
        "event",
        [((role, event), seconds) for event, seconds in state.timeline.items()],
    )
    if state.group_spec:
        yield _gauge(
            "group_info",
            "The spec the group runs (the chart's hash of it).",
            "group_spec",
            [((role, state.group_spec), 1)],
        )
    if role == "head":
        yield from _head_families(state)
    elif role == "worker":
        yield from _worker_families(state)
    restarts = CounterMetricFamily(
        _full("restarts"),
        "Starts of this pod's supervisor after a previous run in the same pod ended, by the "
        "cause that run recorded as it left (unknown: it was killed without a word).",
        labels=["role", "cause"],
    )
    for cause, count in state.restarts.items():
        restarts.add_metric([role, cause], count)
    yield restarts


def _head_families(state: HealthState) -> Iterator[Metric]:
    facts = state.facts if isinstance(state.facts, HeadFacts) else None
    if facts is not None:
        gauges = {
            "group_nodes": ("Nodes alive in the group (Ray's, or mp's ranks).", facts.nodes),
            "group_nodes_expected": ("RAY_NODE_COUNT.", facts.expected_nodes),
            "group_gpus": ("GPUs registered with Ray (mp: TP x nodes).", facts.gpus),
            "group_gpus_expected": (
                "TENSOR_PARALLEL_SIZE x PIPELINE_PARALLEL_SIZE.",
                facts.expected_gpus,
            ),
            "group_lost_nodes": ("Nodes of the formed group that are lost.", len(facts.lost_nodes)),
        }
        for name, (text, value) in gauges.items():
            yield _role_gauge(name, text, state.role, value)
    yield _role_gauge(
        "engine_ready",
        "1 if vLLM answers /health and lists the served model now, else 0.",
        state.role,
        int(state.engine_ready()),
    )
    formed = state.timeline.get("group_complete")
    if formed is not None:  # absent until the group was first complete
        yield _role_gauge(
            "group_formation_seconds",
            "Seconds from the supervisor's start to the group first complete.",
            state.role,
            formed,
        )


def _worker_families(state: HealthState) -> Iterator[Metric]:
    facts = state.facts if isinstance(state.facts, WorkerFacts) else WorkerFacts()
    yield _role_gauge(
        "worker_joined",
        "1 if this worker's Ray node (mp: its rank's vLLM) is joined to the head's group now.",
        state.role,
        int(facts.node_running and facts.joined),
    )
    yield _role_gauge(
        "head_reachable",
        "1 if the head's Ray GCS (mp: its rank roster) answers this worker now, else 0.",
        state.role,
        int(facts.head_reachable),
    )


def _role_gauge(name: str, help_text: str, role: str, value: float) -> GaugeMetricFamily:
    """A gauge with one sample, labelled with the supervisor's role only."""
    family = GaugeMetricFamily(_full(name), help_text, labels=["role"])
    family.add_metric([role], value)
    return family


def _gauge(
    name: str, help_text: str, label: str, samples: Iterable[tuple[Sequence[str], float]]
) -> GaugeMetricFamily:
    """A gauge labelled ``role`` and ``label``: samples are ``((role, label value), value)``."""
    family = GaugeMetricFamily(_full(name), help_text, labels=["role", label])
    for labels, value in samples:
        family.add_metric(labels, value)
    return family


def _full(name: str) -> str:
    """A family's full name (a counter's without ``_total``: prometheus_client adds it)."""
    return f"multinode_llm_{name}"
