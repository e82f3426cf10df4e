"""The KServe releases of the chart's table, each with a Python site holding its storage code.

charts/multinode-llm/kserve-releases.yaml says, per release, which PyPI package holds its storage
initializer's code (``storageInitializer.package``) and which huggingface_hub and hf-xet its image
locks. For each release this builds, with pip, two ``--target`` directories under
``~/.cache/multinode-llm/storage-sites`` (``$XDG_CACHE_HOME`` if set), reused across runs:

- a code site: the package alone (``--no-deps``: its declared dependencies are not what the image
  has; 0.18.x even declares ``pyasn``, a typo for pyasn1 that needs a C compiler);
- a deps site: the pinned huggingface_hub (and hf-xet), plus what the package's storage code imports
  at top level (IMPORTS). Releases with the same pins share it.

Each directory's name carries a hash of exactly what was asked of pip (requirements, interpreter,
platform): change a pin in the table and a new site is built. What pip resolved for the unpinned
libraries (requests, PyYAML, ...) is written to ``installed.txt`` in the site. hf_transfer, which
the images also ship, is left out: huggingface_hub uses it only with HF_HUB_ENABLE_HF_TRANSFER=1,
which KServe sets on the init containers it injects but the chart's download Job does not.

Releases whose storage code (the files run_initializer.py loads, compared byte for byte) and pins
are the same run the same thing: ``Site.same_as`` names the first of them, and tests of the code
alone run once per such group.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from multinode_llm_testing.chartlib import kserve_releases

RUNNER = Path(__file__).with_name("run_initializer.py")
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / (
    "multinode-llm/storage-sites"
)
LAYOUT = 2  # bump when the way sites are built changes: every site is rebuilt
PIP_TIMEOUT = 900  # seconds for one pip install, downloads included

# What each package's storage code imports at top level besides the standard library (read from the
# wheels; huggingface_hub is imported inside the hf:// download). The images have these and more.
IMPORTS = {
    # storage.py imports requests; kserve/logging.py imports yaml, and the logging configuration
    # the entrypoint applies (configure_logging) names uvicorn's formatters.
    "kserve": ("pyyaml", "requests", "uvicorn"),
    # kserve_storage.py imports requests; kserve_storage/logging.py imports yaml, which the
    # package does not declare (it comes with huggingface_hub).
    "kserve-storage": ("pyyaml", "requests"),
}


@dataclass(frozen=True)
class Release:
    """One release's ``storageInitializer`` entry."""

    version: str
    status: str
    package: str  # "kserve==0.15.0", "kserve-storage==0.16.0"
    huggingface_hub: str
    hf_xet: str | None
    makes_parents: bool

    @property
    def distribution(self) -> str:
        return self.package.partition("==")[0]

    @property
    def deps_requirements(self) -> tuple[str, ...]:
        pinned = [f"huggingface_hub=={self.huggingface_hub}"]
        if self.hf_xet:
            pinned.append(f"hf-xet=={self.hf_xet}")
        return (*pinned, *IMPORTS[self.distribution])


def releases(status: str = "supported") -> list[Release]:
    """The table's releases of ``status`` with a storage initializer entry, in table order."""
    found = []
    for version, entry in kserve_releases()["releases"].items():
        storage = entry.get("storageInitializer")
        if entry["status"] != status or storage is None:
            continue
        found.append(
            Release(
                version=str(version),
                status=entry["status"],
                package=storage["package"],
                huggingface_hub=str(storage["huggingfaceHub"]),
                hf_xet=str(storage["hfXet"]) if storage.get("hfXet") else None,
                makes_parents=bool(storage["makesParents"]),
            )
        )
    return found


@dataclass(frozen=True)
class Site:
    """A release's storage code and the libraries its image pins, ready to run."""

    release: Release
    code: Path
    deps: Path
    files: tuple[str, ...]  # what run_initializer.py loads from the code site
    versions: dict[str, str | None]  # huggingface_hub, hf_xet, ... as the runner sees them
    identity: str  # sha256 over those files' bytes and the deps site's requirements
    same_as: str | None = None  # the first release with the same identity, if another

    def env(self) -> dict[str, str]:
        """What the runner needs in its environment (merge it into the container's)."""
        return {"PYTHONPATH": f"{self.code}{os.pathsep}{self.deps}"}

    def command(self, *args: str) -> list[str]:
        """The storage initializer's command line: the image's ENTRYPOINT followed by ``args``."""
        # -S: no site-packages of this test environment (its huggingface_hub and hf_xet would
        # otherwise fill in whatever a site lacks); -P: not this directory either.
        return [sys.executable, "-S", "-P", "-B", str(RUNNER), self.release.distribution, *args]


def _site_key(requirements: Iterable[str], no_deps: bool) -> str:
    asked = {
        "layout": LAYOUT,
        "requirements": list(requirements),
        "no_deps": no_deps,
        "python": sys.implementation.cache_tag,
        "platform": sysconfig.get_platform(),
    }
    return hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()[:16]


def build(label: str, requirements: tuple[str, ...], no_deps: bool) -> Path:
    """The site for ``requirements``, installed by pip unless an earlier run did."""
    site = CACHE / f"{label}-{_site_key(requirements, no_deps)}"
    if (site / ".complete").exists():
        return site
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{site.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be building the same site
        if (site / ".complete").exists():
            return site
        building = Path(tempfile.mkdtemp(prefix=f".{site.name}-", dir=CACHE))
        try:
            _pip_install(building, requirements, no_deps)
            (building / "requirements.txt").write_text("\n".join(requirements) + "\n")
            listed = subprocess.run(
                [sys.executable, "-m", "pip", "list", "--format=freeze", "--path", str(building)],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            )
            (building / "installed.txt").write_text(listed.stdout)
            (building / ".complete").touch()
            building.chmod(0o755)  # an image's files: a pod's non-root user reads them too
            if site.exists():  # an unfinished site left by a run that was killed
                shutil.rmtree(site)
            building.rename(site)
        finally:
            shutil.rmtree(building, ignore_errors=True)
    return site


def _pip_install(target: Path, requirements: tuple[str, ...], no_deps: bool) -> None:
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-input",
        "--no-warn-conflicts",  # it would compare the site with this test environment
        "--only-binary=:all:",
        "--target",
        str(target),
        *(["--no-deps"] if no_deps else []),
        *requirements,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout}{result.stderr}")


def _identify(release: Release, code: Path, deps: Path) -> Site:
    probe = Site(release, code, deps, (), {}, "")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **probe.env()}
    result = subprocess.run(
        probe.command("--identify"), capture_output=True, text=True, env=env, timeout=120
    )
    if result.returncode != 0:
        raise RuntimeError(f"{release.package} does not import:\n{result.stderr[-3000:]}")
    found = json.loads(result.stdout)
    digest = hashlib.sha256(json.dumps(release.deps_requirements).encode())
    for name in found["files"]:
        digest.update(b"\0" + name.encode() + b"\0" + (code / name).read_bytes())
    return Site(release, code, deps, tuple(found["files"]), found["versions"], digest.hexdigest())


def build_sites(wanted: list[Release]) -> dict[str, Site]:
    """A site for each release (built in parallel where missing), by version."""
    jobs = {
        ("code", r.package): (f"code-{r.package.replace('==', '-')}", (r.package,), True)
        for r in wanted
    } | {
        ("deps", r.deps_requirements): (
            f"deps-{r.distribution}-hub-{r.huggingface_hub}",
            r.deps_requirements,
            False,
        )
        for r in wanted
    }
    with ThreadPoolExecutor(max_workers=4) as pool:
        built = dict(zip(jobs, pool.map(lambda job: build(*job), jobs.values()), strict=True))
        sites = list(
            pool.map(
                lambda r: _identify(
                    r, built[("code", r.package)], built[("deps", r.deps_requirements)]
                ),
                wanted,
            )
        )
    first: dict[str, str] = {}
    result = {}
    for site in sites:
        representative = first.setdefault(site.identity, site.release.version)
        same_as = representative if representative != site.release.version else None
        result[site.release.version] = replace(site, same_as=same_as)
    return result
