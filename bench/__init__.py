"""Benchmarks: what the runtime and the cache cost, each figure a ratio against a baseline
measured in the same run. Run them all with ``python -m bench`` (``tox -e bench``)."""
