"""The pod's network as vLLM's collectives need it: its address and the interface that carries it.

Multi-node vLLM must be told which address and interface to use: without ``VLLM_HOST_IP`` and
``GLOO_SOCKET_IFNAME`` gloo binds 127.0.0.1 and start-up hangs, and the accelerator's collective
library (NCCL, RCCL, HCCL: the variables the chart names in ``MULTINODE_LLM_SOCKET_IFNAME_ENV``) may
pick a wrong interface. All are derived from ``POD_IP``; values already in the environment win (the
chart may set them).
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from collections.abc import Mapping

from multinode_llm.accelerator import Accelerator

_SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address


def interface_for(ip: str) -> str | None:
    """The name of the network interface holding ``ip``, or None if no interface has it."""
    if ipaddress.ip_address(ip).version != 4:
        return None  # the ioctl below is IPv4-only; IPv6 pods keep NCCL/gloo's own choice
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _index, name in socket.if_nameindex():
            try:
                request = struct.pack("256s", name.encode()[:15])
                answer = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request)
            except OSError:
                continue  # an interface without an IPv4 address
            if socket.inet_ntoa(answer[20:24]) == ip:
                return name
    return None


def collective_env(pod_ip: str, env: Mapping[str, str]) -> dict[str, str]:
    """The variables vLLM and Ray's workers need to talk over the pod's own address."""
    derived = {"VLLM_HOST_IP": pod_ip}
    interface = interface_for(pod_ip)
    if interface is not None:
        derived["GLOO_SOCKET_IFNAME"] = interface
        for name in Accelerator.from_env(env).socket_ifname_env:
            derived[name] = interface
    return {name: env.get(name) or value for name, value in derived.items()}
