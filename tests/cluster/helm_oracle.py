"""tests/lifecycle's Helm model as a checked oracle: it takes the steps a real Helm took on the
real cluster, with the same renders, and must then agree with it on the release's history and on
the objects that carry the release's Helm stamp (test_lifecycle.py, test_migration.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from realcluster import Obj, RealCluster, helm_history

from tests.lifecycle.cluster import FakeCluster
from tests.lifecycle.helm_model import RELEASE_NAME, Helm

# The kinds whose objects are compared even when the model holds none of them (after uninstall).
KINDS = {"InferenceService", "ServingRuntime", "Job", "NetworkPolicy", "PersistentVolumeClaim"}


@dataclass
class Modelled:
    """The model of one Helm major and one release, taking the real steps on its fake cluster."""

    helm: int
    namespace: str
    release: str
    cluster: FakeCluster = field(default_factory=FakeCluster)
    client: Helm = field(init=False)

    def __post_init__(self) -> None:
        self.client = Helm(self.cluster, f"helm{self.helm}")

    def rendered(self, cluster: RealCluster, chart: Path, args: Sequence[str]) -> list[Obj]:
        """``helm template`` of what a real step sends: the documents the model is given."""
        found = cluster.helm("template", self.release, str(chart), "--namespace", self.namespace,
                             *args, version=self.helm)  # fmt: skip
        return [doc for doc in yaml.safe_load_all(found.stdout) if doc]

    def step(self, act: Callable[[Helm], object]) -> None:
        act(self.client)
        self.cluster.settle()

    def history(self) -> list[str]:
        return [r.status for r in self.client.history.get((self.namespace, self.release), [])]

    def managed(self) -> set[tuple[str, str]]:
        """(kind, name) of every object of the release the model holds (Helm's stamp on it)."""
        return {
            (key.kind, key.name)
            for key, live in self.cluster.objects.items()
            if key.namespace == self.namespace
            and live.annotations.get(RELEASE_NAME) == self.release
        }


def agree(model: Modelled, cluster: RealCluster, released: bool = True) -> None:
    """The model and the real cluster after the same step: the same release history (``helm
    history``) and the same objects carrying the release's Helm stamp, of every kind either has."""
    real = helm_history(cluster, model.release, model.namespace, model.helm) if released else []
    assert real == model.history()
    kinds = {kind for kind, _ in model.managed()} | KINDS
    live = cluster.items(",".join(sorted(kinds)), "-n", model.namespace)
    stamped = {(o["kind"], o["metadata"]["name"]) for o in live if _stamped(o, model.release)}
    assert stamped == model.managed()


def _stamped(obj: Obj, release: str) -> bool:
    """Whether Helm stamped ``obj`` as the release's; KServe copies the stamp into what it makes,
    which has an owner."""
    annotations = obj["metadata"].get("annotations") or {}
    return annotations.get(RELEASE_NAME) == release and not obj["metadata"].get("ownerReferences")
