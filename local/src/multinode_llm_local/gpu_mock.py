"""A FAKE GPU for tests: vLLM's CPU platform, presented to Ray as a GPU platform. Test-only.

vLLM's CPU platform refuses the Ray executor (it has no Ray device key), yet multi-node serving
needs Ray. This vLLM platform plugin (entry point group ``vllm.platform_plugins``, see
local/pyproject.toml) is the CPU platform with ``ray_device_key = "GPU"``: with each Ray node
started with ``--num-gpus N``, vLLM places its workers on those fake GPUs and computes on the CPU
(docs/cpu-groups.md, "The fake GPU").

It activates only when ``MULTINODE_LLM_GPU_MOCK=1`` is in the environment (of every node's
`ray start` and of vLLM); otherwise ``register()`` returns None and vLLM never sees it. Only the
local cluster, the runtime tests and the kind CI values set it; a production pod never does.

Its ranks talk as GPUs on different nodes would: shared memory only inside one pod (vLLM's CPU
communicator otherwise assumes every rank of a tensor- or pipeline-parallel group shares one
/dev/shm, which pods on a cluster, and in the local cluster, do not), torch.distributed over the
pod network between pods, as NCCL would go over the network.

The classes are built on first access (module ``__getattr__``), so loading this module to ask
``register()`` imports nothing of vLLM.
"""

from __future__ import annotations

import os
from typing import Any

ENV = "MULTINODE_LLM_GPU_MOCK"
# Set by the local cluster for mp pods only: the pod's GPU count, which the platform reports as its
# device count. vLLM's mp executor tells the ranks of one node by ``rank // device_count()``
# (MessageQueue.create_from_process_group_single_reader), and the CPU platform counts one device,
# so with TP 2 the head's second rank would take itself for another node's and vLLM fails to
# start. The Ray path keeps the CPU platform's count (Ray's placement reads it).
DEVICES_ENV = "MULTINODE_LLM_GPU_MOCK_DEVICES"
PLATFORM = f"{__name__}.GpuMockPlatform"
COMMUNICATOR = f"{__name__}.PodLocalCommunicator"


def register() -> str | None:
    """vLLM's platform plugin hook: the platform's qualified name when activated, else None."""
    return PLATFORM if os.environ.get(ENV) == "1" else None


def __getattr__(name: str) -> Any:
    if name == "GpuMockPlatform":
        from vllm.platforms.cpu import CpuPlatform  # only vLLM, once activated, gets here

        members: dict[str, Any] = {
            "ray_device_key": "GPU",
            "get_device_communicator_cls": classmethod(lambda cls: COMMUNICATOR),
            "__doc__": "vLLM's CPU platform, with Ray GPUs as its devices (FAKE).",
        }
        devices = os.environ.get(DEVICES_ENV, "")
        if devices.isdigit() and int(devices) > 0:
            members["device_count"] = classmethod(lambda cls: int(devices))
        built: Any = type("GpuMockPlatform", (CpuPlatform,), members)
    elif name == "PodLocalCommunicator":
        built = _pod_local_communicator()
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = built
    return built


def _pod_local_communicator() -> Any:
    """vLLM's CPU communicator, with shared memory only when all ranks of a group share a pod."""
    import socket

    import torch
    from vllm.distributed.device_communicators.cpu_communicator import CpuCommunicator

    class PodLocalCommunicator(CpuCommunicator):  # type: ignore[misc,unused-ignore]
        def _all_group_ranks_share_shm_group_name(self) -> bool:
            # A pod's hostname is its name: ranks on several hosts must not use shared memory.
            hosts: list[str] = [""] * self.world_size
            torch.distributed.all_gather_object(
                hosts, socket.gethostname(), group=self.device_group
            )
            return len(set(hosts)) == 1 and bool(super()._all_group_ranks_share_shm_group_name())

    return PodLocalCommunicator
