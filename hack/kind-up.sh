#!/usr/bin/env bash
# A kind cluster that chart CI installs multinode-llm on: cert-manager, KServe in Standard
# (RawDeployment) mode without Knative or Istio, with the ClusterServingRuntimes a default KServe
# install has (so that the chart's runtime meets KServe's own in its webhook, as on a real
# cluster), and worker nodes that advertise mocked GPUs.
#
# GPUs are FAKE: each worker node's status capacity gets `nvidia.com/gpu` (Kubernetes' documented
# way to advertise an extended resource), so the scheduler places the chart's head and workers as
# on a GPU cluster; the pods compute on CPUs with the runtime's GPU mock (charts/multinode-llm/ci).
#
# Usage: bash hack/kind-up.sh             (creates or reuses the cluster, prints its KUBECONFIG)
#        bash hack/kind-up.sh --existing  (only installs into the cluster in $KUBECONFIG: k3s, ...)
#        bash hack/kind-up.sh --delete    (removes the kind cluster)
# Needs: docker, kind (https://kind.sigs.k8s.io: `go install sigs.k8s.io/kind@v0.29.0` or the
# release binary; GitHub Actions: helm/kind-action), and helm + kubectl (hack/install-tools.sh).
# Environment: CLUSTER (multinode-llm), WORKERS (2), GPUS_PER_NODE (2), KSERVE_VERSION (default:
#              the `default` release of charts/multinode-llm/kserve-releases.yaml, the chart's
#              table of KServe releases), CERT_MANAGER_VERSION (v1.16.2), KUBECONFIG (written to
#              .tools/kind-kubeconfig).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLUSTER="${CLUSTER:-multinode-llm}"
WORKERS="${WORKERS:-2}"
GPUS_PER_NODE="${GPUS_PER_NODE:-2}"
RELEASES="$ROOT/charts/multinode-llm/kserve-releases.yaml"
KSERVE_VERSION="${KSERVE_VERSION:-v$(sed -n 's/^default: "\(.*\)"$/\1/p' "$RELEASES")}"
CERT_MANAGER_VERSION="${CERT_MANAGER_VERSION:-v1.16.2}"
export KUBECONFIG="${KUBECONFIG:-$ROOT/.tools/kind-kubeconfig}"
export PATH="$ROOT/.tools/bin:$PATH"

die() { echo "kind-up: $*" >&2; exit 1; }
[[ "$KSERVE_VERSION" =~ ^v0\.[0-9]+\.[0-9]+$ ]] ||
  die "KSERVE_VERSION=$KSERVE_VERSION is not vMAJOR.MINOR.PATCH (the default comes from $RELEASES)"

MODE="${1:-create}"
TOOLS=(helm kubectl)
[[ "$MODE" == "--existing" ]] || TOOLS+=(docker kind)
for tool in "${TOOLS[@]}"; do
  command -v "$tool" >/dev/null ||
    die "$tool is not installed (helm, kubectl: bash hack/install-tools.sh; kind: see this script's header)"
done

if [[ "$MODE" == "--delete" ]]; then
  kind delete cluster --name "$CLUSTER"
  exit 0
fi

if [[ "$MODE" != "--existing" ]]; then
  docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed): start Docker first"
fi
if [[ "$MODE" != "--existing" ]] && ! kind get clusters | grep -x "$CLUSTER" >/dev/null; then
  config=$(mktemp)
  trap 'rm -f "$config"' EXIT
  {
    echo "kind: Cluster"
    echo "apiVersion: kind.x-k8s.io/v1alpha4"
    echo "nodes:"
    echo "  - role: control-plane"
    for _ in $(seq "$WORKERS"); do echo "  - role: worker"; done
  } >"$config"
  kind create cluster --name "$CLUSTER" --config "$config" --wait 180s
fi
[[ "$MODE" == "--existing" ]] || kind export kubeconfig --name "$CLUSTER" --kubeconfig "$KUBECONFIG"

# Mocked GPUs: advertise nvidia.com/gpu in each worker node's status capacity (the kubelet keeps
# extended resources it does not manage), so the chart's GPU requests schedule as on GPU nodes.
# A one-node cluster (k3s) runs its pods on the control plane: then every node gets them.
nodes=$(kubectl get nodes -l '!node-role.kubernetes.io/control-plane' -o name)
[[ -n "$nodes" ]] || nodes=$(kubectl get nodes -o name)
for node in $nodes; do
  kubectl patch "$node" --subresource=status --type=json \
    -p "[{\"op\":\"add\",\"path\":\"/status/capacity/nvidia.com~1gpu\",\"value\":\"$GPUS_PER_NODE\"}]"
done

helm upgrade --install cert-manager cert-manager --repo https://charts.jetstack.io \
  --namespace cert-manager --create-namespace --version "$CERT_MANAGER_VERSION" \
  --set crds.enabled=true --wait --timeout 10m

helm upgrade --install kserve-crd oci://ghcr.io/kserve/charts/kserve-crd \
  --namespace kserve --create-namespace --version "$KSERVE_VERSION" --wait --timeout 10m
helm upgrade --install kserve oci://ghcr.io/kserve/charts/kserve-resources \
  --namespace kserve --version "$KSERVE_VERSION" \
  --set kserve.controller.deploymentMode=Standard \
  --wait --timeout 10m
kubectl -n kserve rollout status deployment/kserve-controller-manager --timeout=10m
# From 0.17 KServe's runtimes are a chart of their own, off by default; before, kserve-resources has
# them (charts/kserve-runtime-configs, values kserve.servingruntime.enabled, at each tag).
minor="${KSERVE_VERSION#v0.}"
minor="${minor%%.*}"
if (( minor >= 17 )); then
  helm upgrade --install kserve-runtime-configs oci://ghcr.io/kserve/charts/kserve-runtime-configs \
    --namespace kserve --version "$KSERVE_VERSION" --set kserve.version="$KSERVE_VERSION" \
    --set kserve.servingruntime.enabled=true --wait --timeout 10m
fi
kubectl get clusterservingruntime kserve-huggingfaceserver-multinode >/dev/null ||
  die "KServe $KSERVE_VERSION installed no kserve-huggingfaceserver-multinode runtime"

echo "cluster ready: KServe $KSERVE_VERSION (Standard mode), $GPUS_PER_NODE mocked GPUs per worker node"
echo "export KUBECONFIG=$KUBECONFIG"
