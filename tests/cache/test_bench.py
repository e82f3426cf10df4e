"""The cache benchmark's harness: it runs, reports throughput and CPU per GB (tiny blob, figures
unchecked), and reads the CPU of the processes it names."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import cache_vs_nginx

BENCH = Path(__file__).resolve().parents[2] / "bench" / "cache_vs_nginx.py"
LABELS = ("one_client", "2_clients", "range")


@pytest.mark.skipif(
    shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists(),
    reason="the benchmark's baseline is Debian's nginx: apt-get install nginx-light",
)
def test_cache_vs_nginx_benchmark_runs(tmp_path: Path) -> None:
    command = [
        sys.executable,
        str(BENCH),
        "--size-mib",
        "4",
        "--runs",
        "2",
        "--clients",
        "2",
        "--out",
        str(tmp_path),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "cache/nginx" in result.stdout
    assert "CPU s/GB" in result.stdout
    results = json.loads((tmp_path / "cache-vs-nginx.json").read_text())
    assert results["size_bytes"] == 4 << 20
    for label in LABELS:
        assert results[f"ratio_{label}"] > 0
        for server in ("cache", "nginx"):
            assert results[f"{server}_{label}_cpu_s_per_gb"] >= 0  # 4 MiB may take under a tick
            assert results[f"{server}_{label}_client_cpu_s_per_gb"] > 0  # curl's start, at least
    figures = cache_vs_nginx.figures(results)
    cpu = [figure for figure in figures if figure.unit == cache_vs_nginx.CPU_UNIT]
    assert len(cpu) == len(figures) // 2 == len(LABELS)
    # A 4 MiB blob can cost nginx under one clock tick: that figure is skipped, saying so, and a
    # measured one carries the goal.
    for figure in cpu:
        if figure.skipped:
            assert "clock tick" in figure.skipped
            assert figure.value is None
        else:
            assert figure.goal
            assert figure.goal.op == "<="
    assert [f.name for f in figures if f.goal and f.goal.op == ">="] == [
        "warm blob, 1 client: throughput",
        "warm blob, 2 clients: throughput",
    ]


def test_cpu_seconds_count_every_thread_of_the_process() -> None:
    before = cache_vs_nginx.cpu_seconds((os.getpid(),))
    spent = time.process_time()
    while time.process_time() - spent < 0.3:
        pass
    assert cache_vs_nginx.cpu_seconds((os.getpid(),)) - before >= 0.2


def test_the_clients_cpu_is_that_of_children_that_ended() -> None:
    """A transfer's clients (curls run to their end) are counted once they have ended."""
    before = cache_vs_nginx.ended_children_cpu_seconds()
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    subprocess.run([sys.executable, "-c", spin], check=True)
    assert cache_vs_nginx.ended_children_cpu_seconds() - before >= 0.25


def test_a_servers_processes_are_it_and_its_children() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert cache_vs_nginx.with_children(os.getpid()) == (os.getpid(), child.pid)
    finally:
        child.kill()
        child.wait()


def test_a_cpu_figure_whose_nginx_cpu_read_zero_is_skipped_with_its_reason() -> None:
    results: dict[str, float] = {"clients": 2, "size_bytes": 4 << 20, "runs": 2}
    results |= {"load_before": 0.0, "load_after": 0.0}
    for label in LABELS:
        for server in ("cache", "nginx"):
            results[f"{server}_{label}_mb_s"] = 1000.0
            results[f"{server}_{label}_cpu_s_per_gb"] = 0.5
        results |= {f"ratio_{label}": 1.0, f"ratio_{label}_min": 1.0, f"ratio_{label}_max": 1.0}
    results["nginx_range_cpu_s_per_gb"] = 0.0
    cpu = {
        figure.name: figure
        for figure in cache_vs_nginx.figures(results)
        if figure.unit == cache_vs_nginx.CPU_UNIT
    }
    skipped = cpu[f"warm blob, {cache_vs_nginx.RANGE_LABEL}: CPU per GB sent"]
    assert "clock tick" in (skipped.skipped or "")
    measured = cpu["warm blob, 1 client: CPU per GB sent"]
    assert measured.goal
    assert measured.goal.op == "<="
