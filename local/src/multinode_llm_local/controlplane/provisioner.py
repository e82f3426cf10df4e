"""The cluster's volume provisioner: a folder on this machine for every claim of its StorageClass.

It is an external provisioner as Kubernetes defines one (what nfs-subdir-external-provisioner or
local-path-provisioner are on a real cluster): it watches PersistentVolumeClaims whose class names
``PROVISIONER``, makes a folder under the state directory's ``volumes/`` and creates a
``hostPath`` PersistentVolume for it with the claim's size and access modes, pre-bound to the
claim (``claimRef``); the real PersistentVolume controller of kube-controller-manager does the
binding. Every node shares this machine's disk, so a ReadWriteMany volume is truly shared by pods on
different nodes, as NFS would be. A volume released under ``reclaimPolicy: Delete`` loses its
folder and its object; ``Retain`` keeps both, as the API says.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path

from multinode_llm_local.controlplane.api import Api, ApiError, Obj

log = logging.getLogger("multinode_llm_local.controlplane.provisioner")
PROVISIONER = "multinode-llm.local/host-folder"
STORAGE_CLASS = "local-rwx"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"


class Provisioner:
    def __init__(self, api: Api, volumes: Path) -> None:
        self.api = api
        self.volumes = volumes
        self.classes: dict[str, Obj] = {}

    async def run(self) -> None:
        await asyncio.gather(self._watch_claims(), self._watch_volumes())

    async def _class(self, name: str) -> Obj | None:
        if name not in self.classes:
            found = await self.api.get(f"/apis/storage.k8s.io/v1/storageclasses/{name}")
            if found is None:
                return None
            self.classes[name] = found
        return self.classes[name]

    async def _watch_claims(self) -> None:
        async for kind, claim in self.api.watch("/api/v1/persistentvolumeclaims"):
            if kind == "DELETED" or claim["spec"].get("volumeName"):
                continue
            storage_class = await self._class(claim["spec"].get("storageClassName") or "")
            if storage_class is None or storage_class.get("provisioner") != PROVISIONER:
                continue
            try:
                await self._provision(claim, storage_class)
            except ApiError as error:
                if error.code != 409:  # the volume exists: an earlier event made it
                    log.error("provisioning %s failed: %s", claim["metadata"]["name"], error)

    async def _provision(self, claim: Obj, storage_class: Obj) -> None:
        meta = claim["metadata"]
        name = f"pvc-{meta['uid']}"
        folder = self.volumes / f"{meta['namespace']}-{meta['name']}-{meta['uid'][:8]}"
        folder.mkdir(parents=True, exist_ok=True)
        # Any pod user may write, as on an NFS export (a hostPath volume ignores fsGroup).
        folder.chmod(0o777)
        size = claim["spec"]["resources"]["requests"]["storage"]
        volume = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {PROVISIONED_BY: PROVISIONER}},
            "spec": {
                "capacity": {"storage": size},
                "accessModes": claim["spec"].get("accessModes") or ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": storage_class.get("reclaimPolicy", "Delete"),
                "storageClassName": storage_class["metadata"]["name"],
                "volumeMode": claim["spec"].get("volumeMode", "Filesystem"),
                "hostPath": {"path": str(folder), "type": "Directory"},
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": meta["namespace"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
            },
        }
        await self.api.create("/api/v1/persistentvolumes", volume)
        log.info("provisioned %s for %s/%s at %s", name, meta["namespace"], meta["name"], folder)

    async def _watch_volumes(self) -> None:
        async for kind, volume in self.api.watch("/api/v1/persistentvolumes"):
            annotations = volume["metadata"].get("annotations") or {}
            if kind == "DELETED" or annotations.get(PROVISIONED_BY) != PROVISIONER:
                continue
            released = (volume.get("status") or {}).get("phase") == "Released"
            if released and volume["spec"].get("persistentVolumeReclaimPolicy") == "Delete":
                folder = Path(volume["spec"]["hostPath"]["path"])
                if folder.is_relative_to(self.volumes):
                    shutil.rmtree(folder, ignore_errors=True)
                await self.api.delete(f"/api/v1/persistentvolumes/{volume['metadata']['name']}")
                log.info("deleted %s and its folder %s", volume["metadata"]["name"], folder)
