"""Warm-cache throughput of one large blob: the Hub cache against Debian's nginx, same client.

    tox -e bench-cache                       # 1 GiB, 7 paired runs, one client and eight at once
    tox -e bench-cache -- --size-mib 256     # quicker

Both servers run on loopback and serve the same file from the page cache; curl downloads it to
/dev/null. The cache is first filled from the FAKE Hub (tests/cache/fake_hub.py), then only serves
stored bytes (sendfile). nginx runs with Debian's defaults that matter here (sendfile on, tcp_nopush
on, worker_processes auto). Each run measures both back to back (order alternating), each with one
client, with ``--clients`` at once, and one client reading the middle half of the file (a Range
request). Prints median MB/s for each, the median of the runs' ratios cache / nginx with their
range, each server's CPU seconds (user + system, from its processes' /proc/PID/stat) per GB sent
and its clients' (the ended curls' rusage), and the load average (the machine may be shared);
writes bench/out/cache-vs-nginx.json. Throughput here swings with the machine's load; CPU per byte
is the steadier figure. With every core busy, the server's and the clients' CPU per byte together
bound the throughput: on loopback the receive path's kernel work is charged to whichever side ran
it, so a server can lower its own figure by moving work to the clients without sending faster (a
larger send buffer does: see bench/analysis.md, 6 December 2026). Needs nginx
(`apt-get install nginx-light`) and curl.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from multinode_llm_testing.cache import CacheProcess, raw_request
from multinode_llm_testing.ports import free_port
from multinode_llm_testing.waits import wait_until

ROOT = Path(__file__).resolve().parents[1]

if TYPE_CHECKING:
    from bench.figures import Figure, Load

FILE = "model.safetensors"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=1024, help="size of the blob; default 1024")
    parser.add_argument(
        "--runs",
        type=int,
        default=7,
        help="paired runs (cache and nginx back to back) per client count; default 7",
    )
    parser.add_argument(
        "--clients",
        type=int,
        default=8,
        help="concurrent clients for the aggregate figure",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "bench" / "out",
        help="work and result directory",
    )
    args = parser.parse_args()
    try:
        results = measure(args.size_mib, args.runs, args.clients, args.out)
    except MissingToolError as missing:
        print(missing, file=sys.stderr)
        return 2
    report(results, args.clients)
    (args.out / "cache-vs-nginx.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


class MissingToolError(Exception):
    """nginx or curl is not installed: the benchmark cannot run here."""


def tools() -> tuple[str, str]:
    """(nginx, curl), or MissingToolError saying how to install them."""
    nginx, curl = shutil.which("nginx") or "/usr/sbin/nginx", shutil.which("curl")
    if not Path(nginx).exists() or curl is None:
        raise MissingToolError("needs nginx and curl: apt-get install -y nginx-light curl")
    return nginx, curl


@dataclass(frozen=True)
class Server:
    """A server under test: where its file is, and the processes whose CPU it spends."""

    name: str
    url: str
    pids: tuple[int, ...]


@dataclass
class Samples:
    """One configuration on one server: bytes per second per run, and bytes sent and CPU
    seconds spent over all runs, by the server and by its clients."""

    rates: list[float] = field(default_factory=list)
    sent: int = 0
    cpu_s: float = 0.0
    client_cpu_s: float = 0.0


Transfer = Callable[[str], tuple[float, int]]  # url -> (bytes per second, bytes sent)


def measure(size_mib: int, runs: int, clients: int, out: Path) -> dict[str, float]:
    """Fill the cache, then ``runs`` paired downloads from it and from nginx: the figures."""
    nginx, curl = tools()
    work = out / "cache-vs-nginx"
    model = work / "model"
    blob = make_blob(model / FILE, size_mib << 20)
    processes: list[subprocess.Popen[bytes]] = []
    cache: CacheProcess | None = None
    try:
        hub_port, cdn_port = free_port(), free_port()
        processes.append(start_fake_hub(model, hub_port, cdn_port, work))
        hub_url = f"http://127.0.0.1:{hub_port}"
        wait_until(lambda: answers(hub_url, "/api/models/org/model"), 60, "the fake hub")
        shutil.rmtree(work / "store", ignore_errors=True)
        cache = CacheProcess(hub_url, work / "store", work / "cache.log").wait_ready()
        commit = fill_cache(curl, cache.url, blob)
        cache_url = f"{cache.url}/org/model/resolve/{commit}/{FILE}"
        nginx_port = free_port()
        processes.append(start_nginx(nginx, model, nginx_port, work))
        nginx_url = f"http://127.0.0.1:{nginx_port}/{FILE}"
        wait_until(lambda: answers(nginx_url.rsplit("/", 1)[0], f"/{FILE}", "HEAD"), 30, "nginx")
        servers = [
            Server("cache", cache_url, with_children(cache.process.pid)),
            Server("nginx", nginx_url, with_children(processes[-1].pid)),
        ]
        load_before = os.getloadavg()[0]
        samples = paired_runs(servers, transfers(curl, blob, clients), runs)
        results = summarize(samples)
        results.update(size_bytes=blob, runs=runs, clients=clients)
        results.update(load_before=load_before, load_after=os.getloadavg()[0])
        return results
    finally:
        if cache:
            cache.stop()
        for process in processes:
            process.terminate()
            process.wait(10)
        shutil.rmtree(work / "store", ignore_errors=True)


def transfers(curl: str, size: int, clients: int) -> dict[str, Transfer]:
    """What each run measures, by label: one client, ``clients`` at once, one Range read (the
    middle half of the file, as a client resuming or splitting a download asks)."""
    first, last = size // 4, 3 * size // 4 - 1
    return {
        "one_client": lambda url: (download(curl, url, size), size),
        f"{clients}_clients": lambda url: (aggregate(curl, url, size, clients), clients * size),
        "range": lambda url: (
            download(curl, url, last - first + 1, (first, last)),
            last - first + 1,
        ),
    }


def paired_runs(
    servers: list[Server], measured: dict[str, Transfer], runs: int
) -> dict[str, dict[str, Samples]]:
    """``runs`` rounds of every transfer from each server, in pairs, each transfer's CPU read from
    the server's processes and from the clients it ended around it: samples by label, then by
    server."""
    for server in servers:  # once each, unmeasured: page cache and paths warm
        measured["one_client"](server.url)
    samples = {label: {server.name: Samples() for server in servers} for label in measured}
    for run in range(runs):  # in pairs, order alternating: drift hits both alike
        for server in servers if run % 2 == 0 else servers[::-1]:
            for label, transfer in measured.items():
                before, clients_before = cpu_seconds(server.pids), ended_children_cpu_seconds()
                rate, sent = transfer(server.url)
                sample = samples[label][server.name]
                sample.cpu_s += cpu_seconds(server.pids) - before
                sample.client_cpu_s += ended_children_cpu_seconds() - clients_before
                sample.sent += sent
                sample.rates.append(rate)
    return samples


def cpu_seconds(pids: tuple[int, ...]) -> float:
    """User + system CPU seconds the processes (all their threads) have used so far."""
    ticks = 0
    for pid in pids:
        # stat(5): the fields after the command's closing parenthesis start at field 3 (state);
        # utime and stime are fields 14 and 15, in clock ticks.
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def ended_children_cpu_seconds() -> float:
    """User + system CPU seconds of this process's children that have ended: the curls a transfer
    ran (the servers are children too, but still running, so not counted)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def with_children(pid: int) -> tuple[int, ...]:
    """``pid`` and its children (nginx's master and its workers, which do the sending)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # the process ended meanwhile
            continue
        if int(fields[1]) == pid:  # field 4 of stat(5), the parent
            children.append(int(stat.parent.name))
    return (pid, *children)


def figures(results: dict[str, float]) -> list[Figure]:
    """The results as the bench's figure records (``python -m bench``)."""
    from bench.figures import Figure, Goal, Load

    clients = int(results["clients"])
    config = {
        "blob_bytes": int(results["size_bytes"]),
        "paired_runs": int(results["runs"]),
        "client": "curl to /dev/null over loopback, from the page cache",
        "nginx": "Debian's nginx, sendfile on, tcp_nopush on, worker_processes auto",
        "cache": "multinode-llm cache serve, filled once from the FAKE Hub",
        "cpu": "each server's processes' user + system CPU (/proc/PID/stat) around each transfer",
    }
    load = Load(results["load_before"], results["load_after"])
    baseline = "nginx (sendfile), same file, same client"
    many = f"{clients}_clients"
    labels = {"one_client": "1 client", many: f"{clients} clients", "range": RANGE_LABEL}
    # The goals: the cache keeps up with nginx alone and beats it under concurrency (the
    # kernel sends for both), at about nginx's CPU per byte. The range read has no throughput goal
    # of its own: it is one client's transfer, started elsewhere in the file.
    goals = {
        "one_client": Goal("ratio", ">=", 1.0, "cache warm throughput >= 1.0x nginx, 1 client"),
        many: Goal("ratio", ">=", 1.2, f"cache warm throughput >= 1.2x nginx, {clients} clients"),
    }
    measured: list[Figure] = []
    for key, label in labels.items():
        setting = {**config, "clients": clients if key == many else 1}
        if key == "range":
            setting["range"] = "bytes=SIZE/4-(3*SIZE/4 - 1), the middle half"
        measured.append(
            Figure(
                benchmark="cache",
                name=f"warm blob, {label}: throughput",
                unit="MB/s",
                value=results[f"cache_{key}_mb_s"],
                baseline=results[f"nginx_{key}_mb_s"],
                baseline_name=baseline,
                config=setting,
                load=load,
                goal=goals.get(key),
                paired_ratio=results[f"ratio_{key}"],
                spread=(results[f"ratio_{key}_min"], results[f"ratio_{key}_max"]),
            )
        )
        measured.append(_cpu_figure(results, key, label, baseline, setting, load))
    return measured


def _cpu_figure(
    results: dict[str, float],
    key: str,
    label: str,
    baseline: str,
    setting: dict[str, object],
    load: Load,
) -> Figure:
    """CPU per GB sent, cache against nginx; skipped where nginx's CPU read 0: a small blob (the
    quick run's 4 MiB) costs it less than one clock tick (10 ms), and a ratio to 0 means nothing."""
    from bench.figures import Figure, Goal, skipped

    name = f"warm blob, {label}: CPU per GB sent"
    if not results[f"nginx_{key}_cpu_s_per_gb"]:
        reason = "nginx's CPU was below one clock tick (10 ms): send a larger blob or more runs"
        return skipped("cache", name, CPU_UNIT, baseline, reason)
    return Figure(
        benchmark="cache",
        name=name,
        unit=CPU_UNIT,
        value=results[f"cache_{key}_cpu_s_per_gb"],
        baseline=results[f"nginx_{key}_cpu_s_per_gb"],
        baseline_name=baseline,
        config=setting,
        load=load,
        goal=Goal("ratio", "<=", 1.1, f"cache CPU per GB sent <= 1.1x nginx's, {label}"),
        note="the ratio of the totals over all runs (CPU is read in clock ticks)",
    )


RANGE_LABEL = "1 client reading a range"
CPU_UNIT = "CPU s/GB"


def summarize(samples: dict[str, dict[str, Samples]]) -> dict[str, float]:
    """Per label: median MB/s of each server and the median of each pair's ratio cache / nginx
    (robust to drift); each server's CPU seconds per GB over all its runs."""
    results: dict[str, float] = {}
    for label, by_server in samples.items():
        for name, sample in by_server.items():
            results[f"{name}_{label}_mb_s"] = statistics.median(sample.rates) / 1e6
            results[f"{name}_{label}_cpu_s_per_gb"] = sample.cpu_s / (sample.sent / 1e9)
            client = sample.client_cpu_s / (sample.sent / 1e9)
            results[f"{name}_{label}_client_cpu_s_per_gb"] = client
        cache, nginx = by_server["cache"].rates, by_server["nginx"].rates
        ratios = [c / n for c, n in zip(cache, nginx, strict=True)]
        results[f"ratio_{label}"] = statistics.median(ratios)
        results[f"ratio_{label}_min"], results[f"ratio_{label}_max"] = min(ratios), max(ratios)
    return results


def make_blob(path: Path, size: int) -> int:
    if path.exists() and path.stat().st_size == size:
        return size
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as file:
        for _ in range(size >> 20):
            file.write(os.urandom(1 << 20))
    return size


def start_fake_hub(model: Path, port: int, cdn_port: int, work: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "multinode_llm_testing.fake_hub",
        str(model),
        "--port",
        str(port),
        "--cdn-port",
        str(cdn_port),
    ]
    log = (work / "fake-hub.log").open("wb")
    return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def start_nginx(nginx: str, root: Path, port: int, work: Path) -> subprocess.Popen[bytes]:
    (work / "nginx-tmp").mkdir(exist_ok=True)
    user = "user root;" if os.geteuid() == 0 else ""  # workers must read the file where it lies
    config = work / "nginx.conf"
    config.write_text(
        f"""
{user}
worker_processes auto;
daemon off;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log;
events {{ worker_connections 1024; }}
http {{
    sendfile on;
    tcp_nopush on;
    access_log off;
    client_body_temp_path {work}/nginx-tmp/body;
    proxy_temp_path {work}/nginx-tmp/proxy;
    fastcgi_temp_path {work}/nginx-tmp/fastcgi;
    uwsgi_temp_path {work}/nginx-tmp/uwsgi;
    scgi_temp_path {work}/nginx-tmp/scgi;
    types {{ application/octet-stream safetensors; }}
    server {{ listen 127.0.0.1:{port}; root {root}; }}
}}
"""
    )
    return subprocess.Popen([nginx, "-c", str(config), "-p", str(work)], stderr=subprocess.DEVNULL)


def answers(base_url: str, path: str, method: str = "GET") -> bool:
    try:
        return raw_request(base_url, method, path, read_limit=0)[0] == 200
    except OSError:
        return False


def fill_cache(curl: str, cache_url: str, size: int) -> str:
    """Download once through the cache (the cold fill); returns the commit that names the file."""
    status, headers, _ = raw_request(cache_url, "HEAD", f"/org/model/resolve/main/{FILE}")
    if status != 200:
        raise RuntimeError(f"the cache answered {status} for {FILE}: see {cache_url}/metrics")
    commit = str(headers["X-Repo-Commit"])
    download(curl, f"{cache_url}/org/model/resolve/{commit}/{FILE}", size)
    return commit


def download(curl: str, url: str, size: int, byte_range: tuple[int, int] | None = None) -> float:
    """One curl download to /dev/null (of ``byte_range``, inclusive, if given): bytes per second
    as curl measures it."""
    result = subprocess.run(
        [
            curl,
            "-s",
            "--max-time",  # bounded: a stuck server fails the run instead of hanging it
            "300",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{size_download} %{speed_download}",
            *(["-r", f"{byte_range[0]}-{byte_range[1]}"] if byte_range else []),
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    status, got, speed = result.stdout.split()
    if (status, int(got)) != ("206" if byte_range else "200", size):
        raise RuntimeError(f"{url} answered {status} with {got} bytes, not {size}")
    return float(speed)


def aggregate(curl: str, url: str, size: int, clients: int) -> float:
    """``clients`` curl downloads at once: total bytes per second of wall time."""
    start = time.monotonic()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(lambda _: download(curl, url, size), range(clients)))
    return clients * size / (time.monotonic() - start)


def report(results: dict[str, float], clients: int) -> None:
    size_mib, runs = int(results["size_bytes"]) >> 20, int(results["runs"])
    print(f"warm cache vs nginx, one {size_mib} MiB blob over loopback, curl, {runs} paired runs")
    print(f"(load average {results['load_before']:.1f} before, {results['load_after']:.1f} after)")
    labels = ("one_client", f"{clients}_clients", "range")
    print(f"{'':16}{'1 client':>22}{f'{clients} clients at once':>22}{'range, 1 client':>22}")
    for name in ("cache", "nginx"):
        rates = "".join(f"{results[f'{name}_{label}_mb_s']:>17.0f} MB/s" for label in labels)
        print(f"{name + ' (median)':16}{rates}")
    print(f"{'cache/nginx':16}{''.join(f'{_ratio(results, label):>22}' for label in labels)}")
    for name in ("cache", "nginx"):
        print(_cpu_row(results, f"{name} CPU", f"{name}_{{label}}_cpu_s_per_gb", labels))
    print(
        f"{'CPU cache/nginx':16}{''.join(f'{_cpu_ratio(results, label):>22}' for label in labels)}"
    )
    # On loopback the receive path's kernel work is charged to whichever side ran it, and with
    # every core busy the sum of both sides' CPU per byte is what bounds the bytes per second.
    for name in ("cache", "nginx"):
        print(_cpu_row(results, f"{name} clients", f"{name}_{{label}}_client_cpu_s_per_gb", labels))


def _cpu_row(results: dict[str, float], title: str, key: str, labels: tuple[str, ...]) -> str:
    """One printed row of CPU s/GB: ``key`` with ``{label}`` filled in for each column."""
    cells = "".join(f"{results[key.format(label=label)]:>14.3f} CPU s/GB" for label in labels)
    return f"{title:16}{cells}"


def _ratio(results: dict[str, float], label: str) -> str:
    low, high = results[f"ratio_{label}_min"], results[f"ratio_{label}_max"]
    return f"{results[f'ratio_{label}']:.2f}x ({low:.2f}-{high:.2f})"


def _cpu_ratio(results: dict[str, float], label: str) -> str:
    nginx = results[f"nginx_{label}_cpu_s_per_gb"]
    return f"{results[f'cache_{label}_cpu_s_per_gb'] / nginx:.2f}x" if nginx else "-"


if __name__ == "__main__":
    sys.exit(main())
