"""Argo CD on the real cluster: its application controller and repo server, built from
``github.com/argoproj/argo-cd/v3`` (the release ``local/go/argocd`` pins), with Debian's Redis.

What runs is what Argo CD's own install runs for a sync, minus what a sync does not use (the API
server and UI, Dex, the ApplicationSet and notification controllers):

- Argo CD's CRDs (``manifests/crds`` of the same module), the ``argocd`` namespace, the settings
  ConfigMaps and Secret labelled ``app.kubernetes.io/part-of: argocd`` (Argo CD's settings
  informers select on that label), and a ``default`` AppProject as the API server would make it;
- ``redis-server`` (Debian's package), the repo server (``--disable-tls``) and the application
  controller (``--repo-server-plaintext``), as processes in the cluster's host network namespace,
  so that they reach each other on its loopback and ``cluster down`` stops them with the rest.

One thing differs from an in-cluster install: the controller runs outside a pod, so it reaches
the API server through the admin kubeconfig under ``ARGOCD_FAKE_IN_CLUSTER`` (the switch Argo
CD's own local development uses: ``https://kubernetes.default.svc`` then means this kubeconfig's
cluster, ``pkg/apis/application/v1alpha1/types.go`` ``RawRestConfig``). The repo server renders
charts with the ``helm`` of ``.tools/bin`` (Helm 4, as Argo CD 3.5's image ships Helm 4.2) and
reads git repositories by ``file://`` URL, as Argo CD's own end-to-end tests do.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from multinode_llm.errors import UserError

from multinode_llm_local.controlplane import build
from multinode_llm_local.controlplane.kubectl import Kubectl

Obj = dict[str, Any]
Spawn = Callable[[str, list[str], dict[str, str]], int]
MODULE = "github.com/argoproj/argo-cd/v3"
NAMESPACE = "argocd"
# Processes, in the order they start (``cluster down`` stops them first, in reverse).
PROCESSES = ("argocd-redis", "argocd-repo-server", "argocd-application-controller")
REDIS_PORT = 6379
REPO_SERVER_PORT = 8081
CONTROLLER_METRICS_PORT = 8082
REPO_SERVER_METRICS_PORT = 8084
# What a user puts in argocd-cm for the chart's health check (docs/kserve-releases.md).
HEALTH_KEY = "resource.customizations.health.serving.kserve.io_InferenceService"


def module() -> build.Module:
    return build.modules()["argocd"]


def version() -> str:
    """The Argo CD release ``local/go/argocd`` pins (``v3.5.1``)."""
    return module().required(MODULE)


def module_dir() -> Path:
    """The Argo CD module's files in Go's module cache (its CRDs, its image's scripts)."""
    return build.module_files(module(), MODULE, version())


def settings(health_checks: dict[str, str]) -> list[Obj]:
    """The namespace, CRDs' companions and settings objects a sync reads, ``health_checks``
    (argocd-cm key -> Lua) in argocd-cm."""
    labels = {"app.kubernetes.io/part-of": "argocd"}

    def configmap(name: str, data: dict[str, str]) -> Obj:
        meta = {"name": name, "namespace": NAMESPACE, "labels": labels}
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}

    secret_meta = {"name": "argocd-secret", "namespace": NAMESPACE, "labels": labels}
    project = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AppProject",
        "metadata": {"name": "default", "namespace": NAMESPACE},
        "spec": {  # what Argo CD's API server creates when no default project exists
            "sourceRepos": ["*"],
            "destinations": [{"server": "*", "namespace": "*"}],
            "clusterResourceWhitelist": [{"group": "*", "kind": "*"}],
        },
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        configmap("argocd-cm", dict(health_checks)),
        configmap("argocd-cmd-params-cm", {}),
        configmap("argocd-rbac-cm", {}),
        configmap("argocd-gpg-keys-cm", {}),
        configmap("argocd-ssh-known-hosts-cm", {}),
        configmap("argocd-tls-certs-cm", {}),
        {"apiVersion": "v1", "kind": "Secret", "metadata": secret_meta, "type": "Opaque"},
        project,
    ]


def crds(files: Path) -> list[Obj]:
    """Application and AppProject, from the module's own ``manifests/crds`` (``files``)."""
    folder = files / "manifests" / "crds"
    names = ("application-crd.yaml", "appproject-crd.yaml")
    return [yaml.safe_load((folder / name).read_text()) for name in names]


def install(
    kubectl: Kubectl,
    spawn: Spawn,
    helm: Path,
    state_dir: Path,
    health_checks: dict[str, str],
    progress: Callable[[str], None] = print,
) -> None:
    """Apply Argo CD's objects and start its processes with ``spawn(name, argv, env)`` (in the
    cluster's host namespace); return once the controller has come up."""
    redis = shutil.which("redis-server")
    if redis is None:
        raise UserError(
            "Argo CD needs Redis: apt-get install redis-server "
            "(bash hack/install-packages.sh redis-server=redis-server)"
        )
    built = build.build(module(), progress) / "argocd"
    files = module_dir()
    kubectl.apply(yaml.safe_dump_all(crds(files), sort_keys=False))
    for crd in ("applications.argoproj.io", "appprojects.argoproj.io"):
        kubectl.wait_established(crd)
    kubectl.apply(yaml.safe_dump_all(settings(health_checks), sort_keys=False))
    home = state_dir / "argocd"
    for folder in ("tmp", "ssh", "tls", "gnupg"):
        (home / folder).mkdir(parents=True, exist_ok=True)
    _named(helm, home, "helm")  # the repo server runs `helm template` from its PATH
    _image_scripts(files, home)
    env = _environment(home, kubectl.kubeconfig)
    progress(f"starting Argo CD {version()}: Redis, the repo server, the application controller")
    spawn("argocd-redis", _redis_args(redis, home), env)
    spawn("argocd-repo-server", _repo_server_args(_named(built, home, "argocd-repo-server")), env)
    controller = _named(built, home, "argocd-application-controller")
    spawn("argocd-application-controller", _controller_args(controller, kubectl.kubeconfig), env)


def _image_scripts(files: Path, home: Path) -> None:
    """The scripts Argo CD's image puts in /usr/local/bin (its Dockerfile), from the same module:
    the repo server runs git-verify-wrapper.sh on every revision it renders."""
    for name in ("git-verify-wrapper.sh", "gpg-wrapper.sh"):
        target = home / "bin" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(files / "hack" / name, target)
        target.chmod(0o755)  # the module cache keeps it read-only, without the x bits


def _named(binary: Path, home: Path, name: str) -> Path:
    """A link named ``name`` to ``binary`` on the processes' PATH (Argo CD's multi-call binary
    picks its program by argv[0])."""
    link = home / "bin" / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(binary)
    return link


def _environment(home: Path, kubeconfig: Path) -> dict[str, str]:
    return {
        "PATH": f"{home / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "TMPDIR": str(home / "tmp"),
        "KUBECONFIG": str(kubeconfig),
        "ARGOCD_FAKE_IN_CLUSTER": "true",
        "ARGOCD_GPG_ENABLED": "false",
        "ARGOCD_SSH_DATA_PATH": str(home / "ssh"),
        "ARGOCD_TLS_DATA_PATH": str(home / "tls"),
        "ARGOCD_GNUPGHOME": str(home / "gnupg"),
    }


def _redis_args(redis: str, home: Path) -> list[str]:
    # A cache only: Argo CD keeps nothing in Redis it cannot compute again.
    return [
        redis,
        "--bind",
        "127.0.0.1",
        "--port",
        str(REDIS_PORT),
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(home),
        "--protected-mode",
        "yes",
    ]


def _repo_server_args(argocd: Path) -> list[str]:
    return [
        str(argocd),
        "--address=127.0.0.1",
        f"--port={REPO_SERVER_PORT}",
        "--metrics-address=127.0.0.1",
        f"--metrics-port={REPO_SERVER_METRICS_PORT}",
        f"--redis=127.0.0.1:{REDIS_PORT}",
        "--disable-tls",
        "--client-ca-path=",  # no mTLS: its default path and --disable-tls refuse each other
        "--logformat=text",
    ]


def _controller_args(argocd: Path, kubeconfig: Path) -> list[str]:
    return [
        str(argocd),
        f"--kubeconfig={kubeconfig}",
        f"--namespace={NAMESPACE}",
        f"--repo-server=127.0.0.1:{REPO_SERVER_PORT}",
        "--repo-server-plaintext",
        f"--redis=127.0.0.1:{REDIS_PORT}",
        f"--metrics-port={CONTROLLER_METRICS_PORT}",
        # Resource health in the Application's status (Argo CD 3 keeps it in Redis by default),
        # where kubectl and the tests read it.
        "--persist-resource-health",
        "--status-processors=4",
        "--operation-processors=4",
        "--logformat=text",
    ]
