"""The chart as each KServe release's webhooks and controller take it (docs/kserve-contract.md,
docs/kserve-releases.md): admitted and working on every KServe release the chart claims.

Every render is real helm 4; what KServe does with it is the local emulation
(``multinode_llm_local.kserve``), which follows KServe's source at each tag and reproduces KServe's
own test cases (tests/kserve). Each test is one finding: it failed on the chart before the release
table, and must keep passing for every release the table supports.
"""

from __future__ import annotations

import copy
import shlex
import shutil
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml
from multinode_llm.config import head_config, worker_config
from multinode_llm_local import kserve
from multinode_llm_local.kserve import admission, controller, releases, status
from multinode_llm_testing.chartlib import (
    CHART,
    install_dry_run,
    kserve_releases,
    run_helm,
    template,
)

TABLE = kserve_releases()
SUPPORTED = [v for v, r in TABLE["releases"].items() if r["status"] == "supported"]
HF: dict[str, Any] = {
    "model": {"uri": "hf://Qwen/Qwen2.5-0.5B-Instruct"},
    "parallelism": {"tensor": 2},
}


def render(
    version: str, values: dict[str, Any] | None = None, **kwargs: Any
) -> list[dict[str, Any]]:
    given = copy.deepcopy(values or HF)
    given.setdefault("kserve", {})["version"] = version
    return template("helm4", values=given, **kwargs).documents()


def admitted(
    version: str, *releases_: tuple[str, str, list[dict[str, Any]]]
) -> list[kserve.Reconciled]:
    """A cluster running KServe ``version`` with each (release, namespace, objects) installed."""
    cluster = kserve.Cluster(releases.get(version))
    for name, namespace, objects in releases_:
        cluster.apply(objects, name, namespace)
    return cluster.reconcile()


def test_the_table_supports_the_releases_the_chart_claims() -> None:
    assert SUPPORTED[0] == "0.15.0"
    assert TABLE["default"] in SUPPORTED
    assert TABLE["releases"]["0.20.0"]["status"] == "broken"
    assert TABLE["releases"]["0.21.0"]["source"] is None
    assert {r["status"] for r in TABLE["releases"].values()} == {
        "supported",
        "broken",
        "unverified",
    }


@pytest.mark.parametrize("version", SUPPORTED)
@pytest.mark.parametrize("scope", ["Namespace", "Cluster"])
def test_the_runtime_is_admitted_beside_kserves_own_and_another_release(
    version: str, scope: str
) -> None:
    values = {**HF, "runtime": {"scope": scope}}
    groups = admitted(
        version,
        ("llm", "team-a", render(version, values, release="llm", namespace="team-a")),
        ("other", "team-a", render(version, values, release="other", namespace="team-a")),
        ("llm", "team-b", render(version, values, release="llm", namespace="team-b")),
    )
    assert [(g.namespace, g.isvc_name) for g in groups] == [
        ("team-a", "llm-multinode-llm"),
        ("team-a", "other-multinode-llm"),
        ("team-b", "llm-multinode-llm"),
    ]
    assert all(g.worker.replicas == 1 and not g.deleted for g in groups)


def test_the_old_auto_selected_runtime_is_denied_next_to_kserves_multinode_runtime() -> None:
    [runtime] = [d for d in render("0.19.0") if d["kind"] == "ServingRuntime"]
    runtime = {**runtime, "kind": "ClusterServingRuntime"}
    runtime["spec"]["supportedModelFormats"] = [
        {"name": "huggingface", "version": "1", "autoSelect": True, "priority": 2}
    ]
    cluster = kserve.Cluster(releases.get("0.19.0"))
    with pytest.raises(kserve.Denied, match="same priority assigned for the model format"):
        cluster.apply([runtime], "llm", "serving")


@pytest.mark.parametrize("version", SUPPORTED)
def test_the_runtime_finds_every_count_it_needs_in_what_the_release_injects(version: str) -> None:
    [group] = admitted(version, ("llm", "serving", render(version)))
    downward = {"POD_IP": "10.0.0.5", "POD_NAME": "p", "POD_NAMESPACE": "serving"}
    head = head_config({**controller.env_of(group.head.container), **downward}, {})
    worker = worker_config({**controller.env_of(group.worker.container), **downward}, {})
    assert (head.node.node_count, head.node.gpus, head.parallel.tensor) == (2, 2, 2)
    assert (worker.node.node_count, worker.node.gpus) == (2, 2)
    assert worker.head_host == "llm-multinode-llm-head-1.serving.svc.cluster.local"
    derived = version == "0.15.0"
    assert bool(head.node.derived) is derived
    assert bool(worker.node.derived) is derived


@pytest.mark.parametrize("version", SUPPORTED)
def test_the_compile_caches_reach_head_and_worker_pods_with_one_key(version: str) -> None:
    """KServe merges the runtime's volumes into each pod it makes (``MergePodSpec``,
    pkg/controller/v1beta1/inferenceservice/utils/utils.go, v0.15.0 to v0.20.0): the compile
    cache and its shared folder on the model's claim reach head and worker, under one key."""
    values = {
        "model": {"uri": "pvc://models/llama"},
        "parallelism": {"tensor": 2},
        "compileCache": {"shared": {"enabled": True}},
    }
    [group] = admitted(version, ("llm", "serving", render(version, values)))
    keys = set()
    for workload in (group.head, group.worker):
        volumes = {v["name"]: v for v in workload.pod_spec["volumes"]}
        assert "emptyDir" in volumes["compile-cache"], workload.role
        shared = volumes["compile-cache-shared"]["persistentVolumeClaim"]
        assert shared["claimName"] == "models", workload.role
        mounts = {m["name"]: m["mountPath"] for m in workload.container["volumeMounts"]}
        assert mounts["compile-cache"] == "/var/cache/multinode-llm/compile", workload.role
        assert mounts["compile-cache-shared"] == "/var/cache/multinode-llm/shared", workload.role
        keys.add(controller.env_of(workload.container)["MULTINODE_LLM_COMPILE_CACHE_KEY"])
    assert len(keys) == 1


@pytest.mark.parametrize("version", SUPPORTED)
def test_the_live_objects_are_what_the_chart_rendered(version: str) -> None:
    """No field the chart renders is changed by KServe's defaulting webhook (an Argo CD diff)."""
    rendered = next(d for d in render(version) if d["kind"] == "InferenceService")
    live = admission.default_isvc(releases.get(version), rendered)
    assert_subset(rendered, live)


def test_a_chart_version_bump_changes_no_pod_of_the_group(tmp_path: Path) -> None:
    bumped = tmp_path / "chart"
    shutil.copytree(CHART, bumped)
    meta = yaml.safe_load((bumped / "Chart.yaml").read_text())
    meta["version"] = "9.9.9"
    (bumped / "Chart.yaml").write_text(yaml.safe_dump(meta))
    args = ["template", "llm", "--namespace", "serving", "--set", "model.uri=pvc://m/x"]
    before, after = (
        run_helm("helm4", *args[:2], str(chart), *args[2:]).documents() for chart in (CHART, bumped)
    )
    old, new = (admitted("0.19.0", ("llm", "serving", objects))[0] for objects in (before, after))
    for role in ("head", "worker"):
        one, two = getattr(old, role), getattr(new, role)
        assert (one.labels, one.annotations, one.pod_spec) == (
            two.labels,
            two.annotations,
            two.pod_spec,
        )


@pytest.mark.parametrize("version", SUPPORTED)
def test_vllm_arguments_with_double_braces_reach_vllm_unchanged(version: str) -> None:
    template_arg = "--chat-template={% for m in messages %}{{ m['content'] }}{% endfor %}"
    values = {
        **HF,
        "vllm": {"args": [template_arg]},
        "head": {"env": [{"name": "GREETING", "value": "{{ hello }}"}]},
    }
    [group] = admitted(version, ("llm", "serving", render(version, values)))
    assert group.head.container["args"][-1] == template_arg
    assert controller.env_of(group.head.container)["GREETING"] == "{{ hello }}"


@pytest.mark.parametrize("version", [*SUPPORTED, "0.20.0"])
def test_readiness_is_what_each_release_reports_for_a_healthy_group(version: str) -> None:
    healthy = {
        "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
        ]
    }
    release = releases.get(version)
    ready = status.conditions(release, healthy, healthy)["PredictorReady"]["status"]
    expected = (
        "Unknown" if TABLE["releases"][version]["controller"]["readiness"] == "stuck" else "True"
    )
    assert ready == expected


@pytest.mark.parametrize("version", SUPPORTED)
def test_notes_and_helm_test_say_when_the_release_never_reports_ready(version: str) -> None:
    stuck = TABLE["releases"][version]["controller"]["readiness"] == "stuck"
    given = {**HF, "kserve": {"version": version}}
    result = run_helm_install(given)
    notes = result.split("NOTES:", 1)[1]
    assert ("never reports this InferenceService Ready" in notes) is stuck
    jobs = [d for d in render(version) if d["kind"] == "Job"]
    ready = next(d for d in jobs if "-ready-" in d["metadata"]["name"])
    assert f"wait --for=condition=complete job/{ready['metadata']['name']}" in notes
    pod = next(d for d in render(version) if d["kind"] == "Pod")
    names = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
    assert ("STATUS_NOTE" in names) is stuck


@pytest.mark.parametrize("version", SUPPORTED)
def test_the_readiness_job_asks_the_service_each_release_makes_for_the_head(version: str) -> None:
    """await-group reaches the group as a client does: the predictor Service KServe creates, on
    its port 80, selecting the head's pods and not the workers'."""
    objects = render(version)
    [group] = admitted(version, ("llm", "serving", objects))
    job = next(d for d in objects if d["kind"] == "Job" and "-ready-" in d["metadata"]["name"])
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    url = urllib.parse.urlsplit(args[1])
    [service] = [s for s in group.running_services if not s.headless]
    assert url.hostname == f"{service.name}.serving.svc.cluster.local"
    assert (url.port or 80, 8080) in service.ports
    assert service.selector.items() <= group.head.labels.items()
    assert not service.selector.items() <= group.worker.labels.items()


def run_helm_install(values: dict[str, Any]) -> str:
    result = install_dry_run("helm4", values=values)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("version", ["0.16.0", "0.17.0", "0.17.1", "0.18.0", "0.18.1", "0.19.0"])
def test_an_isvc_made_on_0_15_after_a_kserve_upgrade(version: str) -> None:
    """Created on 0.15.1 (status.deploymentMode RawDeployment), then KServe is upgraded: 0.16 to
    0.18.1 reconcile it as Knative and refuse the chart's update; 0.19.0 normalizes the status."""
    cluster = kserve.Cluster(releases.get("0.15.1"))
    cluster.apply(render("0.15.1"), "llm", "serving")
    cluster.reconcile()
    assert cluster.isvcs()[0]["status"]["deploymentMode"] == "RawDeployment"
    cluster.upgrade_kserve(releases.get(version))
    if version != "0.19.0":
        with pytest.raises(kserve.ReconcileError, match="Knative reconciler"):
            cluster.reconcile()
        with pytest.raises(
            kserve.Denied,
            match="deploymentMode cannot be changed from 'RawDeployment' to 'Standard'",
        ):
            cluster.apply(render(version), "llm", "serving")
        return
    assert cluster.reconcile()[0].worker.replicas == 1
    cluster.apply(render(version), "llm", "serving")
    assert cluster.reconcile()[0].worker.replicas == 1
    assert cluster.isvcs()[0]["status"]["deploymentMode"] == "Standard"


def test_0_20_0_is_refused_because_it_deletes_the_workers() -> None:
    result = template("helm4", values={**HF, "kserve": {"version": "0.20"}})
    assert result.returncode != 0
    assert "kserve#6113" in result.stderr
    assert "use 0.19.0" in result.stderr
    [group] = admitted("0.20.0", ("llm", "serving", render("0.19.0")))
    assert group.deleted == [
        "llm-multinode-llm-predictor-worker",
        "llm-multinode-llm-head-1",
        "llm-multinode-llm-workers-1",
    ]
    assert [w.name for w in group.workloads] == ["llm-multinode-llm-predictor"]


MP = {
    "model": {"uri": "pvc://models/llama"},
    "parallelism": {"tensor": 2, "pipeline": 3},
    "group": {"executor": "mp"},
}
MP_RELEASES = [v for v in SUPPORTED if "mp" in TABLE["releases"][v]["controller"]["executors"]]


@pytest.mark.parametrize("version", [*MP_RELEASES, "0.20.0"])
def test_an_mp_group_is_what_each_release_with_the_mode_makes_of_it(version: str) -> None:
    """components/predictor.go multiNodeProcess (v0.18.0 on): the runtime's spec.annotations
    select computeMpNodeAndGPUs, nodes = PP and GPUs per pod = TP. 0.20.0 is refused by the chart
    (it deletes the workers): its controller gets the 0.19.0 render, as the Ray test above."""
    objects = render("0.19.0" if version == "0.20.0" else version, MP)
    runtime = next(d for d in objects if d["kind"] == "ServingRuntime")
    assert runtime["spec"]["annotations"][controller.EXECUTOR_ANNOTATION] == "mp"
    [group] = admitted(version, ("llm", "serving", objects))
    assert (group.node_count, group.head_gpus, group.worker_gpus) == (3, 2, 2)
    assert group.worker.replicas == 3 - 1
    # KServe copies spec.annotations into the head's pods only: the env tells both the mode
    assert group.head.annotations[controller.EXECUTOR_ANNOTATION] == "mp"
    assert controller.EXECUTOR_ANNOTATION not in group.worker.annotations
    for workload in (group.head, group.worker):
        env = controller.env_of(workload.container)
        assert env["REQUEST_GPU_COUNT"] == "2", workload.role
        assert env["RAY_NODE_COUNT"] == "3", workload.role
        assert (env["MULTINODE_LLM_EXECUTOR"], env["MASTER_PORT"]) == ("mp", "29500")
        assert "RAY_PORT" not in env, workload.role
        limits = workload.container["resources"]["limits"]
        assert limits["nvidia.com/gpu"] in ("2", 2), workload.role


@pytest.mark.parametrize("version", [v for v in SUPPORTED if v not in MP_RELEASES])
def test_mp_is_refused_on_a_release_without_the_mode(version: str) -> None:
    result = template("helm4", values={**MP, "kserve": {"version": version}})
    assert result.returncode != 0
    assert "group.executor=mp" in result.stderr
    assert f"which KServe {version} lacks" in result.stderr
    assert f"({', '.join(MP_RELEASES)})" in result.stderr


def test_an_unverified_release_is_a_deliberate_choice() -> None:
    refused = template("helm4", values={**HF, "kserve": {"version": "0.21"}})
    assert refused.returncode != 0
    assert "kserve.allowUnverifiedRelease=true" in refused.stderr
    allowed = {**HF, "kserve": {"version": "0.21", "allowUnverifiedRelease": True}}
    notes = run_helm_install(allowed).split("NOTES:", 1)[1]
    assert "KServe 0.21.0 is unverified" in notes


@pytest.mark.parametrize("version", SUPPORTED)
def test_the_download_job_stages_with_its_own_command_on_every_release(version: str) -> None:
    """KServe 0.15-0.18's storage initializer cannot create a nested target (tests/storage): the
    Job stages with `multinode-llm stage`, which makes its folders, on every release."""
    jobs = [d for d in render(version) if d["kind"] == "Job"]
    job = next(d for d in jobs if "-download-" in d["metadata"]["name"])
    spec = job["spec"]["template"]["spec"]
    assert "initContainers" not in spec
    [stage] = spec["containers"]
    assert (stage["command"], stage["args"][0]) == (["multinode-llm"], "stage")
    assert stage["image"].startswith("ghcr.io/multinode-llm/multinode-llm-cache:")


def test_the_cluster_domain_names_every_service_the_pods_use() -> None:
    values = {**HF, "clusterDomain": "corp.example"}
    objects = render("0.19.0", values)
    [group] = admitted("0.19.0", ("llm", "serving", objects))
    downward = {"POD_IP": "10.0.0.5", "POD_NAMESPACE": "serving"}
    worker = worker_config({**controller.env_of(group.worker.container), **downward}, {})
    assert worker.head_host == "llm-multinode-llm-head-1.serving.svc.corp.example"
    pod = next(d for d in objects if d["kind"] == "Pod")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["BASE_URL"] == "http://llm-multinode-llm-predictor.serving.svc.corp.example"
    assert "cluster.local" not in yaml.safe_dump_all(objects)


def test_kserves_progress_deadline_is_reported_while_a_big_model_loads() -> None:
    notes = run_helm_install(HF).split("NOTES:", 1)[1]
    assert "600 s progress deadline" in notes
    [group] = admitted("0.19.0", ("llm", "serving", render("0.19.0")))
    assert group.head.progress_deadline_s == 600


def assert_subset(expected: Any, actual: Any, path: str = "") -> None:
    if isinstance(expected, dict):
        assert isinstance(actual, dict), path
        for key, value in expected.items():
            assert key in actual, f"{path}.{key} is gone"
            assert_subset(value, actual[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list), path
        assert len(actual) == len(expected), path
        for index, (one, two) in enumerate(zip(expected, actual, strict=True)):
            assert_subset(one, two, f"{path}[{index}]")
    else:
        assert expected == actual, f"{path}: rendered {expected!r}, live {actual!r}"


def test_the_readiness_job_is_new_exactly_when_the_group_restarts() -> None:
    """Named after its spec, which holds the hash of what restarts the group: a change that
    restarts it makes a new Job (the new group to wait for), one that does not makes none. A new
    strategy restarts it too: it is a new generation, which KServe writes into the pods."""

    def ready(**sets: Any) -> tuple[str, str]:
        values = copy.deepcopy(HF)
        for key, value in sets.items():
            node = values
            *parents, leaf = key.split(".")
            for parent in parents:
                node = node.setdefault(parent, {})
            node[leaf] = value
        objects = render("0.19.0", values)
        job = next(d for d in objects if d["kind"] == "Job" and "-ready-" in d["metadata"]["name"])
        [group] = admitted("0.19.0", ("llm", "serving", objects))
        env = controller.env_of(group.head.container)
        args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--group-spec") + 1] == env["MULTINODE_LLM_GROUP_SPEC"]
        return job["metadata"]["name"], env["MULTINODE_LLM_GROUP_SPEC"]

    base = ready()
    assert ready(**{"tests.prompt": "hi"}) == base
    restarts: list[dict[str, Any]] = [
        {"image.tag": "v2"},
        {"vllm.args": ["--x"]},
        {"parallelism.tensor": 4},
        {"strategy.type": "RollingUpdate"},
    ]
    for change in restarts:
        assert ready(**change)[1] != base[1], change
        assert ready(**change)[0] != base[0], change


def readme_install() -> list[str]:
    """The README's `helm install` command of "Install on a cluster", as argv."""
    readme = (CHART.parents[1] / "README.md").read_text()
    section = readme.split("## Install on a cluster", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    command = block.split("\nhelm test", 1)[0].replace("\\\n", " ")
    return shlex.split(command)


def test_the_readmes_own_install_is_admitted_and_runs_on_the_release_it_names() -> None:
    """What a user copies from the README: KServe's webhooks of the release it sets admit it, and
    its controller makes the group the README promises (a head and one worker, 2 GPUs each)."""
    argv = readme_install()
    assert argv[:3] == ["helm", "install", "qwen"]
    assert {"--wait", "--wait-for-jobs"} <= set(argv), "the README waits for the readiness Job"
    sets = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--set"]
    namespace = argv[argv.index("--namespace") + 1]
    asked = dict(s.split("=", 1) for s in sets)["kserve.version"]
    version = releases.resolve(asked).version  # MAJOR.MINOR: its newest patch
    args = ["template", "qwen", str(CHART), "--namespace", namespace]
    for assignment in sets:
        args += ["--set", assignment]
    result = run_helm("helm4", *args)
    assert result.returncode == 0, result.stderr
    objects = result.documents()
    [group] = admitted(version, ("qwen", namespace, objects))
    assert (group.node_count, group.head_gpus, group.worker_gpus) == (2, 2, 2)
    assert group.worker.replicas == 1
    kinds = {d["kind"] for d in objects}
    assert {"PersistentVolumeClaim", "Job", "InferenceService"} <= kinds


def test_a_defect_is_asked_for_by_an_id_the_table_has() -> None:
    """A test that branches on a release's defect names it by id; a misspelt id is an error,
    not a release without the defect."""
    assert releases.get("0.15.0").has_defect("deployment-update-keeps-removed")
    assert not releases.get("0.15.2").has_defect("deployment-update-keeps-removed")
    with pytest.raises(ValueError, match="'deployment-update-keeps-removd'"):
        releases.get("0.15.0").has_defect("deployment-update-keeps-removd")
