"""The runtime's side of the accelerator table: what the chart's two variables make of `ray start`
and of the interface variables, and the fallback without them matching the table's default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from multinode_llm.accelerator import RAY_RESOURCE_ENV, SOCKET_IFNAME_ENV, Accelerator
from multinode_llm.errors import UserError
from multinode_llm.group.network import collective_env

TABLE = Path(__file__).resolve().parents[2] / "charts" / "multinode-llm" / "accelerators.yaml"


def test_without_the_charts_variables_the_runtime_acts_as_the_tables_default_entry() -> None:
    table = yaml.safe_load(TABLE.read_text())
    default = table["accelerators"][table["default"]]
    fallback = Accelerator.from_env({})
    assert fallback.ray_resource == default["rayResource"]
    assert list(fallback.socket_ifname_env) == default["collective"]["socketIfname"]


def test_rays_own_gpu_resource_is_given_by_num_gpus() -> None:
    assert Accelerator.from_env({RAY_RESOURCE_ENV: "GPU"}).ray_start_arguments(4) == [
        "--num-gpus",
        "4",
    ]


def test_any_other_ray_resource_is_a_custom_resource() -> None:
    arguments = Accelerator.from_env({RAY_RESOURCE_ENV: "HPU"}).ray_start_arguments(8)
    assert arguments[0] == "--resources"
    assert json.loads(arguments[1]) == {"HPU": 8}


@pytest.mark.parametrize("value", ["", "CPU"])
def test_a_ray_resource_that_cannot_hold_gpus_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(UserError, match=RAY_RESOURCE_ENV):
        Accelerator.from_env({RAY_RESOURCE_ENV: value})


def test_the_interface_goes_to_the_variables_the_chart_names_and_to_gloo() -> None:
    env = collective_env("127.0.0.1", {SOCKET_IFNAME_ENV: "HCCL_SOCKET_IFNAME"})
    assert env["HCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "lo"
    assert "NCCL_SOCKET_IFNAME" not in env


def test_an_empty_list_of_variables_leaves_only_gloos() -> None:
    env = collective_env("127.0.0.1", {SOCKET_IFNAME_ENV: ""})
    assert env == {"VLLM_HOST_IP": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo"}


def test_a_variable_list_that_names_no_variable_is_refused() -> None:
    with pytest.raises(UserError, match=SOCKET_IFNAME_ENV):
        Accelerator.from_env({SOCKET_IFNAME_ENV: "NCCL_SOCKET_IFNAME,eth0=1"})
