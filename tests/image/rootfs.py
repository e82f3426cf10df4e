"""Run a command from a built image's root filesystem the way a pod spec runs its container.

buildah mounts a working container of the image (its own writable layer, removed on close). Each
run enters fresh mount and PID namespaces (``unshare``), binds that root read-only
(``readOnlyRootFilesystem``), gives it ``/proc``, a root-owned ``/dev`` with the usual device nodes
and the container runtime's own 64 MiB ``/dev/shm``, then exactly the volumes it is handed
(writable or read-only directories, or memory-backed emptyDirs), and executes the command with
``chroot --userspec`` as the image's user, with only the given environment. Mount points missing
from the image are made in the working container's layer, as a container runtime does. Nothing
is mounted outside those namespaces, so nothing is left mounted when a run ends.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


@dataclass(frozen=True)
class Volume:
    """A volume mount: a host directory (``source``) or, without one, a memory-backed emptyDir."""

    target: str
    source: Path | None = None
    read_only: bool = False


def buildah(*args: str) -> str:
    result = subprocess.run(["buildah", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"buildah {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout.strip()


class MountedImage:
    """A working container of ``image`` with its root filesystem mounted on this machine."""

    def __init__(self, image: str) -> None:
        self.image = image
        self.container = buildah("from", "--pull=never", "--quiet", image)
        self.rootfs = Path(buildah("mount", self.container))
        inspected = json.loads(buildah("inspect", "--type", "container", self.container))
        self.config: dict[str, Any] = inspected["OCIv1"]["config"]

    def close(self) -> None:
        buildah("umount", self.container)
        buildah("rm", self.container)

    @property
    def user(self) -> str:
        return str(self.config.get("User") or "0:0")

    @property
    def env(self) -> dict[str, str]:
        return dict(item.split("=", 1) for item in self.config.get("Env") or [])

    @property
    def entrypoint(self) -> list[str]:
        return list(self.config.get("Entrypoint") or [])

    def run(
        self,
        argv: list[str],
        *,
        volumes: Sequence[Volume] = (),
        env: dict[str, str] | None = None,
        workdir: str | None = None,
        own_network: bool = False,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the image (entry point not prepended) and return what it did."""
        for volume in volumes:  # mount points, in the working container's own layer
            (self.rootfs / volume.target.lstrip("/")).mkdir(parents=True, exist_ok=True)
        environment = {**self.env, **(env or {})}
        with tempfile.TemporaryDirectory(prefix="image-root-") as new_root:
            script = self._script(Path(new_root), argv, volumes, environment, workdir)
            command = ["unshare", "--mount", "--pid", "--fork", "--kill-child"]
            command += ["--propagation", "private"]
            if own_network:
                command.append("--net")
            return subprocess.run(
                [*command, "sh", "-euc", script],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )

    def _script(
        self,
        root: Path,
        argv: list[str],
        volumes: Sequence[Volume],
        env: dict[str, str],
        workdir: str | None,
    ) -> str:
        r = shlex.quote(str(root))
        lines = [
            "ip link set lo up 2>/dev/null || true",
            f"mount --bind {shlex.quote(str(self.rootfs))} {r}",
            f"mount -o remount,bind,ro {r}",
            f"mount -t proc proc {r}/proc",
            f"mount -t tmpfs -o nosuid,mode=755,size=1m dev {r}/dev",
        ]
        for device in DEVICES:
            lines += [f"touch {r}/dev/{device}", f"mount --bind /dev/{device} {r}/dev/{device}"]
        lines += [
            f"ln -s /proc/self/fd {r}/dev/fd",
            f"mkdir {r}/dev/shm",
            f"mount -t tmpfs -o nosuid,nodev,mode=1777,size=64m shm {r}/dev/shm",
        ]
        for volume in volumes:
            target = shlex.quote(f"{root}{volume.target}")
            if volume.source is None:
                lines.append(f"mount -t tmpfs -o nosuid,nodev,mode=1777 emptydir {target}")
            else:
                lines.append(f"mount --bind {shlex.quote(str(volume.source))} {target}")
                mode = "ro" if volume.read_only else "rw"
                lines.append(f"mount -o remount,bind,{mode} {target}")
        user = self.user if ":" in self.user else f"{self.user}:{self.user}"
        workdir = workdir or self.config.get("WorkingDir") or "/"
        assignments = [f"{key}={value}" for key, value in env.items()]
        lines.append(
            shlex.join(
                [
                    "exec",
                    *("chroot", f"--userspec={user}", f"--groups={user.split(':')[1]}", str(root)),
                    *("/usr/bin/env", "-i", f"--chdir={workdir}", *assignments, *argv),
                ]
            )
        )
        return "\n".join(lines)
