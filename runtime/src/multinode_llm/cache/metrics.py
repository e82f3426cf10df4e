"""The cache's counters, rendered in Prometheus' text format on ``/metrics``.

A blob request is a *hit* (served from a stored blob), *coalesced* (joined a fill already in flight)
or a *miss* (started a fill). Bytes are counted where they cross the node's edge: blob bytes from
upstream, from peers, and served to clients and peers. Metadata traffic is counted in requests.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

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

    def gauge(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        """Register a value read at scrape time (store size, live peers...)."""
        self.gauges[name] = (help_text, read)

    def render(self) -> str:
        lines: list[str] = []
        for name, help_text in _HELP.items():
            lines += _family(name, "counter", help_text, [("", getattr(self, name))])
        samples = [
            (f'{{kind="{kind}"}}', count) for kind, count in sorted(self.upstream_requests.items())
        ]
        lines += _family("upstream_requests_total", "counter", "requests sent upstream", samples)
        errors = [
            (f'{{kind="{kind}"}}', count) for kind, count in sorted(self.upstream_errors.items())
        ]
        lines += _family(
            "upstream_errors_total",
            "counter",
            "upstream requests that failed: no answer, a timeout, a broken body or a 5xx",
            errors,
        )
        for name, (help_text, read) in sorted(self.gauges.items()):
            lines += _family(name, "gauge", help_text, [("", read())])
        return "\n".join(lines) + "\n"


def _family(
    name: str, kind: str, help_text: str, samples: Sequence[tuple[str, float]]
) -> list[str]:
    full = f"{PREFIX}_{name}"
    lines = [f"# HELP {full} {help_text}", f"# TYPE {full} {kind}"]
    lines += [f"{full}{labels} {value}" for labels, value in samples]
    return lines


def parse(text: str) -> dict[str, float]:
    """Sample name (with labels) -> value, for tests and benchmarks reading ``/metrics``."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name.removeprefix(f"{PREFIX}_")] = float(value)
    return values
