"""The benchmark entry point on its cheapest configuration: the cache benchmarks (no vLLM).

No figure is judged here (figures live in bench/, as ratios measured on a quiet machine): this only
proves that `python -m bench --quick --only cache-warm,cache-fanout` measures what it can on this
machine, records the rest as skipped with their reason, and writes results.json, REPORT.md and the
plots. The vLLM benchmarks' quick run (a plain server and a group per executor, about 14 minutes
in CI) is tests/bench/test_quick_run.py, `tox -e bench-quick`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from records import ROOT, check_report, check_results, run_quick

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def quick_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    results = tmp_path_factory.mktemp("bench")
    return run_quick(results, "cache-warm", "cache-fanout", timeout=540), results


def test_quick_run_exits_zero_and_prints_the_table(
    quick_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    run, _ = quick_run
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ratio (range)" in run.stdout


def test_results_json_has_one_well_formed_record_per_figure(
    quick_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, results = quick_run
    check_results(results, {"cache"})


def test_report_links_plots_that_exist(
    quick_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, results = quick_run
    check_report(results)


def test_unknown_benchmark_is_refused_naming_the_choices() -> None:
    command = [sys.executable, "-m", "bench", "--only", "serve"]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert (
        "unknown benchmark(s) serve: choose from cache-warm, cache-fanout, serving, group"
        in run.stderr
    )


def test_unknown_executor_is_refused_naming_the_choices() -> None:
    command = [sys.executable, "-m", "bench", "--only", "group", "--executors", "ray,rpc"]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "unknown executor(s) rpc: choose from ray, mp" in run.stderr
