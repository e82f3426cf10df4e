"""What the chart renders is valid for Kubernetes (its own schemas, strict) and for KServe (our
schemas in schemas/, always; the real CRDs, strict, where KSERVE_CRD_DIR points at them)."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from crdschema import crd_schemas_from_env, schema_errors
from multinode_llm_testing.chartlib import (
    KSERVE_KINDS,
    KUBE_HIGHEST,
    KUBE_LOWEST,
    LWS_KINDS,
    MONITORING_KINDS,
    SCHEMAS,
    load_values_file,
    scenarios,
    template,
)
from multinode_llm_testing.gateway_api import GATEWAY_KINDS
from referencing import Registry, Resource

SCENARIOS = scenarios()
OUR_SCHEMAS = {p.stem: json.loads(p.read_text()) for p in sorted(SCHEMAS.glob("*.json"))}
REGISTRY: Registry = Registry().with_resources(
    (s["$id"], Resource.from_contents(s)) for s in OUR_SCHEMAS.values()
)


def our_errors(doc: dict[str, Any]) -> list[str]:
    schema = OUR_SCHEMAS[doc["kind"].lower()]
    validator = jsonschema.Draft202012Validator(schema, registry=REGISTRY)
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(doc)]


def rendered(major: str, name: str, kube_version: str = KUBE_HIGHEST) -> list[dict[str, Any]]:
    return template(major, [SCENARIOS[name]], kube_version=kube_version).documents()


@pytest.fixture(params=sorted(SCENARIOS))
def scenario(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def crds() -> dict[tuple[str, str], dict[str, Any]]:
    return crd_schemas_from_env("KSERVE_CRD_DIR", "KServe's", "../shared/kserve-crds")


def test_our_schemas_are_valid_json_schemas_with_a_description_on_top() -> None:
    assert set(OUR_SCHEMAS) >= {k.lower() for k in KSERVE_KINDS}
    for name, schema in OUR_SCHEMAS.items():
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema.get("description"), name


@pytest.mark.parametrize("kube_version", [KUBE_LOWEST, KUBE_HIGHEST])
def test_core_objects_are_valid_for_the_lowest_and_highest_kubernetes(
    major: str, scenario: str, kube_version: str
) -> None:
    custom = (*KSERVE_KINDS, *MONITORING_KINDS, *GATEWAY_KINDS, *LWS_KINDS)
    core = [d for d in rendered(major, scenario, kube_version) if d["kind"] not in custom]
    assert core, "no core objects rendered"
    for doc in core:
        version = kube_version.rsplit(".", 1)[0]
        kubernetes_validate.validate(doc, version, strict=True)


def expected_kserve_kinds(name: str) -> set[str]:
    """The InferenceService where the scenario serves a model on KServe, the
    ClusterStorageContainer where it renders one."""
    values = load_values_file(SCENARIOS[name])
    kinds = set()
    on_kserve = values.get("group", {}).get("backend", "kserve") == "kserve"
    if values.get("model", {}).get("uri") and on_kserve:
        kinds.add("InferenceService")
    if values.get("modelCache", {}).get("storageContainer", {}).get("enabled"):
        kinds.add("ClusterStorageContainer")
    return kinds


def test_kserve_objects_are_valid_under_our_schemas(major: str, scenario: str) -> None:
    kserve = [d for d in rendered(major, scenario) if d["kind"] in KSERVE_KINDS]
    expected = expected_kserve_kinds(scenario)
    if not expected:
        assert kserve == [], "a KServe object where the scenario needs none"
        return
    assert {d["kind"] for d in kserve} >= expected
    for doc in kserve:
        assert our_errors(doc) == [], doc["kind"]


def test_kserve_objects_are_valid_under_the_real_crds_strictly(
    crds: dict[tuple[str, str], dict[str, Any]], major: str, scenario: str
) -> None:
    for doc in rendered(major, scenario):
        if doc["kind"] in KSERVE_KINDS:
            schema = crds[(doc["apiVersion"], doc["kind"])]
            assert schema_errors(schema, doc) == [], doc["kind"]


def test_the_strict_crd_check_catches_a_field_the_api_server_would_prune(
    crds: dict[tuple[str, str], dict[str, Any]],
) -> None:
    isvc = next(d for d in rendered("helm4", "hf-tp2-pp2") if d["kind"] == "InferenceService")
    isvc["spec"]["predictor"]["model"]["storageURI"] = isvc["spec"]["predictor"]["model"].pop(
        "storageUri"
    )
    schema = crds[("serving.kserve.io/v1beta1", "InferenceService")]
    assert not jsonschema.Draft4Validator(schema).is_valid(isvc)


def mutated(doc: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


BAD_ISVCS: dict[str, tuple[list[Any], Any]] = {
    "tensor parallel size in env": (
        ["spec", "predictor", "workerSpec", "containers", 0, "env"],
        [{"name": "TENSOR_PARALLEL_SIZE", "value": "2"}],
    ),
    "two worker containers": (
        ["spec", "predictor", "workerSpec", "containers"],
        [{"name": "worker-container"}, {"name": "sidecar"}],
    ),
    "serverless mode": (
        ["metadata", "annotations", "serving.kserve.io/deploymentMode"],
        "Serverless",
    ),
    "hpa autoscaler": (["metadata", "annotations", "serving.kserve.io/autoscalerClass"], "hpa"),
    "an s3 storage uri": (["spec", "predictor", "model", "storageUri"], "s3://bucket/model"),
    "two heads": (["spec", "predictor", "minReplicas"], 2),
    "pipeline size 0": (["spec", "predictor", "workerSpec", "pipelineParallelSize"], 0),
    "a canary": (["spec", "canary"], [{"predictor": {"name": "c"}}]),
    "a typo in the predictor": (["spec", "predictor", "workerspec"], {}),
}


@pytest.mark.parametrize("case", sorted(BAD_ISVCS))
def test_our_isvc_schema_refuses_what_kserve_rejects_or_breaks_on(case: str) -> None:
    isvc = next(d for d in rendered("helm4", "hf-tp2-pp2") if d["kind"] == "InferenceService")
    assert our_errors(isvc) == []
    path, value = BAD_ISVCS[case]
    assert our_errors(mutated(isvc, path, value)), case


def test_our_runtime_schema_refuses_a_runtime_without_a_single_worker_container() -> None:
    runtime = next(d for d in rendered("helm4", "hf-tp2-pp2") if d["kind"] == "ServingRuntime")
    assert our_errors(runtime) == []
    assert our_errors(mutated(runtime, ["spec", "workerSpec", "containers"], []))
    no_worker = copy.deepcopy(runtime)
    del no_worker["spec"]["workerSpec"]
    assert our_errors(no_worker)
    assert our_errors(mutated(runtime, ["spec", "containers", 0, "name"], "head"))


def test_our_storage_container_schema_accepts_an_hf_downloader_and_refuses_a_typo() -> None:
    csc = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ClusterStorageContainer",
        "metadata": {"name": "hf-cache"},
        "spec": {
            "container": {
                "name": "storage-initializer",
                "image": "kserve/storage-initializer:v0.20.0",
                "env": [{"name": "HF_ENDPOINT", "value": "http://cache:8090"}],
            },
            "supportedUriFormats": [{"prefix": "hf://"}],
            "workloadType": "initContainer",
        },
    }
    assert our_errors(csc) == []
    assert our_errors(mutated(csc, ["spec", "supportedUriFormat"], [{"prefix": "hf://"}]))
    # `disabled` sits beside spec in the CRD, not inside it.
    assert our_errors(mutated(csc, ["disabled"], True)) == []
    assert our_errors(mutated(csc, ["spec", "disabled"], True))


@pytest.mark.parametrize("kube_version", [KUBE_LOWEST, KUBE_HIGHEST])
def test_strict_kubernetes_validation_catches_an_unknown_field(kube_version: str) -> None:
    claim = next(d for d in rendered("helm4", "hf-tp2-pp2") if d["kind"] == "PersistentVolumeClaim")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(
            mutated(claim, ["spec", "accesMode"], "ReadWriteMany"),
            kube_version.rsplit(".", 1)[0],
            strict=True,
        )
