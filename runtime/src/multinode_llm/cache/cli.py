"""``multinode-llm cache serve``: one node's Hub pull-through cache, sharing blobs with its peers.

Clients point ``HF_ENDPOINT`` at it (and may set ``HF_HUB_DISABLE_XET=1`` as a second safety net).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from multinode_llm.cache.store import parse_size
from multinode_llm.errors import UserError

if TYPE_CHECKING:  # the server pulls in aiohttp; building the parser must stay fast
    from multinode_llm.cache.server import Settings

DEFAULT_PORT = 8090


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="cache_command", required=True, metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="serve the Hub protocol from a local store, filling it from peers and upstream",
        description=__doc__,
    )
    serve.add_argument(
        "--upstream",
        default="https://huggingface.co",
        help="the hub to pull from; default %(default)s",
    )
    serve.add_argument(
        "--store", required=True, type=Path, help="directory for blobs and metadata (a volume)"
    )
    serve.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="port to serve on; default %(default)s"
    )
    serve.add_argument("--host", default="0.0.0.0", help="address to bind; default %(default)s")  # noqa: S104
    serve.add_argument(
        "--peers", metavar="DNS_NAME", help="a headless Service name whose addresses are the peers"
    )
    serve.add_argument(
        "--peer",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="a peer by address (repeatable)",
    )
    serve.add_argument(
        "--advertise-address",
        default=os.environ.get("POD_IP"),
        help="this node's address as its peers see it; default $POD_IP, else the route to a peer",
    )
    serve.add_argument(
        "--max-store-size",
        metavar="SIZE",
        help="evict least recently used blobs above this (e.g. 500Gi); default none",
    )
    serve.add_argument(
        "--ref-ttl",
        type=float,
        default=30.0,
        help="seconds a branch's commit is trusted; default 30",
    )
    serve.add_argument(
        "--auth-ttl",
        type=float,
        default=60.0,
        help="seconds the Hub's yes to a caller for a file is reused; default 60",
    )
    serve.add_argument(
        "--upstream-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="seconds an upstream or peer read may make no progress (1 MiB) before it is "
        "abandoned; default 30",
    )
    serve.add_argument(
        "--client-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="seconds a client has to send a request's head, and its body; default 60",
    )
    serve.add_argument(
        "--max-connections",
        type=int,
        default=1000,
        metavar="N",
        help="client connections held at once (idle ones give way to new ones); default 1000",
    )


def run(args: argparse.Namespace) -> int:
    from multinode_llm.cache.server import serve

    asyncio.run(serve(settings_from(args)))
    return 0


def settings_from(args: argparse.Namespace) -> Settings:
    """Validated settings; every refusal names the value and how to fix it."""
    from multinode_llm.cache.server import Settings

    upstream = urlsplit(args.upstream)
    if upstream.scheme not in ("http", "https") or not upstream.netloc or upstream.query:
        raise UserError(
            f"--upstream {args.upstream!r} is not an http(s) URL: pass one such as https://huggingface.co"
        )
    if not 0 < args.port < 65536:
        raise UserError(
            f"--port {args.port} is not a TCP port: pass 1-65535 (the chart uses {DEFAULT_PORT})"
        )
    for peer in args.peer:
        host, _, port = peer.rpartition(":")
        if not host or not port.isdigit():
            raise UserError(
                f"--peer {peer!r} is not HOST:PORT: pass one such as 10.0.0.7:{DEFAULT_PORT}"
            )
    max_bytes = None
    if args.max_store_size:
        try:
            max_bytes = parse_size(args.max_store_size)
        except ValueError as bad:
            raise UserError(f"--max-store-size: {bad}") from None
    for name in ("ref_ttl", "auth_ttl"):
        if getattr(args, name) < 0:
            raise UserError(
                f"--{name.replace('_', '-')} {getattr(args, name)} is negative: pass seconds >= 0"
            )
    for name in ("upstream_timeout", "client_timeout"):
        if not getattr(args, name) > 0:
            raise UserError(
                f"--{name.replace('_', '-')} {getattr(args, name)} is not positive: pass seconds "
                "> 0 (a timeout of none would let a stalled peer hold a request forever)"
            )
    if args.max_connections < 1:
        raise UserError(
            f"--max-connections {args.max_connections} is below 1: pass how many client "
            "connections to hold at once, such as 1000"
        )
    try:
        args.store.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(
            f"--store {str(args.store)!r} cannot be created ({error.strerror}): "
            "pass a writable directory"
        ) from None
    if not os.access(args.store, os.W_OK):
        raise UserError(
            f"--store {str(args.store)!r} is not writable by uid {os.getuid()}: "
            f"mount a writable volume there (a hostPath must be owned by uid {os.getuid()})"
        )
    return Settings(
        upstream=args.upstream.rstrip("/"),
        store=args.store,
        port=args.port,
        host=args.host,
        peers_dns=args.peers,
        peers=tuple(args.peer),
        advertise_address=args.advertise_address,
        max_store_bytes=max_bytes,
        ref_ttl=args.ref_ttl,
        auth_ttl=args.auth_ttl,
        upstream_timeout=args.upstream_timeout,
        client_timeout=args.client_timeout,
        max_connections=args.max_connections,
    )
