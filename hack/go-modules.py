#!/usr/bin/env python3
"""Writes the Go modules the local cluster builds its real control plane from (``local/go/``).

    python3 hack/go-modules.py            # every module: go.mod from PINS, then `go mod tidy`
    python3 hack/go-modules.py kserve     # only the KServe releases (one module per release)
    python3 hack/go-modules.py lws etcd   # only the modules named (keys of PINS)

Each module is a folder with a ``go.mod`` whose ``tool`` lines name the programs to build
(``multinode_llm_local.controlplane.build`` builds them) and a ``go.sum``. Kubernetes' staging
modules (``k8s.io/api``, ...) are ``replace``d by the release of the same minor, as
``k8s.io/kubernetes``' own ``go.mod`` points them at its ``staging/`` folder, which a dependency
cannot use. A KServe release gets the ``replace`` lines of its own ``go.mod`` at that tag (a
dependency's replaces are ignored, so without them Go would pick other versions than KServe builds
with). Every release of ``charts/multinode-llm/kserve-releases.yaml`` is tried; the Go module proxy
does not serve every tag, and those it refuses are written, with the proxy's own words, to
``local/go/unserved.yaml`` (the tests read it to say why a release runs only emulated).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
GO = ROOT / "local" / "go"
RELEASES = ROOT / "charts" / "multinode-llm" / "kserve-releases.yaml"
UNSERVED = GO / "unserved.yaml"
GO_LINE = "1.26.0"
# A release gets an llmisvc-vX.Y.Z module (its cmd/llmisvc) where the table has an
# llmInferenceService: v1alpha1 at 0.16.0, v1alpha2 from 0.17.0.
LLMISVC_MERGE = "llmisvc-presets"  # a module's folder holding KServe's merge over the presets

KUBERNETES = "v1.37.2"
# module folder -> (the module it requires, its version, the main packages it builds)
PINS: dict[str, tuple[str, str, list[str]]] = {
    "kubernetes": (
        "k8s.io/kubernetes",
        KUBERNETES,
        [
            "k8s.io/kubernetes/cmd/kube-apiserver",
            "k8s.io/kubernetes/cmd/kube-controller-manager",
            "k8s.io/kubernetes/cmd/kube-scheduler",
            "k8s.io/kubernetes/cmd/kube-proxy",
        ],
    ),
    # etcd's own main package lives in go.etcd.io/etcd/v3, which the proxy serves only up to
    # v3.6.8; the server module's etcdmain is the same program (main.go here calls it).
    "etcd": ("go.etcd.io/etcd/server/v3", "v3.6.16", ["multinode-llm.local/etcd"]),
    "coredns": ("github.com/coredns/coredns", "v1.14.7", ["github.com/coredns/coredns"]),
    # KServe's manager Deployment runs it beside the manager (its metrics port).
    "kube-rbac-proxy": (
        "github.com/brancz/kube-rbac-proxy",
        "v0.18.0",
        ["github.com/brancz/kube-rbac-proxy/cmd/kube-rbac-proxy"],
    ),
    # LeaderWorkerSet's controller, for the chart's `group.backend: lws`. The proxy serves the
    # module's zip up to v0.9.0; v0.10.x and v0.11.0 answer 403 (2026-12-04).
    "lws": ("sigs.k8s.io/lws", "v0.9.0", ["sigs.k8s.io/lws/cmd"]),
    # Argo CD's application controller and repo server, for the chart's sync tests (main.go here
    # picks one by argv[0], as Argo CD's own multi-call binary does; its cmd/main.go also links
    # the API server, whose UI assets the module zip lacks). v3.5.1: from v3.3 the gitops-engine
    # lives in the repository (`replace => ./gitops-engine`), which a dependency cannot use, and
    # the proxy serves the nested module only at three commits of 2026 (v3.6.x's gitops-engine/v3
    # at none that builds). The one of 2026-08-27 is v3.5.1's own gitops-engine plus one
    # cherry-picked fix (a recovered panic in AuthReconcile): diffed against the v3.5.1 tag.
    "argocd": ("github.com/argoproj/argo-cd/v3", "v3.5.1", ["multinode-llm.local/argocd"]),
}
MODULE_PATHS = {"etcd": "multinode-llm.local/etcd", "argocd": "multinode-llm.local/argocd"}
# Replaces of our own, beside those a module's go.mod has at its tag (``upstream_replaces``).
EXTRA_REPLACES = {
    "argocd": [
        "github.com/argoproj/argo-cd/gitops-engine => "
        "github.com/argoproj/argo-cd/gitops-engine v0.0.0-20260827090335-e258ee23c3e5"
    ],
}
ETCD_MAIN = """\
// The etcd server: what etcd's own main package (go.etcd.io/etcd/v3) runs.
package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
\tetcdmain.Main(os.Args)
}
"""
ARGOCD_MAIN = """\
// Argo CD's application controller, repo server and git ask-pass helper, picked by argv[0] (or
// ARGOCD_BINARY_NAME) as Argo CD's own multi-call binary (cmd/main.go) picks them.
package main

import (
\t"os"
\t"path/filepath"

\t"github.com/spf13/cobra"

\tappcontroller "github.com/argoproj/argo-cd/v3/cmd/argocd-application-controller/commands"
\tgitaskpass "github.com/argoproj/argo-cd/v3/cmd/argocd-git-ask-pass/commands"
\treposerver "github.com/argoproj/argo-cd/v3/cmd/argocd-repo-server/commands"
)

func main() {
\tname := filepath.Base(os.Args[0])
\tif env := os.Getenv("ARGOCD_BINARY_NAME"); env != "" {
\t\tname = env
\t}
\tvar command *cobra.Command
\tswitch name {
\tcase "argocd-repo-server":
\t\tcommand = reposerver.NewCommand()
\tcase "argocd-git-ask-pass":
\t\tcommand = gitaskpass.NewCommand()
\tdefault:
\t\tcommand = appcontroller.NewCommand()
\t}
\tif err := command.Execute(); err != nil {
\t\tos.Exit(1)
\t}
}
"""
MAINS = {"etcd": ETCD_MAIN, "argocd": ARGOCD_MAIN}


def go(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
    return subprocess.run(["go", *args], cwd=cwd, env=env, capture_output=True, text=True)


def module_file(module: str, version: str) -> str | None:
    """The ``go.mod`` of ``module@version`` from the proxy, or None with the reason printed."""
    result = go("mod", "download", "-json", f"{module}@{version}", cwd=GO)
    info = json.loads(result.stdout or "{}")
    if result.returncode != 0 or "Error" in info:
        return None
    return Path(info["GoMod"]).read_text()


def download_error(module: str, version: str) -> str:
    result = go("mod", "download", "-json", f"{module}@{version}", cwd=GO)
    info = json.loads(result.stdout or "{}")
    return str(info.get("Error") or result.stderr.strip() or "unknown error")


def staging_replaces(kubernetes_mod: str, version: str) -> list[str]:
    """``k8s.io/X => k8s.io/X v0.MINOR.PATCH`` for each staging module ``k8s.io/kubernetes`` has."""
    staging = re.findall(r"^\s*(k8s\.io/[\w.-]+) => \./staging/", kubernetes_mod, flags=re.M)
    return [f"{name} => {name} v0{version[2:]}" for name in staging]


def upstream_replaces(go_mod: str) -> list[str]:
    """The ``replace`` lines of a module's own ``go.mod`` (single lines and blocks)."""
    lines = re.findall(r"^replace\s+([^(\s].*)$", go_mod, flags=re.M)
    for block in re.findall(r"^replace\s*\((.*?)^\)", go_mod, flags=re.M | re.S):
        lines += [line.split("//")[0].strip() for line in block.splitlines()]
    return [line for line in lines if line and "=> ./" not in line and "=> ../" not in line]


def write_module(
    name: str, module: str, version: str, tools: list[str], replaces: list[str]
) -> None:
    folder = GO / name
    folder.mkdir(parents=True, exist_ok=True)
    path = MODULE_PATHS.get(name, f"multinode-llm.local/{name}")
    text = [f"// Written by hack/go-modules.py: what the local cluster builds {name} from.", ""]
    text += [f"module {path}", "", f"go {GO_LINE}", ""]
    text += [f"require {module} {version}", ""]
    text += ["tool (", *(f"\t{tool}" for tool in tools), ")", ""]
    if replaces:
        text += ["replace (", *(f"\t{line}" for line in replaces), ")", ""]
    (folder / "go.mod").write_text("\n".join(text))
    if name in MAINS:
        (folder / "main.go").write_text(MAINS[name])
    result = go("mod", "tidy", cwd=folder)
    if result.returncode != 0:
        sys.exit(f"go mod tidy in {folder} failed:\n{result.stderr}")
    print(f"wrote {folder.relative_to(ROOT)} ({module} {version})")


def fixed_modules(names: list[str]) -> None:
    for name, (module, version, tools) in PINS.items():
        if names and name not in names:
            continue
        replaces: list[str] = []
        if name in ("kubernetes", "argocd"):
            text = module_file(module, version)
            if text is None:
                sys.exit(f"{module}@{version}: {download_error(module, version)}")
            if name == "kubernetes":
                replaces = staging_replaces(text, version)
            else:  # Argo CD pins k8s.io/* and a few others with replaces, as KServe does
                replaces = upstream_replaces(text)
        replaces += EXTRA_REPLACES.get(name, [])
        write_module(name, module, version, tools, replaces)


def kserve_modules() -> None:
    releases = yaml.safe_load(RELEASES.read_text())["releases"]
    unserved: dict[str, str] = {}
    for folder in GO.glob("kserve-v*"):
        shutil.rmtree(folder)
    for folder in GO.glob("llmisvc-v*"):  # kept: a merge program's main.go, which we wrote
        for written in ("go.mod", "go.sum"):
            (folder / written).unlink(missing_ok=True)
        if not any(folder.iterdir()):
            folder.rmdir()
    for release in releases:
        version = f"v{release}"
        text = module_file("github.com/kserve/kserve", version)
        if text is None:
            unserved[release] = download_error("github.com/kserve/kserve", version)
            print(f"kserve {version}: not served ({unserved[release]})")
            continue
        tools = ["github.com/kserve/kserve/cmd/manager"]
        replaces = upstream_replaces(text)
        write_module(f"kserve-{version}", "github.com/kserve/kserve", version, tools, replaces)
        if releases[release].get("llmInferenceService"):
            llmisvc_module(version, replaces)
    header = (
        "# Written by hack/go-modules.py: the KServe releases of kserve-releases.yaml whose Go\n"
        "# module the proxy refused (its answer), so none of their managers is built here.\n"
    )
    # The proxy's answer as lines (it names a URL, and yamllint holds lines to 160 characters).
    answers = {release: answer.splitlines() for release, answer in unserved.items()}
    UNSERVED.write_text(header + yaml.safe_dump(answers, width=150))


def llmisvc_module(version: str, replaces: list[str]) -> None:
    """``llmisvc-{version}``: KServe's llmisvc controller at that tag, and the merge program where
    the folder has one (``kserve/llmisvc.py`` runs it)."""
    name = f"llmisvc-{version}"
    tools = ["github.com/kserve/kserve/cmd/llmisvc"]
    if (GO / name / LLMISVC_MERGE / "main.go").is_file():
        tools.append(f"multinode-llm.local/{name}/{LLMISVC_MERGE}")
    write_module(name, "github.com/kserve/kserve", version, tools, replaces)


def main(argv: list[str]) -> int:
    GO.mkdir(parents=True, exist_ok=True)
    if argv[:1] != ["kserve"]:
        fixed_modules(argv)
    if not argv or argv == ["kserve"]:
        kserve_modules()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
