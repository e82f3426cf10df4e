"""The accelerator table (accelerators.yaml) drives the chart's resources and env and the runtime's
`ray start` and interface variables; a new vendor is one entry of it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from multinode_llm.accelerator import Accelerator
from multinode_llm.config import Node, RayPorts
from multinode_llm.group import ray_node
from multinode_llm.group.network import collective_env
from multinode_llm_testing.chartlib import (
    CHART,
    NAMESPACE,
    RELEASE,
    ROOT,
    Render,
    accelerators,
    run_with_values,
    template,
)

TABLE = accelerators()
CHART_YAML = yaml.safe_load((CHART / "Chart.yaml").read_text())
MODEL = {"model": {"uri": "hf://Qwen/Qwen2.5-0.5B-Instruct"}}
# What a maintainer adds for a vendor the chart has never heard of: one entry, nothing else.
FAKE_ENTRY: dict[str, Any] = {
    "resourceName": "example.com/npu",
    "rayResource": "NPU",
    "collective": {
        "library": "XCCL",
        "socketIfname": ["XCCL_SOCKET_IFNAME"],
        "debug": "XCCL_DEBUG",
        "ibDisable": None,
        "ibHca": None,
    },
    "image": "example.com/multinode-llm-npu",
    "baseImage": "example.com/vllm-npu",
}


def group_containers(render: Render) -> list[dict[str, Any]]:
    """The head and worker containers of the InferenceService (GPUs), each with the env of its
    ServingRuntime container (the chart's env), as KServe merges them."""
    predictor = render.one("InferenceService")["spec"]["predictor"]
    runtime = render.one("ServingRuntime")["spec"]
    pairs = [
        (predictor["model"], runtime["containers"][0]),
        (predictor["workerSpec"]["containers"][0], runtime["workerSpec"]["containers"][0]),
    ]
    return [
        {**runtime_side, **isvc_side, "env": runtime_side["env"]}
        for isvc_side, runtime_side in pairs
    ]


def plain_env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def runtime_view(env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """What `multinode-llm head` makes of a rendered env: its `ray start` GPU arguments and the
    interface variables it derives for a pod whose IP is on loopback."""
    accelerator = Accelerator.from_env(env)
    node = Node(
        pod_ip="127.0.0.1",
        gpus=2,
        node_count=2,
        ray_ports=RayPorts(),
        ray_temp_dir=Path("/tmp/ray"),
        wait_timeout_s=60.0,
        status_port=8081,
    )
    command = ray_node.start_command(node, None, accelerator)
    derived = collective_env("127.0.0.1", env)
    return command, derived


# A serving image a user built for a vendor the project builds none for (the Dockerfile's header).
OWN_IMAGE = "registry.example/multinode-llm-vendor"


def serving_image(entry: dict[str, Any]) -> dict[str, Any]:
    """The image values a vendor needs: none where the table lists its image, else one's own."""
    return {} if entry.get("image") else {"image": {"repository": OWN_IMAGE}}


@pytest.mark.parametrize("vendor", sorted(TABLE["accelerators"]))
def test_each_vendor_of_the_table_reaches_the_pods_and_the_runtime(major: str, vendor: str) -> None:
    entry = TABLE["accelerators"][vendor]
    values = {**MODEL, "gpu": {"resourceName": entry["resourceName"]}, **serving_image(entry)}
    values["communication"] = {"socketIfname": "eth1"}
    for container in group_containers(template(major, values=values)):
        assert container["image"].rsplit(":", 1)[0] == (entry.get("image") or OWN_IMAGE)
        assert container["resources"]["limits"][entry["resourceName"]] == "1"
        env = plain_env(container)
        assert env["MULTINODE_LLM_RAY_RESOURCE"] == entry["rayResource"]
        assert env["MULTINODE_LLM_SOCKET_IFNAME_ENV"] == ",".join(
            entry["collective"]["socketIfname"]
        )
        for name in [*entry["collective"]["socketIfname"], "GLOO_SOCKET_IFNAME"]:
            assert env[name] == "eth1", name
        accelerator = Accelerator.from_env(env)
        assert accelerator.ray_resource == entry["rayResource"]
        assert list(accelerator.socket_ifname_env) == entry["collective"]["socketIfname"]


def test_a_resource_name_of_a_known_domain_takes_that_vendors_entry(major: str) -> None:
    mig = "nvidia.com/mig-1g.10gb"
    values = {**MODEL, "gpu": {"resourceName": mig, "customResourceTypes": [mig]}}
    values["parallelism"] = {"tensor": 1}
    values["communication"] = {"ncclDebug": "INFO"}
    for container in group_containers(template(major, values=values)):
        env = plain_env(container)
        assert env["NCCL_DEBUG"] == "INFO"
        assert env["MULTINODE_LLM_RAY_RESOURCE"] == "GPU"


@pytest.mark.parametrize(
    "vendor", sorted(v for v, entry in TABLE["accelerators"].items() if not entry.get("image"))
)
def test_a_vendor_no_image_is_built_for_is_refused_until_image_repository_names_one(
    major: str, vendor: str
) -> None:
    entry = TABLE["accelerators"][vendor]
    values = {**MODEL, "gpu": {"resourceName": entry["resourceName"]}}
    render = template(major, values=values)
    assert render.returncode != 0
    refusal = f"gpu.resourceName={entry['resourceName']}: no serving image is built for its vendor"
    assert f"{refusal}, {vendor}" in render.stderr
    assert f"build the Dockerfile's serving target on {entry['baseImage']}" in render.stderr
    assert "set image.repository to it" in render.stderr
    assert "1 value(s) to fix" in render.stderr


def test_the_default_image_follows_the_table_for_its_vendor(major: str) -> None:
    [(vendor, entry)] = [(v, e) for v, e in TABLE["accelerators"].items() if e.get("image")]
    mig = f"{entry['resourceName'].split('/')[0]}/mig-1g.10gb"  # the same vendor by its domain
    for resource, custom in ((entry["resourceName"], []), (mig, [mig])):
        values = {**MODEL, "gpu": {"resourceName": resource, "customResourceTypes": custom}}
        for container in group_containers(template(major, values=values)):
            assert container["image"] == f"{entry['image']}:{CHART_YAML['appVersion']}", vendor


def test_a_resource_no_entry_claims_needs_image_repository(major: str) -> None:
    resource = "example.org/accel"
    values = {**MODEL, "gpu": {"resourceName": resource, "customResourceTypes": [resource]}}
    render = template(major, values=values)
    assert render.returncode != 0
    assert f"gpu.resourceName={resource}: no entry of the chart's accelerators.yaml claims it" in (
        render.stderr
    )
    values["image"] = {"repository": OWN_IMAGE}
    for container in group_containers(template(major, values=values)):
        assert container["image"].startswith(f"{OWN_IMAGE}:")


def test_the_dockerfile_says_how_to_build_each_vendor_s_image_the_project_does_not() -> None:
    header = "\n".join(
        line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("#")
    )
    for vendor, entry in TABLE["accelerators"].items():
        if not entry.get("image"):
            assert entry["resourceName"] in header, vendor
            assert entry["baseImage"].split(" (")[0] in header, vendor
    assert "--set image.repository=" in header


def test_a_value_whose_variable_the_vendor_lacks_is_refused_naming_it(major: str) -> None:
    values = {**MODEL, "gpu": {"resourceName": "habana.ai/gaudi"}}
    values["communication"] = {"ncclDebug": "INFO"}
    render = template(major, values=values)
    assert render.returncode != 0
    assert "communication.ncclDebug with gpu.resourceName=habana.ai/gaudi: HCCL" in render.stderr
    assert "unset communication.ncclDebug" in render.stderr


def test_the_vendors_own_variables_are_reserved_in_head_env(major: str) -> None:
    values: dict[str, Any] = {
        **MODEL,
        "gpu": {"resourceName": "habana.ai/gaudi"},
        "image": {"repository": OWN_IMAGE},
    }
    values["head"] = {"env": [{"name": "HCCL_SOCKET_IFNAME", "value": "eth0"}]}
    render = template(major, values=values)
    assert render.returncode != 0
    assert "head.env[0] sets HCCL_SOCKET_IFNAME: set communication.socketIfname" in render.stderr


def test_adding_a_vendor_is_one_entry_that_flows_through_chart_and_runtime(
    major: str, tmp_path: Path
) -> None:
    chart = tmp_path / "multinode-llm"
    shutil.copytree(CHART, chart)
    table_file = chart / "accelerators.yaml"
    table = yaml.safe_load(table_file.read_text())
    table["accelerators"]["example"] = FAKE_ENTRY
    table_file.write_text(yaml.safe_dump(table))

    resource = FAKE_ENTRY["resourceName"]
    # KServe's own list lacks it: declared to KServe, one GPU per pod (KServe's facts, not ours).
    values = {**MODEL, "gpu": {"resourceName": resource, "customResourceTypes": [resource]}}
    values["parallelism"] = {"tensor": 1}
    values["communication"] = {"ncclDebug": "TRACE"}
    args = ["template", RELEASE, str(chart), "--namespace", NAMESPACE]
    render = run_with_values(major, args, None, values)

    isvc = render.one("InferenceService")
    assert resource in isvc["metadata"]["annotations"]["serving.kserve.io/gpu-resource-types"]
    for container in group_containers(render):
        assert container["image"].startswith(f"{FAKE_ENTRY['image']}:")
        assert container["resources"]["limits"][resource] == "1"
        env = plain_env(container)
        assert env["XCCL_DEBUG"] == "TRACE"
        assert "NCCL_DEBUG" not in env
        command, derived = runtime_view(env)
        assert command[command.index("--resources") + 1] == '{"NPU": 2}'
        assert "--num-gpus" not in command
        assert derived["XCCL_SOCKET_IFNAME"] == derived["GLOO_SOCKET_IFNAME"] == "lo"
        assert "NCCL_SOCKET_IFNAME" not in derived
