"""The chart's download Job, run here as its pod would run it: a stand-in for the kubelet.

Each volume of the pod is a directory under the test's tmp dir: a ``persistentVolumeClaim`` is a
new empty directory (a fresh claim), an ``emptyDir`` too, a ``secret`` holds the items the test
gives. Each container runs as a process with the pod's env (``value`` entries only) and every
path under one of ITS volumeMounts mapped into that volume's directory. A path the container names
outside its mounts would be on the pod's read-only root filesystem, so it fails the test instead of
touching this machine; so does a mount path buried inside a longer argument
(``sh -c "mkdir /mnt/..."``), which this stand-in cannot map.

What a container runs: its ``command`` when it has one (only the commands in COMMANDS: coreutils'
``mkdir``, which this machine's does exactly as the image's Debian one, and ``multinode-llm``, the
runtime of this checkout that the multinode-llm images hold), otherwise the image's ENTRYPOINT,
which for KServe's storage initializer is the release's storage code (``Site.command``). Init
containers run first, in order; the first that exits non-zero fails the pod, as in Kubernetes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multinode_llm_testing.storage_sites import Site

COMMANDS = frozenset({"mkdir", "multinode-llm"})
TIMEOUT = 180  # seconds for one container
# The environment the storage-initializer image itself sets (python:3.11-slim-bookworm's ENV).
IMAGE_ENV = {"LANG": "C.UTF-8"}


@dataclass
class ContainerRun:
    name: str
    command: list[str]
    returncode: int
    stdout: str
    stderr: str


@dataclass
class PodRun:
    volumes: dict[str, Path]
    containers: list[ContainerRun] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.containers) and all(c.returncode == 0 for c in self.containers)

    @property
    def failed(self) -> str | None:
        """The container that failed the pod, if one did."""
        return next((c.name for c in self.containers if c.returncode != 0), None)

    def report(self) -> str:
        return "\n".join(
            f"--- {c.name} exited {c.returncode}: {' '.join(c.command)}\n{c.stderr[-3000:]}"
            for c in self.containers
        )


class JobPod:
    """The pod of ``job`` (a rendered batch/v1 Job), with its volumes under ``root``."""

    def __init__(
        self,
        job: dict[str, Any],
        root: Path,
        site: Site | None,
        image: str,
        secrets: dict[str, dict[str, str]] | None = None,
    ) -> None:
        assert job["kind"] == "Job", job["kind"]
        self.spec: dict[str, Any] = job["spec"]["template"]["spec"]
        self.root = root
        self.site = site
        self.image = image  # the storage initializer's image: its ENTRYPOINT is the site's code
        self.secrets = secrets or {}
        self.volumes = {v["name"]: self._volume(v) for v in self.spec.get("volumes", [])}

    def _volume(self, volume: dict[str, Any]) -> Path:
        path: Path = self.root / "volumes" / volume["name"]
        path.mkdir(parents=True)
        if "persistentVolumeClaim" in volume or "emptyDir" in volume:
            return path
        if "secret" in volume:
            secret = volume["secret"]
            data = self.secrets[secret["secretName"]]
            items = secret.get("items") or [{"key": key, "path": key} for key in data]
            for item in items:
                target = path / item["path"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(data[item["key"]])
                target.chmod(item.get("mode", secret.get("defaultMode", 0o644)))
            return path
        raise AssertionError(
            f"volume {volume['name']}: the stand-in knows claims, emptyDir, secrets"
        )

    def mounts(self, container: dict[str, Any]) -> list[tuple[str, Path]]:
        """(mountPath, directory) of the container's mounts, deepest first."""
        found = []
        for mount in container.get("volumeMounts", []):
            directory: Path = self.volumes[mount["name"]]
            if mount.get("subPath"):
                directory = directory / mount["subPath"]
            found.append((mount["mountPath"].rstrip("/") or "/", directory))
        return sorted(found, key=lambda m: len(m[0]), reverse=True)

    def host_path(self, container: dict[str, Any], path: str) -> Path:
        """Where ``path`` inside ``container`` lies on this machine."""
        mapped = self._translate(container, path, "path")
        assert mapped != path, f"{container['name']}: {path} is not on a volume"
        return Path(mapped)

    def _translate(self, container: dict[str, Any], value: str, what: str) -> str:
        name = container["name"]
        for mount_path, directory in self.mounts(container):
            if value == mount_path or value.startswith(mount_path + "/"):
                return str(directory) + value[len(mount_path) :]
            buried = re.search(rf"(?<![\w.:/-]){re.escape(mount_path)}(?=/|$|[\s'\"])", value)
            assert buried is None, (
                f"{name}: {what} {value!r} names {mount_path} inside a longer string; the stand-in"
                " maps whole paths only"
            )
        assert not value.startswith("/"), (
            f"{name}: {what} {value!r} is outside the container's volumes (on the pod's read-only"
            " root filesystem)"
        )
        return value

    def _env(self, container: dict[str, Any]) -> dict[str, str]:
        assert not container.get("envFrom"), f"{container['name']}: envFrom is not emulated"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **IMAGE_ENV}
        for item in container.get("env", []):
            assert "value" in item, f"{container['name']}: env {item['name']} has no plain value"
            env[item["name"]] = self._translate(
                container, str(item["value"]), f"env {item['name']}"
            )
        return env

    def run_container(self, container: dict[str, Any]) -> ContainerRun:
        name = container["name"]
        assert container["image"] == self.image, (
            f"{name}: image {container['image']}; the stand-in runs {self.image} only"
        )
        args = [self._translate(container, str(a), "argument") for a in container.get("args", [])]
        env = self._env(container)
        if container.get("command"):
            command = [self._translate(container, str(c), "command") for c in container["command"]]
            assert command[0] in COMMANDS, (
                f"{name}: runs {command[0]!r}; the stand-in runs only {sorted(COMMANDS)}"
            )
            if command[0] == "multinode-llm":
                command = [sys.executable, "-m", "multinode_llm", *command[1:]]
            argv = [*command, *args]
        else:
            assert self.site is not None, f"{name}: no command, and no entrypoint to stand in for"
            argv = self.site.command(*args)
            env |= self.site.env()
        workdir = self.root / "workdir" / name  # the image's WORKDIR, empty
        workdir.mkdir(parents=True)
        result = subprocess.run(
            argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=TIMEOUT
        )
        return ContainerRun(name, argv, result.returncode, result.stdout, result.stderr)

    def run(self) -> PodRun:
        """Init containers in order, then the Job's one container, while each succeeds."""
        run = PodRun(self.volumes)
        [main] = self.spec["containers"]
        for container in [*self.spec.get("initContainers", []), main]:
            run.containers.append(self.run_container(container))
            if run.containers[-1].returncode != 0:
                break
        return run


def initializer_env(site: Site, hub_url: str, scratch: Path) -> dict[str, str]:
    """The download Job's environment through a Hub cache, with ``scratch`` as its /tmp."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        **IMAGE_ENV,
        "HOME": str(scratch),
        "HF_HOME": str(scratch / "huggingface"),
        "HF_ENDPOINT": hub_url,
        "HF_HUB_DISABLE_XET": "1",
        **site.env(),
    }


def model_files_in(directory: Path) -> list[str]:
    """Files staged into ``directory``, without huggingface_hub's own ``.cache/`` bookkeeping."""
    return sorted(
        str(p.relative_to(directory))
        for p in directory.rglob("*")
        if p.is_file() and ".cache" not in p.relative_to(directory).parts
    )
