"""vLLM's command line: TP and PP exactly as configured, the user's arguments untouched."""

from __future__ import annotations

from multinode_llm.cli import build_parser
from multinode_llm.config import head_config
from multinode_llm.serving.command import (
    MIDDLEWARE,
    api_key,
    engine_arguments,
    engine_command,
    engine_env,
    headless_command,
    serves_tls,
)

ENV = {
    "PIPELINE_PARALLEL_SIZE": "3",
    "TENSOR_PARALLEL_SIZE": "8",
    "RAY_NODE_COUNT": "3",
    "REQUEST_GPU_COUNT": "2",  # the head's local GPU count must not leak into TP
    "MODEL_NAME": "big",
    "MODEL_DIR": "/mnt/models",
    "POD_IP": "10.0.0.5",
}


def _head_args(argv: list[str]) -> dict[str, object]:
    parser, _modules = build_parser()
    args, extra = parser.parse_known_args(["head", *argv])
    flags = {name: value for name, value in vars(args).items() if value is not None}
    return {**flags, "vllm_args": extra}


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_tensor_and_pipeline_sizes_pass_through_unchanged() -> None:
    argv = engine_command(head_config(ENV, {}), python="python")
    assert argv[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    assert _flag(argv, "--tensor-parallel-size") == "8"
    assert _flag(argv, "--pipeline-parallel-size") == "3"
    assert _flag(argv, "--distributed-executor-backend") == "ray"
    assert _flag(argv, "--model") == "/mnt/models"
    assert _flag(argv, "--served-model-name") == "big"
    assert _flag(argv, "--port") == "8080"
    assert _flag(argv, "--middleware") == MIDDLEWARE
    assert argv.count("--tensor-parallel-size") == 1


def test_unknown_arguments_reach_vllm_untouched_and_in_order() -> None:
    user = ["--max-model-len", "4096", "--enable-prefix-caching", "--kv-cache-dtype=fp8", "x y"]
    flags = _head_args(["--served-model-name", "big", *user])
    argv = engine_command(head_config(ENV, flags), python="python")
    assert argv[-len(user) :] == user


def test_parallel_flags_on_the_command_line_override_the_environment_once() -> None:
    flags = _head_args(["-tp", "2", "--pipeline-parallel-size", "4", "--max-num-seqs", "8"])
    argv = engine_command(head_config(ENV, flags), python="python")
    assert _flag(argv, "--tensor-parallel-size") == "2"
    assert _flag(argv, "--pipeline-parallel-size") == "4"
    assert argv.count("--pipeline-parallel-size") == 1
    assert argv[-2:] == ["--max-num-seqs", "8"]


def test_several_served_names_pass_through() -> None:
    flags = _head_args(["--served-model-name", "a", "b", "--max-model-len", "256"])
    argv = engine_command(head_config(ENV, flags), python="python")
    start = argv.index("--served-model-name")
    assert argv[start : start + 3] == ["--served-model-name", "a", "b"]
    assert argv[-2:] == ["--max-model-len", "256"]


def test_vllm_learns_where_ray_and_the_supervisor_are() -> None:
    env = engine_env(head_config(ENV, {"ray_port": 7000}), {"PATH": "/bin", "VLLM_HOST_IP": "x"})
    assert env["RAY_ADDRESS"] == "10.0.0.5:7000"
    assert env["MULTINODE_LLM_STATUS_URL"] == "http://127.0.0.1:8081"
    assert env["PATH"] == "/bin"
    assert env["VLLM_HOST_IP"] == "x"


def test_api_key_comes_from_vllm_arguments_or_environment() -> None:
    assert api_key(["--api-key", "k1"], {}) == "k1"
    assert api_key(["--api-key=k2"], {"VLLM_API_KEY": "k3"}) == "k2"
    assert api_key([], {"VLLM_API_KEY": "k3"}) == "k3"
    assert api_key(["--max-model-len", "8"], {}) is None
    # vLLM's parser keeps the last of a repeated flag, and so does the supervisor's check
    assert api_key(["--api-key", "k1", "--api-key=k4"], {}) == "k4"


def test_vllm_serves_tls_only_with_a_certificate_file_named() -> None:
    assert serves_tls(["--ssl-certfile", "/var/run/kserve/tls/tls.crt"])
    assert serves_tls(["--ssl-certfile=/tls.crt"])
    assert not serves_tls(["--ssl-certfile", "", "--ssl-keyfile", ""])  # uvicorn: no TLS
    assert not serves_tls(["--ssl-keyfile", "/tls.key"])
    assert not serves_tls(["--ssl-certfile", "/tls.crt", "--ssl-certfile="])


MP_ENV = {**ENV, "MULTINODE_LLM_EXECUTOR": "mp", "REQUEST_GPU_COUNT": "8", "MASTER_PORT": "29600"}


def test_mp_rank_zero_is_the_openai_server_and_the_master() -> None:
    config = head_config(MP_ENV, _head_args(["--max-model-len", "256"]))
    argv = engine_command(config, python="python")
    assert argv[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    assert _flag(argv, "--distributed-executor-backend") == "mp"
    assert _flag(argv, "--nnodes") == "3"  # PIPELINE_PARALLEL_SIZE pods
    assert _flag(argv, "--node-rank") == "0"
    assert _flag(argv, "--master-addr") == "10.0.0.5"  # the head's own POD_IP
    assert _flag(argv, "--master-port") == "29600"
    assert _flag(argv, "--middleware") == MIDDLEWARE
    assert argv[-2:] == ["--max-model-len", "256"]
    env = engine_env(config, {"PATH": "/bin"})
    assert "RAY_ADDRESS" not in env  # no Ray anywhere in an mp group
    assert env["MULTINODE_LLM_STATUS_URL"] == "http://127.0.0.1:8081"


def test_an_mp_workers_command_is_the_heads_with_its_own_rank() -> None:
    config = head_config(MP_ENV, _head_args(["--max-model-len", "256"]))
    head = engine_arguments(config, node_rank=0)
    worker = engine_arguments(config, node_rank=2)
    assert [arg for arg in worker if arg != "2"] == [arg for arg in head if arg != "0"]
    assert _flag(worker, "--node-rank") == "2"
    argv = headless_command(worker, python="python")
    assert argv[:3] == ["python", "-m", "multinode_llm.serving.headless"]
    assert argv[3:] == worker


def test_the_ray_head_gets_no_mp_flags() -> None:
    argv = engine_command(head_config(ENV, {}), python="python")
    assert not {"--nnodes", "--node-rank", "--master-addr", "--master-port"} & set(argv)
    assert engine_env(head_config(ENV, {}), {})["RAY_ADDRESS"] == "10.0.0.5:6379"


def test_the_executor_and_master_port_flags_reach_vllm() -> None:
    flags = _head_args(["--executor", "mp", "--master-port", "29700", "--gpus", "8"])
    argv = engine_command(head_config(ENV, flags), python="python")
    assert _flag(argv, "--distributed-executor-backend") == "mp"
    assert _flag(argv, "--master-port") == "29700"
    assert "--executor" not in argv  # the supervisor's own flags never reach vLLM
