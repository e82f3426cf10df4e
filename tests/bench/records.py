"""What every benchmark run's results.json and REPORT.md must hold, whichever benchmarks ran."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = {"serving", "startup", "recovery", "throughput", "cache"}
RECORD_KEYS = {
    "benchmark",
    "name",
    "unit",
    "value",
    "baseline",
    "baseline_name",
    "ratio",
    "config",
    "load",
    "goal",
    "met",
    "skipped",
}


def run_quick(results: Path, *only: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m bench --quick`` into ``results`` (``--only`` the given benchmarks), its output
    printed for the test log."""
    command = [sys.executable, "-m", "bench", "--quick", "--results", str(results)]
    if only:
        command += ["--only", ",".join(only)]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    print(run.stdout[-6000:])
    print(run.stderr[-6000:], file=sys.stderr)
    return run


def figures(results: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads((results / "results.json").read_text())["figures"]
    return found


def check_results(results: Path, benchmarks: set[str]) -> None:
    """One well-formed record per figure: measured with a finite value and baseline, or skipped
    naming why; ``benchmarks`` among them."""
    data = json.loads((results / "results.json").read_text())
    assert data["quick"] is True
    assert data["machine"]["cores"] >= 1
    assert benchmarks <= {figure["benchmark"] for figure in data["figures"]}
    for figure in data["figures"]:
        check_record(figure)


def check_record(figure: dict[str, Any]) -> None:
    assert figure.keys() >= RECORD_KEYS, figure
    assert figure["benchmark"] in BENCHMARKS
    assert not figure["skipped"].startswith("FAILED"), figure["skipped"]
    if figure["value"] is None:
        assert figure["skipped"], f"{figure['name']} has no value and no reason"
    if figure["skipped"]:
        return  # a skip names its reason; nothing was measured
    assert math.isfinite(figure["value"]), figure
    assert math.isfinite(figure["baseline"]), figure
    # A cost (the supervisor's CPU) can measure 0 at the clock's 10 ms resolution in a quick
    # run; a rate cannot: something was served.
    assert figure["ratio"] >= 0, figure
    if figure["unit"].endswith("/s"):
        assert figure["ratio"] > 0, figure
    assert min(figure["load"]["before"], figure["load"]["after"]) >= 0
    assert figure["config"], f"{figure['name']} carries no configuration"


def check_report(results: Path) -> None:
    """REPORT.md starts as a report and every plot it links is a PNG that exists."""
    report = (results / "REPORT.md").read_text()
    assert report.startswith("# Benchmarks")
    for line in report.splitlines():
        if line.startswith("![") and line.endswith(".png)"):
            png = results / line.split("(")[-1].rstrip(")")
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{png} is not a PNG"
