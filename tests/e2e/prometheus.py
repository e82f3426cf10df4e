"""A real Prometheus (Debian's 2.42, ``/usr/bin/prometheus``) scraping a local cluster the way the
Prometheus Operator would scrape it for the chart's PodMonitor, with the chart's PrometheusRule.

What stands in for what:

- Discovery: the operator gives Prometheus ``kubernetes_sd_configs: [{role: pod}]``. There is no
  API server here, so ``discovered_targets`` writes what that discovery yields for the local
  cluster's pods (one target per named container port, with the same ``__meta_kubernetes_*``
  labels) into a ``file_sd`` file, rewritten by ``Prometheus.sync_targets`` (a pod's IP and
  labels stay across container restarts here, but rewriting keeps it honest if they change).
- The scrape config: ``scrape_configs`` builds, per PodMonitor endpoint, the job the operator
  generates (``podMonitor/<ns>/<name>/<i>``): its relabelings keep the pods the selector matches
  and the port the endpoint names, drop finished pods, and set ``namespace``, ``pod``,
  ``container``, ``endpoint``, ``job`` and the ``podTargetLabels``. So it is Prometheus itself that
  decides which pods the chart's selector matches, as in a cluster.
- Rules: each PrometheusRule's ``spec`` is a Prometheus rule file as it stands (the operator
  writes it out unchanged).
- Timing, the one deliberate difference: scrapes and rule evaluations every second (the test
  waits on them), whatever interval the PodMonitor asks for.

Reaching the pods: every pod's netns is on a bridge that holds an address in the root namespace
(``local/netns.py``), so the host reaches each pod's IP directly, as the e2e tests' own status
checks do. Prometheus therefore runs in the root namespace, listening on loopback only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from multinode_llm_local.state import ClusterPlan
from multinode_llm_testing.ports import free_port

PROMETHEUS = "prometheus"  # Debian's package `prometheus` (hack/install-packages.sh prometheus)
INTERVAL = "1s"  # scrape and evaluation interval: the test waits on both
READY_S = 60
STOP_S = 15
Obj = dict[str, Any]

# The keys of a PodMonitor's RelabelConfig (camelCase) in Prometheus's config (snake_case).
_RELABEL_KEYS = {
    "sourceLabels": "source_labels",
    "targetLabel": "target_label",
    "separator": "separator",
    "regex": "regex",
    "replacement": "replacement",
    "modulus": "modulus",
    "action": "action",
}


def prerequisites(group: bool = True) -> str:
    """Why a real Prometheus (scraping a local cluster, with ``group``) cannot run here, or ""."""
    if group and os.geteuid() != 0:
        return "needs root (the local cluster's network namespaces)"
    if shutil.which(PROMETHEUS) is None:
        return (
            "needs Debian's prometheus (/usr/bin/prometheus): bash hack/install-packages.sh "
            "prometheus (tox -e e2e runs it)"
        )
    return ""


def sanitize(name: str) -> str:
    """A Kubernetes label name as a Prometheus one (as kubernetes_sd and the operator make it)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def discovered_targets(plan: ClusterPlan, status: Mapping[str, Any]) -> list[Obj]:
    """What ``kubernetes_sd_configs: [{role: pod}]`` would discover in the local cluster: a file_sd
    target group per named container port of every pod with an IP."""
    phases = {pod["name"]: pod for pod in status.get("pods", [])}
    groups: list[Obj] = []
    for pod in plan.pods:
        if not pod.ip or pod.pending:
            continue
        now = phases.get(pod.name, {})
        meta = {
            "__meta_kubernetes_namespace": pod.namespace,
            "__meta_kubernetes_pod_name": pod.name,
            "__meta_kubernetes_pod_ip": pod.ip,
            "__meta_kubernetes_pod_phase": str(now.get("phase") or "Pending"),
            "__meta_kubernetes_pod_ready": str(bool(now.get("ready"))).lower(),
        }
        for key, value in pod.labels.items():
            meta[f"__meta_kubernetes_pod_label_{sanitize(key)}"] = value
            meta[f"__meta_kubernetes_pod_labelpresent_{sanitize(key)}"] = "true"
        for container in pod.containers:
            for port_name, number in sorted(container.ports.items()):
                labels = {
                    **meta,
                    "__meta_kubernetes_pod_container_name": container.name,
                    "__meta_kubernetes_pod_container_init": "false",
                    "__meta_kubernetes_pod_container_port_name": port_name,
                    "__meta_kubernetes_pod_container_port_number": str(number),
                    "__meta_kubernetes_pod_container_port_protocol": "TCP",
                }
                groups.append({"targets": [f"{pod.ip}:{number}"], "labels": labels})
    return groups


def _selector_relabelings(selector: Mapping[str, Any]) -> list[Obj]:
    """The operator's keep/drop rules for a label selector (matchLabels and matchExpressions)."""
    rules: list[Obj] = []
    for key, value in sorted((selector.get("matchLabels") or {}).items()):
        label = sanitize(key)
        rules.append(
            {
                "action": "keep",
                "source_labels": [
                    f"__meta_kubernetes_pod_label_{label}",
                    f"__meta_kubernetes_pod_labelpresent_{label}",
                ],
                "regex": f"({re.escape(str(value))});true",
            }
        )
    for expression in selector.get("matchExpressions") or []:
        label = sanitize(expression["key"])
        values = "|".join(re.escape(str(v)) for v in expression.get("values") or [])
        operator = expression["operator"]
        by_value = [
            f"__meta_kubernetes_pod_label_{label}",
            f"__meta_kubernetes_pod_labelpresent_{label}",
        ]
        presence = [f"__meta_kubernetes_pod_labelpresent_{label}"]
        rule = {
            "In": {"action": "keep", "source_labels": by_value, "regex": f"({values});true"},
            "NotIn": {"action": "drop", "source_labels": by_value, "regex": f"({values});true"},
            "Exists": {"action": "keep", "source_labels": presence, "regex": "true"},
            "DoesNotExist": {"action": "drop", "source_labels": presence, "regex": "true"},
        }[operator]
        rules.append(rule)
    return rules


def _namespaces(monitor: Obj) -> list[str]:
    """The namespaces the PodMonitor's discovery covers; empty means every namespace."""
    chosen = monitor["spec"].get("namespaceSelector") or {}
    if chosen.get("any"):
        return []
    return list(chosen.get("matchNames") or [monitor["metadata"]["namespace"]])


def _relabel(config: Obj) -> Obj:
    rule = {_RELABEL_KEYS[k]: v for k, v in config.items() if k in _RELABEL_KEYS}
    if "action" in rule:
        rule["action"] = str(rule["action"]).lower()
    return rule


def scrape_configs(monitor: Obj, targets_file: Path) -> list[Obj]:
    """The scrape jobs the Prometheus Operator generates for one PodMonitor, over ``targets_file``
    (the stand-in for its kubernetes_sd_configs), at the test's interval."""
    namespace, name = monitor["metadata"]["namespace"], monitor["metadata"]["name"]
    spec = monitor["spec"]
    jobs = []
    for index, endpoint in enumerate(spec.get("podMetricsEndpoints") or []):
        relabelings: list[Obj] = []
        namespaces = _namespaces(monitor)
        if namespaces:  # kubernetes_sd's `namespaces: {names: [...]}`
            relabelings.append(
                {
                    "action": "keep",
                    "source_labels": ["__meta_kubernetes_namespace"],
                    "regex": "|".join(re.escape(n) for n in namespaces),
                }
            )
        relabelings += _selector_relabelings(spec.get("selector") or {})
        port = endpoint.get("port")
        if port:
            relabelings.append(
                {
                    "action": "keep",
                    "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                    "regex": re.escape(port),
                }
            )
        relabelings.append(
            {
                "action": "drop",
                "source_labels": ["__meta_kubernetes_pod_phase"],
                "regex": "(Failed|Succeeded)",
            }
        )
        for source, target in (
            ("__meta_kubernetes_namespace", "namespace"),
            ("__meta_kubernetes_pod_container_name", "container"),
            ("__meta_kubernetes_pod_name", "pod"),
        ):
            relabelings.append({"source_labels": [source], "target_label": target})
        for label in spec.get("podTargetLabels") or []:
            relabelings.append(
                {
                    "source_labels": [f"__meta_kubernetes_pod_label_{sanitize(label)}"],
                    "target_label": sanitize(label),
                    "regex": "(.+)",
                    "replacement": "${1}",
                }
            )
        relabelings.append({"target_label": "job", "replacement": f"{namespace}/{name}"})
        job_label = spec.get("jobLabel")
        if job_label:
            relabelings.append(
                {
                    "source_labels": [f"__meta_kubernetes_pod_label_{sanitize(job_label)}"],
                    "target_label": "job",
                    "regex": "(.+)",
                    "replacement": "${1}",
                }
            )
        if port:
            relabelings.append({"target_label": "endpoint", "replacement": port})
        relabelings += [_relabel(r) for r in endpoint.get("relabelings") or []]
        job: Obj = {
            "job_name": f"podMonitor/{namespace}/{name}/{index}",
            "honor_labels": bool(endpoint.get("honorLabels", False)),
            "scrape_interval": INTERVAL,  # the test's, not endpoint["interval"]
            "scrape_timeout": INTERVAL,
            "metrics_path": endpoint.get("path") or "/metrics",
            "scheme": endpoint.get("scheme") or "http",
            "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": INTERVAL}],
            "relabel_configs": relabelings,
        }
        if endpoint.get("params"):
            job["params"] = endpoint["params"]
        metric_relabelings = endpoint.get("metricRelabelings") or []
        if metric_relabelings:
            job["metric_relabel_configs"] = [_relabel(r) for r in metric_relabelings]
        jobs.append(job)
    return jobs


def rule_groups(rules: Obj) -> list[Obj]:
    """A PrometheusRule's groups as a rule file holds them, evaluated at the test's interval."""
    return [{**group, "interval": INTERVAL} for group in rules["spec"].get("groups") or []]


def monitoring_objects(objects: Sequence[Obj]) -> tuple[list[Obj], list[Obj]]:
    """The rendered PodMonitors and PrometheusRules."""
    monitors = [o for o in objects if o.get("kind") == "PodMonitor"]
    rules = [o for o in objects if o.get("kind") == "PrometheusRule"]
    return monitors, rules


class Prometheus:
    """A Prometheus process on 127.0.0.1 with its config, targets, rules and TSDB in one temporary
    directory; ``running`` starts it and removes all of it after."""

    def __init__(self, directory: Path, port: int) -> None:
        self.directory = directory
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.targets_file = directory / "targets.json"
        self.config_file = directory / "prometheus.yml"
        self.rules_file = directory / "rules.yml"
        self.log_file = directory / "prometheus.log"
        self.process: subprocess.Popen[bytes] | None = None

    def configure(self, monitors: Sequence[Obj], rules: Sequence[Obj]) -> None:
        jobs = [job for monitor in monitors for job in scrape_configs(monitor, self.targets_file)]
        groups = [group for each in rules for group in rule_groups(each)]
        self.rules_file.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
        config = {
            "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
            "rule_files": [str(self.rules_file)],
            "scrape_configs": jobs,
        }
        self.config_file.write_text(yaml.safe_dump(config, sort_keys=False))

    def sync_targets(self, plan: ClusterPlan, status: Mapping[str, Any]) -> None:
        """Rewrite the discovery file when the pods changed (file_sd picks it up by itself)."""
        text = json.dumps(discovered_targets(plan, status), indent=1, sort_keys=True)
        if not self.targets_file.is_file() or self.targets_file.read_text() != text:
            temporary = self.targets_file.with_suffix(".tmp")
            temporary.write_text(text)
            temporary.replace(self.targets_file)

    def start(self) -> None:
        argv = [
            PROMETHEUS,
            f"--config.file={self.config_file}",
            f"--storage.tsdb.path={self.directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=info",
        ]
        with self.log_file.open("ab") as log:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        deadline = time.monotonic() + READY_S
        while not self._ready():
            if self.process.poll() is not None:
                raise AssertionError(
                    f"prometheus exited at start (code {self.process.returncode}): {self.log()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"prometheus not ready after {READY_S}s: {self.log()}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=STOP_S)

    def log(self, lines: int = 30) -> str:
        text = self.log_file.read_text(errors="replace") if self.log_file.is_file() else ""
        return "\n".join(text.splitlines()[-lines:])

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                return int(answer.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def api(self, path: str, **params: str) -> Any:
        """The ``data`` of a GET on Prometheus's HTTP API (``/api/v1/...``)."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expression: str) -> list[Obj]:
        """The instant vector of ``expression`` now: ``[{"metric": {...}, "value": [t, "v"]}]``."""
        data = self.api("query", query=expression)
        assert data["resultType"] == "vector", data
        return list(data["result"])

    def samples(self, expression: str, start: float, end: float) -> list[float]:
        """The timestamps (seconds since the epoch) at which ``expression`` had a sample between
        ``start`` and ``end``, one step per evaluation interval, every series together."""
        data = self.api(
            "query_range", query=expression, start=f"{start:.3f}", end=f"{end:.3f}", step=INTERVAL
        )
        return sorted(float(t) for series in data["result"] for t, _ in series["values"])

    def targets(self) -> list[Obj]:
        return list(self.api("targets", state="active")["activeTargets"])

    def alerts(self, name: str) -> list[Obj]:
        """Alerts named ``name`` now (pending or firing)."""
        return [a for a in self.api("alerts")["alerts"] if a["labels"].get("alertname") == name]


@contextlib.contextmanager
def running(
    monitors: Sequence[Obj], rules: Sequence[Obj], plan: ClusterPlan, status: Mapping[str, Any]
) -> Iterator[Prometheus]:
    """A Prometheus scraping the local cluster of ``plan``; stopped by PID and removed after."""
    directory = Path(tempfile.mkdtemp(prefix="mnl-prometheus-"))
    prometheus = Prometheus(directory, free_port())
    try:
        prometheus.configure(monitors, rules)
        prometheus.sync_targets(plan, status)
        prometheus.start()
        yield prometheus
    finally:
        prometheus.stop()
        if prometheus.process is not None:
            print(f"--- {prometheus.log_file} (last lines) ---\n{prometheus.log()}")
        shutil.rmtree(directory, ignore_errors=True)
