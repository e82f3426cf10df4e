"""group.executor: what the chart renders for vLLM's own multi-node executor (mp) and what it keeps
for Ray (docs/executors.md). What KServe makes of it on each release is in test_kserve_releases.py;
the refusals are in test_refusals.py."""

from __future__ import annotations

from typing import Any

import pytest
from crdschema import crd_schemas_from_env, schema_errors
from multinode_llm_testing.chartlib import install_dry_run, kserve_releases, template

EXECUTOR_ANNOTATION = "multinode/executor-backend"
# The render docs/executors.md shows: helm template x charts/multinode-llm --set ...
DONE_WHEN: dict[str, Any] = {
    "model": {"uri": "pvc://models/llama"},
    "parallelism": {"tensor": 2, "pipeline": 2},
    "kserve": {"version": "0.18"},
    "group": {"executor": "mp"},
}
RAY_ONLY_ENV = {"RAY_PORT", "RAY_USAGE_STATS_ENABLED", "MULTINODE_LLM_RAY_RESOURCE"}


def containers(runtime: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The runtime's head and worker containers by name."""
    spec = runtime["spec"]
    return {c["name"]: c for c in [*spec["containers"], *spec["workerSpec"]["containers"]]}


def plain_env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


@pytest.fixture(scope="module")
def crds() -> dict[tuple[str, str], dict[str, Any]]:
    return crd_schemas_from_env("KSERVE_CRD_DIR", "KServe's", "../shared/kserve-crds")


def test_the_done_command_puts_the_annotation_where_kserve_0_18_reads_it(major: str) -> None:
    render = template(major, values=DONE_WHEN, release="x", namespace="default")
    runtime = render.one("ServingRuntime")
    # sRuntime.Annotations in multiNodeProcess: the ServingRuntimeSpec's own annotations
    assert runtime["spec"]["annotations"] == {EXECUTOR_ANNOTATION: "mp"}
    assert EXECUTOR_ANNOTATION not in runtime["metadata"]["annotations"]
    assert runtime["metadata"]["annotations"]["multinode-llm/kserve-release"] == "0.18.1"
    # the workers get workerSpec.annotations, never spec.annotations: the env tells them
    assert "annotations" not in runtime["spec"]["workerSpec"]
    predictor = render.one("InferenceService")["spec"]["predictor"]
    assert predictor["workerSpec"]["pipelineParallelSize"] == 2
    assert predictor["workerSpec"]["tensorParallelSize"] == 2
    for resources in (
        predictor["model"]["resources"],
        predictor["workerSpec"]["containers"][0]["resources"],
    ):
        assert resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"]
        assert resources["limits"]["nvidia.com/gpu"] == "2"


def test_both_containers_are_told_the_mode_and_the_master_port_and_nothing_of_ray(
    major: str,
) -> None:
    values = {**DONE_WHEN, "group": {"executor": "mp", "masterPort": 29600}}
    runtime = template(major, values=values).one("ServingRuntime")
    for name, container in containers(runtime).items():
        env = plain_env(container)
        assert env["MULTINODE_LLM_EXECUTOR"] == "mp", name
        assert env["MASTER_PORT"] == "29600", name
        assert not RAY_ONLY_ENV & set(env), name


def test_a_ray_group_renders_as_before_with_no_mp_setting(major: str) -> None:
    values = {key: DONE_WHEN[key] for key in ("model", "parallelism", "kserve")}
    runtime = template(major, values=values).one("ServingRuntime")
    assert EXECUTOR_ANNOTATION not in runtime["spec"].get("annotations", {})
    for name, container in containers(runtime).items():
        env = plain_env(container)
        assert env["RAY_PORT"] == "6379", name
        assert env["RAY_USAGE_STATS_ENABLED"] == "0", name
        assert not {"MULTINODE_LLM_EXECUTOR", "MASTER_PORT"} & set(env), name


def test_the_mp_render_is_valid_under_the_real_crds_strictly(
    crds: dict[tuple[str, str], dict[str, Any]], major: str
) -> None:
    for doc in template(major, values=DONE_WHEN).documents():
        if doc["apiVersion"].startswith("serving.kserve.io/"):
            assert schema_errors(crds[(doc["apiVersion"], doc["kind"])], doc) == [], doc["kind"]


def test_the_network_policy_opens_every_port_inside_an_mp_group(major: str) -> None:
    render = template(major, values=DONE_WHEN)
    [policy] = [
        p
        for p in render.of_kind("NetworkPolicy")
        if not p["metadata"]["name"].endswith("-no-ingress")
    ]
    within, clients = policy["spec"]["ingress"]
    group = policy["spec"]["podSelector"]["matchLabels"]
    # no port list: the master port, Gloo's, NCCL's and vLLM's ZMQ ports are all inside the group
    assert within == {"from": [{"podSelector": {"matchLabels": group}}]}
    assert {p["port"] for p in clients["ports"]} == {8080, 8081}
    assert "vLLM's master port (29500)" in render.stdout
    assert "Ray's pinned ports" not in render.stdout


def test_the_host_network_warning_names_the_mp_ports(helm4: str) -> None:
    values = {**DONE_WHEN, "hostNetwork": True}
    result = install_dry_run(helm4, values=values)
    assert result.returncode == 0, result.stderr
    notes = result.notes()
    assert "29500 (vLLM's master port)" in notes
    assert "6380-6385" not in notes
    assert "Ray GCS" not in notes


def test_the_mp_refusal_names_the_releases_the_table_gives_the_mode() -> None:
    table = kserve_releases()["releases"]
    with_mp = [
        version
        for version, release in table.items()
        if "mp" in release.get("controller", {}).get("executors", [])
    ]
    supported = [v for v in with_mp if table[v]["status"] == "supported"]
    assert with_mp[0] == "0.18.0"
    assert supported == ["0.18.0", "0.18.1", "0.19.0"]
    for version, release in table.items():
        if release.get("status") != "supported" or version in with_mp:
            continue
        refused = template("helm4", values={**DONE_WHEN, "kserve": {"version": version}})
        assert refused.returncode != 0, version
        assert f"which KServe {version} lacks" in refused.stderr, refused.stderr
        assert f"KServe added the mode in {with_mp[0]}" in refused.stderr
        assert f"({', '.join(supported)})" in refused.stderr
