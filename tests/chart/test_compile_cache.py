"""compileCache: the volumes, mounts and env the chart gives head and workers for vLLM's compilation
caches, and the key the runtime files entries under (docs/compile-cache.md). The refusals are in
test_refusals.py; what the runtime does with the env is in tests/unit."""

from __future__ import annotations

from typing import Any

import pytest
from multinode_llm_testing.chartlib import NAMESPACE, RELEASE, Render, deep_merge, template

LOCAL_DIR = "/var/cache/multinode-llm/compile"
SHARED_DIR = "/var/cache/multinode-llm/shared"
VOLUMES = {"compile-cache", "compile-cache-shared"}
PVC: dict[str, Any] = {"model": {"uri": "pvc://models/llama"}}
EXECUTORS: dict[str, dict[str, Any]] = {
    "ray": {},
    "mp": {"group": {"executor": "mp"}, "kserve": {"version": "0.18"}},
}


def containers(render: Render) -> dict[str, dict[str, Any]]:
    """The runtime's head and worker containers by name."""
    spec = render.one("ServingRuntime")["spec"]
    return {c["name"]: c for c in [*spec["containers"], *spec["workerSpec"]["containers"]]}


def pod_volumes(render: Render) -> dict[str, dict[str, dict[str, Any]]]:
    """The head's and the workers' pod volumes by name."""
    spec = render.one("ServingRuntime")["spec"]
    return {
        "head": {v["name"]: v for v in spec["volumes"]},
        "worker": {v["name"]: v for v in spec["workerSpec"]["volumes"]},
    }


def env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def mounts(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in container.get("volumeMounts", [])}


def key_of(
    major: str, values: dict[str, Any], release: str = RELEASE, namespace: str = NAMESPACE
) -> str:
    render = template(major, values=values, release=release, namespace=namespace)
    [key] = {env(c)["MULTINODE_LLM_COMPILE_CACHE_KEY"] for c in containers(render).values()}
    return key


@pytest.mark.parametrize("executor", sorted(EXECUTORS))
def test_head_and_workers_get_the_volume_its_mount_and_the_env_by_default(
    major: str, executor: str
) -> None:
    render = template(major, values=deep_merge(PVC, EXECUTORS[executor]))
    for role, volumes in pod_volumes(render).items():
        assert volumes["compile-cache"] == {
            "name": "compile-cache",
            "emptyDir": {"sizeLimit": "10Gi"},
        }, role
        assert "compile-cache-shared" not in volumes, role
    for name, container in containers(render).items():
        assert mounts(container)["compile-cache"] == {
            "name": "compile-cache",
            "mountPath": LOCAL_DIR,
        }, name
        assert "compile-cache-shared" not in mounts(container), name
        variables = env(container)
        assert variables["MULTINODE_LLM_COMPILE_CACHE"] == LOCAL_DIR, name
        assert variables["MULTINODE_LLM_COMPILE_CACHE_LIMIT"] == "10Gi", name
        assert len(variables["MULTINODE_LLM_COMPILE_CACHE_KEY"]) == 32, name
        assert int(variables["MULTINODE_LLM_COMPILE_CACHE_KEY"], 16) >= 0, name
        assert not {
            "MULTINODE_LLM_COMPILE_CACHE_SHARED",
            "MULTINODE_LLM_COMPILE_CACHE_SHARED_LIMIT",
        } & set(variables), name


@pytest.mark.parametrize("executor", sorted(EXECUTORS))
def test_disabled_renders_no_volume_mount_or_variable(major: str, executor: str) -> None:
    values = deep_merge(PVC, {**EXECUTORS[executor], "compileCache": {"enabled": False}})
    render = template(major, values=values)
    for role, volumes in pod_volumes(render).items():
        assert not VOLUMES & set(volumes), role
    for name, container in containers(render).items():
        assert not VOLUMES & set(mounts(container)), name
        assert not [v for v in env(container) if v.startswith("MULTINODE_LLM_COMPILE_CACHE")], name
    assert "compile" not in render.stdout


def _without_compile_cache(render: Render) -> str:
    """The render with the compile cache's volumes, mounts and env taken out, and the group's spec
    hash (and the readiness Job name it changes) written as the placeholders SPEC and JOB."""
    text = render.stdout
    head = containers(render)["kserve-container"]
    spec = env(head)["MULTINODE_LLM_GROUP_SPEC"]
    text = text.replace(spec, "SPEC").replace(spec[:10], "SPEC")  # the runtime's name holds 10
    text = text.replace(render.one("Job", "readiness")["metadata"]["name"], "JOB")
    documents = Render(render.args, 0, text, "").documents()
    for document in documents:
        if document["kind"] != "ServingRuntime":
            continue
        spec = document["spec"]
        for pod in (spec, spec["workerSpec"]):
            pod["volumes"] = [v for v in pod["volumes"] if v["name"] not in VOLUMES]
            for container in pod["containers"]:
                container["volumeMounts"] = [
                    m for m in container["volumeMounts"] if m["name"] not in VOLUMES
                ]
                container["env"] = [
                    e
                    for e in container["env"]
                    if not e["name"].startswith("MULTINODE_LLM_COMPILE_CACHE")
                ]
    return repr(documents)


@pytest.mark.parametrize("executor", sorted(EXECUTORS))
def test_disabled_renders_exactly_what_enabled_renders_without_the_compile_cache(
    major: str, executor: str
) -> None:
    """The Ray executor's (and mp's) render with compileCache.enabled=false is the chart's render
    from before the compile cache: the cache adds its volumes, mounts and variables, and the group
    spec hash follows them, nothing else."""
    values = deep_merge({"model": {"uri": "hf://org/m:a"}}, EXECUTORS[executor])
    enabled = template(major, values=values)
    disabled = template(major, values=deep_merge(values, {"compileCache": {"enabled": False}}))
    assert _without_compile_cache(enabled) == _without_compile_cache(disabled)
    assert enabled.stdout != disabled.stdout


@pytest.mark.parametrize(
    ("values", "claim"),
    [
        ({"model": {"uri": "hf://org/m:a"}}, "llm-multinode-llm-model"),
        (
            {"model": {"uri": "hf://org/m:a", "storage": {"existingClaim": "shared-models"}}},
            "shared-models",
        ),
        ({"model": {"uri": "pvc://team-models/llama/v1"}}, "team-models"),
        ({"model": {"uri": "pvc://team-models"}}, "team-models"),
    ],
    ids=[
        "hf:// on the chart's volume",
        "hf:// on an existing claim",
        "pvc://CLAIM/PATH",
        "pvc://CLAIM",
    ],
)
def test_the_shared_cache_mounts_a_folder_of_the_models_claim(
    major: str, values: dict[str, Any], claim: str
) -> None:
    shared = {
        "compileCache": {"shared": {"enabled": True, "path": "cache/vllm", "sizeLimit": "80Gi"}}
    }
    render = template(major, values=deep_merge(values, shared))
    for role, volumes in pod_volumes(render).items():
        assert volumes["compile-cache-shared"] == {
            "name": "compile-cache-shared",
            "persistentVolumeClaim": {"claimName": claim},
        }, role
    for name, container in containers(render).items():
        assert mounts(container)["compile-cache-shared"] == {
            "name": "compile-cache-shared",
            "mountPath": SHARED_DIR,
            "subPath": "cache/vllm",
        }, name
        variables = env(container)
        assert variables["MULTINODE_LLM_COMPILE_CACHE_SHARED"] == SHARED_DIR, name
        assert variables["MULTINODE_LLM_COMPILE_CACHE_SHARED_LIMIT"] == "80Gi", name
        assert variables["MULTINODE_LLM_COMPILE_CACHE"] == LOCAL_DIR, name


@pytest.mark.parametrize(
    "change",
    [
        {"parallelism": {"tensor": 2}},
        {"parallelism": {"pipeline": 3}},
        EXECUTORS["mp"],
        {"vllm": {"args": ["--max-model-len", "4096"]}},
        {"image": {"tag": "0.1.1"}},
        {"image": {"digest": "sha256:" + "a" * 64}},
        {"model": {"uri": "pvc://models/llama-3"}},
    ],
    ids=["tensor", "pipeline", "executor", "vllm.args", "image tag", "image digest", "model.uri"],
)
def test_the_key_changes_with_what_vllm_compiles_for(major: str, change: dict[str, Any]) -> None:
    base = deep_merge(PVC, {"kserve": {"version": "0.18"}})
    assert key_of(major, deep_merge(base, change)) != key_of(major, base)


def test_the_key_is_the_same_for_another_release_of_the_same_model(major: str) -> None:
    """A second deployment of the same model finds the first one's entries on a shared claim."""
    assert key_of(major, PVC) == key_of(major, PVC, release="other", namespace="team")
    assert key_of(major, PVC) == key_of(
        major,
        deep_merge(
            PVC, {"compileCache": {"shared": {"enabled": True}}, "scratch": {"sizeLimit": "30Gi"}}
        ),
    )


def test_a_vllm_cache_root_of_ones_own_is_admitted(major: str) -> None:
    """The runtime leaves the cache alone when head.env or worker.env set VLLM_CACHE_ROOT."""
    own = [{"name": "VLLM_CACHE_ROOT", "value": "/mnt/mine"}]
    render = template(major, values=deep_merge(PVC, {"head": {"env": own}, "worker": {"env": own}}))
    assert render.returncode == 0, render.stderr
