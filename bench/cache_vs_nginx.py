"""Warm-cache throughput of one large blob: the Hub cache against Debian's nginx, same client.

    tox -e bench-cache                       # 1 GiB, 7 paired runs, one client and eight at once
    tox -e bench-cache -- --size-mib 256     # quicker

Both servers run on loopback and serve the same file from the page cache; curl downloads it to
/dev/null. The cache is first filled from the FAKE Hub (tests/cache/fake_hub.py), then only serves
stored bytes (sendfile). nginx runs with Debian's defaults that matter here (sendfile on, tcp_nopush
on, worker_processes auto). Each run measures both back to back (order alternating); prints median
MB/s for each, the median of the runs' ratios cache / nginx with their range, and the load average
(the machine may be shared); writes bench/out/cache-vs-nginx.json. Needs nginx
(`apt-get install nginx-light`) and curl.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from multinode_llm_testing.cache import CacheProcess, raw_request
from multinode_llm_testing.ports import free_port
from multinode_llm_testing.waits import wait_until

ROOT = Path(__file__).resolve().parents[1]

if TYPE_CHECKING:
    from bench.figures import Figure

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

        load_before = os.getloadavg()[0]
        for url in (cache_url, nginx_url):  # once each, unmeasured: page cache and paths warm
            download(curl, url, blob)
        one: dict[str, list[float]] = {"cache": [], "nginx": []}
        many: dict[str, list[float]] = {"cache": [], "nginx": []}
        servers = [("cache", cache_url), ("nginx", nginx_url)]
        for run in range(runs):  # in pairs, order alternating: drift hits both alike
            for name, url in servers if run % 2 == 0 else servers[::-1]:
                one[name].append(download(curl, url, blob))
                many[name].append(aggregate(curl, url, blob, clients))
        results = summarize(one, many, clients)
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
    }
    load = Load(results["load_before"], results["load_after"])
    # The goals: the cache keeps up with nginx alone and beats it under concurrency (its
    # sendfile threads use every core; nginx here runs one worker per core too).
    goals = {
        "one_client": Goal("ratio", ">=", 1.0, "cache warm throughput >= 1.0x nginx, 1 client"),
        f"{clients}_clients": Goal(
            "ratio", ">=", 1.2, f"cache warm throughput >= 1.2x nginx, {clients} clients"
        ),
    }
    return [
        Figure(
            benchmark="cache",
            name=f"warm blob, {label}: throughput",
            unit="MB/s",
            value=results[f"cache_{key}_mb_s"],
            baseline=results[f"nginx_{key}_mb_s"],
            baseline_name="nginx (sendfile), same file, same client",
            config={**config, "clients": 1 if key == "one_client" else clients},
            load=load,
            goal=goals[key],
            paired_ratio=results[f"ratio_{key}"],
            spread=(results[f"ratio_{key}_min"], results[f"ratio_{key}_max"]),
        )
        for key, label in (("one_client", "1 client"), (f"{clients}_clients", f"{clients} clients"))
    ]


def summarize(
    one: dict[str, list[float]], many: dict[str, list[float]], clients: int
) -> dict[str, float]:
    """Medians in MB/s, and the median of each pair's ratio cache / nginx (robust to drift)."""
    results: dict[str, float] = {}
    for label, samples in (("one_client", one), (f"{clients}_clients", many)):
        for name in ("cache", "nginx"):
            results[f"{name}_{label}_mb_s"] = statistics.median(samples[name]) / 1e6
        ratios = [c / n for c, n in zip(samples["cache"], samples["nginx"], strict=True)]
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


def download(curl: str, url: str, size: int) -> float:
    """One curl download to /dev/null: bytes per second as curl measures it."""
    result = subprocess.run(
        [
            curl,
            "-s",
            "--max-time",  # bounded: a stuck server fails the run instead of hanging it
            "300",
            "-o",
            "/dev/null",
            "-w",
            "%{size_download} %{speed_download}",
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    got, speed = result.stdout.split()
    if int(got) != size:
        raise RuntimeError(f"{url} sent {got} bytes, not {size}")
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
    many = f"{clients}_clients"
    print(f"{'':14}{'1 client':>14}{f'{clients} clients at once':>24}")
    for name in ("cache", "nginx"):
        a, b = results[f"{name}_one_client_mb_s"], results[f"{name}_{many}_mb_s"]
        print(f"{name + ' (median)':14}{a:>9.0f} MB/s{b:>19.0f} MB/s")
    print(f"{'cache/nginx':14}{_ratio(results, 'one_client'):>14}{_ratio(results, many):>24}")


def _ratio(results: dict[str, float], label: str) -> str:
    low, high = results[f"ratio_{label}_min"], results[f"ratio_{label}_max"]
    return f"{results[f'ratio_{label}']:.2f}x ({low:.2f}-{high:.2f})"


if __name__ == "__main__":
    sys.exit(main())
