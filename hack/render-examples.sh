#!/usr/bin/env bash
# Regenerates the golden renders: charts/multinode-llm/examples/values-<scenario>.yaml ->
# examples/output-<scenario>.yaml, with the exact command tests/chart/test_golden.py compares against.
# Review the diff: it shows what a chart or values change does to the manifests.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/hack/install-tools.sh"
cd "$ROOT"
for values in charts/multinode-llm/examples/values-*.yaml; do
  scenario=$(basename "$values" .yaml)
  scenario=${scenario#values-}
  KUBECONFIG=/nonexistent .tools/bin/helm4 template llm charts/multinode-llm --namespace serving \
    --kube-version 1.37.0 -f "$values" >"charts/multinode-llm/examples/output-$scenario.yaml"
  echo "render-examples: examples/output-$scenario.yaml"
done
