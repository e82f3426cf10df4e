"""local/images.py's pure parts: which repository an image reference names, and a plan that runs
from an image surviving the kubelet's JSON round trip."""

from __future__ import annotations

import pytest
from multinode_llm_local.images import repository
from multinode_llm_local.pods import ContainerPlan, Mount, PodPlan


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("ghcr.io/multinode-llm/multinode-llm:0.1.0", "ghcr.io/multinode-llm/multinode-llm"),
        (
            "ghcr.io/multinode-llm/multinode-llm:0.1.0-cpu@sha256:ab",
            "ghcr.io/multinode-llm/multinode-llm",
        ),
        (
            "127.0.0.1:5000/multinode-llm/multinode-llm-cache:0.1.0",
            "127.0.0.1:5000/multinode-llm/multinode-llm-cache",
        ),
        ("127.0.0.1:5000/cache", "127.0.0.1:5000/cache"),
        ("python", "python"),
    ],
)
def test_repository_drops_tag_and_digest_not_the_registry_port(
    reference: str, expected: str
) -> None:
    assert repository(reference) == expected


def test_image_fields_survive_the_plan_round_trip() -> None:
    container = ContainerPlan(
        name="kserve-container",
        argv=["multinode-llm", "head"],
        env={"PATH": "/usr/local/bin:/usr/bin"},
        workdir="/",
        uid=1000,
        gid=1000,
        groups=[1000],
        no_new_privs=True,
        drop_capabilities=True,
        read_only_root=True,
        mounts=[Mount(target="/tmp", kind="tmpfs")],
        image="ghcr.io/multinode-llm/multinode-llm:0.1.0-cpu",
        rootfs="/var/lib/containers/storage/overlay/x/merged",
        working_container="p-head-kserve-container",
    )
    pod = PodPlan(
        name="head",
        namespace="ns",
        role="head",
        netns="p-1",
        ip="10.0.0.2",
        labels={},
        containers=[container],
        grace=30,
        gpus=1,
        directory="/run/p/head",
    )
    assert PodPlan.from_json(pod.to_json()) == pod
