"""``llmInferenceServicePresets`` (docs/llmisvc.md): the tensor x pipeline preset KServe's
LLMInferenceService looks up and does not ship, under the name KServe's own source looks for, valid
under KServe's own CRD, written for each release's template (its API version, its TLS switch).
KServe's merge of it with a service runs in tests/cluster/test_llmisvc_presets.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from crdschema import crd_schemas, schema_errors
from multinode_llm.errors import UserError
from multinode_llm_local.controlplane import kserve
from multinode_llm_local.kserve import releases
from multinode_llm_testing.chartlib import template

PRESETS = {"llmInferenceServicePresets": {"enabled": True}}
# The first release with LLMInferenceService (v1alpha1) and the chart's default (v1alpha2).
CHECKED = ["0.16.0", releases.default().version]
# Every verified release with LLMInferenceService (an unverified one has no source to read).
WITH_LLMISVC = [
    v
    for v in releases.versions()
    if releases.get(v).llm_inference_service and releases.get(v).source
]


def rendered(version: str = "", **values: Any) -> list[dict[str, Any]]:
    chart = {**PRESETS, "kserve": {"version": version}, **values}
    return template("helm4", values=chart).documents()


def the_preset(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [found] = [d for d in docs if d["kind"] == "LLMInferenceServiceConfig"]
    return found


def source(version: str) -> Path:
    try:
        return kserve.module_dir(kserve.resolve(version))
    except UserError as why:
        pytest.skip(f"KServe {version}'s module is not to be had here: {why}")


def looked_up_name(config_merge: str) -> str:
    """The preset name config_merge.go looks up for a multi-node pipeline-parallel service."""
    suffix = re.search(
        r'configWorkerPipelineParallelName(?:Suffix)?\s*=\s*(?:configPrefix \+ )?"([^"]+)"',
        config_merge,
    )
    prefix = re.search(r'configPrefix\s*=\s*(?:constants\.GetEnvOrDefault\([^,]+, )?"([^"]+)"',
                       config_merge)  # fmt: skip
    assert suffix, "config_merge.go no longer names the pipeline-parallel preset"
    assert prefix, "config_merge.go no longer names the presets' prefix"
    return prefix.group(1) + suffix.group(1)


def test_a_release_of_presets_only_renders_the_preset_alone() -> None:
    docs = rendered()
    assert [d["kind"] for d in docs] == ["LLMInferenceServiceConfig"]
    # the release's namespace (chartlib renders into serving)
    assert the_preset(docs)["metadata"]["namespace"] == "serving"


@pytest.mark.parametrize("version", CHECKED)
def test_the_preset_has_the_name_kserves_source_looks_up(version: str) -> None:
    folder = source(version)
    api = the_preset(rendered(version))["apiVersion"].rsplit("/", 1)[1]
    config_merge = (folder / "pkg/controller" / api / "llmisvc/config_merge.go").read_text()
    assert the_preset(rendered(version))["metadata"]["name"] == looked_up_name(config_merge)
    # the name is looked up, yet no preset of that name ships with KServe
    shipped = {p.stem for p in (folder / "config/llmisvcconfig").glob("*.yaml")}
    assert looked_up_name(config_merge).removeprefix("kserve-") not in shipped


@pytest.mark.parametrize("version", CHECKED)
def test_the_preset_is_valid_under_kserves_own_crd_strictly(version: str) -> None:
    schemas = crd_schemas(source(version) / "config/crd/full/llmisvc")
    preset = the_preset(rendered(version))
    schema = schemas[(preset["apiVersion"], "LLMInferenceServiceConfig")]
    assert schema_errors(schema, preset) == []


@pytest.mark.parametrize("version", WITH_LLMISVC)
def test_the_tables_merge_facts_are_kserves_source(version: str) -> None:
    """missingConfig and appliedConfigs, which tests/cluster/test_llmisvc.py expects of KServe's
    controller, as each release's source has them (a release whose module the Go module proxy
    does not serve skips, naming it)."""
    facts = releases.llm_inference_service(version)
    folder = source(version)
    api = facts.api_version.rsplit("/", 1)[1]
    controller = "\n".join(
        p.read_text() for p in (folder / "pkg/controller" / api / "llmisvc").glob("*.go")
    )
    tells_missing_apart = 'MarkPresetsCombinedNotReady("ConfigNotFound"' in controller
    assert facts.missing_config == ("ConfigNotFound" if tells_missing_apart else "CombineBaseError")
    schemas = crd_schemas(folder / "config/crd/full/llmisvc")
    status = schemas[(facts.api_version, "LLMInferenceService")]["properties"]["status"]
    assert facts.applied_configs == ("appliedConfigs" in status["properties"])


def test_kserves_tls_reaches_vllm_only_on_releases_whose_templates_have_it() -> None:
    """0.17's templates have no .GlobalConfig.EnableTLS: naming it would fail every merge."""
    for version, switched in (("0.17.0", False), ("0.18.0", True), ("0.19.0", True)):
        spec = the_preset(rendered(version))["spec"]
        [head] = spec["template"]["containers"]
        assert ("--ssl-certfile" in head["args"]) is switched, version
        assert any(v["name"] == "tls-certs" for v in spec["template"]["volumes"]) is switched
        assert ("EnableTLS" in str(spec)) is switched, version


def test_the_name_prefix_follows_kserves_setting() -> None:
    docs = rendered(llmInferenceServicePresets={"enabled": True, "namePrefix": "team-"})
    assert the_preset(docs)["metadata"]["name"] == "team-config-llm-worker-pipeline-parallel"


def test_a_release_with_a_model_keeps_its_own_group_beside_the_preset() -> None:
    docs = rendered(model={"uri": "hf://Qwen/Qwen2.5-0.5B-Instruct"})
    kinds = {d["kind"] for d in docs}
    assert {"LLMInferenceServiceConfig", "InferenceService", "ServingRuntime"} <= kinds
    # the preset sizes nothing itself: the service's parallelism and resources decide
    [head] = the_preset(docs)["spec"]["template"]["containers"]
    assert "resources" not in head
    assert "{{ .Spec.Parallelism.Pipeline }}" in str(head["env"])
    volumes = {v["name"] for v in the_preset(docs)["spec"]["template"]["volumes"]}
    assert "model" not in volumes  # KServe attaches the service's model at /mnt/models
