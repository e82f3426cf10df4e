"""A soak: two peered caches under a steady client load, through bounded rounds of faults (a peer
killed and restarted, upstream cut and restored, upstream corrupting every body). Every round heals
unattended; a client sees errors only while a fault lasts (an answer that overlaps the outage), and
never a wrong byte; afterwards nothing has leaked: descriptors, memory, partial or temporary files.

The store limit is far below the files' total, so blobs are evicted and filled again all the time:
the load keeps reaching upstream and the peers, not only the stores.
"""

from __future__ import annotations

import functools
import http.client
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from multinode_llm_testing.cache import CacheProcess
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo
from multinode_llm_testing.ports import free_port
from multinode_llm_testing.waits import wait_until

FILES = {
    f"shard-{index:02d}.safetensors": random.Random(index).randbytes(512 << 10)
    for index in range(24)
}
CLIENTS = 4
TIMEOUT = 3  # --upstream-timeout


@dataclass
class Answer:
    began: float
    ended: float
    cache: str
    ok: bool
    what: str


class Load:
    """CLIENTS threads asking the caches for random files and ranges, checking every byte."""

    def __init__(self, caches: dict[str, Callable[[], str]], commit: str) -> None:
        self.caches, self.commit = caches, commit
        self.answers: list[Answer] = []
        self.wrong: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(seed,)) for seed in range(CLIENTS)
        ]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def _run(self, seed: int) -> None:
        rng = random.Random(seed)
        while not self._stop.is_set():
            name = rng.choice(sorted(FILES))
            content = FILES[name]
            start = rng.randrange(len(content)) if rng.random() < 0.3 else 0
            cache = rng.choice(sorted(self.caches))
            began = time.monotonic()
            ok, what = self._get(self.caches[cache](), name, content, start)
            self.answers.append(Answer(began, time.monotonic(), cache, ok, what))

    def _get(self, url: str, name: str, content: bytes, start: int) -> tuple[bool, str]:
        host, port = url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            headers = {"Range": f"bytes={start}-"} if start else {}
            connection.request("GET", f"/org/soak/resolve/{self.commit}/{name}", headers=headers)
            response = connection.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException) as error:
            return False, repr(error)
        finally:
            connection.close()
        if response.status not in (200, 206):
            return False, f"{response.status} {response.headers.get('X-Error-Code')}"
        if body != content[start:]:
            self.wrong.append(f"{name} from {start}: {len(body)} bytes, not upstream's")
        return True, ""


@pytest.fixture
def soak_hub() -> Iterator[FakeHub]:
    hub = FakeHub().start()
    yield hub
    hub.stop()


def test_the_cache_heals_from_every_fault_round_and_leaks_nothing(
    soak_hub: FakeHub, tmp_path: Path
) -> None:
    began = time.monotonic()
    repo = soak_hub.add(FakeRepo("org/soak", FILES))
    ports = {"a": free_port(), "b": free_port()}
    caches: dict[str, CacheProcess] = {}

    def start(name: str) -> CacheProcess:
        other = "b" if name == "a" else "a"
        caches[name] = CacheProcess(
            soak_hub.url,
            tmp_path / f"store-{name}",
            tmp_path / f"cache-{name}.log",
            port=ports[name],
            args=[
                "--peer",
                f"127.0.0.1:{ports[other]}",
                "--advertise-address",
                "127.0.0.1",
                "--max-store-size",
                "4Mi",
                "--upstream-timeout",
                str(TIMEOUT),
            ],
        ).wait_ready()
        return caches[name]

    def healed() -> bool:
        return all(cache.metrics()["peers_live"] == 2 for cache in caches.values())

    def url_of(name: str) -> Callable[[], str]:
        return lambda: caches[name].url

    def flowing_since(load: Load, since: float) -> bool:
        return sum(x.ok for x in load.answers if x.began > since) >= 10

    def drained(cache: CacheProcess) -> bool:
        return cache.metrics()["fills_in_flight"] == 0

    outages: list[tuple[str, float, float]] = []

    def outage(load: Load, kind: str, fault: Callable[[], None], heal: Callable[[], None]) -> None:
        """``fault`` until clients have noticed it a few times, then ``heal`` and wait for it."""
        start_at = time.monotonic()
        fault()
        wait_until(
            lambda: sum(not x.ok for x in load.answers if x.ended >= start_at) >= 3,
            30,
            f"clients to notice '{kind}'",
        )
        heal()
        wait_until(healed, 30, "the peers to find each other again")
        outages.append((kind, start_at, time.monotonic()))

    def kill_b() -> None:
        caches["b"].kill()

    def restart_b() -> None:
        start("b")

    def cut() -> None:
        soak_hub.outage = True

    def restore() -> None:
        soak_hub.outage = False

    def corrupt() -> None:
        soak_hub.corrupt.update(FILES)

    def clean() -> None:
        soak_hub.corrupt.clear()

    try:
        start("a")
        start("b")
        wait_until(healed, 30, "the peers to find each other")
        with Load({name: url_of(name) for name in ports}, repo.commit) as load:
            wait_until(lambda: sum(a.ok for a in load.answers) >= 40, 60, "the load to warm up")
            a = caches["a"]
            baseline_fds, baseline_rss = a.open_fds(), a.rss()
            rounds = [
                ("peer killed", kill_b, restart_b),
                ("upstream cut", cut, restore),
                ("upstream corrupting", corrupt, clean),
            ] * 2
            for kind, fault, heal in rounds:
                outage(load, kind, fault, heal)
                settled_at = time.monotonic()
                wait_until(
                    functools.partial(flowing_since, load, settled_at),
                    60,
                    f"the load to flow again after '{kind}'",
                )
        answers = load.answers
        assert load.wrong == [], load.wrong[:5]
        # A round's window lasts until every request begun before its heal has ended: a request
        # that arrives just after the heal can join a fill that began during the fault (one fill
        # per blob) and share its failure.
        windows = [
            (s, max([e] + [x.ended for x in answers if x.began <= e])) for _, s, e in outages
        ]
        stray = [
            x
            for x in answers
            if not x.ok and not any(s <= x.ended and x.began <= e for s, e in windows)
        ]
        assert stray == [], f"errors outside every outage: {[(x.cache, x.what) for x in stray[:5]]}"
        ok = sum(x.ok for x in answers)
        assert ok > 200, f"only {ok} answers succeeded: the load did not flow"
        for cache in caches.values():
            wait_until(functools.partial(drained, cache), 30, "fills to end")
            assert cache.leftovers() == []
        wait_until(lambda: a.open_fds() <= baseline_fds + 8, 30, "cache a's descriptors to settle")
        assert a.rss() - baseline_rss < 64 << 20
        failed = len(answers) - ok
        print(
            f"soak: {len(rounds)} rounds, {len(answers)} answers, {failed} inside outages, "
            f"{time.monotonic() - began:.0f} s"
        )
    finally:
        for cache in caches.values():
            cache.stop()
            print(f"--- {cache.log_path.name} ---\n{cache.log_tail(15)}")
