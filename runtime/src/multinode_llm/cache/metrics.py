"""The cache's counters, exported in Prometheus' text format on ``/metrics`` by prometheus_client.

A blob request is a *hit* (served from a stored blob), *coalesced* (joined a fill already in flight)
or a *miss* (started a fill). Bytes are counted where they cross the node's edge: blob bytes from
upstream, from peers, and served to clients and peers. Metadata traffic is counted in requests.

The counts live in plain fields (the hot paths add to an int); a collector turns them into metric
families at scrape time, in a registry of this server's own, so that several caches in one process
(the tests) never share or collide in prometheus_client's global registry.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# The text format every Prometheus reads (what generate_latest writes).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

PREFIX = "multinode_llm_cache"

_HELP = {
    "hits_total": "blob requests served from a stored, verified blob",
    "misses_total": "blob requests that started a fill (from a peer or upstream)",
    "coalesced_total": "blob requests that joined a fill already in flight",
    "upstream_bytes_total": "blob bytes received from the upstream hub",
    "peer_bytes_total": "blob bytes received from peer caches",
    "served_bytes_total": "blob bytes sent to clients and peers",
    "range_requests_total": "blob GETs that asked for a byte range",
    "fills_failed_total": "fills that ended without a verified blob",
    "peer_retries_total": "fills that moved to another source after a peer failed or lied",
    "corrupt_total": "fill attempts whose bytes did not match the blob's hash",
    "connections_shed_total": "connections closed to stay within --max-connections",
}


@dataclass
class Metrics:
    hits_total: int = 0
    misses_total: int = 0
    coalesced_total: int = 0
    upstream_bytes_total: int = 0
    peer_bytes_total: int = 0
    served_bytes_total: int = 0
    range_requests_total: int = 0
    fills_failed_total: int = 0
    peer_retries_total: int = 0
    corrupt_total: int = 0
    connections_shed_total: int = 0
    upstream_requests: Counter[str] = field(default_factory=Counter)  # by kind: meta | blob
    # Upstream requests that failed (no answer, a timeout, a cut body, a 5xx), by kind; both kinds
    # are exported from the start so that increase() sees the first failure.
    upstream_errors: Counter[str] = field(default_factory=lambda: Counter(meta=0, blob=0))
    gauges: dict[str, tuple[str, Callable[[], float]]] = field(default_factory=dict)
    registry: CollectorRegistry = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_Exporter(self))

    def gauge(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        """Register a value read at scrape time (store size, live peers...)."""
        self.gauges[name] = (help_text, read)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _Exporter(Collector):
    """The counts of one ``Metrics`` as metric families, read at each scrape."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        metrics = self.metrics
        for name, help_text in _HELP.items():
            yield CounterMetricFamily(f"{PREFIX}_{name}", help_text, value=getattr(metrics, name))
        yield _by_kind(
            "upstream_requests_total", "requests sent upstream", metrics.upstream_requests
        )
        yield _by_kind(
            "upstream_errors_total",
            "upstream requests that failed: no answer, a timeout, a broken body or a 5xx",
            metrics.upstream_errors,
        )
        for name, (help_text, read) in sorted(metrics.gauges.items()):
            yield GaugeMetricFamily(f"{PREFIX}_{name}", help_text, value=read())


def _by_kind(name: str, help_text: str, counts: Counter[str]) -> CounterMetricFamily:
    family = CounterMetricFamily(f"{PREFIX}_{name}", help_text, labels=["kind"])
    for kind, count in sorted(counts.items()):
        family.add_metric([kind], count)
    return family


def parse(text: str) -> dict[str, float]:
    """Sample name (with labels) -> value, for tests and benchmarks reading ``/metrics``."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name.removeprefix(f"{PREFIX}_")] = float(value)
    return values
