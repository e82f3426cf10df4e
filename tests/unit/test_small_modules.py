"""The network settings for collectives and the test-only GPU mock's activation."""

from __future__ import annotations

import pytest
from multinode_llm.group.network import collective_env, interface_for
from multinode_llm_local import gpu_mock


def test_loopback_address_belongs_to_lo() -> None:
    assert interface_for("127.0.0.1") == "lo"


def test_an_address_of_no_interface_has_none() -> None:
    assert interface_for("203.0.113.77") is None  # TEST-NET-3: on no interface
    assert interface_for("::1") is None


def test_collective_env_is_derived_from_the_pod_ip() -> None:
    env = collective_env("127.0.0.1", {})
    assert env == {
        "VLLM_HOST_IP": "127.0.0.1",
        "GLOO_SOCKET_IFNAME": "lo",
        "NCCL_SOCKET_IFNAME": "lo",
    }


def test_collective_env_keeps_what_the_pod_sets() -> None:
    env = collective_env("127.0.0.1", {"NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": ""})
    assert env["NCCL_SOCKET_IFNAME"] == "ib0"
    assert env["GLOO_SOCKET_IFNAME"] == "lo"  # empty counts as unset


def test_gpu_mock_is_inert_without_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gpu_mock.ENV, raising=False)
    assert gpu_mock.register() is None
    monkeypatch.setenv(gpu_mock.ENV, "true")  # only exactly "1" activates it
    assert gpu_mock.register() is None


def test_gpu_mock_names_its_platform_when_activated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gpu_mock.ENV, "1")
    assert gpu_mock.register() == "multinode_llm_local.gpu_mock.GpuMockPlatform"


def test_gpu_mock_plugin_is_registered_for_vllm() -> None:
    from importlib.metadata import entry_points

    names = {entry.value for entry in entry_points(group="vllm.platform_plugins")}
    assert "multinode_llm_local.gpu_mock:register" in names


def test_gpu_mock_names_a_communicator_that_keeps_shared_memory_inside_a_pod() -> None:
    assert gpu_mock.COMMUNICATOR == "multinode_llm_local.gpu_mock.PodLocalCommunicator"
