"""``group.backend=lws`` (docs/lws.md): a LeaderWorkerSet of ``groups.replicas`` groups that runs
the same pods KServe would make of the chart's InferenceService, valid under LeaderWorkerSet's own
CRD (strictly, from the module ``local/go/lws`` pins), behind a Service of KServe's name and ports.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crdschema import crd_schemas, schema_errors
from multinode_llm.errors import UserError
from multinode_llm_local import kserve
from multinode_llm_local.controlplane import lws
from multinode_llm_local.kserve import releases
from multinode_llm_testing.chartlib import install_dry_run, scenarios, template

MODEL = {"uri": "hf://Qwen/Qwen2.5-0.5B-Instruct"}
LWS: dict[str, Any] = {
    "model": MODEL,
    "parallelism": {"tensor": 2, "pipeline": 3},
    "group": {"backend": "lws"},
    "groups": {"replicas": 2},
}
# What each backend names its own way: KServe's Services and names, LWS's leader address.
BACKEND_ENV = {
    "HEAD_SVC",
    "WORKER_SVC",
    "MODEL_NAME",
    "ISVC_NAME",
    "INFERENCE_SERVICE_NAME",
    "MULTINODE_LLM_GROUP_SPEC",
}
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"  # on every pod of the set (lws v0.9.0)
QUEUE_METRIC = {
    "type": "Pods",
    "pods": {
        "metric": {"name": "vllm_num_requests_waiting"},
        "target": {"type": "AverageValue", "averageValue": "4"},
    },
}
AUTOSCALED = {"autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 4,
                              "metrics": [QUEUE_METRIC]}}  # fmt: skip
SAME_FIELDS = ("image", "command", "ports", "startupProbe", "readinessProbe", "livenessProbe")


def rendered(values: dict[str, Any] = LWS, major: str = "helm4") -> list[dict[str, Any]]:
    return template(major, values=values).documents()


def with_values(**changes: Any) -> dict[str, Any]:
    values = copy.deepcopy(LWS)
    values.update(changes)
    return values


def the(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [found] = [d for d in docs if d["kind"] == kind]
    return found


@pytest.fixture(scope="module")
def lws_crds() -> dict[tuple[str, str], dict[str, Any]]:
    try:
        return crd_schemas(lws.module_dir() / "charts" / "lws" / "crds")
    except UserError as why:
        pytest.skip(f"LeaderWorkerSet's CRDs are not to be had here: {why}")


def test_kserve_stays_the_default_and_renders_no_leader_worker_set(major: str) -> None:
    kinds = {d["kind"] for d in rendered({"model": MODEL}, major)}
    assert "InferenceService" in kinds
    assert "LeaderWorkerSet" not in kinds


def test_lws_renders_the_set_and_its_service_instead_of_kserve_objects(major: str) -> None:
    kinds = {d["kind"] for d in rendered(major=major)}
    assert {"LeaderWorkerSet", "Service", "Job"} <= kinds
    assert not kinds & {"InferenceService", "ServingRuntime", "ClusterServingRuntime"}


def test_the_set_is_valid_under_leader_worker_sets_crd_strictly(
    lws_crds: dict[tuple[str, str], dict[str, Any]], major: str
) -> None:
    workers_set = the(rendered(major=major), "LeaderWorkerSet")
    schema = lws_crds[(workers_set["apiVersion"], "LeaderWorkerSet")]
    assert schema_errors(schema, workers_set) == []


def test_the_groups_are_sized_started_and_rolled_as_the_values_say() -> None:
    values = with_values(
        groups={
            "replicas": 3,
            "restartPolicy": "RecreateGroupOnPodRestart",
            "rollout": {"maxUnavailable": "50%", "maxSurge": 1, "partition": 1},
        }
    )
    spec = the(rendered(values), "LeaderWorkerSet")["spec"]
    assert spec["replicas"] == 3
    assert spec["leaderWorkerTemplate"]["size"] == 3  # parallelism.pipeline
    assert spec["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    # A head is Ready only once its group formed: LeaderReady would never start the workers.
    assert spec["startupPolicy"] == "LeaderCreated"
    assert spec["rolloutStrategy"]["rollingUpdateConfiguration"] == {
        "maxUnavailable": "50%",
        "maxSurge": 1,
        "partition": 1,
    }


def test_a_failed_pod_restarts_alone_by_default_for_the_runtime_to_heal_in_place() -> None:
    spec = the(rendered(), "LeaderWorkerSet")["spec"]
    assert spec["leaderWorkerTemplate"]["restartPolicy"] == "None"


def _containers(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    template_ = the(docs, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    return {
        "head": template_["leaderTemplate"]["spec"]["containers"][0],
        "worker": template_["workerTemplate"]["spec"]["containers"][0],
    }


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {
        e["name"]: e.get("value", e.get("valueFrom"))
        for e in container.get("env") or []
        if e["name"] not in BACKEND_ENV
    }


def test_each_pod_runs_what_kserve_would_make_of_the_inference_service() -> None:
    """The same runtime contract on both backends: KServe's emulated controller reconciles the
    chart's InferenceService, and the LeaderWorkerSet's containers match its pods' (env, args,
    ports, probes, resources, mounts), but for the names each backend gives its own objects."""
    values = copy.deepcopy(LWS)
    del values["group"], values["groups"]
    cluster = kserve.Cluster(releases.default())
    cluster.apply(rendered(values), "llm", "serving")
    [group] = cluster.reconcile()
    theirs = {"head": group.head.container, "worker": group.worker.container}
    ours = _containers(rendered())
    for role in ("head", "worker"):
        assert _env(ours[role]) == _env(theirs[role]), role
        assert ours[role]["args"] == theirs[role]["args"], role
        for name in SAME_FIELDS:
            assert ours[role].get(name) == theirs[role].get(name), (role, name)
        assert ours[role]["resources"] == theirs[role]["resources"], role
        mounts = {
            (m["mountPath"], m.get("subPath"), bool(m.get("readOnly")))
            for m in ours[role]["volumeMounts"]
        }
        kserve_mounts = {
            (m["mountPath"], m.get("subPath"), bool(m.get("readOnly")))
            for m in theirs[role]["volumeMounts"]
        }
        assert mounts == kserve_mounts, role


def test_the_service_has_kserves_name_and_ports_and_selects_only_heads() -> None:
    docs = rendered()
    [service] = [d for d in docs if d["kind"] == "Service"]
    assert service["metadata"]["name"] == "llm-multinode-llm-predictor"
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        (80, "http"),
        (8081, "status"),
    ]
    template_ = the(docs, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    head_labels = template_["leaderTemplate"]["metadata"]["labels"]
    worker_labels = template_["workerTemplate"]["metadata"]["labels"]
    selector = dict(service["spec"]["selector"])
    # LWS labels every pod with the set's name; the rest the chart's templates carry.
    assert selector.pop(NAME_LABEL) == "llm-multinode-llm"
    assert selector.items() <= head_labels.items()
    assert not selector.items() <= worker_labels.items()


def test_the_readiness_job_asks_every_groups_head_by_its_own_name() -> None:
    job = next(
        d
        for d in rendered()
        if d["kind"] == "Job"
        and d["metadata"]["labels"]["app.kubernetes.io/component"] == "readiness"
    )
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:4] == [
        "await-group",
        "--every",
        "http://llm-multinode-llm-0.llm-multinode-llm.serving.svc.cluster.local:8080",
        "http://llm-multinode-llm-1.llm-multinode-llm.serving.svc.cluster.local:8080",
    ]
    head_env = {e["name"]: e.get("value") for e in _containers(rendered())["head"]["env"]}
    assert args[args.index("--group-spec") + 1] == head_env["MULTINODE_LLM_GROUP_SPEC"]


def test_no_readiness_job_waits_for_zero_groups() -> None:
    docs = rendered(with_values(groups={"replicas": 0}))
    assert the(docs, "LeaderWorkerSet")["spec"]["replicas"] == 0
    components = {d["metadata"]["labels"].get("app.kubernetes.io/component") for d in docs}
    assert "readiness" not in components


def test_the_group_spec_moves_with_the_pods_and_not_with_the_replicas() -> None:
    def spec(values: dict[str, Any]) -> str:
        env = _containers(rendered(values))["head"]["env"]
        found: str = next(e["value"] for e in env if e["name"] == "MULTINODE_LLM_GROUP_SPEC")
        return found

    base = spec(LWS)
    assert spec(with_values(groups={"replicas": 5})) == base
    assert spec(with_values(image={"tag": "0.2.0"})) != base


def test_policies_monitors_and_spread_select_the_sets_pods_not_kserves() -> None:
    values = with_values(
        monitoring={"podMonitor": {"enabled": True}, "rules": {"enabled": True}},
        worker={
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
            ]
        },
    )
    docs = rendered(values)
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    assert policy["spec"]["podSelector"]["matchLabels"] == {NAME_LABEL: "llm-multinode-llm"}
    monitor = the(docs, "PodMonitor")
    assert monitor["spec"]["selector"]["matchLabels"] == {NAME_LABEL: "llm-multinode-llm"}
    relabel = monitor["spec"]["podMetricsEndpoints"][0]["relabelings"][1]
    assert relabel["sourceLabels"] == [
        "__meta_kubernetes_pod_label_leaderworkerset_sigs_k8s_io_name"
    ]
    worker = the(docs, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    [spread] = worker["spec"]["topologySpreadConstraints"]
    assert spread["labelSelector"] == {"matchLabels": {NAME_LABEL: "llm-multinode-llm"}}
    assert spread["matchLabelKeys"] == ["leaderworkerset.sigs.k8s.io/template-revision-hash"]
    rules = the(docs, "PrometheusRule")
    assert f"-l {NAME_LABEL}=llm-multinode-llm" in str(rules)


def test_the_example_is_valid_under_leader_worker_sets_crd_strictly(
    lws_crds: dict[tuple[str, str], dict[str, Any]], major: str
) -> None:
    docs = template(major, [scenarios()["lws"]]).documents()
    workers_set = the(docs, "LeaderWorkerSet")
    schema = lws_crds[(workers_set["apiVersion"], "LeaderWorkerSet")]
    assert schema_errors(schema, workers_set) == []
    target = the(docs, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
    assert target["kind"] == "LeaderWorkerSet"


def test_an_hpa_scales_the_sets_scale_subresource_and_the_chart_leaves_replicas_to_it() -> None:
    docs = rendered(with_values(groups=AUTOSCALED))
    hpa = the(docs, "HorizontalPodAutoscaler")["spec"]
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "name": "llm-multinode-llm",
    }
    assert (hpa["minReplicas"], hpa["maxReplicas"], hpa["metrics"]) == (2, 4, [QUEUE_METRIC])
    assert hpa["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 600
    # An upgrade or a sync would otherwise set the HPA's choice back to groups.replicas.
    assert "replicas" not in the(docs, "LeaderWorkerSet")["spec"]
    assert "HorizontalPodAutoscaler" not in {d["kind"] for d in rendered()}


def test_with_an_hpa_the_readiness_job_waits_for_its_floor_of_groups() -> None:
    job = next(
        d
        for d in rendered(with_values(groups=AUTOSCALED))
        if d["kind"] == "Job"
        and d["metadata"]["labels"]["app.kubernetes.io/component"] == "readiness"
    )
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("http://")] == [
        f"http://llm-multinode-llm-{g}.llm-multinode-llm.serving.svc.cluster.local:8080"
        for g in (0, 1)
    ]


def test_the_notes_name_the_groups_their_pods_and_how_they_scale(helm4: str) -> None:
    result = install_dry_run(helm4, values=LWS)
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    assert "2 groups (LeaderWorkerSet llm-multinode-llm) of 3 nodes" in notes
    assert "logs -f llm-multinode-llm-0 " in notes
    assert "deploy/" not in notes
    assert "InferenceService" not in notes
    assert "port-forward svc/llm-multinode-llm-predictor 8080:80" in notes
    assert "--set groups.replicas=N" in notes
    scaled = install_dry_run(helm4, values=with_values(groups=AUTOSCALED))
    assert "2 to 4 groups" in scaled.stdout
    assert "get hpa,leaderworkerset llm-multinode-llm" in scaled.stdout
