"""Real kubectl against a cluster of this package: the one client the control plane's add-ons
(KServe, its llmisvc controller, LeaderWorkerSet, Argo CD) and the cluster itself apply and wait
with."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from multinode_llm.errors import UserError

from multinode_llm_local.chart import find_chart


class Kubectl:
    """Real kubectl against the cluster (``.tools/bin/kubectl``, hack/install-tools.sh)."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        tools = find_chart().resolve().parent.parent / ".tools" / "bin" / "kubectl"
        found = os.environ.get("KUBECTL") or (str(tools) if tools.exists() else None)
        found = found or shutil.which("kubectl")
        if not found:
            raise UserError("kubectl was not found: run `bash hack/install-tools.sh`")
        self.path = found

    def run(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        result = subprocess.run(
            [self.path, "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise UserError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()[-2000:]}")
        return result.stdout

    def apply(self, manifests: str, namespace: str = "") -> None:
        """Server-side apply; ``namespace`` goes to namespaced objects that name none, as helm
        install puts a chart's objects into its release's namespace."""
        where = ["--namespace", namespace] if namespace else []
        self.run("apply", "--server-side", "--force-conflicts", *where, "-f", "-", stdin=manifests)

    def wait_for(self, kind: str, name: str, condition: str, timeout: float) -> None:
        self.run(
            "wait",
            kind,
            name,
            f"--for={condition}",
            f"--timeout={timeout:.0f}s",
            timeout=timeout + 30,
        )

    def wait_established(self, crd: str, timeout: float = 60) -> None:
        """Until the CRD is Established. Asked, not ``kubectl wait``: a CRD just applied may have
        no conditions yet, and kubectl wait fails on that at once (.status.conditions accessor
        error)."""
        deadline = time.monotonic() + timeout
        while True:
            found = json.loads(self.run("get", "crd", crd, "-o", "json"))
            conditions = (found.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return
            if time.monotonic() > deadline:
                raise UserError(f"CRD {crd} was not Established within {timeout:.0f} s")
            time.sleep(0.5)

    def rollout(self, namespace: str, name: str, timeout: float) -> None:
        self.run(
            "-n",
            namespace,
            "rollout",
            "status",
            name,
            f"--timeout={timeout:.0f}s",
            timeout=timeout + 30,
        )
