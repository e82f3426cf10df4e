"""No user map can repeat a key the chart writes into the same map.

A label, annotation or variable set twice renders a duplicate key (or an env entry KServe merges
over the chart's), and the last copy, the user's, is the one the API server keeps: the
InferenceService would run as Serverless while the chart rendered Standard. For each scenario, every
key the chart writes into the InferenceService's and the runtime's labels and annotations, the pod
templates' annotations, the containers' env and the monitoring objects' labels is set in the user
map that renders beside it, all at once: the render must refuse each one, naming the key and what
decides it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from multinode_llm_testing.chartlib import (
    deep_merge,
    load_values_file,
    scenarios,
    template,
)

SCENARIOS = scenarios()
# One of each kind of group and object: an hf:// model, RDMA and Multus, the mp executor, the
# monitors and alerts, the cache.
COVERING = ("hf-tp2-pp2", "placement-rdma", "mp", "monitoring", "model-cache")
# What a refusal without an owner would say (the helper's fallback): no chart key may need it.
NO_OWNER = "the chart decides it; remove it from"


def env_names(container: dict[str, Any]) -> set[str]:
    return {e["name"] for e in container.get("env", [])}


def head_and_worker(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(role, container) of a runtime spec or an InferenceService predictor."""
    for container in [*spec.get("containers", []), spec.get("model", {})]:
        if container:
            yield "head", container
    for container in spec.get("workerSpec", {}).get("containers", []):
        yield "worker", container


def chart_keys(docs: list[dict[str, Any]], values: dict[str, Any]) -> dict[str, set[str]]:
    """The keys the chart wrote, by the value path of the user map beside them (the scenario's own
    user keys taken out)."""
    found: dict[str, set[str]] = {}

    def add(path: str, keys: Any) -> None:
        found.setdefault(path, set()).update(keys)

    for doc in docs:
        meta, kind = doc["metadata"], doc["kind"]
        if kind == "InferenceService":
            add("inferenceService.labels", meta.get("labels", {}))
            add("inferenceService.annotations", meta.get("annotations", {}))
            predictor = doc["spec"]["predictor"]
            for role, container in head_and_worker(predictor):
                add(f"{role}.env", env_names(container))
        elif kind in ("ServingRuntime", "ClusterServingRuntime"):
            add("runtime.labels", meta.get("labels", {}))
            add("runtime.annotations", meta.get("annotations", {}))
            spec = doc["spec"]
            add("podAnnotations", spec.get("annotations", {}))
            add("podAnnotations", spec["workerSpec"].get("annotations", {}))
            for role, container in head_and_worker(spec):
                add(f"{role}.env", env_names(container))
        elif kind in ("PodMonitor", "ServiceMonitor", "PrometheusRule"):
            add("monitoring.labels", meta.get("labels", {}))
            for group in doc["spec"].get("groups", []):
                for rule in group["rules"]:
                    add("monitoring.rules.alertLabels", rule.get("labels", {}))
        elif kind == "DaemonSet":
            [cache] = doc["spec"]["template"]["spec"]["containers"]
            add("modelCache.env", env_names(cache))
    own = {
        "inferenceService.labels": values.get("inferenceService", {}).get("labels", {}),
        "inferenceService.annotations": values.get("inferenceService", {}).get("annotations", {}),
        "runtime.labels": values.get("runtime", {}).get("labels", {}),
        "runtime.annotations": values.get("runtime", {}).get("annotations", {}),
        "podAnnotations": values.get("podAnnotations", {}),
        "head.env": {e["name"] for e in values.get("head", {}).get("env", [])},
        "worker.env": {e["name"] for e in values.get("worker", {}).get("env", [])},
        "modelCache.env": {e["name"] for e in values.get("modelCache", {}).get("env", [])},
        "monitoring.labels": values.get("monitoring", {}).get("labels", {}),
        "monitoring.rules.alertLabels": values.get("monitoring", {})
        .get("rules", {})
        .get("alertLabels", {}),
    }
    return {path: keys - set(own.get(path, ())) for path, keys in found.items() if keys}


def as_values(path: str, keys: set[str]) -> dict[str, Any]:
    """The user map at ``path`` holding every key (an env list for `*.env`)."""
    leaf: Any = (
        [{"name": k, "value": "x"} for k in sorted(keys)]
        if path.endswith(".env")
        else dict.fromkeys(sorted(keys), "x")
    )
    values: dict[str, Any] = leaf
    for part in reversed(path.split(".")):
        values = {part: values}
    return values


def expected(path: str, keys: set[str]) -> list[tuple[str, ...]]:
    """How the refusal of each key in the user map at ``path`` may start."""
    if path.endswith(".env"):
        return [(f"{path}[{i}] sets {k}:",) for i, k in enumerate(sorted(keys))]
    return [(f"{path}.{k}=x:", f"{path}.{k}:") for k in sorted(keys)]


@pytest.mark.parametrize("name", COVERING)
def test_every_key_the_chart_writes_is_refused_in_the_user_map_beside_it(
    major: str, name: str
) -> None:
    values = load_values_file(SCENARIOS[name])
    keys = chart_keys(template(major, [SCENARIOS[name]]).documents(), values)
    if values.get("model", {}).get("uri"):
        assert keys["inferenceService.annotations"] >= {
            "serving.kserve.io/deploymentMode",
            "serving.kserve.io/autoscalerClass",
        }
        assert keys["head.env"]
        assert keys["worker.env"]
    else:  # the cache alone
        assert keys["modelCache.env"] == {"POD_IP", "PYTHONDONTWRITEBYTECODE"}
    collide: dict[str, Any] = {}
    for path, names in keys.items():
        collide = deep_merge(collide, as_values(path, names))
    render = template(major, [SCENARIOS[name]], collide)
    assert render.returncode != 0, f"{name}: rendered with every chart key repeated"
    lines = [line.strip() for line in render.stderr.splitlines()]
    for path, names in keys.items():
        for starts in expected(path, names):
            refused = [line for line in lines if line.startswith(tuple(f"- {s}" for s in starts))]
            assert refused, f"{starts[0]} was not refused:\n{render.stderr}"
            assert NO_OWNER not in refused[0], refused[0]


@pytest.mark.parametrize(
    ("path", "key", "owner"),
    [
        ("inferenceService.annotations", "serving.kserve.io/deploymentMode", "kserve.version"),
        (
            "inferenceService.annotations",
            "serving.kserve.io/autoscalerClass",
            "inferenceService.autoscalerClass",
        ),
        ("inferenceService.labels", "app.kubernetes.io/instance", "the release name"),
        ("runtime.annotations", "multinode-llm/kserve-release", "kserve.version"),
    ],
)
def test_a_repeated_key_names_the_value_that_owns_it(
    major: str, path: str, key: str, owner: str
) -> None:
    values = deep_merge(load_values_file(SCENARIOS["hf-tp2-pp2"]), as_values(path, {key}))
    render = template(major, values=values)
    assert render.returncode != 0
    assert f"{path}.{key}=x: the chart sets this" in render.stderr, render.stderr
    assert f"{owner} decides it" in render.stderr, render.stderr
    assert "1 value(s) to fix" in render.stderr, render.stderr
