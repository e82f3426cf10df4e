"""The typed configuration: KServe's environment in, frozen settings or a one-line fix out."""

from __future__ import annotations

from pathlib import Path

import pytest
from multinode_llm.config import head_config, worker_config
from multinode_llm.errors import UserError

HEAD_ENV = {
    "PIPELINE_PARALLEL_SIZE": "2",
    "TENSOR_PARALLEL_SIZE": "4",
    "RAY_NODE_COUNT": "2",
    "REQUEST_GPU_COUNT": "4",
    "MODEL_NAME": "llama",
    "MODEL_DIR": "/mnt/models",
    "POD_IP": "10.0.0.5",
    "POD_NAMESPACE": "serving",
}
WORKER_ENV = {**HEAD_ENV, "HEAD_SVC": "llama-head-1", "ISVC_NAME": "llama"}


def test_head_reads_what_kserve_injects() -> None:
    config = head_config(HEAD_ENV, {})
    assert (config.parallel.tensor, config.parallel.pipeline, config.parallel.gpus) == (4, 2, 8)
    assert config.node.node_count == 2
    assert config.node.gpus == 4
    assert config.node.pod_ip == "10.0.0.5"
    assert config.model == "/mnt/models"
    assert config.model_is_dir
    assert config.served_model_names == ("llama",)
    assert config.node.ray_ports.gcs == 6379
    assert config.node.wait_timeout_s == 600
    assert config.node.ray_temp_dir == Path("/tmp/ray")
    assert (config.http_port, config.node.status_port) == (8080, 8081)


def test_flags_override_the_environment() -> None:
    flags = {
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 3,
        "node_count": 3,
        "wait_timeout": 5.0,
        "ray_port": 7000,
        "served_model_name": ["a", "b"],
        "model": "org/name",
        "ray_temp_dir": "/tmp/r1",
        "vllm_args": ["--max-model-len", "256"],
    }
    config = head_config(HEAD_ENV, flags)
    assert (config.parallel.tensor, config.parallel.pipeline) == (1, 3)
    assert config.node.node_count == 3
    assert config.node.wait_timeout_s == 5.0
    assert config.node.ray_ports.gcs == 7000
    assert config.served_model_names == ("a", "b")
    assert config.model == "org/name"
    assert not config.model_is_dir
    assert config.node.ray_temp_dir == Path("/tmp/r1")
    assert config.vllm_args == ("--max-model-len", "256")


def test_model_id_is_served_when_no_model_dir_is_given() -> None:
    env = {key: value for key, value in HEAD_ENV.items() if key != "MODEL_DIR"}
    assert head_config({**env, "MODEL_ID": "Qwen/Qwen2-0.5B"}, {}).model == "Qwen/Qwen2-0.5B"


def test_wait_timeout_comes_from_group_wait_timeout() -> None:
    assert head_config({**HEAD_ENV, "GROUP_WAIT_TIMEOUT": "42"}, {}).node.wait_timeout_s == 42


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"TENSOR_PARALLEL_SIZE": None}, "TENSOR_PARALLEL_SIZE is not set"),
        ({"PIPELINE_PARALLEL_SIZE": "two"}, "PIPELINE_PARALLEL_SIZE='two' is not an integer"),
        ({"RAY_NODE_COUNT": "0"}, "RAY_NODE_COUNT=0 is less than 1"),
        ({"POD_IP": None}, "POD_IP is not set: declare it from the downward API"),
        ({"POD_IP": "head-0"}, "POD_IP='head-0' is not an IP address"),
        ({"RAY_PORT": "70000"}, "RAY_PORT='70000' is not a TCP port"),
        ({"GROUP_WAIT_TIMEOUT": "soon"}, "GROUP_WAIT_TIMEOUT='soon' is not a positive number"),
        ({"REQUEST_GPU_COUNT": "0"}, "REQUEST_GPU_COUNT=0 on the head"),
        ({"MODEL_DIR": None}, "no model given: set MODEL_DIR"),
    ],
)
def test_a_bad_environment_names_the_variable_and_the_fix(
    change: dict[str, str | None], message: str
) -> None:
    merged = {**HEAD_ENV, **change}
    env = {key: value for key, value in merged.items() if value is not None}
    with pytest.raises(UserError, match="^" + message.replace("(", r"\(")) as error:
        head_config(env, {})
    assert "\n" not in str(error.value)
    assert ":" in str(error.value)  # the fix follows the colon


def test_a_bad_flag_is_named_as_the_flag() -> None:
    with pytest.raises(UserError, match=r"^--tensor-parallel-size=0 is less than 1"):
        head_config(HEAD_ENV, {"tensor_parallel_size": 0})


def test_worker_finds_the_head_through_its_service() -> None:
    config = worker_config(WORKER_ENV, {})
    assert config.head_host == "llama-head-1.serving.svc.cluster.local"
    assert config.head_address == "llama-head-1.serving.svc.cluster.local:6379"
    assert config.isvc_name == "llama"


def test_worker_head_address_flag_wins() -> None:
    assert worker_config(WORKER_ENV, {"head_address": "10.0.0.9"}).head_address == "10.0.0.9:6379"


def test_worker_without_head_svc_says_what_to_set() -> None:
    env = {key: value for key, value in WORKER_ENV.items() if key != "HEAD_SVC"}
    with pytest.raises(
        UserError, match=r"^HEAD_SVC is not set: KServe sets it.*LWS_LEADER_ADDRESS"
    ):
        worker_config(env, {})


def test_a_leader_worker_set_worker_finds_its_leader_by_its_absolute_name() -> None:
    env = {key: value for key, value in WORKER_ENV.items() if key != "HEAD_SVC"}
    env["LWS_LEADER_ADDRESS"] = "llama-1.llama.serving"
    config = worker_config({**env, "CLUSTER_DOMAIN": "corp.local"}, {})
    assert config.head_host == "llama-1.llama.serving.svc.corp.local"


def test_kserve_head_service_wins_over_a_leader_address() -> None:
    config = worker_config({**WORKER_ENV, "LWS_LEADER_ADDRESS": "other-0.other.serving"}, {})
    assert config.head_host == "llama-head-1.serving.svc.cluster.local"


def test_worker_may_have_no_gpus_and_needs_no_model() -> None:
    env = {key: value for key, value in WORKER_ENV.items() if not key.startswith("MODEL")}
    assert worker_config({**env, "REQUEST_GPU_COUNT": "0"}, {}).node.gpus == 0


def test_counts_kserve_0_15_0_does_not_inject_are_derived_from_the_parallel_sizes() -> None:
    env = {k: v for k, v in HEAD_ENV.items() if k not in ("RAY_NODE_COUNT", "REQUEST_GPU_COUNT")}
    node = head_config(env, {}).node
    assert (node.node_count, node.gpus) == (2, 4)
    assert node.derived == (
        "REQUEST_GPU_COUNT=4 from TENSOR_PARALLEL_SIZE (this KServe release sets no "
        "REQUEST_GPU_COUNT)",
        "RAY_NODE_COUNT=2 from PIPELINE_PARALLEL_SIZE (this KServe release sets no RAY_NODE_COUNT)",
    )
    assert head_config(HEAD_ENV, {}).node.derived == ()


def test_a_count_with_neither_variable_names_both() -> None:
    env = {
        k: v
        for k, v in WORKER_ENV.items()
        if k not in ("REQUEST_GPU_COUNT", "TENSOR_PARALLEL_SIZE")
    }
    with pytest.raises(UserError, match=r"^neither REQUEST_GPU_COUNT nor TENSOR_PARALLEL_SIZE"):
        worker_config(env, {})


def test_worker_names_the_head_in_the_cluster_domain_it_is_given() -> None:
    config = worker_config({**WORKER_ENV, "CLUSTER_DOMAIN": "corp.example"}, {})
    assert config.head_host == "llama-head-1.serving.svc.corp.example"


MP_HEAD_ENV = {**HEAD_ENV, "MULTINODE_LLM_EXECUTOR": "mp"}  # TP 4 per pod, PP 2 pods: mp's layout


def test_the_executor_is_ray_unless_mp_is_asked_for() -> None:
    config = head_config(HEAD_ENV, {})
    assert (config.node.executor, config.node.mp, config.node.master_port) == ("ray", False, 29500)
    mp = head_config({**MP_HEAD_ENV, "MASTER_PORT": "29600"}, {})
    assert (mp.node.executor, mp.node.mp, mp.node.master_port) == ("mp", True, 29600)
    assert head_config(HEAD_ENV, {"executor": "mp", "master_port": 1234}).node.master_port == 1234
    assert worker_config({**WORKER_ENV, "MULTINODE_LLM_EXECUTOR": " MP "}, {}).node.mp


def test_an_unknown_executor_is_refused_naming_the_choices() -> None:
    with pytest.raises(UserError) as refused:
        head_config({**HEAD_ENV, "MULTINODE_LLM_EXECUTOR": "slurm"}, {})
    assert str(refused.value) == (
        "MULTINODE_LLM_EXECUTOR='slurm' is not an executor: set it to one of ray, mp (default ray)"
    )


def test_a_bad_master_port_is_refused() -> None:
    with pytest.raises(UserError, match=r"^MASTER_PORT='70000' is not a TCP port"):
        worker_config({**WORKER_ENV, "MASTER_PORT": "70000"}, {})


def test_mp_refuses_a_master_port_the_head_uses_already() -> None:
    with pytest.raises(UserError) as refused:
        head_config({**MP_HEAD_ENV, "MASTER_PORT": "8081"}, {})
    assert str(refused.value).startswith(
        "MASTER_PORT=8081 is also the status port: vLLM's TCPStore needs a port of its own"
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"REQUEST_GPU_COUNT": "8"},  # Ray's layout: the head holds more than TP GPUs
            "REQUEST_GPU_COUNT=8 but TENSOR_PARALLEL_SIZE=4: each pod of an mp group holds "
            "exactly TENSOR_PARALLEL_SIZE GPUs",
        ),
        (
            {"RAY_NODE_COUNT": "1"},
            "RAY_NODE_COUNT=1 but PIPELINE_PARALLEL_SIZE=2: an mp group has one pod per "
            "pipeline stage",
        ),
    ],
)
def test_mp_refuses_a_layout_that_is_not_kserves_mp_mode(env: dict[str, str], message: str) -> None:
    for make, base in ((head_config, MP_HEAD_ENV), (worker_config, {**WORKER_ENV, **MP_HEAD_ENV})):
        with pytest.raises(UserError) as refused:
            make({**base, **env}, {})
        assert str(refused.value).startswith(message)
        assert "group.executor=mp" in str(refused.value)
        assert "MULTINODE_LLM_EXECUTOR=ray" in str(refused.value)


def test_ray_keeps_its_own_layout() -> None:
    """Ray's path is unchanged: a head with more GPUs than TP, fewer pods than PP is fine."""
    config = head_config({**HEAD_ENV, "REQUEST_GPU_COUNT": "8", "RAY_NODE_COUNT": "1"}, {})
    assert (config.node.gpus, config.node.node_count) == (8, 1)
