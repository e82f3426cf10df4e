"""The chart's real render (helm) through the KServe emulation: what the local cluster would run.

Needs helm only (``bash hack/install-tools.sh``); no root, no vLLM.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from multinode_llm.errors import UserError
from multinode_llm_local import cluster, kserve
from multinode_llm_local.chart import find_chart, find_helm
from multinode_llm_local.k8s import env_value
from multinode_llm_local.pods import PodIdentity, plan_pod


@pytest.fixture(scope="module")
def chart() -> Path:
    try:
        chart = find_chart()
        find_helm(chart)
    except UserError as error:
        pytest.skip(str(error))
    return chart


def _render(chart: Path, *sets: str) -> kserve.Reconciled:
    objects = cluster.render(chart, [cluster.DEFAULT_VALUES], sets, "local", "default")
    return kserve.reconcile(objects)


def test_the_built_in_values_make_a_head_and_one_worker(chart: Path) -> None:
    reconciled = _render(chart)
    assert (reconciled.node_count, reconciled.worker.replicas) == (2, 1)
    assert (reconciled.head_gpus, reconciled.worker_gpus) == (1, 1)
    head = reconciled.head.container
    assert head["command"] == ["multinode-llm"]
    assert head["args"][:3] == ["head", "--served-model-name", "tiny-llama"]
    assert reconciled.worker.container["args"][0] == "worker"
    assert reconciled.storage_uri == "pvc://models/tiny-llama"


@pytest.mark.parametrize(("pipeline", "tensor"), [(2, 1), (2, 2), (3, 1)])
def test_parallelism_travels_from_values_to_the_injected_environment(
    chart: Path, pipeline: int, tensor: int
) -> None:
    reconciled = _render(chart, f"parallelism.pipeline={pipeline}", f"parallelism.tensor={tensor}")
    head_env = reconciled.head.container["env"]
    assert env_value(head_env, "PIPELINE_PARALLEL_SIZE") == str(pipeline)
    assert env_value(head_env, "TENSOR_PARALLEL_SIZE") == str(tensor)
    assert env_value(head_env, "RAY_NODE_COUNT") == str(pipeline)
    assert reconciled.worker.replicas == pipeline - 1
    assert reconciled.worker.container["resources"]["limits"]["nvidia.com/gpu"] == str(tensor)


def test_the_pods_run_as_the_charts_user_on_a_read_only_root(chart: Path, tmp_path: Path) -> None:
    reconciled = _render(chart)
    (tmp_path / "tiny-llama").mkdir()
    identity = PodIdentity(
        name="head-0",
        namespace="default",
        ip="10.230.0.2",
        netns="mnl-head",
        role="head",
        labels={},
        annotations={},
        directory=tmp_path / "pod",
        gpus=1,
    )
    container = plan_pod(identity, reconciled.head.pod_spec, [], {"models": tmp_path}).containers[0]
    assert (container.uid, container.gid) == (1000, 1000)
    assert container.read_only_root
    assert container.drop_capabilities
    assert container.no_new_privs
    targets = {m.target: m for m in container.mounts}
    assert targets["/mnt/models"].source == str(tmp_path / "tiny-llama")
    assert targets["/mnt/models"].read_only
    assert targets["/dev/shm"].kind == "tmpfs"
    assert container.env["MODEL_DIR"] == "/mnt/models"
    assert container.env["POD_IP"] == "10.230.0.2"
    assert container.startup is not None
    assert (container.startup.port, container.startup.path) == (8081, "/startup")


def test_a_value_the_chart_refuses_is_one_line_naming_it(chart: Path) -> None:
    with pytest.raises(UserError) as error:
        _render(chart, "parallelism.pipeline=1")
    message = str(error.value)
    assert message.startswith("helm refused the values:")
    assert "pipeline" in message
    assert "\n" not in message
