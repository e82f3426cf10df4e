#!/usr/bin/env bash
# Regenerates the golden renders: charts/multinode-llm/examples/values-<scenario>.yaml ->
# examples/output-<scenario>.yaml, with the exact command tests/chart/test_golden.py compares against.
# Review the diff: it shows what a chart or values change does to the manifests.
#
# Each scenario is also a chart-testing case: ci/<scenario>-values.yaml is a symbolic link to its
# examples/values-<scenario>.yaml (chart-testing reads ci/*-values.yaml only), so the scenario is
# written once. ci/ files that are not links (kind-values.yaml) are CI's own.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/hack/install-tools.sh"
cd "$ROOT"
chart=charts/multinode-llm
for link in "$chart"/ci/*-values.yaml; do
  if [[ -L $link && ! -e $link ]]; then
    rm "$link"  # its example is gone
  fi
done
for values in "$chart"/examples/values-*.yaml; do
  scenario=$(basename "$values" .yaml)
  scenario=${scenario#values-}
  KUBECONFIG=/nonexistent .tools/bin/helm4 template llm "$chart" --namespace serving \
    --kube-version 1.37.0 -f "$values" >"$chart/examples/output-$scenario.yaml"
  ln -sfn "../examples/values-$scenario.yaml" "$chart/ci/$scenario-values.yaml"
  echo "render-examples: examples/output-$scenario.yaml, ci/$scenario-values.yaml"
done
