"""The head supervisor (not built yet)."""

import argparse

from multinode_llm.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser


def run(args: argparse.Namespace) -> int:
    del args
    raise UserError("this subcommand is not built yet")
