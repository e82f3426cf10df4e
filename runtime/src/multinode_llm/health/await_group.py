"""``multinode-llm await-group URL [URL ...] --model NAME --group-spec HASH``: until the new group
serves.

The one readiness signal that holds on every KServe release (KServe 0.16 to 0.19 never report a
multi-node InferenceService Ready, and its ``status.observedGeneration`` is the head Deployment's):
the chart runs this in a Job (templates/group-ready.yaml) named after the group's spec hash, so that
``helm install --wait --wait-for-jobs`` (Helm 3 and 4), ``kubectl wait
--for=condition=complete job/...`` and an Argo CD sync (wave 1) all end when it ends.

Through the InferenceService's Service, as a client would, it waits until

1. the head answering exports ``multinode_llm_group_info{group_spec="HASH"}`` (the new group, not
   the old one a RollingUpdate keeps serving meanwhile),
2. ``/v1/models`` lists the served name, and
3. one completion returns a token (the whole pipeline computes).

With ``--every`` each URL is one group's head (a LeaderWorkerSet's groups, ``group.backend=lws``,
each by its own name), and every one must serve: a Service in front of them would answer from
whichever group is up.

Otherwise each try asks the URLs in order and takes the first that accepts a connection: the chart
passes the predictor Service's port 80, then its container port 8080, because a cluster whose
KServe has ``serviceClusterIPNone`` makes that Service headless, and its name then resolves to the
head pod, which listens on 8080 only. KServe gives the Service port 80 for the container's first
port and its other ports under their own numbers, so 8080 is no port of a ClusterIP predictor
Service (pkg/controller/v1beta1/inferenceservice/reconcilers/service/service_reconciler.go, the
same at v0.15.0, v0.16.0, v0.17.0, v0.19.0 and v0.20.0). A URL is first only connected to, within
``CONNECT_TIMEOUT_S``: the Service drops what is sent to a port it does not have, so the second
URL's connection hangs, and with the request's timeout alone each try took 30 s more, up to 36 s
between the head turning Ready and the Job seeing it (measured on the real cluster with KServe
0.19.0, tests/cluster/test_lifecycle.py).

Standard library only: it runs in the slim cache image.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence

from multinode_llm.errors import UserError

REQUEST_TIMEOUT_S = 30.0  # a request to a group that accepted the connection (a first completion)
CONNECT_TIMEOUT_S = 3.0  # a connection inside the cluster takes milliseconds, or never comes
UNREACHABLE = ": nothing answers there"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "urls",
        nargs="+",
        metavar="URL",
        help="the group's HTTP base URLs (the InferenceService's Service), tried in order: the "
        "first that accepts a connection answers",
    )
    parser.add_argument(
        "--every",
        action="store_true",
        help="each URL is a group of its own, and every one must serve the spec",
    )
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument(
        "--group-spec", required=True, help="the spec hash the new group runs (from the chart)"
    )
    parser.add_argument(
        "--timeout", type=float, default=3600.0, help="seconds to wait; default %(default)s"
    )
    parser.add_argument(
        "--interval", type=float, default=5.0, help="seconds between tries; default %(default)s"
    )


def run(args: argparse.Namespace) -> int:
    if args.timeout <= 0 or args.interval <= 0:
        raise UserError("--timeout and --interval must be positive numbers of seconds")
    urls = [url.rstrip("/") for url in args.urls]
    return wait(urls, args.model, args.group_spec, args.timeout, args.interval, every=args.every)


def wait(
    urls: Sequence[str],
    model: str,
    spec: str,
    timeout: float,
    interval: float,
    sleep: Callable[[float], None] = time.sleep,
    every: bool = False,
) -> int:
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        url, reason = check_every(urls, model, spec) if every else check_any(urls, model, spec)
        if not reason:
            where = f"all {len(urls)} groups" if every else url
            print(f"the group runs spec {spec} and serves {model!r} at {where}", flush=True)
            return 0
        if reason != last:
            print(f"waiting: {reason}", flush=True)
            last = reason
        if time.monotonic() >= deadline:
            print(f"the new group did not serve within {timeout:.0f} s: {reason}", file=sys.stderr)
            return 1
        sleep(interval)


def check_any(urls: Sequence[str], model: str, spec: str) -> tuple[str, str]:
    """(the URL asked, why the group does not serve there yet or ""): the first URL that accepts
    a connection, else the last one's reason."""
    reason = ""
    for url in urls:
        reason = check(url, model, spec)
        if not reason.endswith(UNREACHABLE):
            return url, reason
    return urls[-1], reason


def check_every(urls: Sequence[str], model: str, spec: str) -> tuple[str, str]:
    """(the first URL whose group does not serve, and why), or ("", "") when every one does."""
    for url in urls:
        reason = check(url, model, spec)
        if reason:
            return url, f"{reason} ({urls.index(url)} of {len(urls)} groups serve)"
    return "", ""


def check(url: str, model: str, spec: str) -> str:
    """Why the new group does not serve yet, or "" when it does."""
    try:
        _connect(url)
        metrics = _get(f"{url}/metrics").decode(errors="replace")
        if f'group_spec="{spec}"' not in metrics:
            running = [
                line.split('group_spec="', 1)[1].split('"', 1)[0]
                for line in metrics.splitlines()
                if line.startswith("multinode_llm_group_info{")
            ]
            return f"the head at {url} runs spec {running[0] if running else 'unknown'}, not {spec}"
        listed = [m.get("id") for m in json.loads(_get(f"{url}/v1/models")).get("data", [])]
        if model not in listed:
            return f"/v1/models lists {listed}, not {model!r}"
        body = {"model": model, "prompt": "ready", "max_tokens": 1}
        reply = json.loads(_post(f"{url}/v1/completions", body))
        if int((reply.get("usage") or {}).get("completion_tokens") or 0) < 1:
            return f"a completion returned no token: {str(reply)[:200]}"
    except urllib.error.HTTPError as error:
        return f"{error.url} answered {error.code}"
    except OSError as error:  # refused, unresolved, timed out: nothing answers there (yet)
        return f"{url} does not serve yet ({error}){UNREACHABLE}"
    except ValueError as error:  # not JSON: something answers, not the group yet
        return f"{url} does not serve yet ({error})"
    return ""


def _connect(url: str) -> None:
    """A connection to ``url``'s host and port, closed at once; OSError when none comes."""
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    with socket.create_connection((parts.hostname or "", port), timeout=CONNECT_TIMEOUT_S):
        pass


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT_S) as answer:  # noqa: S310
        return bytes(answer.read())


def _post(url: str, body: dict[str, object]) -> bytes:
    request = urllib.request.Request(  # noqa: S310 - the group's own Service
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as answer:  # noqa: S310
        return bytes(answer.read())
