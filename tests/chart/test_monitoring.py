"""The monitoring objects (docs/monitoring.md): PodMonitors or ServiceMonitors, the PrometheusRule
and the Grafana dashboard.

They validate against the real Prometheus Operator CRDs (where PROMETHEUS_OPERATOR_CRD_DIR points at
them), render only when asked, and their PromQL is what Prometheus' own promtool accepts: every
alert fires on the series of its failure and stays quiet on a healthy group (`promtool test
rules`), and every dashboard query parses. The metrics they use are the contract docs/monitoring.md
lists, which the runtime emits.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from alerttests import unit_tests
from crdschema import crd_schemas_from_env, schema_errors
from multinode_llm_local import kserve
from multinode_llm_testing.chartlib import (
    EXAMPLES,
    MONITORING_KINDS,
    NAMESPACE,
    RELEASE,
    ROOT,
    Render,
    hack_script,
    helm,
    template,
)
from scrapelabels import (
    endpoint_target,
    pod_meta,
    pod_monitor_rules,
    pod_target,
    relabel,
    service_monitor_rules,
)

EXAMPLE = EXAMPLES / "values-monitoring.yaml"
DOCS = ROOT / "docs" / "monitoring.md"
RUNTIME = ROOT / "runtime" / "src" / "multinode_llm"
FULLNAME = f"{RELEASE}-multinode-llm"
ALL_ON = {
    "podMonitor": {"enabled": True},
    "rules": {"enabled": True},
    "dashboard": {"enabled": True},
}
MODEL = {"model": {"uri": "hf://Qwen/Qwen2.5-0.5B-Instruct"}}
CACHE = {"modelCache": {"enabled": True}}
# Durations short enough for promtool's unit tests.
SHORT = {"engineNotReadyFor": "10m", "cacheStoreFullFor": "10m"}
ALERTS = {
    "MultinodeLLMGroupDegraded",
    "MultinodeLLMEngineNotReady",
    "MultinodeLLMCrashLooping",
    "MultinodeLLMCacheUpstreamErrors",
    "MultinodeLLMCacheStoreFull",
    "MultinodeLLMDownloadJobFailed",
}


def monitored(release: dict[str, Any], **rules: Any) -> Render:
    monitoring = {**ALL_ON, "rules": {"enabled": True, **rules}}
    return template("helm4", values={**release, "monitoring": monitoring})


def service_monitored(release: dict[str, Any]) -> Render:
    """``release`` with ServiceMonitors in place of the PodMonitors, and the other objects on."""
    monitoring = {**ALL_ON, "podMonitor": {"enabled": False}, "serviceMonitor": {"enabled": True}}
    return template("helm4", values={**release, "monitoring": monitoring})


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@pytest.fixture(scope="module")
def prometheus_crds() -> dict[tuple[str, str], dict[str, Any]]:
    return crd_schemas_from_env(
        "PROMETHEUS_OPERATOR_CRD_DIR",
        "the Prometheus Operator's",
        "../shared/prometheus-operator-crds",
    )


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip(
            "promtool missing: run `bash hack/install-packages.sh promtool=prometheus` (as root)"
        )
    return str(found)


@pytest.fixture(scope="module")
def helm4_only() -> None:
    if not helm("helm4").exists():
        pytest.skip(f"{helm('helm4')} missing: run `bash hack/install-tools.sh`")


def rules_spec(render: Render) -> dict[str, Any]:
    spec: dict[str, Any] = render.one("PrometheusRule")["spec"]
    return spec


def alerts(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in spec["groups"] for rule in group["rules"]]


def dashboard(render: Render) -> dict[str, Any]:
    [config_map] = [
        d for d in render.of_kind("ConfigMap") if d["metadata"]["name"].endswith("-dashboard")
    ]
    [text] = config_map["data"].values()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) of every target of every panel."""
    return [
        (panel["title"], target["expr"])
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]


def run_promtool(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


# -- rendered objects ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "release", [MODEL, CACHE, {**MODEL, "modelCache": {"endpoint": "http://c:8090"}}]
)
def test_monitoring_objects_are_valid_under_the_prometheus_operator_crds_strictly(
    helm4_only: None, prometheus_crds: dict[tuple[str, str], dict[str, Any]], release: Any
) -> None:
    docs = [d for d in monitored(release).documents() if d["kind"] in MONITORING_KINDS]
    assert {d["kind"] for d in docs} == {"PodMonitor", "PrometheusRule"}
    for doc in docs:
        assert schema_errors(prometheus_crds[(doc["apiVersion"], doc["kind"])], doc) == []


def test_the_strict_crd_check_catches_a_typo_in_a_pod_monitor(
    helm4_only: None, prometheus_crds: dict[tuple[str, str], dict[str, Any]]
) -> None:
    monitor = monitored(MODEL).one("PodMonitor")
    monitor["spec"]["podMetricEndpoints"] = monitor["spec"].pop("podMetricsEndpoints")
    assert schema_errors(prometheus_crds[("monitoring.coreos.com/v1", "PodMonitor")], monitor)


@pytest.mark.parametrize(
    "release", [MODEL, CACHE, {**MODEL, "modelCache": {"endpoint": "http://c:8090"}}]
)
def test_service_monitors_are_valid_under_the_prometheus_operator_crds_strictly(
    helm4_only: None, prometheus_crds: dict[tuple[str, str], dict[str, Any]], release: Any
) -> None:
    docs = [d for d in service_monitored(release).documents() if d["kind"] in MONITORING_KINDS]
    assert {d["kind"] for d in docs} == {"ServiceMonitor", "PrometheusRule"}
    for doc in docs:
        assert schema_errors(prometheus_crds[(doc["apiVersion"], doc["kind"])], doc) == []


@pytest.mark.parametrize("release", [MODEL, CACHE], ids=["model", "cache"])
def test_a_service_monitor_gives_the_pod_monitors_series_labels(
    helm4_only: None, release: Any
) -> None:
    """Same ports, path, interval and relabelings, plus dropping the `service` label the operator
    adds to ServiceMonitor targets (its job default, the Service's name, is relabelled anyway)."""
    [pod_monitor] = monitored(release).of_kind("PodMonitor")
    [service_monitor] = service_monitored(release).of_kind("ServiceMonitor")
    assert service_monitor["metadata"]["name"] == pod_monitor["metadata"]["name"]
    drop_service = {"action": "labeldrop", "regex": "service"}
    expected = [
        {**e, "relabelings": [*e["relabelings"], drop_service]}
        for e in pod_monitor["spec"]["podMetricsEndpoints"]
    ]
    assert service_monitor["spec"]["endpoints"] == expected


Monitors = tuple[dict[str, Any], dict[str, Any]]


def scraped(
    meta: dict[str, str], monitors: Monitors, container: dict[str, Any], service: str
) -> list[tuple[str, dict[str, str] | None, dict[str, str] | None]]:
    """(port, PodMonitor's labels, ServiceMonitor's labels) of every named port of ``container``
    (of the pod ``meta`` describes) that the monitors scrape, as the operator's jobs label them."""
    pod_monitor, service_monitor = monitors
    by_port = {e["port"]: e for e in service_monitor["spec"]["endpoints"]}
    found = []
    for endpoint in pod_monitor["spec"]["podMetricsEndpoints"]:
        port = endpoint["port"]
        if port not in {p.get("name") for p in container.get("ports", [])}:
            continue
        via_pod = relabel(
            pod_target(meta, container["name"], port),
            pod_monitor_rules(pod_monitor, endpoint),
        )
        via_service = relabel(
            endpoint_target(meta, service, container["name"], port),
            service_monitor_rules(by_port[port]),
        )
        found.append((port, via_pod, via_service))
    return found


def both_monitors(release: dict[str, Any]) -> Monitors:
    [pod_monitor] = monitored(release).of_kind("PodMonitor")
    [service_monitor] = service_monitored(release).of_kind("ServiceMonitor")
    return pod_monitor, service_monitor


def test_head_and_worker_series_get_the_same_labels_from_either_monitor(
    helm4_only: None,
) -> None:
    """Relabelled the way the operator's scrape jobs do: job, inferenceservice, namespace, pod,
    container and endpoint, and no `service`, whichever monitor scrapes."""
    cluster = kserve.Cluster(kserve.releases.default())
    cluster.apply(service_monitored(MODEL).documents(), RELEASE, NAMESPACE)
    [reconciled] = cluster.reconcile()
    monitors = both_monitors(MODEL)
    ports: dict[str, list[str]] = {}
    for workload in (reconciled.head, reconciled.worker):
        meta = pod_meta(NAMESPACE, f"{workload.name}-0", "node-a", workload.labels)
        found = scraped(meta, monitors, workload.container, f"{FULLNAME}-metrics")
        ports[workload.role] = [port for port, _, _ in found]
        for port, via_pod, via_service in found:
            assert via_service == via_pod, (workload.role, port)
            assert via_pod is not None
            assert set(via_pod) == {
                "job",
                "inferenceservice",
                "namespace",
                "pod",
                "container",
                "endpoint",
            }
            assert (via_pod["job"], via_pod["inferenceservice"]) == (FULLNAME, FULLNAME)
            assert (via_pod["namespace"], via_pod["endpoint"]) == (NAMESPACE, port)
    assert ports == {"head": ["status", "http"], "worker": ["status"]}


def test_cache_series_get_the_same_labels_from_either_monitor(helm4_only: None) -> None:
    [daemon_set] = service_monitored(CACHE).of_kind("DaemonSet")
    template_ = daemon_set["spec"]["template"]
    meta = pod_meta(NAMESPACE, "cache-x", "node-a", template_["metadata"]["labels"])
    [container] = [c for c in template_["spec"]["containers"] if c["name"] == "cache"]
    service = f"{FULLNAME}-cache-metrics"
    [(port, via_pod, via_service)] = scraped(meta, both_monitors(CACHE), container, service)
    assert via_service == via_pod
    assert via_pod is not None
    assert set(via_pod) == {"job", "node", "namespace", "pod", "container", "endpoint"}
    assert (via_pod["job"], via_pod["node"], port) == (f"{FULLNAME}-cache", "node-a", "http")


@pytest.mark.parametrize("release", [MODEL, CACHE], ids=["model", "cache"])
def test_the_rules_are_the_same_with_either_monitor(helm4_only: None, release: Any) -> None:
    assert rules_spec(service_monitored(release)) == rules_spec(monitored(release))


def test_the_metrics_service_lists_head_and_workers_and_is_the_only_one_selected(
    helm4_only: None,
) -> None:
    """Its selector matches the pods KServe makes (local emulation of its controller); the
    ServiceMonitor's matches it and no other Service, KServe's included; workers have no port
    named `http`, so Kubernetes lists them under `status` only."""
    docs = service_monitored(MODEL).documents()
    cluster = kserve.Cluster(kserve.releases.default())
    cluster.apply(docs, RELEASE, NAMESPACE)
    [reconciled] = cluster.reconcile()
    [service] = [d for d in docs if d["kind"] == "Service"]
    assert service["metadata"]["name"] == f"{FULLNAME}-metrics"
    spec = service["spec"]
    assert spec["clusterIP"] == "None"
    assert spec["selector"] == {
        "serving.kserve.io/inferenceservice": FULLNAME,
        "component": "predictor",
    }
    assert matches(spec["selector"], reconciled.head.labels)
    assert matches(spec["selector"], reconciled.worker.labels)
    assert [(p["name"], p["targetPort"]) for p in spec["ports"]] == [
        ("http", "http"),
        ("status", "status"),
    ]
    [monitor] = [d for d in docs if d["kind"] == "ServiceMonitor"]
    wanted = monitor["spec"]["selector"]["matchLabels"]
    assert matches(wanted, service["metadata"]["labels"])
    kserves = cluster.services_of(NAMESPACE, reconciled.isvc_name)
    assert kserves
    assert not any(matches(wanted, s.labels) for s in kserves)


def test_the_cache_service_monitor_selects_only_its_metrics_service(helm4_only: None) -> None:
    """The cache's two Services carry the same labels: selecting them would scrape twice."""
    docs = service_monitored(CACHE).documents()
    [monitor] = [d for d in docs if d["kind"] == "ServiceMonitor"]
    wanted = monitor["spec"]["selector"]["matchLabels"]
    services = [d for d in docs if d["kind"] == "Service"]
    picked = [s["metadata"]["name"] for s in services if matches(wanted, s["metadata"]["labels"])]
    assert picked == [f"{FULLNAME}-cache-metrics"]
    [metrics] = [s for s in services if s["metadata"]["name"] == picked[0]]
    [daemon_set] = [d for d in docs if d["kind"] == "DaemonSet"]
    pod_labels = daemon_set["spec"]["template"]["metadata"]["labels"]
    assert matches(metrics["spec"]["selector"], pod_labels)
    assert [(p["name"], p["targetPort"]) for p in metrics["spec"]["ports"]] == [("http", "http")]


@pytest.mark.parametrize("release", [MODEL, CACHE], ids=["model", "cache"])
def test_nothing_monitoring_renders_unless_asked(helm4_only: None, release: Any) -> None:
    docs = template("helm4", values=release).documents()
    assert [d["kind"] for d in docs if d["kind"] in MONITORING_KINDS] == []
    components = {d["metadata"].get("labels", {}).get("app.kubernetes.io/component") for d in docs}
    assert components.isdisjoint({"monitoring", "dashboard", "metrics", "model-cache-metrics"})


def test_the_group_monitor_scrapes_vllm_and_the_supervisors_with_the_alerts_labels(
    helm4_only: None,
) -> None:
    render = monitored(MODEL)
    [monitor] = render.of_kind("PodMonitor")
    assert monitor["spec"]["selector"]["matchLabels"] == {
        "serving.kserve.io/inferenceservice": FULLNAME
    }
    endpoints = {e["port"]: e for e in monitor["spec"]["podMetricsEndpoints"]}
    assert set(endpoints) == {"status", "http"}
    for endpoint in endpoints.values():
        targets = {r["targetLabel"] for r in endpoint["relabelings"]}
        assert targets == {"job", "inferenceservice"}
    runtime = render.one("ServingRuntime")["spec"]
    head_ports = [(p["name"], p["containerPort"]) for p in runtime["containers"][0]["ports"]]
    worker_ports = [
        (p["name"], p["containerPort"]) for p in runtime["workerSpec"]["containers"][0]["ports"]
    ]
    # KServe's Service targets the head's first port.
    assert head_ports == [("http", 8080), ("status", 8081)]
    assert worker_ports == [("status", 8081)]


@pytest.mark.parametrize("version", kserve.releases.versions("supported"))
def test_kserve_adds_the_status_port_to_the_predictor_service_and_targets_8080_first(
    helm4_only: None, version: str
) -> None:
    """What the local emulation of KServe's service reconciler (createDefaultSvc) makes of the
    head's two ports: the first as port 80, the next as itself."""
    cluster = kserve.Cluster(kserve.releases.get(version))
    values = {**MODEL, "kserve": {"version": version}, "monitoring": ALL_ON}
    cluster.apply(template("helm4", values=values).documents(), RELEASE, NAMESPACE)
    [reconciled] = cluster.reconcile()
    [predictor] = [
        s for s in cluster.services_of(NAMESPACE, reconciled.isvc_name) if not s.headless
    ]
    assert predictor.ports == [(80, 8080), (8081, 8081)]


def test_the_cache_monitor_renders_with_the_cache(helm4_only: None) -> None:
    [monitor] = monitored(CACHE).of_kind("PodMonitor")
    assert monitor["metadata"]["name"] == f"{FULLNAME}-cache"
    assert monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "model-cache"
    )


def test_monitoring_labels_reach_every_monitoring_object(helm4_only: None) -> None:
    values = {**MODEL, "monitoring": {**ALL_ON, "labels": {"release": "kube-prometheus-stack"}}}
    docs = template("helm4", values=values).documents()
    picked = [d for d in docs if d["metadata"]["labels"].get("release") == "kube-prometheus-stack"]
    assert sorted(d["kind"] for d in picked) == ["ConfigMap", "PodMonitor", "PrometheusRule"]


def test_scrapers_are_let_in_where_clients_are_narrowed(helm4_only: None) -> None:
    scraper = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    gateway = {"podSelector": {"matchLabels": {"app": "gateway"}}}
    values = {
        **MODEL,
        "networkPolicy": {"clients": [gateway]},
        "monitoring": {"scrapers": [scraper]},
    }
    group = template("helm4", values=values).of_kind("NetworkPolicy")[0]
    [http] = [rule for rule in group["spec"]["ingress"] if "ports" in rule]
    assert {p["port"] for p in http["ports"]} == {8080, 8081}
    assert scraper in http["from"]
    assert gateway in http["from"]
    cache_values = {**CACHE, "monitoring": {"scrapers": [scraper]}}
    cache = template("helm4", values=cache_values).one("NetworkPolicy", "model-cache")
    [ingress] = cache["spec"]["ingress"]
    assert scraper in ingress["from"]


# -- the alerts ------------------------------------------------------------------------------


def test_every_alert_has_a_severity_a_summary_a_description_and_a_runbook_section(
    helm4_only: None,
) -> None:
    found = alerts(rules_spec(monitored(MODEL))) + alerts(rules_spec(monitored(CACHE)))
    assert {a["alert"] for a in found} == ALERTS
    sections = set(re.findall(r"(?m)^### (\w+)$", DOCS.read_text()))
    for alert in found:
        assert alert["labels"]["severity"] in {"critical", "warning"}, alert["alert"]
        annotations = alert["annotations"]
        assert f"release {RELEASE} in namespace {NAMESPACE}" in annotations["summary"]
        assert f"Release {RELEASE} in namespace {NAMESPACE}" in annotations["description"]
        anchor = annotations["runbook_url"].rpartition("#")[2]
        assert annotations["runbook_url"].endswith(f"docs/monitoring.md#{alert['alert'].lower()}")
        assert anchor in {s.lower() for s in sections}, alert["alert"]


def test_only_the_alerts_of_what_the_release_runs_render(helm4_only: None) -> None:
    def names(release: dict[str, Any]) -> set[str]:
        return {a["alert"] for a in alerts(rules_spec(monitored(release)))}

    group = {"MultinodeLLMGroupDegraded", "MultinodeLLMEngineNotReady", "MultinodeLLMCrashLooping"}
    assert names(MODEL) == group | {"MultinodeLLMDownloadJobFailed"}
    assert names({"model": {"uri": "pvc://models/qwen"}}) == group
    assert names(CACHE) == {"MultinodeLLMCacheUpstreamErrors", "MultinodeLLMCacheStoreFull"}


def test_engine_not_ready_waits_for_the_heads_startup_budget_by_default(helm4_only: None) -> None:
    def waits(values: dict[str, Any]) -> str:
        spec = rules_spec(monitored({**MODEL, **values}))
        [rule] = [a for a in alerts(spec) if a["alert"] == "MultinodeLLMEngineNotReady"]
        return str(rule["for"])

    assert waits({}) == "3600s"
    startup = {"periodSeconds": 5, "failureThreshold": 360, "initialDelaySeconds": 10}
    assert waits({"head": {"probes": {"startup": startup}}}) == "1810s"
    assert monitored(MODEL, engineNotReadyFor="20m").returncode == 0
    spec = rules_spec(monitored(MODEL, engineNotReadyFor="20m"))
    assert {a["for"] for a in alerts(spec) if a["alert"] == "MultinodeLLMEngineNotReady"} == {"20m"}


@pytest.mark.parametrize("release", [MODEL, CACHE], ids=["model", "cache"])
def test_promtool_accepts_the_rules(
    helm4_only: None, promtool: str, tmp_path: Path, release: Any
) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules_spec(monitored(release))))
    check = run_promtool(promtool, "check", "rules", "rules.yaml", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr


def without_annotations(spec: dict[str, Any]) -> dict[str, Any]:
    """The rules for `promtool test rules`, which compares annotations too: the unit tests are
    about expressions and labels; the annotations' templates are checked by `check rules`."""
    return {
        "groups": [
            {**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]}
            for g in spec["groups"]
        ]
    }


def test_every_alert_fires_on_its_failure_and_stays_quiet_on_a_healthy_group(
    helm4_only: None, promtool: str, tmp_path: Path
) -> None:
    model = monitored(MODEL, **SHORT)
    cache = monitored(CACHE, **SHORT)
    for name, render in (("model", model), ("cache", cache)):
        rules = without_annotations(rules_spec(render))
        (tmp_path / f"{name}.rules.yaml").write_text(yaml.safe_dump(rules))
    job = next(
        d["metadata"]["name"] for d in model.of_kind("Job") if "-download-" in d["metadata"]["name"]
    )
    tests = unit_tests(job)
    covered = {case["alertname"] for t in tests["tests"] for case in t["alert_rule_test"]}
    assert covered == ALERTS
    (tmp_path / "alerts.test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = run_promtool(promtool, "test", "rules", "alerts.test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


# -- the dashboard ---------------------------------------------------------------------------


GRAFANA_VARIABLES = {
    "$__rate_interval": "5m",
    "$namespace": NAMESPACE,
    "$inferenceservice": FULLNAME,
    "$cache": f"{FULLNAME}-cache",
}


def test_the_dashboard_is_valid_json_for_the_grafana_sidecar(helm4_only: None) -> None:
    render = monitored(MODEL)
    [config_map] = [
        d for d in render.of_kind("ConfigMap") if d["metadata"]["name"].endswith("-dashboard")
    ]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    board = dashboard(render)
    assert board["uid"].startswith("multinode-llm-")
    assert len(board["uid"]) <= 40  # Grafana's limit
    assert board["title"] == f"multinode-llm: {NAMESPACE}/{RELEASE}"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    titles = {t for t, _ in queries(board)}
    for wanted in ("Nodes joined / expected", "Engine ready", "Group formation"):
        assert wanted in titles
    for wanted in ("Restarts by cause", "Token throughput", "KV cache usage", "Hit ratio"):
        assert wanted in titles
    for wanted in ("Bytes", "Store use", "Time to first token"):
        assert wanted in titles
    other = template(
        "helm4", values={**MODEL, "monitoring": ALL_ON}, release="chat", namespace="team-b"
    )
    assert dashboard(other)["uid"] != board["uid"]


def test_the_dashboard_namespace_and_annotations_follow_the_values(helm4_only: None) -> None:
    values = {
        **MODEL,
        "monitoring": {
            "dashboard": {
                "enabled": True,
                "namespace": "grafana",
                "annotations": {"grafana_folder": "LLM"},
            }
        },
    }
    [config_map] = template("helm4", values=values).of_kind("ConfigMap")
    assert config_map["metadata"]["namespace"] == "grafana"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "LLM"}


def test_promtool_parses_every_dashboard_query(
    helm4_only: None, promtool: str, tmp_path: Path
) -> None:
    rules = []
    for i, (title, expr) in enumerate(queries(dashboard(monitored(MODEL)))):
        for variable, value in sorted(GRAFANA_VARIABLES.items(), key=lambda kv: -len(kv[0])):
            expr = expr.replace(variable, value)
        assert "$" not in expr, f"{title}: a Grafana variable left in {expr}"
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    (tmp_path / "dashboard.rules.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]})
    )
    check = run_promtool(promtool, "check", "rules", "dashboard.rules.yaml", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr


# -- the metric contract ---------------------------------------------------------------------


METRIC = re.compile(r"\b(multinode_llm_[a-z0-9_]+|vllm:[a-z0-9_]+)")


def contract() -> set[str]:
    """The metric names docs/monitoring.md lists (its table's first column)."""
    return set(re.findall(r"(?m)^\| `([a-z0-9_:]+)`", DOCS.read_text()))


def family(name: str) -> str:
    """The name a contract lists for a series: histograms' _bucket dropped, vLLM's counters'
    _total dropped (prometheus_client adds it; vLLM names the counter without it)."""
    name = name.removesuffix("_bucket")
    return name.removesuffix("_total") if name.startswith("vllm:") else name


def used_metrics() -> dict[str, set[str]]:
    """Metric families each consumer uses: the alerts' expressions, the dashboard's queries."""
    model, cache = monitored(MODEL), monitored(CACHE)
    exprs = [a["expr"] for r in (model, cache) for a in alerts(rules_spec(r))]
    return {
        "rules": {family(m) for e in exprs for m in METRIC.findall(e)},
        "dashboard": {family(m) for _, e in queries(dashboard(model)) for m in METRIC.findall(e)},
    }


def test_every_metric_the_rules_and_the_dashboard_use_is_in_the_contract(
    helm4_only: None,
) -> None:
    listed = contract()
    assert listed, f"no metric table in {DOCS}"
    for consumer, names in used_metrics().items():
        assert sorted(names - listed) == [], consumer


def test_every_multinode_llm_metric_of_the_contract_is_emitted_by_the_runtime() -> None:
    sources = {
        "multinode_llm_cache_": "\n".join(p.read_text() for p in (RUNTIME / "cache").glob("*.py")),
        "multinode_llm_": "\n".join(p.read_text() for p in (RUNTIME / "health").glob("*.py")),
    }
    missing = []
    for name in sorted(contract()):
        prefix = next((p for p in sources if name.startswith(p)), None)
        if prefix is None:
            continue  # vLLM's own
        short = name.removeprefix(prefix)
        stem = short.removesuffix("_total")
        if f'"{short}"' not in sources[prefix] and f'"{stem}"' not in sources[prefix]:
            missing.append(name)
    assert missing == []


# -- upgrades --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "monitoring.podMonitor.enabled",
        "monitoring.serviceMonitor.enabled",
        "monitoring.rules.enabled",
        "monitoring.dashboard.enabled",
        "monitoring.scrapers",
    ],
)
def test_turning_monitoring_on_restarts_nothing(helm4_only: None, value: str) -> None:
    module = hack_script("upgrade-matrix")
    [change] = [c for c in module.CHANGES if c.value == value]
    outcome = module.measure(change)
    assert outcome.generations[0] == outcome.generations[1]
    assert outcome.head == []
    assert outcome.worker == []
    assert outcome.head_deployment == []
    assert outcome.worker_deployment == []
    assert outcome.new_services == []
    assert set(outcome.jobs.values()) <= {"same"}
