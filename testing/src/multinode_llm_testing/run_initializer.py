"""What KServe's storage-initializer image runs, for one release:
``run_initializer.py PACKAGE SRC DEST``.

Run it with ``python -S -P`` and ``PYTHONPATH=<code site>:<deps site>`` (storage_sites.py
builds both): then only the release's own package and the libraries its image pins are importable,
never this test environment's.

The image's ENTRYPOINT (``python/storage-initializer/scripts/initializer-entrypoint``) is in no
wheel: it is a short script that configures the package's logging and hands exactly one source and
one destination to the package's API. This does the same with the same two calls:

- ``kserve`` (0.15.x): ``kserve.logging.configure_logging()``, then ``Storage.download(src, dest)``;
- ``kserve-storage`` (0.16 and later): ``kserve_storage.logging.configure_logging()``, then
  ``Storage.download_files([src], [dest])``.

An exception leaves with a traceback and exit status 1, as from the 0.15 and 0.16 entrypoints (0.17
and later log it and exit 1: the same status).

``run_initializer.py PACKAGE --identify`` imports the same modules and prints, as JSON, the files it
loaded from the code site and the versions of the libraries that decide a download, so a test can
tell which releases run the same code.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

VERSIONED = ("huggingface_hub", "hf_xet", "hf_transfer", "requests")


def load(package: str) -> tuple[Any, Any]:
    """The release's ``Storage`` class and its ``configure_logging``."""
    if package == "kserve-storage":
        from kserve_storage import Storage  # type: ignore[import-not-found,unused-ignore]
        from kserve_storage.logging import (  # type: ignore[import-not-found,unused-ignore]
            configure_logging,
        )

        return Storage, configure_logging
    if package == "kserve":
        # The 0.15 storage code lives in the model server's package: kserve/__init__.py imports the
        # whole server (fastapi, grpc, numpy, pandas, the REST and gRPC clients...), none of which
        # the storage initializer uses. Register the package from its real spec WITHOUT running its
        # __init__.py, so that kserve.storage, kserve.logging and kserve.constants (what the storage
        # code imports) load from the wheel unchanged, with only the libraries they import present.
        spec = importlib.util.find_spec("kserve")
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit("the kserve package is not on PYTHONPATH")
        sys.modules["kserve"] = importlib.util.module_from_spec(spec)
        from kserve.logging import configure_logging  # type: ignore[import-not-found,unused-ignore]
        from kserve.storage import Storage  # type: ignore[import-not-found,unused-ignore]

        return Storage, configure_logging
    raise SystemExit(f"unknown storage package {package!r}: kserve or kserve-storage")


def identify(package: str) -> dict[str, Any]:
    load(package)
    code_site = Path(sys.path[0]).resolve()
    # kserve/__init__.py counts although it was not run (its spec is registered): conservative.
    loaded = [
        Path(f).resolve() for m in list(sys.modules.values()) if (f := getattr(m, "__file__", None))
    ]
    files = sorted(str(p.relative_to(code_site)) for p in loaded if p.is_relative_to(code_site))
    versions: dict[str, str | None] = {}
    for name in VERSIONED:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {"files": files, "versions": versions}


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[1] == "--identify":
        print(json.dumps(identify(argv[0])))
        return 0
    if len(argv) != 3:
        print("usage: run_initializer.py kserve|kserve-storage SRC_URI DEST_PATH", file=sys.stderr)
        return 2
    package, source, destination = argv
    storage, configure_logging = load(package)
    configure_logging()
    if package == "kserve":
        storage.download(source, destination)
    else:
        storage.download_files([source], [destination])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
