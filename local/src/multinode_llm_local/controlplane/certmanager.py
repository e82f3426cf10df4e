"""What cert-manager would do for the controllers this cluster installs from their own charts.

KServe's and LeaderWorkerSet's charts ask cert-manager for a ``Certificate`` of their webhook
Service and for its CA in the webhook configurations (and CRD conversion webhooks). Here
``pki.py`` issues each certificate into the Secret it names, and the CA bundle is written where
cert-manager's cainjector would write it. The ``Certificate`` and ``Issuer`` objects themselves are
left out: their CRDs are cert-manager's, which this cluster does not run.
"""

from __future__ import annotations

import base64
from typing import Any

from multinode_llm_local.controlplane.pki import Pki

Obj = dict[str, Any]
KINDS = ("Certificate", "Issuer", "ClusterIssuer")
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
INJECT_ANNOTATION = "cert-manager.io/inject-ca-from"


def stand_in(objects: list[Obj], pki: Pki, namespace: str, inject_all: bool = False) -> list[Obj]:
    """``objects`` with each Certificate replaced by the Secret cert-manager would write and the
    CA bundle injected: into the objects that ask for it, or every webhook with ``inject_all``
    (a chart that relies on its controller's own injection, as LeaderWorkerSet's)."""
    certificates = [o for o in objects if o["kind"] == "Certificate"]
    secrets = [serving_secret(pki, c, namespace) for c in certificates]
    names = {s["metadata"]["name"] for s in secrets}
    ca_bundle = base64.b64encode(pki.ca.cert.read_bytes()).decode()
    kept = [
        with_ca_bundle(o, ca_bundle, inject_all)
        for o in objects
        if o["kind"] not in KINDS and not (o["kind"] == "Secret" and _name(o) in names)
    ]
    return [*secrets, *kept]


def serving_secret(pki: Pki, certificate: Obj, namespace: str) -> Obj:
    """What cert-manager would write for ``certificate``: a TLS Secret signed by the CA."""
    spec = certificate["spec"]
    name = spec["secretName"]
    dns = list(spec.get("dnsNames") or [])
    pair = pki.issue(f"webhook-{name}", spec.get("commonName") or dns[0], dns=dns)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {
            "name": name,
            "namespace": certificate["metadata"].get("namespace", namespace),
        },
        "data": {
            "tls.crt": base64.b64encode(pair.cert.read_bytes()).decode(),
            "tls.key": base64.b64encode(pair.key.read_bytes()).decode(),
            "ca.crt": base64.b64encode(pki.ca.cert.read_bytes()).decode(),
        },
    }


def with_ca_bundle(obj: Obj, ca_bundle: str, inject_all: bool = False) -> Obj:
    """The object with the CA where cert-manager's cainjector puts it (webhooks, conversion)."""
    annotations = obj.get("metadata", {}).get("annotations") or {}
    if not inject_all and INJECT_ANNOTATION not in annotations:
        return obj
    if obj["kind"] in WEBHOOK_KINDS:
        for webhook in obj.get("webhooks") or []:
            webhook.setdefault("clientConfig", {})["caBundle"] = ca_bundle
    if obj["kind"] == "CustomResourceDefinition":
        conversion = obj.get("spec", {}).get("conversion", {}).get("webhook")
        if conversion:
            conversion.setdefault("clientConfig", {})["caBundle"] = ca_bundle
    return obj


def _name(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("name", ""))
