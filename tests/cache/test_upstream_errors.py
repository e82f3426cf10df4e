"""multinode_llm_cache_upstream_errors_total{kind}: upstream requests that failed (no answer, a cut
body, a 5xx), counted once each, by kind; a healthy or a 4xx answer is no failure. The exposition
is parsed with prometheus_client's parser too: valid text format, the counter typed as one."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable

from multinode_llm_testing.cache import CacheProcess, model_files, raw_request
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo
from multinode_llm_testing.ports import free_port
from prometheus_client.parser import text_string_to_metric_families

SHARD = "model-00001-of-00002.safetensors"


def errors(cache: CacheProcess) -> dict[str, float]:
    """kind -> failures, from the cache's /metrics read by prometheus_client's parser."""
    with urllib.request.urlopen(f"{cache.url}/metrics", timeout=5) as response:
        families = {f.name: f for f in text_string_to_metric_families(response.read().decode())}
    family = families["multinode_llm_cache_upstream_errors"]
    assert family.type == "counter"
    return {sample.labels["kind"]: sample.value for sample in family.samples}


def requests(cache: CacheProcess) -> dict[str, float]:
    values = cache.metrics()
    return {
        kind: values.get(f'upstream_requests_total{{kind="{kind}"}}', 0)
        for kind in ("meta", "blob")
    }


def test_healthy_and_not_found_answers_are_no_upstream_errors(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    repo = fake_hub.add(FakeRepo("org/fine", model_files(seed=90)))
    cache = start_cache()
    assert errors(cache) == {"meta": 0, "blob": 0}  # both kinds from the start
    status, _, _ = raw_request(cache.url, "GET", f"/org/fine/resolve/{repo.commit}/{SHARD}")
    assert status == 200
    status, _, _ = raw_request(cache.url, "GET", "/org/fine/resolve/main/missing.json")
    assert status == 404
    assert requests(cache)["meta"] >= 2
    assert requests(cache)["blob"] >= 1
    assert errors(cache) == {"meta": 0, "blob": 0}


def test_a_5xx_from_upstream_counts_a_meta_error(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    fake_hub.add(FakeRepo("org/down", model_files(seed=91)))
    fake_hub.failing = 503
    cache = start_cache()
    status, _, _ = raw_request(cache.url, "HEAD", "/org/down/resolve/main/config.json")
    assert status == 502
    assert errors(cache) == {"meta": requests(cache)["meta"], "blob": 0}
    assert errors(cache)["meta"] >= 1


def test_cut_blob_bodies_count_a_blob_error_per_attempt(
    fake_hub: FakeHub, start_cache: Callable[..., CacheProcess]
) -> None:
    repo = fake_hub.add(FakeRepo("org/cut", model_files(seed=92)))
    fake_hub.fault(SHARD, "cut")  # every attempt: half the body, then a reset connection
    cache = start_cache()
    status, _, _ = raw_request(cache.url, "GET", f"/org/cut/resolve/{repo.commit}/{SHARD}")
    assert status == 502
    attempts = requests(cache)["blob"]
    assert attempts >= 2  # the fill retried upstream
    assert errors(cache) == {"meta": 0, "blob": attempts}


def test_an_upstream_that_refuses_connections_counts_each_request(
    start_cache: Callable[..., CacheProcess],
) -> None:
    cache = start_cache(upstream=f"http://127.0.0.1:{free_port()}")  # nothing listens there
    status, _, _ = raw_request(cache.url, "GET", "/api/models/org/gone/revision/main")
    assert status == 502
    assert errors(cache) == {"meta": requests(cache)["meta"], "blob": 0}
    assert errors(cache)["meta"] == 1
