"""The way in (traffic.*, docs/traffic.md): the Ingress and the Gateway API HTTPRoute send the API's
paths, and only those, to the Service each KServe release makes for the head; the HTTPRoute is
valid under the real Gateway API CRDs, strictly."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crdschema import crd_schemas, schema_errors
from multinode_llm_local import kserve
from multinode_llm_local.kserve import releases
from multinode_llm_testing import gateway_api
from multinode_llm_testing.chartlib import install_dry_run, kserve_releases, template

TABLE = kserve_releases()
SUPPORTED = [v for v, r in TABLE["releases"].items() if r["status"] == "supported"]
ROUTED: dict[str, Any] = {
    "model": {"uri": "hf://Qwen/Qwen2.5-0.5B-Instruct"},
    "traffic": {
        "ingress": {"enabled": True, "hosts": ["llm.example.com"]},
        "httpRoute": {"enabled": True, "parentRefs": [{"name": "inference-gateway"}]},
    },
}
KINDS = ("Ingress", "HTTPRoute")


def rendered(values: dict[str, Any] = ROUTED, major: str = "helm4") -> dict[str, dict[str, Any]]:
    """Kind -> the one object of that kind, for the kinds of the way in."""
    return {d["kind"]: d for d in template(major, values=values).documents() if d["kind"] in KINDS}


def with_traffic(**changes: Any) -> dict[str, Any]:
    values = copy.deepcopy(ROUTED)
    values["traffic"].update(changes)
    return values


def ingress_backends(ingress: dict[str, Any]) -> list[tuple[str, str, str, int]]:
    """(host, path, Service, port) of each path of each rule."""
    return [
        (
            rule.get("host", ""),
            p["path"],
            p["backend"]["service"]["name"],
            p["backend"]["service"]["port"]["number"],
        )
        for rule in ingress["spec"]["rules"]
        for p in rule["http"]["paths"]
    ]


def route_backends(route: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(path prefix, Service, port) of each match of each rule."""
    return [
        (match["path"]["value"], ref["name"], ref["port"])
        for rule in route["spec"]["rules"]
        for match in rule["matches"]
        for ref in rule["backendRefs"]
    ]


@pytest.fixture(scope="module")
def gateway_crds() -> dict[tuple[str, str], dict[str, Any]]:
    try:
        return crd_schemas(gateway_api.crd_dir())
    except gateway_api.UnavailableError as why:
        pytest.skip(f"the Gateway API CRDs are not to be had here: {why}")


def test_neither_is_rendered_by_default(major: str) -> None:
    assert rendered({"model": ROUTED["model"]}, major) == {}


def test_both_send_the_api_paths_and_only_them_to_the_predictor_service(major: str) -> None:
    objects = rendered(major=major)
    assert ingress_backends(objects["Ingress"]) == [
        ("llm.example.com", "/v1", "llm-multinode-llm-predictor", 80),
        ("llm.example.com", "/v2", "llm-multinode-llm-predictor", 80),
    ]
    assert route_backends(objects["HTTPRoute"]) == [
        ("/v1", "llm-multinode-llm-predictor", 80),
        ("/v2", "llm-multinode-llm-predictor", 80),
    ]
    assert all(
        p["pathType"] == "Prefix"
        for r in objects["Ingress"]["spec"]["rules"]
        for p in r["http"]["paths"]
    )


def test_an_ingress_without_hosts_has_one_rule_for_every_host() -> None:
    ingress = rendered(with_traffic(ingress={"enabled": True}))["Ingress"]
    [rule] = ingress["spec"]["rules"]
    assert "host" not in rule
    assert "ingressClassName" not in ingress["spec"]


def test_the_paths_value_is_the_one_list_both_route() -> None:
    objects = rendered(with_traffic(paths=["/v1/chat/completions", "/metrics"]))
    assert [p for _, p, _, _ in ingress_backends(objects["Ingress"])] == [
        "/v1/chat/completions",
        "/metrics",
    ]
    assert [p for p, _, _ in route_backends(objects["HTTPRoute"])] == [
        "/v1/chat/completions",
        "/metrics",
    ]


def test_the_route_waits_ten_minutes_by_default_and_leaves_it_to_the_gateway_when_empty() -> None:
    [rule] = rendered()["HTTPRoute"]["spec"]["rules"]
    assert rule["timeouts"] == {"request": "10m"}
    changed = with_traffic(httpRoute={**ROUTED["traffic"]["httpRoute"], "requestTimeout": ""})
    [rule] = rendered(changed)["HTTPRoute"]["spec"]["rules"]
    assert "timeouts" not in rule


def test_neither_takes_the_name_kserve_gives_its_own_ingress() -> None:
    """KServe makes an Ingress named after the InferenceService once PredictorReady is True
    (kube_ingress_reconciler.go, createRawIngress, v0.15.0 to v0.20.0; a multi-node group gets
    there on 0.15 and 0.20): the chart's must not be that one."""
    names = {d["metadata"]["name"] for d in rendered().values()}
    assert names == {"llm-multinode-llm-api"}


@pytest.mark.parametrize("version", SUPPORTED)
def test_the_backend_is_the_service_each_release_makes_for_the_head(version: str) -> None:
    values = copy.deepcopy(ROUTED)
    values["kserve"] = {"version": version}
    objects = template("helm4", values=values).documents()
    cluster = kserve.Cluster(releases.get(version))
    cluster.apply(objects, "llm", "serving")
    [group] = cluster.reconcile()
    [service] = [s for s in group.running_services if not s.headless]
    [route] = [d for d in objects if d["kind"] == "HTTPRoute"]
    assert {(name, port) for _, name, port in route_backends(route)} == {(service.name, 80)}
    assert (80, 8080) in service.ports
    assert service.selector.items() <= group.head.labels.items()
    assert not service.selector.items() <= group.worker.labels.items()


def test_the_http_route_is_valid_under_the_gateway_api_crds_strictly(
    gateway_crds: dict[tuple[str, str], dict[str, Any]], major: str
) -> None:
    route = rendered(major=major)["HTTPRoute"]
    schema = gateway_crds[(route["apiVersion"], route["kind"])]
    assert schema_errors(schema, route) == []


def test_the_strict_check_catches_a_field_the_gateway_api_lacks(
    gateway_crds: dict[tuple[str, str], dict[str, Any]],
) -> None:
    route = rendered()["HTTPRoute"]
    route["spec"]["rules"][0]["timeouts"]["requestTimeout"] = "10m"
    schema = gateway_crds[(route["apiVersion"], route["kind"])]
    assert schema_errors(schema, route) != []


def test_every_value_the_schema_admits_for_a_parent_ref_is_one_the_crd_admits(
    gateway_crds: dict[tuple[str, str], dict[str, Any]],
) -> None:
    ref = {
        "group": "gateway.networking.k8s.io",
        "kind": "Gateway",
        "namespace": "gateway-system",
        "name": "inference-gateway",
        "sectionName": "https",
        "port": 443,
    }
    values = with_traffic(
        httpRoute={"enabled": True, "parentRefs": [ref], "hostnames": ["*.example.com"]}
    )
    route = rendered(values)["HTTPRoute"]
    assert route["spec"]["parentRefs"] == [ref]
    assert schema_errors(gateway_crds[(route["apiVersion"], route["kind"])], route) == []


def test_the_notes_say_how_to_reach_it_from_outside() -> None:
    notes = install_dry_run("helm4", values=ROUTED).notes()
    assert "through the Ingress llm-multinode-llm-api (/v1, /v2)" in notes
    assert "curl -s http://llm.example.com/v1/models" in notes
    assert "get httproute llm-multinode-llm-api" in notes
    assert "Gateway inference-gateway" in notes


def test_the_notes_warn_that_narrowed_clients_must_admit_the_gateway() -> None:
    values = copy.deepcopy(ROUTED)
    values["networkPolicy"] = {"clients": [{"podSelector": {"matchLabels": {"app": "client"}}}]}
    assert (
        "it must admit the Ingress controller's pods"
        in install_dry_run("helm4", values=values).notes()
    )
    assert "must admit" not in install_dry_run("helm4", values=ROUTED).notes()
