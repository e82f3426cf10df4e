"""The labels a target gets from the Prometheus Operator's scrape job for a PodMonitor or a
ServiceMonitor endpoint, worked out in Python: the discovery labels Kubernetes service discovery
attaches (role pod, role endpoints), the relabelings the operator puts before the endpoint's own
(as its generated configs for the two kinds do: namespace, pod, container, job, endpoint; plus
service for a ServiceMonitor), then the endpoint's relabelings, with Prometheus' semantics for
the actions the chart uses (replace, keep, drop, labeldrop).

The selector and port keep rules are left out: which targets exist is checked on the objects
(tests/chart/test_monitoring.py); this module answers what labels those targets carry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

Labels = dict[str, str]
Rule = Mapping[str, Any]


def sanitize(name: str) -> str:
    """A Kubernetes label name as Prometheus' service discovery writes it."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def pod_meta(namespace: str, pod: str, node: str, labels: Mapping[str, str]) -> Labels:
    """What role pod (and, for a pod-backed endpoint, role endpoints) says about a pod."""
    meta = {
        "__meta_kubernetes_namespace": namespace,
        "__meta_kubernetes_pod_name": pod,
        "__meta_kubernetes_pod_node_name": node,
    }
    for key, value in labels.items():
        meta[f"__meta_kubernetes_pod_label_{sanitize(key)}"] = value
        meta[f"__meta_kubernetes_pod_labelpresent_{sanitize(key)}"] = "true"
    return meta


def pod_target(pod: Labels, container: str, port: str) -> Labels:
    """Role pod's target for one named container port."""
    return {
        **pod,
        "__meta_kubernetes_pod_container_name": container,
        "__meta_kubernetes_pod_container_port_name": port,
    }


def endpoint_target(pod: Labels, service: str, container: str, port: str) -> Labels:
    """Role endpoints' target for one Service port backed by a pod's container port."""
    return {
        **pod_target(pod, container, port),
        "__meta_kubernetes_service_name": service,
        "__meta_kubernetes_endpoint_port_name": port,
        "__meta_kubernetes_endpoint_address_target_kind": "Pod",
        "__meta_kubernetes_endpoint_address_target_name": pod["__meta_kubernetes_pod_name"],
    }


def _copy(source: str, target: str) -> Rule:
    return {"sourceLabels": [source], "targetLabel": target}


def pod_monitor_rules(monitor: Mapping[str, Any], endpoint: Mapping[str, Any]) -> list[Rule]:
    meta = monitor["metadata"]
    return [
        _copy("__meta_kubernetes_namespace", "namespace"),
        _copy("__meta_kubernetes_pod_container_name", "container"),
        _copy("__meta_kubernetes_pod_name", "pod"),
        {"targetLabel": "job", "replacement": f"{meta['namespace']}/{meta['name']}"},
        {"targetLabel": "endpoint", "replacement": endpoint["port"]},
        *endpoint.get("relabelings", []),
    ]


def service_monitor_rules(endpoint: Mapping[str, Any]) -> list[Rule]:
    kind_and_name = [
        "__meta_kubernetes_endpoint_address_target_kind",
        "__meta_kubernetes_endpoint_address_target_name",
    ]
    return [
        {"sourceLabels": kind_and_name, "regex": "Node;(.*)", "targetLabel": "node"},
        {"sourceLabels": kind_and_name, "regex": "Pod;(.*)", "targetLabel": "pod"},
        _copy("__meta_kubernetes_namespace", "namespace"),
        _copy("__meta_kubernetes_service_name", "service"),
        _copy("__meta_kubernetes_pod_name", "pod"),
        _copy("__meta_kubernetes_pod_container_name", "container"),
        _copy("__meta_kubernetes_service_name", "job"),
        {"targetLabel": "endpoint", "replacement": endpoint["port"]},
        *endpoint.get("relabelings", []),
    ]


def _expand(replacement: str, match: re.Match[str]) -> str:
    return re.sub(r"\$\{?(\d+)\}?", lambda m: match.group(int(m.group(1))) or "", replacement)


def _apply(labels: Labels, rule: Rule) -> Labels | None:
    action = str(rule.get("action", "replace")).lower()
    regex = re.compile(str(rule.get("regex", "(.*)")))
    if action == "labeldrop":
        return {k: v for k, v in labels.items() if not regex.fullmatch(k)}
    value = str(rule.get("separator", ";")).join(
        labels.get(s, "") for s in rule.get("sourceLabels", [])
    )
    match = regex.fullmatch(value)
    if action == "keep":
        return labels if match else None
    if action == "drop":
        return None if match else labels
    if action != "replace":
        raise ValueError(f"relabel action {action} is not modelled here")
    if match is None:
        return labels
    result = _expand(str(rule.get("replacement", "$1")), match)
    target = str(rule["targetLabel"])
    if result:
        return {**labels, target: result}
    return {k: v for k, v in labels.items() if k != target}


def relabel(discovered: Labels, rules: Sequence[Rule]) -> Labels | None:
    """The target's labels after ``rules``, without the ``__`` ones; None when dropped."""
    labels: Labels | None = dict(discovered)
    for rule in rules:
        if labels is None:
            return None
        labels = _apply(labels, rule)
    if labels is None:
        return None
    return {k: v for k, v in labels.items() if not k.startswith("__")}
