#!/usr/bin/env bash
# Strict mypy over hack/ and every folder of tests/, each the way pytest imports it (tox -e lint):
# a folder with __init__.py is a package, checked by its dotted name; any other folder's modules
# import each other by their bare names (pytest's pythonpath and rootdir-relative imports), so it
# is checked on its own, with itself, the checkout's root and hack/ on mypy's path. One run per
# folder, because several hold modules of the same name (conftest.py).
set -euo pipefail
cd "$(dirname "$0")/.."
config=runtime/pyproject.toml
MYPYPATH=hack mypy --config-file "$config" --explicit-package-bases hack
packages=()
for folder in tests/*/; do
    folder=${folder%/}
    if [[ -f $folder/__init__.py ]]; then
        packages+=(-p "${folder//\//.}")
    else
        MYPYPATH="$folder:.:hack" mypy --config-file "$config" --explicit-package-bases "$folder"
    fi
done
mypy --config-file "$config" "${packages[@]}"
