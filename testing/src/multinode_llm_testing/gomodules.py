"""Files of a Go module the tests read but never build (CRDs), at the release that a folder under
``testing/go/`` pins: its ``go.mod`` names the release and its ``go.sum`` the bytes. ``go mod
download`` fetches the module once per machine into Go's module cache."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

from multinode_llm_testing.chartlib import ROOT

PINS = ROOT / "testing" / "go"


class UnavailableError(Exception):
    """The module cannot be had here (no Go, or the module proxy refused): the reason, for a
    skip."""


def version(pin: str, module: str) -> str:
    """The release ``testing/go/<pin>/go.mod`` requires of ``module`` (v1.6.3)."""
    go_mod = PINS / pin / "go.mod"
    found = re.search(rf"^require {re.escape(module)} (v\S+)$", go_mod.read_text(), re.M)
    assert found, f"{go_mod} requires no {module}"
    return found.group(1)


@cache
def module_dir(pin: str, module: str) -> Path:
    """The pinned release's files (read-only, in Go's module cache)."""
    wanted = f"{module}@{version(pin, module)}"
    if shutil.which("go") is None:
        raise UnavailableError(f"go is not on PATH: the files come from the module {wanted}")
    result = subprocess.run(
        ["go", "mod", "download", "-json", wanted],
        cwd=PINS / pin,
        capture_output=True,
        text=True,
        check=False,
    )
    info = json.loads(result.stdout or "{}")
    if result.returncode != 0 or "Dir" not in info:
        raise UnavailableError(f"go mod download {wanted} failed: {info or result.stderr}")
    return Path(info["Dir"])
