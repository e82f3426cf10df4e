"""KServe's multi-node executor backend as the local emulation reads it, per release.

From v0.18.0 the controller reads ``multinode/executor-backend`` from the runtime's
``spec.annotations`` (``sRuntime.Annotations[constants.MultiNodeExecutorBackendAnnotationKey]`` in
``multiNodeProcess``, pkg/controller/v1beta1/inferenceservice/components/predictor.go; the key in
pkg/constants/constants.go) and, for ``mp``, sizes the group with ``computeMpNodeAndGPUs``: nodes =
pipelineParallelSize, GPUs per pod = tensorParallelSize, whatever the containers request. Every
other value, and every earlier release, takes the Ray math (``computeRayNodeAndGPUs``; 0.15.0: its
tensor math). KServe's own table of ``computeMpNodeAndGPUs``: tests/kserve/vectors/gpu-math.yaml.

The containers here request no GPU, so that the Ray math (TP x PP nodes of one GPU each) and the
mp math (PP nodes of TP GPUs) give different groups and show which one a release runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from multinode_llm_local import kserve
from multinode_llm_local.kserve import controller, releases
from multinode_llm_local.kserve.admission import AUTOSCALER, MODE

RENDERED = Path(__file__).with_name("data") / "rendered-multinode.yaml"
WITH_MP = ["0.18.0", "0.18.1", "0.19.0", "0.20.0"]
WITHOUT_MP = ["0.15.1", "0.15.2", "0.16.0", "0.17.0", "0.17.1"]
PIPELINE, TENSOR = 3, 2


def objects(version: str, *, spec_annotation: bool = True) -> list[dict[str, Any]]:
    """The fixture's runtime, annotated mp (in ``spec.annotations``, or else only in its
    metadata), and its InferenceService of PP=3, TP=2 with no GPU requests."""
    found = [d for d in yaml.safe_load_all(RENDERED.read_text()) if d]
    runtime = next(o for o in found if o["kind"] == "ClusterServingRuntime")
    holder = runtime["spec"] if spec_annotation else runtime["metadata"]
    holder.setdefault("annotations", {})[controller.EXECUTOR_ANNOTATION] = "mp"
    # 0.15.0's runtime webhook wants both sizes; the InferenceService's win on every release
    runtime["spec"]["workerSpec"].update(pipelineParallelSize=2, tensorParallelSize=1)
    isvc = next(o for o in found if o["kind"] == "InferenceService")
    isvc["metadata"]["annotations"][MODE] = releases.get(version).deployment_mode
    isvc["metadata"]["annotations"][AUTOSCALER] = releases.get(version).autoscaler_class
    del isvc["metadata"]["namespace"]
    predictor = isvc["spec"]["predictor"]
    for container in [predictor["model"], *predictor["workerSpec"]["containers"]]:
        for kind in ("limits", "requests"):
            container.get("resources", {}).get(kind, {}).pop("nvidia.com/gpu", None)
    return found


def group(version: str, *, spec_annotation: bool = True) -> kserve.Reconciled:
    made = objects(version, spec_annotation=spec_annotation)
    return kserve.reconcile(made, release=releases.get(version))


def env(workload: kserve.Workload) -> dict[str, str]:
    return controller.env_of(workload.container)


@pytest.mark.parametrize("version", WITH_MP)
def test_an_mp_runtime_gets_pipeline_nodes_of_tensor_gpus(version: str) -> None:
    result = group(version)
    assert (result.node_count, result.head_gpus, result.worker_gpus) == (PIPELINE, TENSOR, TENSOR)
    assert result.worker.replicas == PIPELINE - 1
    for workload in (result.head, result.worker):
        assert env(workload)["REQUEST_GPU_COUNT"] == str(TENSOR), workload.role
        assert env(workload)["RAY_NODE_COUNT"] == str(PIPELINE), workload.role
        assert env(workload)["PIPELINE_PARALLEL_SIZE"] == str(PIPELINE), workload.role
        assert env(workload)["TENSOR_PARALLEL_SIZE"] == str(TENSOR), workload.role


@pytest.mark.parametrize("version", WITH_MP)
def test_the_annotation_counts_only_in_the_runtimes_spec(version: str) -> None:
    result = group(version, spec_annotation=False)
    assert (result.node_count, result.head_gpus) == (PIPELINE * TENSOR, 1)


@pytest.mark.parametrize("version", WITHOUT_MP)
def test_a_release_before_0_18_ignores_the_annotation(version: str) -> None:
    result = group(version)
    assert (result.node_count, result.head_gpus, result.worker_gpus) == (PIPELINE * TENSOR, 1, 1)
    assert result.worker.replicas == PIPELINE * TENSOR - 1


def test_0_15_0_keeps_its_tensor_math_with_the_annotation() -> None:
    result = group("0.15.0")
    assert (result.node_count, result.head_gpus, result.worker_gpus) == (PIPELINE, TENSOR, TENSOR)


def test_the_releases_with_the_mode_are_the_tables() -> None:
    table = {v: "mp" in releases.get(v).controller.executors for v in WITH_MP + WITHOUT_MP}
    assert table == {**dict.fromkeys(WITH_MP, True), **dict.fromkeys(WITHOUT_MP, False)}
