"""The models read the real renders as Helm and Argo CD do: checked against Helm 4's own release
record where one exists without a cluster, and stated for Argo CD object by object."""

from __future__ import annotations

import pytest
import yaml
from multinode_llm_testing import chartlib

from tests.lifecycle import argo_model
from tests.lifecycle.charts import CHARTS, component, release_record, render
from tests.lifecycle.cluster import Doc
from tests.lifecycle.helm_model import sort_manifests


@pytest.mark.parametrize("uri", ["hf://Qwen/Qwen2.5-0.5B-Instruct", "pvc://models/qwen"])
@pytest.mark.parametrize("which", CHARTS)
def test_the_hook_split_is_helms_own(which: str, uri: str) -> None:
    """``helm install --dry-run=client -o json`` (Helm 4; Helm 3's needs a cluster) returns the
    release as Helm would store it: its hooks (events, weight, delete policies) and its manifest,
    in Helm's order. helm_model.sort_manifests must agree, on each chart."""
    if not chartlib.helm("helm4").exists():
        pytest.skip("helm4 missing: run `bash hack/install-tools.sh`")
    values = {"model": {"uri": uri}}
    record = release_record(which, values)
    hooks, manifest = sort_manifests(render("helm4", which, values))
    assert [(h.kind, h.name, h.events, h.weight, h.delete_policies) for h in hooks] == [
        (
            h["kind"],
            h["name"],
            tuple(h["events"]),
            h.get("weight", 0),
            tuple(h.get("delete_policies") or ()),
        )
        for h in record["hooks"]
    ]
    recorded = [d for d in yaml.safe_load_all(record["manifest"]) if d]
    assert [(d["kind"], d["metadata"]["name"]) for d in manifest] == [
        (d["kind"], d["metadata"]["name"]) for d in recorded
    ]


def argo_view(doc: Doc) -> tuple[bool, list[str], int, list[str], str | None, str | None]:
    """What Argo CD reads off one object: hook, phases, wave, delete policies, Prune, Delete."""
    return (
        argo_model.is_hook(doc),
        argo_model.sync_phases(doc),
        argo_model.wave(doc),
        argo_model.delete_policies(doc) if argo_model.is_hook(doc) else [],
        argo_model.option(doc, argo_model.SYNC_OPTIONS, "Prune"),
        argo_model.option(doc, argo_model.SYNC_OPTIONS, "Delete"),
    )


def test_what_argo_cd_makes_of_each_chart(major: str) -> None:
    """The volume, the download and the helm test Pod as Argo CD sees them: the old chart's
    volume is a PreSync hook deleted on failure; the new one an ordinary object it never prunes or
    deletes; the test Pod (helm.sh/hook: test) is in no phase, so Argo CD never applies it."""
    old, new = render(major, "old"), render(major, "new")
    assert argo_view(component(old, "PersistentVolumeClaim", "model-volume")) == (
        True, ["PreSync"], -5, ["HookFailed"], None, None
    )  # fmt: skip
    # DeletePolicies appends the Helm annotation's policies to Argo CD's own, without dropping
    # repeats: the old Job names BeforeHookCreation twice.
    assert argo_view(component(old, "Job", "model-download")) == (
        True, ["PreSync"], -5, ["BeforeHookCreation"] * 2, None, None
    )  # fmt: skip
    assert argo_view(component(new, "PersistentVolumeClaim", "model-volume")) == (
        False, ["Sync"], -1, [], "false", "false"
    )  # fmt: skip
    assert argo_view(component(new, "Job", "model-download")) == (
        False, ["Sync"], -1, [], None, None
    )  # fmt: skip
    for docs in (old, new):
        [test_pod] = [d for d in docs if d["kind"] == "Pod"]
        assert argo_model.is_hook(test_pod)
        assert argo_model.sync_phases(test_pod) == []
