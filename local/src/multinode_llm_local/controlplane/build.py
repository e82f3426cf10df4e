"""The real control plane's programs, built from the pinned Go modules in ``local/go/``.

Each folder of ``local/go/`` is one Go module whose ``go.mod`` pins what it builds (its ``tool``
lines name the main packages) and whose ``go.sum`` pins every byte: ``kubernetes`` (kube-apiserver,
kube-controller-manager, kube-scheduler, kube-proxy from ``k8s.io/kubernetes``, its staging
modules replaced by the same minor), ``etcd``, ``coredns``, ``kube-rbac-proxy``, one
``kserve-vX.Y.Z`` per KServe release the Go module proxy serves and one ``llmisvc-vX.Y.Z`` per
such release with KServe's llmisvc controller (``python3 hack/go-modules.py`` writes them). A
build lands in ``~/.cache/multinode-llm/control-plane/<folder>-<key>/``
(``$XDG_CACHE_HOME`` if set), keyed by a hash of the module's files, the Go version and the
flags: a second run finds it and takes no time, and Go's own module and build caches (outside the
checkout) make a rebuild after a pin change cost only what changed. Binaries are static
(``CGO_ENABLED=0``), so that the node agent can run one from a root filesystem of its own
(``runtime.py``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from multinode_llm.errors import UserError

# Bumped when what a build does changes in a way the hashed files do not show.
RECIPE = "1"
# What a cold build took on this project's 2-core machine, said before it starts (minutes).
COLD_MINUTES = {
    "kubernetes": 25,
    "etcd": 3,
    "coredns": 5,
    "kube-rbac-proxy": 2,
    "kserve": 6,
    "llmisvc": 2,  # after its release's manager, whose packages it shares; about 6 alone
    "argocd": 5,
}
HEARTBEAT_S = 60.0

Progress = Callable[[str], None]


def go_root() -> Path:
    """``local/go`` of the checkout this package runs from (an editable install, as tox makes)."""
    here = Path(__file__).resolve().parents  # .../local/src/multinode_llm_local/controlplane/
    candidates = [Path(os.environ.get("MULTINODE_LLM_GO_MODULES", "")), here[3] / "go"]
    for candidate in candidates:
        if str(candidate) not in ("", ".") and (candidate / "kubernetes" / "go.mod").is_file():
            return candidate
    raise UserError(
        "the Go modules of the control plane (local/go/) were not found: install the local "
        "package from a checkout (pip install -e ./local) or set MULTINODE_LLM_GO_MODULES"
    )


def cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "multinode-llm" / "control-plane"


@dataclass(frozen=True)
class Module:
    """One folder of ``local/go``: a Go module and the main packages it builds."""

    directory: Path

    @property
    def name(self) -> str:
        return self.directory.name

    @property
    def family(self) -> str:
        """The folder's name less a release suffix: ``kserve`` for every ``kserve-vX.Y.Z``."""
        return re.sub(r"-v\d+\.\d+\.\d+$", "", self.name)

    def text(self) -> str:
        return (self.directory / "go.mod").read_text()

    def tools(self) -> list[str]:
        """The main packages: the module's ``tool`` lines (one per line, or in a block)."""
        found = re.findall(r"^tool\s+([^\s(]\S*)\s*$", self.text(), flags=re.M)
        for block in re.findall(r"^tool\s*\((.*?)^\)", self.text(), flags=re.M | re.S):
            found += [line.strip() for line in block.splitlines() if line.strip()]
        if not found:
            raise UserError(f"{self.directory}/go.mod names no `tool`: nothing to build")
        return found

    def required(self, module: str) -> str:
        """The version the module requires of ``module``."""
        match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", self.text(), re.M)
        if not match:
            raise UserError(f"{self.directory}/go.mod does not require {module}")
        return match.group(1)

    def ldflags(self) -> str:
        """``-s -w`` (no debug info: smaller, faster to link); Kubernetes' programs also get the
        version its own build stamps (``hack/lib/version.sh``), which Helm and kubectl read, and
        Argo CD its release."""
        flags = ["-s", "-w"]
        if self.name == "kubernetes":
            version = self.required("k8s.io/kubernetes")
            major, minor = version.lstrip("v").split(".")[:2]
            for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
                flags += [
                    f"-X {package}.gitVersion={version}",
                    f"-X {package}.gitMajor={major}",
                    f"-X {package}.gitMinor={minor}",
                    f"-X {package}.gitTreeState=clean",
                    f"-X {package}.buildDate=1970-01-01T00:00:00Z",
                ]
        if self.name == "argocd":  # what Argo CD's Makefile stamps (it logs and reports it)
            version = self.required("github.com/argoproj/argo-cd/v3").lstrip("v")
            flags += [f"-X github.com/argoproj/argo-cd/v3/common.version={version}"]
        return " ".join(flags)

    def key(self, go_version: str) -> str:
        digest = hashlib.sha256(f"{RECIPE}\n{go_version}\n{self.ldflags()}\n".encode())
        for path in sorted(self.directory.rglob("*")):
            if path.is_file():
                digest.update(f"{path.relative_to(self.directory)}\n".encode())
                digest.update(path.read_bytes())
        return digest.hexdigest()[:16]


def modules(root: Path | None = None) -> dict[str, Module]:
    """Every module of ``local/go``, by folder name."""
    base = root or go_root()
    return {path.parent.name: Module(path.parent) for path in sorted(base.glob("*/go.mod"))}


def release_module(family: str, version: str, root: Path | None = None) -> Module | None:
    """The module of ``family`` (``kserve``: the manager; ``llmisvc``: its llmisvc controller)
    at KServe ``version`` (``0.19.0``), or None when none is built at that release."""
    return modules(root).get(f"{family}-v{version.lstrip('v')}")


def go_version() -> str:
    if shutil.which("go") is None:
        raise UserError(
            "go is not installed: the control plane is built from Go modules (Go 1.26 or newer)"
        )
    return subprocess.run(
        ["go", "env", "GOVERSION"], capture_output=True, text=True, check=True
    ).stdout.strip()


def build(module: Module, progress: Progress = print) -> Path:
    """The folder holding ``module``'s programs, built now unless a build with its key exists."""
    version = go_version()
    target = cache_root() / f"{module.name}-{module.key(version)}"
    if _complete(target, module):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _lock(target.parent / f".{module.name}.lock"):
        if _complete(target, module):  # another process built it while we waited
            return target
        programs = ", ".join(tool.rsplit("/", 1)[-1] for tool in module.tools())
        progress(
            f"building {module.name} ({programs}) with {version}: a cold build takes about "
            f"{COLD_MINUTES.get(module.family, 5)} min on 2 cores, a warm one seconds"
        )
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{module.name}.") as tmp:
            _go_build(module, Path(tmp) / "bin", progress, started)
            (Path(tmp) / "bin" / ".complete").write_text(" ".join(module.tools()))
            shutil.rmtree(target, ignore_errors=True)
            Path(tmp, "bin").rename(target)
        progress(f"built {module.name} in {_minutes(time.monotonic() - started)}: {target}")
    return target


def program(module: Module, name: str, progress: Progress = print) -> Path:
    """The path of one program of ``module`` (``kube-apiserver``), building it first if needed."""
    path = build(module, progress) / name
    if not path.is_file():
        raise UserError(f"{module.name} builds no program {name!r}: its tools are {module.tools()}")
    return path


def _complete(target: Path, module: Module) -> bool:
    marker = target / ".complete"
    return marker.is_file() and marker.read_text() == " ".join(module.tools())


def _go_build(module: Module, out: Path, progress: Progress, started: float) -> None:
    out.mkdir()
    env = {
        **os.environ,
        "CGO_ENABLED": "0",
        "GOTOOLCHAIN": "local",  # the machine's Go: never a toolchain fetched behind our back
        "GOFLAGS": "-mod=readonly",
    }
    command = ["go", "build", "-trimpath", "-ldflags", module.ldflags(), "-o", f"{out}/"]
    with _heartbeat(module.name, started, progress):
        result = subprocess.run(
            [*command, *module.tools()],
            cwd=module.directory,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    if result.returncode != 0:
        raise UserError(
            f"go build of {module.name} failed (exit {result.returncode}); its last lines:\n"
            + "\n".join(result.stderr.strip().splitlines()[-25:])
        )


@contextlib.contextmanager
def _heartbeat(name: str, started: float, progress: Progress) -> Iterator[None]:
    """Say every minute that a long build is still going, so a cold run never looks hung."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(HEARTBEAT_S):
            progress(f"still building {name}: {_minutes(time.monotonic() - started)} so far")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def module_files(module: Module, path: str, version: str) -> Path:
    """The files of Go module ``path@version`` in Go's module cache (downloaded if need be),
    resolved from ``module``'s folder."""
    result = subprocess.run(
        ["go", "mod", "download", "-json", f"{path}@{version}"],
        cwd=module.directory,
        capture_output=True,
        text=True,
        check=False,
    )
    info = json.loads(result.stdout or "{}")
    if result.returncode != 0 or "Dir" not in info:
        raise UserError(f"go mod download of {path}@{version} failed: {info or result}")
    return Path(info["Dir"])
