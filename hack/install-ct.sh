#!/usr/bin/env bash
# Builds chart-testing's `ct` from its Go module into .tools/bin/ct (git-ignored) and puts the two
# files it reads beside it, as its module ships them (etc/chart_schema.yaml, etc/lintconf.yaml), in
# .tools/ct: point CT_CONFIG_DIR there. `ct lint --config ct.yaml` (tox -e lint) then lints the chart
# with every ci/*-values.yaml. ct runs helm, yamllint, yamale and git from the PATH.
#
#   module  github.com/helm/chart-testing/v3 v3.13.0 (tag v3.13.0, commit dac2d60e7a47)
#
# The Go proxy serves the module; Go's checksum database is not reachable from every machine, so
# the module is fetched without it and checked against the pinned h1: hash instead (its
# dependencies are checked against the module's own go.sum by the build). Go's caches stay where Go
# keeps them (GOMODCACHE, GOCACHE: ~/go/pkg/mod, ~/.cache/go-build), outside the checkout.
# Idempotent: with the pinned ct and its files in place it returns at once.
#
# Usage: bash hack/install-ct.sh        (from anywhere; TOOLS_DIR overrides .tools; needs Go 1.24+)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS_DIR="${TOOLS_DIR:-$ROOT/.tools}"
MODULE=github.com/helm/chart-testing/v3
VERSION=v3.13.0
COMMIT=dac2d60e7a47c929a9c1ef545b83ac247d9f51d8
SUM="h1:jww7UnQQQ3arcL4+qLnLep8yf0ls4vYZX9WtK9xPCDA="
BIN="$TOOLS_DIR/bin/ct"
CONF="$TOOLS_DIR/ct"

die() { echo "install-ct: $*" >&2; exit 1; }

installed() {
  [[ -x $BIN && -f $CONF/chart_schema.yaml && -f $CONF/lintconf.yaml ]] || return 1
  # Read all of ct's output first: `ct version | grep -q` fails under pipefail whenever grep exits
  # before ct has written its last line (ct then dies of SIGPIPE).
  local reported
  reported=$("$BIN" version 2>/dev/null) || return 1
  grep -q "Version:[[:space:]]*$VERSION\$" <<<"$reported"
}

installed && exit 0
command -v go >/dev/null || die "go is not on the PATH: install Go 1.24 or later (go.dev/dl)"

echo "install-ct: building ct $VERSION from $MODULE" >&2
info=$(GONOSUMDB="$MODULE" GOFLAGS=-mod=mod go mod download -json "$MODULE@$VERSION") ||
  die "go mod download $MODULE@$VERSION failed: $info"
sum=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["Sum"])' <<<"$info")
dir=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])' <<<"$info")
[[ $sum == "$SUM" ]] || die "$MODULE@$VERSION has hash $sum, not the pinned $SUM: refusing it"

mkdir -p "$TOOLS_DIR/bin" "$CONF"
flags="-X $MODULE/ct/cmd.Version=$VERSION -X $MODULE/ct/cmd.GitCommit=$COMMIT"
# The module's folder is read-only: build from it, write only the binary.
(cd "$dir" && GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath -ldflags "$flags" \
  -o "$BIN.tmp" ./ct)
mv "$BIN.tmp" "$BIN"
install -m 0644 "$dir/etc/chart_schema.yaml" "$dir/etc/lintconf.yaml" "$CONF/"
installed || die "$BIN does not report version $VERSION"
echo "install-ct: $BIN ($("$BIN" version | head -1 | tr -s '\t ' ' ')), configs in $CONF" >&2
