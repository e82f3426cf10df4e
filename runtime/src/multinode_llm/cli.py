"""The `multinode-llm` command: parses the command line and dispatches to one concern's module.

Each subcommand lives in the module named in ``SUBCOMMANDS``. That module defines

    add_arguments(parser: argparse.ArgumentParser) -> None   # its flags, each with help and default
    run(args: argparse.Namespace) -> int                     # the work; returns the exit code

and may set ``ACCEPTS_EXTRA_ARGS = True`` to receive unrecognised arguments in ``args.extra_args``
(the head passes them to vLLM untouched). Modules keep heavy imports (ray, vllm, torch) inside
functions so that building this parser, and `multinode-llm probe`, stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from types import ModuleType

from multinode_llm import __version__
from multinode_llm.errors import UserError

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "head": (
        "multinode_llm.group.head_command",
        "run vLLM's OpenAI server and the group's head: Ray's, or vLLM's own with --executor mp "
        "(KServe head pod)",
    ),
    "worker": (
        "multinode_llm.group.worker_command",
        "join the head's group: its Ray cluster, or a node rank with --executor mp "
        "(KServe worker pod)",
    ),
    "probe": ("multinode_llm.health.probe", "ask a supervisor's status port (exec probe)"),
    "await-group": (
        "multinode_llm.health.await_group",
        "wait until a group runs a given spec and serves (the chart's readiness Job)",
    ),
    "cache": ("multinode_llm.cache.cli", "the Hugging Face Hub pull-through cache"),
    "stage": (
        "multinode_llm.staging.stage",
        "stage an hf:// model onto the shared volume, verified (the download Job)",
    ),
}


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, ModuleType]]:
    parser = argparse.ArgumentParser(
        prog="multinode-llm",
        description="Serve a Hugging Face LLM across several nodes with KServe, Ray and vLLM.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--log-level", default="INFO", help="logging level (DEBUG, INFO, WARNING); default INFO"
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules: dict[str, ModuleType] = {}
    for name, (module_name, summary) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        sub = subparsers.add_parser(name, help=summary, description=summary, allow_abbrev=False)
        module.add_arguments(sub)
        modules[name] = module
    return parser, modules


def main(argv: list[str] | None = None) -> int:
    parser, modules = build_parser()
    args, extra = parser.parse_known_args(argv)
    module = modules[args.command]
    if extra and not getattr(module, "ACCEPTS_EXTRA_ARGS", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra_args = extra
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(module.run(args))
    except UserError as error:
        print(f"multinode-llm {args.command}: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
