#!/usr/bin/env bash
# Pushes the images hack/build-images.sh built and the chart, as an OCI artifact, to one registry
# prefix, and records what it pushed:
#
#   PREFIX/multinode-llm:<tag>          each image of build/images.env (IMAGE: the CPU serving
#   PREFIX/multinode-llm-cache:<tag>    image, GPU_IMAGE: vLLM's, CACHE_IMAGE), under its own name
#                                       and tag
#   oci://PREFIX/charts/multinode-llm   the chart (helm package + helm push), version from Chart.yaml
#
# build/published.env then holds, per image, KEY_REF=PREFIX/name:tag and KEY_DIGEST=sha256:...
# (the manifest digest the registry stores, which `image.digest` pins) and CHART_REF,
# CHART_VERSION, CHART_DIGEST. Log in first where the registry wants it (`buildah login`,
# `helm registry login`); the release workflow does.
#
# Usage: bash hack/publish.sh PREFIX            e.g. ghcr.io/multinode-llm, 127.0.0.1:5000/multinode-llm
# Environment:
#   PLAIN_HTTP=1   the registry speaks plain HTTP (a registry on loopback): buildah --tls-verify=false,
#                  helm --plain-http
#   HELM           helm 3.8+ or 4 (default .tools/bin/helm, bash hack/install-tools.sh)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HELM="${HELM:-$ROOT/.tools/bin/helm}"
BUILD="$ROOT/build"

die() { echo "publish: $*" >&2; exit 1; }
log() { echo "publish: $*" >&2; }

main() {
  (($# == 1)) || die "usage: bash hack/publish.sh REGISTRY/PREFIX (e.g. ghcr.io/multinode-llm)"
  local prefix=${1%/}
  command -v buildah >/dev/null ||
    die "buildah is missing: bash hack/install-packages.sh buildah"
  [[ -x $HELM ]] || die "no helm at $HELM: bash hack/install-tools.sh"
  [[ -f $BUILD/images.env ]] || die "no $BUILD/images.env: build first (bash hack/build-images.sh)"
  local tls=() helm_http=()
  if [[ ${PLAIN_HTTP:-0} == 1 ]]; then
    tls=(--tls-verify=false)
    helm_http=(--plain-http)
  fi
  local out="$BUILD/published.env" key image name ref digest
  : >"$out"
  while IFS='=' read -r key image; do
    [[ $key == *IMAGE && $key != BASE_IMAGE ]] || continue
    name=${image##*/}
    ref="$prefix/$name"
    log "pushing $image to $ref"
    buildah push --quiet "${tls[@]}" --digestfile "$BUILD/$key.digest" "$image" "docker://$ref" >&2
    digest=$(cat "$BUILD/$key.digest")
    printf '%s_REF=%s\n%s_DIGEST=%s\n' "$key" "$ref" "$key" "$digest" >>"$out"
  done <"$BUILD/images.env"
  publish_chart "$prefix" "$out"
  cat "$out"
}

publish_chart() {
  local prefix=$1 out=$2 package pushed version digest
  rm -rf "$BUILD/chart" && mkdir -p "$BUILD/chart"
  package=$("$HELM" package "$ROOT/charts/multinode-llm" -d "$BUILD/chart" | sed -n 's/.*saved it to: //p')
  [[ -f $package ]] || die "helm package wrote no chart archive"
  log "pushing $(basename "$package") to oci://$prefix/charts"
  pushed=$("$HELM" push "$package" "oci://$prefix/charts" "${helm_http[@]}" 2>&1) ||
    die "helm push failed: $pushed"
  echo "$pushed" >&2
  digest=$(sed -n 's/^Digest: //p' <<<"$pushed")
  version=$(sed -n 's/^version: //p' "$ROOT/charts/multinode-llm/Chart.yaml")
  printf 'CHART_REF=oci://%s/charts/multinode-llm\nCHART_VERSION=%s\nCHART_DIGEST=%s\n' \
    "$prefix" "$version" "$digest" >>"$out"
}

main "$@"
