"""KServe's storage initializer of each release, asked to stage into a nested folder of a fresh
volume (``models/ORG/NAME/REVISION``, what the chart's download Job once asked it): 0.15.0 to
0.18.1 create the target with one os.mkdir (``makesParents: false`` in kserve-releases.yaml) and
fail; 0.19.0 creates the parents. The chart's Job now stages with `multinode-llm stage`
(tests/staging), which makes its own folders; this keeps the finding and the table honest.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from multinode_llm_testing.cache import assert_same_files, model_files
from multinode_llm_testing.fake_hub import FakeHub, FakeRepo
from multinode_llm_testing.job_pod import initializer_env, model_files_in
from multinode_llm_testing.storage_sites import Release, Site, releases

from tests.storage.test_releases import by_version, initialize, site_once

RELEASES = releases()


@pytest.mark.parametrize("release", RELEASES, ids=by_version)
def test_a_nested_target_on_a_fresh_volume_works_exactly_where_the_table_says(
    storage_sites: dict[str, Site], fake_hub: FakeHub, tmp_path: Path, release: Release
) -> None:
    site = site_once(storage_sites, release)
    files = model_files(seed=61, shard_size=1 << 20)
    fake_hub.add(FakeRepo("org/model", files))
    volume = tmp_path / "volume"
    volume.mkdir()
    target = volume / "models" / "org" / "model" / "main"
    env = initializer_env(site, fake_hub.url, tmp_path / "tmp")

    result = initialize(site, "hf://org/model", target, env)
    if release.makes_parents:
        assert result.returncode == 0, result.stderr[-3000:]
        assert_same_files(target, files)
    else:
        assert result.returncode != 0, f"KServe {release.version} created the target's parents"
        assert "FileNotFoundError" in result.stderr or "No such file" in result.stderr
        assert model_files_in(volume) == []
        assert fake_hub.blob_gets.total() == 0
