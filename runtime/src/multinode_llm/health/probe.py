"""`multinode-llm probe startup|ready|live`: ask a supervisor's status port, for exec probes.

Kept to the standard library and a plain HTTP GET so that it starts in a fraction of a second: an
exec probe that imports Ray or vLLM costs seconds of CPU on every period (docs/kserve-contract.md,
"KServe's own multi-node runtime").
Exit 0 when the probe passes, 1 when it fails or the supervisor does not answer.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request

PROBES = ("startup", "ready", "live")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("probe", choices=PROBES, help="which answer to ask for")
    parser.add_argument(
        "--port", type=int, default=8081, help="the supervisor's status port (default 8081)"
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="the supervisor's address (default 127.0.0.1)"
    )
    parser.add_argument(
        "--timeout", type=float, default=2.0, help="seconds to wait for an answer (default 2)"
    )


def run(args: argparse.Namespace) -> int:
    url = f"http://{args.host}:{args.port}/{args.probe}"
    try:
        with urllib.request.urlopen(url, timeout=args.timeout) as response:
            ok, reason = True, _reason(response.read())
    except urllib.error.HTTPError as error:
        ok, reason = False, _reason(error.read())
    except (OSError, TimeoutError) as error:
        ok, reason = False, f"the supervisor at {url} does not answer: {error}"
    print(
        f"{args.probe}: {'ok' if ok else 'failing'}: {reason}",
        file=sys.stdout if ok else sys.stderr,
    )
    return 0 if ok else 1


def _reason(body: bytes) -> str:
    try:
        return str(json.loads(body).get("reason", ""))
    except (ValueError, AttributeError):
        return body.decode(errors="replace")[:200]
