"""The real cluster's pure parts: module pins, image stand-ins, releases, projected volumes."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import cast

import pytest
from multinode_llm.errors import UserError
from multinode_llm_local.controlplane import build, certmanager, kserve, llmisvc, node, runtime
from multinode_llm_local.controlplane.api import Api
from multinode_llm_local.controlplane.network import ClusterNetwork
from multinode_llm_local.controlplane.pki import Pki
from multinode_llm_local.kserve import releases
from multinode_llm_local.pods import PodIdentity, plan_pod

ROOT = Path(__file__).resolve().parents[2]


def test_every_module_names_what_it_builds_and_pins_it() -> None:
    modules = build.modules(ROOT / "local" / "go")
    assert {"kubernetes", "etcd", "coredns", "kube-rbac-proxy"} <= set(modules)
    assert modules["kubernetes"].tools() == [
        "k8s.io/kubernetes/cmd/kube-apiserver",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-proxy",
        "k8s.io/kubernetes/cmd/kube-scheduler",
    ]
    for module in modules.values():
        assert (module.directory / "go.sum").is_file(), f"{module.name} has no go.sum"


def test_kubernetes_staging_modules_are_pinned_to_its_own_minor() -> None:
    module = build.modules(ROOT / "local" / "go")["kubernetes"]
    version = module.required("k8s.io/kubernetes")
    assert version.startswith("v1.")
    text = module.text()
    assert f"k8s.io/api => k8s.io/api v0{version[2:]}" in text
    assert f"k8s.io/client-go => k8s.io/client-go v0{version[2:]}" in text


def test_kubernetes_programs_are_stamped_with_their_version() -> None:
    module = build.modules(ROOT / "local" / "go")["kubernetes"]
    version = module.required("k8s.io/kubernetes")
    flags = module.ldflags()
    assert f"k8s.io/component-base/version.gitVersion={version}" in flags
    assert "-s -w" in flags
    assert "gitVersion" not in build.modules(ROOT / "local" / "go")["etcd"].ldflags()


def test_a_build_key_changes_with_the_module_and_the_go_version(tmp_path: Path) -> None:
    folder = tmp_path / "thing"
    folder.mkdir()
    (folder / "go.mod").write_text("module x\n\ngo 1.26.0\n\ntool example.com/x/cmd/x\n")
    module = build.Module(folder)
    assert module.tools() == ["example.com/x/cmd/x"]
    first = module.key("go1.26.8")
    assert module.key("go1.26.9") != first
    (folder / "go.sum").write_text("example.com/x v1.0.0 h1:abc=\n")
    assert module.key("go1.26.8") != first


def test_a_module_without_tools_is_refused(tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text("module x\n\ngo 1.26.0\n")
    with pytest.raises(UserError, match="names no `tool`"):
        build.Module(tmp_path).tools()


def test_each_built_kserve_release_is_one_of_the_chart_table() -> None:
    built = kserve.built_versions()
    assert releases.default().version in built
    assert set(built) <= set(releases.versions())
    refused = kserve.unserved()
    assert not set(built) & set(refused)
    assert set(built) | set(refused) == set(releases.versions())


def test_a_release_the_proxy_refused_is_refused_with_the_proxy_answer() -> None:
    refused = kserve.unserved()
    if not refused:
        pytest.skip("the proxy served every release")
    version = sorted(refused)[0]
    with pytest.raises(
        UserError, match=rf"github\.com/kserve/kserve@v{re.escape(version)}.*releases built here"
    ):
        kserve.resolve(version)


def test_own_images_run_from_this_machine_and_go_images_from_their_builds(tmp_path: Path) -> None:
    program = tmp_path / "build-1" / "manager"
    program.parent.mkdir()
    program.write_bytes(b"\x7fELF")
    programs = {"manager": str(program)}
    own = runtime.resolve("ghcr.io/multinode-llm/multinode-llm:0.1.0", programs, "0.19.0", tmp_path)
    assert own.rootfs == ""
    assert own.entrypoint == ("multinode-llm",)
    manager = runtime.resolve("kserve/kserve-controller:v0.19.0", programs, "0.19.0", tmp_path)
    assert manager.entrypoint == ("/manager",)
    assert manager.user == 65532
    assert (Path(manager.rootfs) / "manager").read_bytes() == b"\x7fELF"


def test_an_image_without_a_stand_in_fails_as_a_pull_would(tmp_path: Path) -> None:
    with pytest.raises(runtime.ImageUnavailableError, match="busybox"):
        runtime.resolve("busybox:1.36", {}, "0.19.0", tmp_path)
    with pytest.raises(runtime.ImageUnavailableError, match=r"KServe 0\.19\.0"):
        runtime.resolve("kserve/kserve-controller:v0.15.2", {"manager": "/x"}, "0.19.0", tmp_path)


def test_an_image_a_test_provides_runs_as_its_stand_in_at_that_tag_only(tmp_path: Path) -> None:
    """A stand-in a test provides (the storage initializer's) is what the agents run for exactly
    that reference, with its environment and folders; another tag still fails as a pull."""
    image = "docker.io/kserve/storage-initializer:v0.19.0"
    stand_in = runtime.Image("", ("/usr/bin/python3", "-S", "run.py"), None, {"A": "1"}, ("/site",))
    runtime.provide(tmp_path, image, stand_in)
    runtime.provide(tmp_path, "example.org/other:1", runtime.Image("", ("true",)))
    provided = runtime.provided(tmp_path)
    assert provided[image] == stand_in
    assert runtime.resolve(image, {}, "0.19.0", tmp_path, stand_ins=provided) == stand_in
    with pytest.raises(runtime.ImageUnavailableError, match=r"storage-initializer:v0\.19\.0"):
        runtime.resolve(image.replace("v0.19.0", "v0.17.0"), {}, "0.19.0", tmp_path, "", provided)


def test_a_provided_images_environment_comes_first_and_the_pods_wins(tmp_path: Path) -> None:
    image = runtime.Image("", ("run",), None, {"LANG": "C.UTF-8", "HOME": "/image"}, ("/site",))
    identity = PodIdentity("p", "llm", "10.235.0.2", "mnk-px", "", {}, {}, tmp_path, 0)
    spec = {"containers": [{"name": "c", "command": ["run"],
                            "env": [{"name": "HOME", "value": "/tmp"}]}]}  # fmt: skip
    plan = plan_pod(identity, spec, [], {})
    [container] = node._with_roots(plan, {"c": image}).containers
    assert (container.env["LANG"], container.env["HOME"]) == ("C.UTF-8", "/tmp")
    assert container.image_paths == ["/site"]


def test_leader_worker_sets_manager_runs_from_its_build_at_the_pinned_tag(tmp_path: Path) -> None:
    program = tmp_path / "lws-1" / "cmd"
    program.parent.mkdir()
    program.write_bytes(b"\x7fELF")
    programs = {"lws": str(program)}
    image = runtime.resolve(
        "registry.k8s.io/lws/lws:v0.9.0", programs, "0.19.0", tmp_path, "v0.9.0"
    )
    assert (image.entrypoint, image.user) == (("/manager",), 65532)
    assert (Path(image.rootfs) / "manager").read_bytes() == b"\x7fELF"
    with pytest.raises(runtime.ImageUnavailableError, match=r"LeaderWorkerSet v0\.9\.0"):
        runtime.resolve("registry.k8s.io/lws/lws:v0.8.0", programs, "0.19.0", tmp_path, "v0.9.0")


def test_the_cert_manager_stand_in_issues_each_certificate_and_injects_its_ca(
    tmp_path: Path,
) -> None:
    """LWS's chart (cert-manager mode) renders an empty Secret of the Certificate's name and no
    inject annotation: the stand-in replaces the one and, asked to, injects the CA anyway."""
    certificate = {
        "kind": "Certificate",
        "metadata": {"name": "serving-cert", "namespace": "lws-system"},
        "spec": {"secretName": "webhook-cert", "dnsNames": ["svc.lws-system.svc"]},
    }
    empty = {"kind": "Secret", "metadata": {"name": "webhook-cert", "namespace": "lws-system"}}
    webhook = {"kind": "MutatingWebhookConfiguration", "metadata": {"name": "m"}, "webhooks": [{}]}
    issuer = {"kind": "Issuer", "metadata": {"name": "self"}}
    pki = Pki(tmp_path / "pki")
    out = certmanager.stand_in([certificate, empty, webhook, issuer], pki, "lws-system", True)
    assert [o["kind"] for o in out] == ["Secret", "MutatingWebhookConfiguration"]
    assert out[0]["type"] == "kubernetes.io/tls"
    assert "tls.key" in out[0]["data"]
    assert out[1]["webhooks"][0]["clientConfig"]["caBundle"]
    untouched = certmanager.stand_in([webhook | {"webhooks": [{}]}], pki, "lws-system")
    assert "clientConfig" not in untouched[0]["webhooks"][0]


def test_the_network_keeps_its_addresses_apart() -> None:
    network = ClusterNetwork()
    assert network.bridge_ip == "10.235.255.254"
    assert network.kubernetes_service_ip == "10.236.0.1"
    assert network.dns_ip == "10.236.0.10"
    assert (network.root_ip, network.uplink_ip) == ("10.237.0.1", "10.237.0.2")
    assert network.pod_namespace("12345678-aaaa-bbbb") == "mnk-p12345678aaaabbbb"


def test_a_projected_service_account_volume_holds_token_ca_and_namespace(tmp_path: Path) -> None:
    identity = PodIdentity(
        name="p",
        namespace="llm",
        ip="10.235.0.2",
        netns="mnk-px",
        role="",
        labels={},
        annotations={},
        directory=tmp_path,
        gpus=0,
        uid="u-1",
        node_name="node-0",
        token="the-token",
    )
    spec = {
        "containers": [
            {
                "name": "c",
                "command": ["true"],
                "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/sa"}],
            }
        ],
        "volumes": [
            {
                "name": "kube-api-access",
                "projected": {
                    "defaultMode": 0o644,
                    "sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                        {
                            "configMap": {
                                "name": "kube-root-ca.crt",
                                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                            }
                        },
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "namespace",
                                        "fieldRef": {"fieldPath": "metadata.namespace"},
                                    }
                                ]
                            }
                        },
                    ],
                },
            }
        ],
    }
    ca = {"kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": "CA"}}
    plan_pod(identity, spec, [ca], {})
    folder = tmp_path / "volumes" / "kube-api-access"
    assert (folder / "token").read_text() == "the-token"
    assert (folder / "ca.crt").read_text() == "CA"
    assert (folder / "namespace").read_text() == "llm"


def _agent() -> node.NodeAgent:
    info = {"cpus_per_node": 8, "memory_per_node": "32Gi", "gpus_per_node": 2,
            "kubernetes": "v1.37.2"}  # fmt: skip
    # no API server: these tests only hand out and free pod addresses
    agent = node.NodeAgent(api=cast(Api, None), name="node-0", info=info, network=ClusterNetwork(),
                           state_dir=Path("/nonexistent"))  # fmt: skip
    agent.pod_cidr = ipaddress.IPv4Network("10.235.3.0/24")
    return agent


def test_addresses_go_round_the_pod_cidr_and_are_freed_only_by_their_pod() -> None:
    agent = _agent()
    first = agent.allocate_ip("pod-a")
    assert first == "10.235.3.2"  # .1 is the node's gateway by convention
    agent.release_ip(first, "pod-a")
    second = agent.allocate_ip("pod-b")
    assert second == "10.235.3.3"  # a just-freed address is not handed out again at once
    agent.release_ip(second, "pod-a")  # a finished pod that once had it frees nothing now
    assert agent.addresses[second] == "pod-b"


def test_a_full_pod_cidr_is_refused_naming_the_node() -> None:
    agent = _agent()
    agent.pod_cidr = ipaddress.IPv4Network("10.235.3.0/30")  # hosts .1 and .2: one for pods
    agent.allocate_ip("pod-a")
    with pytest.raises(UserError, match=r"node-0's podCIDR 10\.235\.3\.0/30 is full"):
        agent.allocate_ip("pod-b")


def test_a_node_advertises_its_mocked_gpus() -> None:
    assert _agent().capacity()["nvidia.com/gpu"] == "2"


def test_kserves_llmisvc_controller_runs_from_its_build_at_its_release_only(
    tmp_path: Path,
) -> None:
    """Its tag is the manager's release, the one its module (local/go/llmisvc-vX.Y.Z) builds."""
    program = tmp_path / "llmisvc-1" / "llmisvc"
    program.parent.mkdir()
    program.write_bytes(b"\x7fELF")
    programs = {"llmisvc": str(program)}
    image = runtime.resolve(
        "kserve/llmisvc-controller:v0.17.0", programs, "0.17.0", tmp_path,
        llmisvc_version="v0.17.0",
    )  # fmt: skip
    assert (image.entrypoint, image.user) == (("/manager",), 65532)
    assert (Path(image.rootfs) / "manager").read_bytes() == b"\x7fELF"
    with pytest.raises(runtime.ImageUnavailableError, match=r"llmisvc controller v0\.17\.0"):
        runtime.resolve(
            "kserve/llmisvc-controller:v0.19.0", programs, "0.17.0", tmp_path,
            llmisvc_version="v0.17.0",
        )  # fmt: skip
    with pytest.raises(runtime.ImageUnavailableError, match="llmisvc controller not built"):
        runtime.resolve("kserve/llmisvc-controller:v0.16.0", programs, "0.16.0", tmp_path)


def test_a_modules_family_is_its_folder_less_the_release() -> None:
    found = build.modules(ROOT / "local" / "go")
    assert found["kserve-v0.19.0"].family == "kserve"
    assert found["llmisvc-v0.19.0"].family == "llmisvc"
    assert found["kube-rbac-proxy"].family == "kube-rbac-proxy"
    assert (
        build.release_module("llmisvc", "v0.19.0", ROOT / "local" / "go")
        == found["llmisvc-v0.19.0"]
    )
    assert build.release_module("llmisvc", "0.15.2", ROOT / "local" / "go") is None


def test_each_llmisvc_controller_is_built_at_a_release_whose_manager_is() -> None:
    """One module per release with LLMInferenceService (0.16.0 on), each pinning KServe at its
    own release, beside that release's manager module."""
    built = llmisvc.built_versions()
    assert built, "no local/go/llmisvc-v*: hack/go-modules.py kserve writes them"
    assert set(built) <= set(kserve.built_versions())
    assert all(releases.get(v).llm_inference_service is not None for v in built)
    for version in built:
        module = llmisvc.module(version)
        assert module is not None
        assert llmisvc.version(module) == f"v{version}"
        assert "github.com/kserve/kserve/cmd/llmisvc" in module.tools()


def test_a_release_without_an_llmisvc_controller_is_refused_naming_those_built() -> None:
    with pytest.raises(UserError, match=r"not built here at 0\.15\.2.*--kserve-version one of"):
        llmisvc.required_module("0.15.2")


def test_a_release_without_llm_inference_service_is_refused_naming_those_with_it() -> None:
    assert releases.llm_inference_service("0.16.0").api_version == "serving.kserve.io/v1alpha1"
    with pytest.raises(UserError, match=r"KServe 0\.15\.2 has no LLMInferenceService.*0\.16\.0"):
        releases.llm_inference_service("0.15.2")
