"""The cache benchmark's entry point runs and reports a ratio (tiny blob, figures unchecked)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "cache_vs_nginx.py"


@pytest.mark.skipif(
    shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists(),
    reason="the benchmark's baseline is Debian's nginx: apt-get install nginx-light",
)
def test_cache_vs_nginx_benchmark_runs(tmp_path):
    command = [
        sys.executable,
        str(BENCH),
        "--size-mib",
        "4",
        "--runs",
        "1",
        "--clients",
        "2",
        "--out",
        str(tmp_path),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "cache/nginx" in result.stdout
    figures = json.loads((tmp_path / "cache-vs-nginx.json").read_text())
    assert figures["ratio_one_client"] > 0
    assert figures["size_bytes"] == 4 << 20
