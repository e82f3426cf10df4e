"""The chart's LLMInferenceService preset through KServe's own merge (``local/go/llmisvc-v0.19.0``:
``MergeSpecs`` and ``ReplaceVariables`` of ``pkg/controller/v1alpha2/llmisvc/config_merge.go``
at the KServe release it pins): an LLMInferenceService with ``parallelism`` and a ``worker``
comes out as the head and workers of this runtime, sized by the service, with its resources, and
the runtime reads what KServe wrote as the group it is.

KServe's llmisvc controller itself serves the preset in test_llmisvc.py (``tox -e cluster-lws``);
this module checks the merge's details without starting a group.
"""

from __future__ import annotations

from typing import Any

import pytest
from multinode_llm.cli import build_parser
from multinode_llm.config import head_config
from multinode_llm.errors import UserError
from multinode_llm.serving.command import engine_arguments, serves_tls
from multinode_llm_local.kserve import llmisvc
from multinode_llm_testing.chartlib import template

Obj = dict[str, Any]
GPUS = {"nvidia.com/gpu": "4"}
SERVICE: Obj = {
    "apiVersion": "serving.kserve.io/v1alpha2",
    "kind": "LLMInferenceService",
    "metadata": {"name": "llama", "namespace": "serving"},
    "spec": {
        "model": {"uri": "hf://Qwen/Qwen2.5-0.5B-Instruct", "name": "qwen"},
        "parallelism": {"tensor": 4, "pipeline": 2},
        "template": {"containers": [{"name": "main", "resources": {"limits": GPUS}}]},
        "worker": {"containers": [{"name": "main", "resources": {"limits": GPUS}}]},
    },
}
CHAT_TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"


def preset(**values: Any) -> Obj:
    """The chart's preset for KServe ``llmisvc.release()``, as helm 4 renders it."""
    chart = {
        "kserve": {"version": llmisvc.release()},
        "llmInferenceServicePresets": {"enabled": True},
        **values,
    }
    [found] = template("helm4", values=chart).of_kind("LLMInferenceServiceConfig")
    return found


@pytest.fixture(scope="module")
def merge() -> Any:
    def run(tls: bool = False, **values: Any) -> Obj:
        try:
            return llmisvc.merge(SERVICE, [preset(**values)], tls=tls)
        except UserError as why:
            if "go is not installed" in str(why):
                pytest.skip(f"KServe's merge is built from its Go module: {why}")
            raise

    return run


def main(pod: Obj) -> Obj:
    containers: list[Obj] = pod["containers"]
    [container] = [c for c in containers if c["name"] == "main"]
    return container


def env(container: Obj) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_kserve_makes_the_head_and_workers_of_the_services_size(merge: Any) -> None:
    merged = merge()
    spec = merged["config"]["spec"]
    assert merged["groupSize"] == 2  # LeaderWorkerSet size: parallelism.pipeline
    head, worker = main(spec["template"]), main(spec["worker"])
    assert head["args"][:5] == ["head", "--port", "8000", "--served-model-name", "qwen"]
    assert worker["args"] == ["worker"]
    for container in (head, worker):
        assert {k: env(container)[k] for k in ("PIPELINE_PARALLEL_SIZE", "TENSOR_PARALLEL_SIZE",
                                               "RAY_NODE_COUNT", "REQUEST_GPU_COUNT")} == {
            "PIPELINE_PARALLEL_SIZE": "2", "TENSOR_PARALLEL_SIZE": "4",
            "RAY_NODE_COUNT": "2", "REQUEST_GPU_COUNT": "4",
        }  # fmt: skip
        # the service's own resources, merged into the preset's container by its name
        assert container["resources"]["limits"] == GPUS
        assert container["image"].startswith("ghcr.io/multinode-llm/multinode-llm:")
    assert env(head)["INFERENCE_SERVICE_NAME"] == "llama"
    assert env(worker)["ISVC_NAME"] == "llama"


def test_the_runtime_reads_kserves_output_as_the_group_the_service_asked_for(merge: Any) -> None:
    head = main(merge()["config"]["spec"]["template"])
    parser, _ = build_parser()
    args, extra = parser.parse_known_args(head["args"])  # the runtime's own command line
    flags = {k: v for k, v in vars(args).items() if v is not None} | {"vllm_args": extra}
    downward = {"POD_IP": "10.0.0.5", "POD_NAME": "llama-0", "POD_NAMESPACE": "serving"}
    config = head_config(env(head) | downward, flags)
    assert config.served_model_names == ("qwen",)
    assert (config.parallel.tensor, config.parallel.pipeline) == (4, 2)
    argv = engine_arguments(config)
    assert argv[argv.index("--port") + 1] == "8000"
    assert not serves_tls(config.vllm_args)  # KServe's TLS is off: empty certificate names


def test_with_kserves_tls_on_vllm_serves_its_certificate(merge: Any) -> None:
    spec = merge(tls=True)["config"]["spec"]
    head = main(spec["template"])
    assert serves_tls(head["args"])
    assert head["args"][head["args"].index("--ssl-keyfile") + 1] == "/var/run/kserve/tls/tls.key"
    [certs] = [v for v in spec["template"]["volumes"] if v["name"] == "tls-certs"]
    assert certs["secret"]["secretName"] == "llama-kserve-self-signed-certs"


def test_a_chat_template_in_vllm_args_reaches_vllm_as_written(merge: Any) -> None:
    """KServe executes the whole config as a Go template: the chart escapes the user's braces."""
    merged = merge(vllm={"args": ["--chat-template", CHAT_TEMPLATE]})
    head = main(merged["config"]["spec"]["template"])
    assert head["args"][-2:] == ["--chat-template", CHAT_TEMPLATE]
