"""`multinode-llm head`: its arguments, and the supervisor its executor asks for (group/head.py
with Ray, group/mp_head.py with vLLM's own executor). Kept apart from both so that neither
supervisor module imports the other's."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

from multinode_llm.config import head_config
from multinode_llm.errors import UserError
from multinode_llm.group import arguments
from multinode_llm.group.head import HeadSupervisor
from multinode_llm.group.mp_head import MpHeadSupervisor

ACCEPTS_EXTRA_ARGS = True  # everything the head does not own goes to vLLM untouched


def add_arguments(parser: argparse.ArgumentParser) -> None:
    arguments.add_node_arguments(parser)
    group = parser.add_argument_group("the model and its parallelism (also passed to vLLM)")
    group.add_argument("--model", help="model directory or Hub id (env MODEL_DIR, else MODEL_ID)")
    group.add_argument(
        "--served-model-name", nargs="+", help="name(s) clients ask for (env MODEL_NAME)"
    )
    group.add_argument(
        "--tensor-parallel-size", "-tp", type=int, help="GPUs per node (env TENSOR_PARALLEL_SIZE)"
    )
    group.add_argument(
        "--pipeline-parallel-size",
        "-pp",
        type=int,
        help="pipeline stages (env PIPELINE_PARALLEL_SIZE)",
    )
    group.add_argument("--port", type=int, help="vLLM's HTTP port (default 8080)")
    group.add_argument(
        "--early-engine-start",
        action=argparse.BooleanOptionalAction,
        help="start vLLM while the workers join, so its start-up overlaps the wait (default on)",
    )
    parser.epilog = "Any other argument is passed to vLLM's OpenAI server unchanged."


def run(args: argparse.Namespace) -> int:
    flags = arguments.overrides(args)
    flags["vllm_args"] = list(getattr(args, "extra_args", []))
    config = head_config(os.environ, flags)
    if config.model_is_dir and not Path(config.model).is_dir():
        raise UserError(
            f"the model directory {config.model} does not exist: check MODEL_DIR (KServe mounts "
            "the storageUri at /mnt/models) or pass --model with a directory or a Hub model id"
        )
    supervisor = MpHeadSupervisor(config) if config.node.mp else HeadSupervisor(config)
    code = asyncio.run(supervisor.run())
    # Every child is stopped by now. Exit without running atexit handlers: the Ray driver's would
    # wait a minute for a GCS that is gone when Ray died.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
