"""The emulation as a checked oracle: what real KServe made of a release, against what
``multinode_llm_local.kserve`` says it makes of the same objects.

The emulation gets the chart's objects as Helm sent them (``helm get manifest`` with Helm's
ownership metadata, as ``kserve.Cluster.apply`` adds it). Compared, for the head and the worker:

- the Deployment KServe's controller made: replicas, strategy, the pod template's labels;
- a pod of it, as KServe's pod webhook left it (the emulation's pod template is both at once):
  annotations, volumes and, for the serving container, command, args, env, resources, image,
  volume mounts and probes; the service-account token volume the API server adds is left out;
- the Services: name, selector, headless, ``publishNotReadyAddresses``, ports;
- the InferenceService's conditions, which the emulation computes from the real Deployments'
  status.

Any difference fails the test that calls ``differences``, until the emulation matches.
"""

from __future__ import annotations

from typing import Any

from multinode_llm_local import kserve
from multinode_llm_local.k8s import Obj
from multinode_llm_local.kserve import releases, status
from realcluster import Installed

CONTAINER_FIELDS = ("command", "args", "env", "resources", "volumeMounts", "image")
API_ACCESS = "kube-api-access-"  # the API server's ServiceAccount admission, not KServe's


def differences(group: Installed, objects: list[Obj]) -> list[str]:
    """Every difference between the real cluster's objects and the emulation's for ``objects``
    (the chart as Helm applied it for this group), each as ``what: real ..., emulation ...``."""
    release = releases.get(group.cluster.kserve)
    result = kserve.reconcile(objects, group.namespace, _generation(group), release, group.release)
    found: list[str] = []
    for workload in result.workloads:
        real = group.cluster.get("-n", group.namespace, f"deployment/{workload.name}")
        found += _compare(
            f"deployment/{workload.name}",
            _deployment_view(real),
            _emulated_deployment_view(workload),
        )
        pods = group.pods(workload.role)
        if not pods:
            found.append(f"deployment/{workload.name}: real KServe's made no pod")
            continue
        real_pod = _pod_view(pods[0]["metadata"], pods[0]["spec"])
        emulated_pod = _pod_view({"annotations": workload.annotations}, workload.pod_spec)
        found += _compare(f"pod of {workload.name}", real_pod, emulated_pod)
    real_services = {
        s["metadata"]["name"]: s for s in group.cluster.items("services", "-n", group.namespace)
    }
    for service in result.running_services:
        real_service = real_services.get(service.name)
        if real_service is None:
            found.append(f"service/{service.name}: real none, emulation {service}")
            continue
        found += _compare(
            f"service/{service.name}", _service_view(real_service), _emulated_service_view(service)
        )
    found += _conditions(group, release, result)
    return found


def _generation(group: Installed) -> int:
    isvc = group.cluster.get("-n", group.namespace, f"inferenceservice/{group.isvc}")
    return int(isvc["metadata"]["generation"])


def _deployment_view(deployment: Obj) -> dict[str, Any]:
    spec = deployment["spec"]
    labels = dict(spec["template"]["metadata"].get("labels") or {})
    return {"replicas": spec.get("replicas"), "strategy": spec.get("strategy"), "labels": labels}


def _emulated_deployment_view(workload: kserve.Workload) -> dict[str, Any]:
    strategy = workload.strategy or {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
    }
    return {"replicas": workload.replicas, "strategy": strategy, "labels": workload.labels}


def _pod_view(metadata: Obj, spec: Obj) -> dict[str, Any]:
    """What KServe decides of a pod, flattened to comparable paths."""
    volumes = [v for v in spec.get("volumes") or [] if not v["name"].startswith(API_ACCESS)]
    view: dict[str, Any] = {
        "annotations": metadata.get("annotations") or {},
        "volumes": sorted((v["name"], sorted(set(v) - {"name"})) for v in volumes),
    }
    for container in spec["containers"]:
        where = f"containers[{container['name']}]"
        for name in CONTAINER_FIELDS:
            value = container.get(name)
            if name == "env":
                value = {e["name"]: _value_from(e) for e in value or []}
            if name == "volumeMounts":
                value = [m for m in value or [] if not m["name"].startswith(API_ACCESS)]
            view[f"{where}.{name}"] = value
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            view[f"{where}.{probe}"] = _probe(container.get(probe))
    return view


def _value_from(var: Obj) -> Any:
    """An env var's value, with the API server's default of a fieldRef (``apiVersion: v1``)."""
    if "valueFrom" not in var:
        return var.get("value", "")
    source = var["valueFrom"]
    if "fieldRef" in source:
        return {"fieldRef": {"apiVersion": "v1", **source["fieldRef"]}}
    return source


def _probe(probe: Obj | None) -> Obj | None:
    """A probe as the API server stores one: its defaults filled, zero delays left out."""
    if probe is None:
        return None
    probe = {k: v for k, v in probe.items() if not (k == "initialDelaySeconds" and v == 0)}
    defaults = {
        "timeoutSeconds": 1,
        "periodSeconds": 10,
        "successThreshold": 1,
        "failureThreshold": 3,
    }
    filled = {**defaults, **probe}
    if "httpGet" in filled:
        filled["httpGet"] = {"path": "/", "scheme": "HTTP", **filled["httpGet"]}
    return filled


def _service_view(service: Obj) -> dict[str, Any]:
    spec = service["spec"]
    return {
        "selector": spec.get("selector") or {},
        "headless": spec.get("clusterIP") == "None",
        "publishNotReadyAddresses": bool(spec.get("publishNotReadyAddresses")),
        "ports": sorted(
            (p["port"], p.get("targetPort", p["port"])) for p in spec.get("ports") or []
        ),
    }


def _emulated_service_view(service: kserve.Service) -> dict[str, Any]:
    return {
        "selector": service.selector,
        "headless": service.headless,
        "publishNotReadyAddresses": service.publish_not_ready,
        "ports": sorted(service.ports),
    }


def _compare(what: str, real: dict[str, Any], emulated: dict[str, Any]) -> list[str]:
    found = []
    for key in sorted(set(real) | set(emulated)):
        if real.get(key) != emulated.get(key):
            found.append(f"{what} {key}: real {real.get(key)!r}, emulation {emulated.get(key)!r}")
    return found


def _conditions(
    group: Installed, release: releases.Release, result: kserve.Reconciled
) -> list[str]:
    """The InferenceService's conditions: real KServe's, and the emulation's from the same
    (real) Deployment statuses."""
    deployments = {
        w.role: group.cluster.get("-n", group.namespace, f"deployment/{w.name}")["status"]
        for w in result.workloads
    }
    emulated = status.conditions(release, deployments.get("head"), deployments.get("worker"))
    isvc = group.cluster.get("-n", group.namespace, f"inferenceservice/{group.isvc}")
    real = {c["type"]: c for c in isvc["status"].get("conditions") or []}
    found = []
    for kind, expected in emulated.items():
        got = real.get(kind, {})
        if got.get("status") != expected["status"]:
            real_one = f"{got.get('status')!r} ({got.get('reason', '')})"
            emulated_one = f"{expected['status']!r} ({expected['reason']})"
            found.append(
                f"inferenceservice/{group.isvc} condition {kind}: real {real_one}, "
                f"emulation {emulated_one}"
            )
    return found
