"""The cluster's certificates and keys, made here with openssl (as kubeadm makes them).

One CA signs everything: the API server's serving certificate, a client certificate per control
plane identity (``admin`` in ``system:masters``, the controller manager, the scheduler, kube-proxy,
each node as ``system:node:NAME``), and the serving certificates of the webhooks that cert-manager
would issue on a real cluster (KServe's). The service-account key pair signs the tokens the API
server hands to pods. Keys never leave the state directory, which only root can read.
"""

from __future__ import annotations

import base64
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

CA_DAYS = 3650
# A new P-256 key, unencrypted (the state directory is root's alone), for `openssl req`.
NEW_EC_KEY = ("-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256")
LEAF_DAYS = 365


@dataclass(frozen=True)
class Pair:
    """A certificate and its key, as files."""

    cert: Path
    key: Path


class Pki:
    """The certificates of one cluster, in ``directory`` (made on first use, reused after)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    @property
    def ca(self) -> Pair:
        pair = Pair(self.directory / "ca.crt", self.directory / "ca.key")
        if not pair.cert.exists():
            _openssl(
                "req",
                "-x509",
                *NEW_EC_KEY,
                "-keyout",
                str(pair.key),
                "-out",
                str(pair.cert),
                "-days",
                str(CA_DAYS),
                "-subj",
                "/CN=multinode-llm-local-ca",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            )
        return pair

    def issue(
        self,
        name: str,
        common_name: str,
        organizations: Sequence[str] = (),
        ips: Sequence[str] = (),
        dns: Sequence[str] = (),
    ) -> Pair:
        """A leaf certificate for client and server use, signed by the CA (reused if present)."""
        pair = Pair(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        if pair.cert.exists():
            return pair
        ca = self.ca
        subject = "".join(f"/O={org}" for org in organizations) + f"/CN={common_name}"
        names = [f"IP:{ip}" for ip in ips] + [f"DNS:{d}" for d in dns]
        extensions = [
            "basicConstraints=critical,CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            "extendedKeyUsage=serverAuth,clientAuth",
        ]
        if names:
            extensions.append("subjectAltName=" + ",".join(names))
        with tempfile.TemporaryDirectory() as tmp:
            csr, ext = Path(tmp, "csr.pem"), Path(tmp, "ext.cnf")
            ext.write_text("\n".join(extensions) + "\n")
            _openssl(
                "req",
                "-new",
                *NEW_EC_KEY,
                "-keyout",
                str(pair.key),
                "-out",
                str(csr),
                "-subj",
                subject,
            )
            _openssl(
                "x509",
                "-req",
                "-in",
                str(csr),
                "-CA",
                str(ca.cert),
                "-CAkey",
                str(ca.key),
                "-CAcreateserial",
                "-days",
                str(LEAF_DAYS),
                "-out",
                str(pair.cert),
                "-extfile",
                str(ext),
            )
        return pair

    def service_account_keys(self) -> Pair:
        """The RSA key pair the API server signs and verifies service-account tokens with
        (``cert`` is the public key)."""
        pair = Pair(self.directory / "sa.pub", self.directory / "sa.key")
        if not pair.key.exists():
            _openssl(
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
                "-out",
                str(pair.key),
            )
            _openssl("pkey", "-in", str(pair.key), "-pubout", "-out", str(pair.cert))
        return pair

    def kubeconfig(self, name: str, server: str, pair: Pair) -> Path:
        """A kubeconfig for ``server`` that authenticates with ``pair``, written once."""
        path = self.directory / f"{name}.kubeconfig"
        if not path.exists():
            path.write_text(yaml.safe_dump(kubeconfig(server, self.ca.cert, pair, name)))
            path.chmod(0o600)
        return path


def kubeconfig(server: str, ca: Path, pair: Pair, user: str) -> dict[str, object]:
    """A kubeconfig with the certificates inline, so that it can be copied anywhere."""

    def inline(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {"server": server, "certificate-authority-data": inline(ca)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": inline(pair.cert),
                    "client-key-data": inline(pair.key),
                },
            }
        ],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)
