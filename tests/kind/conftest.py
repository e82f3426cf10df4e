"""The kind suite: the chart installed with its CI values on a real Kubernetes cluster with KServe.

The cluster is the one in ``KUBECONFIG`` (``bash hack/kind-up.sh`` makes one: kind, cert-manager,
KServe in Standard mode, nodes advertising mocked GPUs), or, where a Docker engine answers and no
cluster is given, a k3s cluster the suite starts itself through ``testcontainers`` (KServe is then
installed by ``hack/kind-up.sh --existing``). Where neither answers, every test skips and says so.

The runtime image the CI values name (``image.tag``, ``pullPolicy: Never``) must already be on the
nodes: the CI job builds the CPU image and ``kind load``s it.

pytest-helm-charts provides the cluster object (``kube_cluster``) and its ``kubectl``; the
``kube_config`` fixture it builds on is chosen here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools" / "bin"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.kind)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "kind: the chart installed on a kind/k3s cluster with KServe"
    )
    os.environ["PATH"] = f"{TOOLS}{os.pathsep}{os.environ.get('PATH', '')}"


def _cluster_answers(kubeconfig: str) -> str:
    """ "" when the API server behind ``kubeconfig`` answers, else why not."""
    if shutil.which("kubectl") is None:
        return "kubectl is not installed: run bash hack/install-tools.sh"
    result = subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, "version", "--request-timeout=5s", "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        answer = result.stderr.strip()[-200:]
        return f"the cluster in KUBECONFIG={kubeconfig} does not answer ({answer})"
    return ""


def _docker_answers() -> str:
    """ "" when a Docker engine answers, else why not."""
    try:
        import docker
    except ImportError:
        return "the docker client is not installed (testcontainers brings it)"
    try:
        docker.from_env(timeout=5).ping()
    except Exception as error:  # any failure means: no engine here
        return f"no Docker engine answers ({type(error).__name__}: {str(error)[:160]})"
    return ""


@pytest.fixture(scope="session")
def kube_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The cluster the suite runs on (overrides pytest-helm-charts' fixture of the same name)."""
    given = os.environ.get("KUBECONFIG", "")
    if given and Path(given).is_file():
        reason = _cluster_answers(given)
        if reason:
            pytest.skip(reason)
        yield given
        return
    no_docker = _docker_answers()
    if no_docker:
        pytest.skip(
            "no cluster to install on: KUBECONFIG names no kubeconfig file and "
            f"{no_docker}; run bash hack/kind-up.sh and export the KUBECONFIG it prints"
        )
    from testcontainers.community.k3s import K3SContainer

    with K3SContainer() as k3s:
        path = tmp_path_factory.mktemp("k3s") / "kubeconfig"
        path.write_text(k3s.config_yaml())
        env = {**os.environ, "KUBECONFIG": str(path)}
        subprocess.run(
            ["bash", str(ROOT / "hack" / "kind-up.sh"), "--existing"], env=env, check=True
        )
        yield str(path)
