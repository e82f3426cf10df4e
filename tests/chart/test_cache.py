"""The Hub cache in the chart: the DaemonSet runs `multinode-llm cache serve` as DEVELOPERS.md
describes it, its two Services and its NetworkPolicy select exactly its pods, the
ClusterStorageContainer and the download Job reach it through the node-local Service, and a
release may run the cache alone."""

from __future__ import annotations

import re
from typing import Any

import pytest
from multinode_llm_testing.chartlib import (
    NAMESPACE,
    deep_merge,
    install_dry_run,
    scenarios,
    template,
)

SCENARIOS = scenarios()
CACHE_ONLY: dict[str, Any] = {"modelCache": {"enabled": True}}
NODE_LOCAL = "http://llm-multinode-llm-cache.serving.svc.cluster.local:8090"
PEERS_HOST = "llm-multinode-llm-cache-peers.serving.svc.cluster.local"
UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9}


def cache_objects(major: str, values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The cache's objects by kind (Services by their role), rendered from values."""
    render = template(major, values=values)
    services = {s["spec"].get("clusterIP") == "None": s for s in render.of_kind("Service")}
    policies = [
        p
        for p in render.of_kind("NetworkPolicy")
        if p["metadata"]["labels"].get("app.kubernetes.io/component") == "model-cache"
    ]
    return {
        "daemonset": render.one("DaemonSet"),
        "peers": services[True],
        "local": services[False],
        **({"policy": policies[0]} if policies else {}),
    }


def container(daemonset: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = daemonset["spec"]["template"]["spec"]["containers"]
    [cache] = containers
    return cache


def flags(args: list[str]) -> dict[str, str]:
    """`--flag value` pairs of `cache serve`'s arguments."""
    assert args[:2] == ["cache", "serve"]
    rest = args[2:]
    assert len(rest) % 2 == 0, rest
    return dict(zip(rest[::2], rest[1::2], strict=True))


def quantity_bytes(text: str) -> int:
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", text)
    assert match, text
    number, unit = match.groups()
    return int(float(number) * UNITS[unit])


def test_a_cache_only_release_renders_the_cache_and_nothing_of_a_model(major: str) -> None:
    render = template(major, values=CACHE_ONLY)
    assert render.returncode == 0, render.stderr
    kinds = sorted(d["kind"] for d in render.documents())
    assert kinds == ["DaemonSet", "NetworkPolicy", "Service", "Service"]


def test_the_daemonset_runs_cache_serve_from_the_slim_image_as_the_contract_says(
    major: str,
) -> None:
    objects = cache_objects(major, CACHE_ONLY)
    cache = container(objects["daemonset"])
    assert cache["image"] == "ghcr.io/multinode-llm/multinode-llm-cache:0.1.0"
    assert cache["command"] == ["multinode-llm"]
    assert flags(cache["args"]) == {
        "--upstream": "https://huggingface.co",
        "--store": "/var/cache/multinode-llm",
        "--port": "8090",
        "--peers": PEERS_HOST,
        "--advertise-address": "$(POD_IP)",
        "--max-store-size": "500Gi",
    }
    env = {e["name"]: e for e in cache["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["PYTHONDONTWRITEBYTECODE"]["value"] == "1"
    assert cache["ports"] == [{"name": "http", "containerPort": 8090, "protocol": "TCP"}]
    probes = {p: cache[f"{p}Probe"]["httpGet"] for p in ("startup", "readiness", "liveness")}
    assert probes == {
        "startup": {"path": "/live", "port": 8090},
        "readiness": {"path": "/ready", "port": 8090},
        "liveness": {"path": "/live", "port": 8090},
    }
    mount = next(m for m in cache["volumeMounts"] if m["name"] == "store")
    assert mount["mountPath"] == flags(cache["args"])["--store"]


def test_the_cache_runs_non_root_on_a_read_only_root_without_an_api_token(major: str) -> None:
    daemonset = cache_objects(major, CACHE_ONLY)["daemonset"]
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    context = container(daemonset)["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert "hostNetwork" not in pod
    assert all("hostPath" not in v for v in pod["volumes"]), "emptyDir is the default store"


def test_an_empty_dir_store_gives_the_kubelet_limit_headroom_over_the_cache_limit(
    major: str,
) -> None:
    for size, headroom in (("500Gi", 0.05), ("1.5Ti", 0.05), ("2Gi", None), ("20000M", None)):
        values = deep_merge(CACHE_ONLY, {"modelCache": {"store": {"size": size}}})
        daemonset = cache_objects(major, values)["daemonset"]
        [volume] = daemonset["spec"]["template"]["spec"]["volumes"]
        limit = quantity_bytes(volume["emptyDir"]["sizeLimit"])
        store = quantity_bytes(flags(container(daemonset)["args"])["--max-store-size"])
        assert store == quantity_bytes(size)
        # 5% over the store, and at least 1Gi: the metadata beside the blobs must never make the
        # kubelet evict the pod before the cache evicts a blob.
        want = store + max(store * 0.05, 2**30) if headroom is None else store * (1 + headroom)
        assert want <= limit < want + 2**20, (size, volume)


def test_a_host_path_store_is_a_directory_on_the_node_and_keeps_the_size_limit(
    major: str,
) -> None:
    values = deep_merge(
        CACHE_ONLY, {"modelCache": {"store": {"type": "hostPath", "hostPath": "/mnt/nvme/hub"}}}
    )
    daemonset = cache_objects(major, values)["daemonset"]
    [volume] = daemonset["spec"]["template"]["spec"]["volumes"]
    assert volume == {
        "name": "store",
        "hostPath": {"path": "/mnt/nvme/hub", "type": "DirectoryOrCreate"},
    }
    assert flags(container(daemonset)["args"])["--max-store-size"] == "500Gi"


def test_both_services_select_exactly_the_cache_pods_on_its_port(major: str) -> None:
    objects = cache_objects(major, CACHE_ONLY)
    daemonset = objects["daemonset"]
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert daemonset["spec"]["selector"]["matchLabels"] == pod_labels
    assert pod_labels["app.kubernetes.io/component"] == "model-cache"
    for role in ("peers", "local"):
        spec = objects[role]["spec"]
        assert spec["selector"] == pod_labels, role
        assert spec["ports"] == [
            {"name": "http", "port": 8090, "targetPort": "http", "protocol": "TCP"}
        ]


def test_peers_find_every_cache_pod_ready_or_not_through_the_headless_service(major: str) -> None:
    objects = cache_objects(major, CACHE_ONLY)
    peers = objects["peers"]
    assert peers["spec"]["clusterIP"] == "None"
    # Each cache probes /live itself; publishing starting pods gives every node the same peer set.
    assert peers["spec"]["publishNotReadyAddresses"] is True
    host = f"{peers['metadata']['name']}.{NAMESPACE}.svc.cluster.local"
    assert flags(container(objects["daemonset"])["args"])["--peers"] == host


def test_clients_reach_the_cache_on_their_own_node(major: str) -> None:
    local = cache_objects(major, CACHE_ONLY)["local"]
    assert local["spec"]["internalTrafficPolicy"] == "Local"
    assert local["spec"].get("type", "ClusterIP") == "ClusterIP"
    assert f"http://{local['metadata']['name']}.{NAMESPACE}.svc.cluster.local:8090" == NODE_LOCAL


def test_the_policy_opens_8090_to_peers_and_clients_only_and_egress_to_dns_peers_upstream(
    major: str,
) -> None:
    objects = cache_objects(major, CACHE_ONLY)
    policy = objects["policy"]["spec"]
    cache_pods = {"matchLabels": objects["daemonset"]["spec"]["selector"]["matchLabels"]}
    assert policy["podSelector"] == cache_pods
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    [ingress] = policy["ingress"]
    assert ingress["ports"] == [{"port": 8090, "protocol": "TCP"}]
    peers, download_jobs, isvc_pods = ingress["from"]
    assert peers == {"podSelector": cache_pods}
    assert download_jobs == {
        "namespaceSelector": {},
        "podSelector": {"matchLabels": {"app.kubernetes.io/component": "model-download"}},
    }
    assert isvc_pods["podSelector"]["matchExpressions"] == [
        {"key": "serving.kserve.io/inferenceservice", "operator": "Exists"}
    ]
    dns, to_peers, upstream = policy["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    assert "to" not in dns
    assert to_peers == {
        "ports": [{"port": 8090, "protocol": "TCP"}],
        "to": [{"podSelector": cache_pods}],
    }
    assert upstream == {"ports": [{"port": 443, "protocol": "TCP"}]}


@pytest.mark.parametrize(
    ("upstream", "port"),
    [
        ("https://huggingface.co", 443),
        ("http://hf-mirror.internal", 80),
        ("https://hf-mirror.internal:8443/hub", 8443),
    ],
)
def test_upstream_egress_opens_the_upstream_port_to_the_given_destinations(
    helm4: str, upstream: str, port: int
) -> None:
    to = [{"ipBlock": {"cidr": "10.20.0.0/16"}}]
    values = deep_merge(CACHE_ONLY, {"modelCache": {"upstream": upstream, "upstreamEgress": to}})
    objects = cache_objects(helm4, values)
    assert objects["policy"]["spec"]["egress"][-1] == {
        "ports": [{"port": port, "protocol": "TCP"}],
        "to": to,
    }
    assert flags(container(objects["daemonset"])["args"])["--upstream"] == upstream


def test_network_policy_disabled_renders_no_cache_policy(major: str) -> None:
    values = deep_merge(CACHE_ONLY, {"networkPolicy": {"enabled": False}})
    assert "policy" not in cache_objects(major, values)


def test_the_storage_container_is_opt_in(major: str) -> None:
    assert template(major, values=CACHE_ONLY).of_kind("ClusterStorageContainer") == []


def test_the_storage_container_runs_kserves_initializer_against_the_node_local_cache(
    major: str,
) -> None:
    render = template(major, [SCENARIOS["model-cache"]])
    csc = render.one("ClusterStorageContainer")
    assert csc["metadata"]["name"] == "hf-through-cache"
    assert "namespace" not in csc["metadata"]
    spec = csc["spec"]
    assert spec["container"]["image"] == "docker.io/kserve/storage-initializer:v0.20.0"
    env = {e["name"]: e["value"] for e in spec["container"]["env"]}
    assert env == {"HF_ENDPOINT": NODE_LOCAL, "HF_HUB_DISABLE_XET": "1"}
    assert spec["supportedUriFormats"] == [{"prefix": "hf://"}]
    # KServe injects only initContainer storage containers.
    assert spec["workloadType"] == "initContainer"


def test_a_model_release_pointed_at_a_cache_release_downloads_from_its_node_local_service(
    major: str,
) -> None:
    """The URL a cache release's notes print is the Service that release renders."""
    cache_release = template(
        major, [SCENARIOS["model-cache"]], release="hub", namespace="model-cache"
    )
    services = {s["metadata"]["name"]: s for s in cache_release.of_kind("Service")}
    local = services["hub-multinode-llm-cache"]
    assert local["spec"]["internalTrafficPolicy"] == "Local"
    endpoint = f"http://{local['metadata']['name']}.model-cache.svc.cluster.local:8090"
    job = template(major, [SCENARIOS["hf-gated-cache"]]).one("Job", "model-download")
    [download] = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in download["env"]}
    assert env["HF_ENDPOINT"] == endpoint
    assert env["HF_HUB_DISABLE_XET"] == "1"


def test_the_cache_image_can_be_pinned_by_digest(helm4: str) -> None:
    daemonset = template(helm4, [SCENARIOS["cache-hostpath"]]).one("DaemonSet")
    assert container(daemonset)["image"] == (
        "ghcr.io/multinode-llm/multinode-llm-cache:0.1.0@sha256:"
        "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
    )


def test_a_cache_beside_a_model_leaves_the_model_objects_as_they_were(helm4: str) -> None:
    model = {"model": {"uri": "pvc://models/llama"}}
    alone = template(helm4, values=model).documents()
    beside = template(helm4, values=deep_merge(model, CACHE_ONLY)).documents()
    cache_kinds = {"DaemonSet", "Service"}
    not_cache = [
        d
        for d in beside
        if d["kind"] not in cache_kinds
        and d["metadata"].get("labels", {}).get("app.kubernetes.io/component") != "model-cache"
    ]
    assert not_cache == alone


def test_the_notes_say_where_the_cache_answers_and_how_releases_use_it(helm4: str) -> None:
    values = deep_merge(CACHE_ONLY, {"modelCache": {"storageContainer": {"enabled": True}}})
    result = install_dry_run(helm4, values=values)
    assert result.returncode == 0, result.stderr
    notes = result.notes()
    assert f"--set modelCache.endpoint={NODE_LOCAL}" in notes
    assert "rollout status daemonset/llm-multinode-llm-cache" in notes
    assert "storageContainerName: llm-multinode-llm-serving-hf" in notes
    assert "port-forward" not in notes.split("Hits")[0], "no model: no predictor port-forward"
    with_model = install_dry_run(
        helm4, values=deep_merge(CACHE_ONLY, {"model": {"uri": "pvc://models/llama"}})
    )
    notes = with_model.notes()
    assert "port-forward svc/llm-multinode-llm-predictor 8080:80" in notes
    assert "Model cache:" in notes
    assert f"modelCache.endpoint={NODE_LOCAL}" in notes


def test_the_cache_gets_extra_environment_such_as_a_proxy_after_its_own(major: str) -> None:
    proxy = [{"name": "HTTPS_PROXY", "value": "http://proxy.internal:3128"}]
    values = deep_merge(CACHE_ONLY, {"modelCache": {"env": proxy}})
    env = container(cache_objects(major, values)["daemonset"])["env"]
    names = [entry["name"] for entry in env]
    assert names[:2] == ["POD_IP", "PYTHONDONTWRITEBYTECODE"]
    assert env[-1] == proxy[0]
