"""A container's init process: PID 1 of its own PID, mount and UTS namespaces, in the pod's netns.

The kubelet starts it as
``ip netns exec NETNS unshare --pid --fork --mount-proc --uts --propagation private
python -m multinode_llm_local.container PLAN.json CONTAINER``. As root it sets the hostname to the
pod name, makes the mounts the plan lists (volumes, a private /tmp and /dev/shm, the model claim at
/mnt/models), then starts the container's command as the plan's user and stays PID 1: it forwards
SIGTERM/SIGINT, reaps orphans, and exits with the command's status. When it exits the kernel kills
every process left in the PID namespace, which is how a container's processes all go at once.

Only the standard library is imported here: this runs once per container start.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

_COVERED: set[Path] = set()  # directories this init covered with a writable tmpfs mirror
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded before a chroot into an image root


def main(argv: list[str]) -> int:
    plan_file, container_name = argv
    pod = json.loads(Path(plan_file).read_text())
    container = next(c for c in pod["containers"] if c["name"] == container_name)
    socket.sethostname(pod["name"])
    mounts = container["mounts"]
    # Open every source first: a later mount (the pod's /tmp) may cover where a source lives.
    sources = {index: _open_source(m) for index, m in enumerate(mounts) if m["kind"] == "bind"}
    if container.get("rootfs"):
        _enter_image_root(container, mounts, sources)
        return _supervise(_start(container))
    image_paths = _image_paths(container.get("image_paths") or [])
    closed = _closed_ancestors(image_paths, container["uid"])
    image = _keep_image_paths(image_paths, [m["target"] for m in mounts] + closed)
    if container["read_only_root"]:
        _run("mount", "-o", "remount,bind,ro", "/")
    for directory in closed:
        _run("mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", directory)
    for index, mount in enumerate(mounts):
        _mount(mount, sources.get(index))
    for path, descriptor in image.items():
        _restore(path, descriptor)
    return _supervise(_start(container))


def _enter_image_root(
    container: dict[str, Any], mounts: list[dict[str, Any]], sources: dict[int, int]
) -> None:
    """Make the image's root filesystem (a buildah working container, ``rootfs``) this init's root.

    Mount points missing from the image are made in the working container's own layer, as a
    container runtime makes them; then the root is bound (read-only where the pod says), given
    /proc, /sys (read-only) and /dev, the pod network's /etc/hosts and /etc/resolv.conf, and the
    pod's volumes, all with this machine's tools; then this init chroots into it, so that the
    command, and exec probes entering with ``nsenter --root``, run inside the image.
    """
    root = container["rootfs"].rstrip("/")
    network_files = {
        name: os.open(f"/etc/{name}", os.O_PATH)
        for name in ("hosts", "resolv.conf")
        if os.path.exists(f"/etc/{name}")
    }
    for index, mount in enumerate(mounts):
        source = sources.get(index)
        is_dir = source is None or os.path.isdir(f"/proc/self/fd/{source}")
        _make_mount_point(root + mount["target"], is_dir)
    for name in network_files:
        _make_mount_point(f"{root}/etc/{name}", directory=False)
    _run("mount", "--bind", root, root)
    if container["read_only_root"]:
        _run("mount", "-o", "remount,bind,ro", root)
    _run("mount", "-t", "proc", "proc", f"{root}/proc")
    _run("mount", "-t", "sysfs", "-o", "ro,nosuid,nodev,noexec", "sysfs", f"{root}/sys")
    _run("mount", "--rbind", "/dev", f"{root}/dev")
    for name, descriptor in network_files.items():
        target = f"{root}/etc/{name}"
        _run("mount", "-c", "--bind", f"/proc/self/fd/{descriptor}", target, keep_fd=descriptor)
        os.close(descriptor)
    for index, mount in enumerate(mounts):
        _mount({**mount, "target": root + mount["target"]}, sources.get(index))
    os.chroot(root)
    os.chdir("/")


def _make_mount_point(path: str, directory: bool) -> None:
    target = Path(path)
    if target.exists() or target.is_symlink():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    if directory:
        target.mkdir()
    else:
        target.touch()


def _image_paths(provided: list[str]) -> list[str]:
    """The container's "image": this Python environment (venv, base install, import path) and
    the folders of an image provided for a test."""
    paths = {sys.prefix, sys.base_prefix, *sys.path, *provided}
    return sorted(p for p in paths if p.startswith("/") and p != "/" and os.path.isdir(p))


def _closed_ancestors(paths: list[str], uid: int) -> list[str]:
    """Directories a non-root user cannot pass through on the way to the image (``/root`` when
    Python is installed under root's home). Inside the container each is replaced by an empty,
    passable tmpfs into which only the image paths are bound: the image, not the home, is shared.
    """
    if uid == 0:
        return []
    closed = {
        str(ancestor)
        for path in paths
        for ancestor in Path(path).parents
        if str(ancestor) != "/" and not os.stat(ancestor).st_mode & 0o001
    }
    return sorted(c for c in closed if not any(c.startswith(o + "/") for o in closed))


def _keep_image_paths(paths: list[str], targets: list[str]) -> dict[str, int]:
    """Descriptors of the image paths that a mount will cover, to bind them back after it.

    The host's filesystem is the image: when the environment lives below a mount target (a
    checkout under /tmp, which the pod's own /tmp covers), it is bound back after the mounts.
    """
    kept: dict[str, int] = {}
    for path in paths:  # sorted: shallowest first, so a deeper path is bound over its parent's
        # A path below another kept one is kept too: a closed directory between them (a checkout's
        # .tox that others cannot pass) is covered, and the parent's bind brings back that cover.
        if any(path == t or path.startswith(t.rstrip("/") + "/") for t in targets):
            kept[path] = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    return kept


def _restore(path: str, descriptor: int) -> None:
    Path(path).mkdir(parents=True, exist_ok=True)
    _run("mount", "-c", "--rbind", f"/proc/self/fd/{descriptor}", path, keep_fd=descriptor)
    _run("mount", "-o", "remount,bind,ro", path)
    os.close(descriptor)


def _open_source(mount: dict[str, Any]) -> int:
    source = Path(mount["source"])
    if source.exists():
        pass
    elif mount.get("owner_uid") is None:  # an emptyDir's directory, or a subPath in it
        source.mkdir(parents=True, mode=0o777, exist_ok=True)
        source.chmod(0o777)
    else:  # a claim's subPath, which kubelet creates at container start
        _make_subpath(source, mount["owner_uid"], mount["owner_gid"], mount["mode"])
    return os.open(source, os.O_PATH)


def _make_subpath(source: Path, uid: int, gid: int, mode: int) -> None:
    """Make each missing folder of ``source`` owned by uid:gid with ``mode`` (pods.py says which).
    Another pod's container may be making the same folders: one that appears meanwhile is theirs."""
    missing = [p for p in (source, *source.parents) if not p.exists()]
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            continue
        os.chown(directory, uid, gid)
        directory.chmod(mode)


def _mount(mount: dict[str, Any], source: int | None) -> None:
    # Through the host's symlinks (/var/run -> /run, where a service-account token is mounted):
    # a mount on a symlink would land on its target anyway, and mirroring the link's parent
    # would cover the link's target too.
    target = os.path.realpath(mount["target"])
    if source is None:
        _ensure_mount_point(target, directory=True)
        options = "mode=1777"
        if mount["size_bytes"]:
            options += f",size={mount['size_bytes']}"
        _run("mount", "-t", "tmpfs", "-o", options, "tmpfs", target)
    else:
        _ensure_mount_point(target, directory=os.path.isdir(f"/proc/self/fd/{source}"))
        _run("mount", "-c", "--bind", f"/proc/self/fd/{source}", target, keep_fd=source)
        os.close(source)
    # A bind mount copies its source mount's flags (the root may be read-only by now): set them.
    if mount["read_only"] or source is not None:
        _run("mount", "-o", "remount,bind," + ("ro" if mount["read_only"] else "rw"), target)


def _ensure_mount_point(target: str, directory: bool) -> None:
    """Make ``target`` exist without writing to the host: mirror its parent onto a tmpfs if needed.

    A mount point must exist. When it does not (``/mnt/models`` on a host without one), the parent
    is covered, inside this mount namespace only, by a tmpfs holding bind mounts of the parent's
    entries (reached through a directory descriptor opened before the cover), plus the new mount
    point. The host's directory is never touched.
    """
    path = Path(target)
    if path.exists():
        return
    _ensure_mount_point(str(path.parent), directory=True)
    parent = path.parent
    if parent not in _COVERED:
        _cover_with_mirror(parent)
    if directory:
        path.mkdir()
    else:
        path.touch()


def _cover_with_mirror(parent: Path) -> None:
    _COVERED.add(parent)
    entries = sorted(os.listdir(parent))
    original = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        # -n: mount(8) would otherwise write its table into /run/mount, on the new tmpfs when
        # the parent is /run.
        _run("mount", "-n", "-t", "tmpfs", "-o", "mode=755", "tmpfs", str(parent))
        for name in entries:
            entry = f"/proc/self/fd/{original}/{name}"
            mirror = parent / name
            if os.path.islink(entry):
                mirror.symlink_to(os.readlink(entry))
                continue
            if os.path.isdir(entry):
                mirror.mkdir(exist_ok=True)
            else:
                mirror.touch()
            _run("mount", "-n", "-c", "--rbind", entry, str(mirror), keep_fd=original)
    finally:
        os.close(original)


def _start(container: dict[str, Any]) -> subprocess.Popen[bytes]:
    """Start the command as the plan's user, with only the plan's environment."""
    if container.get("rootfs"):
        return _start_in_image(container)
    argv = list(container["argv"])
    privileges = ["setpriv"]
    if container["uid"] != 0 or container["gid"] != 0 or container["groups"]:
        privileges += ["--reuid", str(container["uid"]), "--regid", str(container["gid"])]
        groups = container["groups"]
        privileges += ["--groups", ",".join(map(str, groups))] if groups else ["--clear-groups"]
    if container["no_new_privs"]:
        privileges.append("--no-new-privs")
    if container["drop_capabilities"]:
        privileges += ["--inh-caps=-all", "--bounding-set=-all"]
    if len(privileges) > 1:
        argv = [*privileges, "--", *argv]
    env = dict(container["env"])
    os.chdir(container["workdir"])
    return subprocess.Popen(argv, env=env, start_new_session=False)


def _start_in_image(container: dict[str, Any]) -> subprocess.Popen[bytes]:
    """The command inside the image root (this init chrooted into it): no tool of this machine
    is there, so Python itself drops to the plan's user; a non-root uid keeps no capability."""
    no_new_privs = _no_new_privs if container["no_new_privs"] else None
    uid, gid = container["uid"], container["gid"]
    os.chdir(container["workdir"])
    return subprocess.Popen(
        list(container["argv"]),
        env=dict(container["env"]),
        user=uid if uid or gid else None,
        group=gid if uid or gid else None,
        extra_groups=list(container["groups"]) if uid or gid else None,
        preexec_fn=no_new_privs,
    )


def _no_new_privs() -> None:
    if _LIBC.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")


def _supervise(child: subprocess.Popen[bytes]) -> int:
    """Forward termination signals to the command, reap orphans, return the command's status."""

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue
        if pid == child.pid:
            return (
                os.waitstatus_to_exitcode(status)
                if os.WIFEXITED(status)
                else 128 + os.WTERMSIG(status)
            )


def _run(*argv: str, keep_fd: int | None = None) -> None:
    fds = () if keep_fd is None else (keep_fd,)
    result = subprocess.run(argv, capture_output=True, text=True, check=False, pass_fds=fds)
    if result.returncode != 0:
        raise SystemExit(
            f"local cluster container init: `{' '.join(argv)}` failed: {result.stderr.strip()}"
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
