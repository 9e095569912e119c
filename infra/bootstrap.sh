#!/usr/bin/env bash
# Installs everything Ticketry needs on a fresh Debian machine of our kind, and
# nothing twice: system packages (Redis, Prometheus, Pango/HarfBuzz incl. the subsetter,
# fonts, poppler), uv and just, the FerretDB, versitygw and mailpit binaries built from
# the Go module proxy, and the Python workspace. Idempotent; fast when all is there.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  redis-server            # Redis >= 7 (streams, XAUTOCLAIM)
  libpango-1.0-0 libpangoft2-1.0-0 libharfbuzz0b
  libharfbuzz-subset0     # without it WeasyPrint falls back to fontTools, ~3.4x slower
  fonts-liberation2 fonts-dejavu-core
  fontconfig              # fc-match: ticketry.fonts finds the fallback chain's files
  fonts-noto-core         # Arabic, Hebrew, Thai, Devanagari, Vietnamese… (~42 MB)
  fonts-noto-cjk          # Chinese, Japanese, Korean (~91 MB); -extra (334 MB) is not needed
  poppler-utils           # pdftoppm, for looking at tickets
  prometheus              # prometheus + promtool: the metrics test's scraper, the alert rules' checks
  iproute2                # ip netns for the multi-host test
  chromium                # headless browser of the pages' tests (Playwright drives it; never `playwright install`)
  haproxy                 # the load balancer in front of the api (infra/haproxy/): in-flight bound, queue, cheap 503s
  wrk                     # HTTP load generator of the bench's flood (bench/flood.py): C, not the Python it measures
  redis-sentinel          # Redis's own failover (quorum of sentinels): tests/redis_ha.py and the HA topology
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: apt-get install ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian starts a system redis on 6379 when installing the package; we run our own.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet redis-server 2>/dev/null; then
  systemctl stop redis-server || true
fi
# Likewise a system Prometheus on 9090: the tests start their own, on free ports.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
  systemctl stop prometheus || true
fi
# A system Sentinel on 26379 too: tests/redis_ha.py starts its own sentinels.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet redis-sentinel 2>/dev/null; then
  systemctl stop redis-sentinel || true
fi
# And a system HAProxy: the devstack and the tests start their own from infra/haproxy/.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet haproxy 2>/dev/null; then
  systemctl stop haproxy || true
fi

command -v uv >/dev/null 2>&1 || { echo "bootstrap: pip install uv"; python3 -m pip install -q uv; }
command -v just >/dev/null 2>&1 || { echo "bootstrap: pip install rust-just"; python3 -m pip install -q rust-just; }

# FerretDB v1.24.2 (SQLite backend) through our own main (infra/ferretdb).
# Rebuilt when any of its sources is newer than the binary.
if [[ ! -x .bin/ferretdb || -n "$(find infra/ferretdb -newer .bin/ferretdb -type f 2>/dev/null)" ]]; then
  echo "bootstrap: building FerretDB (go build, module proxy)"
  mkdir -p .bin
  (cd infra/ferretdb && CGO_ENABLED=0 go build -trimpath -o ../../.bin/ferretdb .)
fi

# The linearizability checker of recorded histories (infra/linearize: porcupine
# from the Go module proxy; tests/history.py runs it). Rebuilt when its sources change.
if [[ ! -x .bin/linearize || -n "$(find infra/linearize -newer .bin/linearize -type f 2>/dev/null)" ]]; then
  echo "bootstrap: building linearize (go build, module proxy)"
  mkdir -p .bin
  (cd infra/linearize && CGO_ENABLED=0 go build -trimpath -o ../../.bin/linearize .)
fi

# versitygw (Apache-2.0), an S3-compatible server over a directory: the tests'
# (and `TICKETRY_STORAGE_BACKEND=s3 just up`'s) object store, pinned, from the Go
# module proxy. Rebuilt when the pin changes.
VERSITYGW_VERSION=v1.8.0
if [[ "$(cat .bin/versitygw.version 2>/dev/null)" != "$VERSITYGW_VERSION" || ! -x .bin/versitygw ]]; then
  echo "bootstrap: building versitygw $VERSITYGW_VERSION (go install, module proxy)"
  mkdir -p .bin
  GOBIN="$PWD/.bin" CGO_ENABLED=0 go install -trimpath "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
  printf '%s' "$VERSITYGW_VERSION" > .bin/versitygw.version
fi

# mailpit (MIT), an SMTP server with a web inbox: where `just up` mails the
# tickets (docs/email.md), pinned, from the Go module proxy. Rebuilt when the pin changes.
MAILPIT_VERSION=v1.33.1
if [[ "$(cat .bin/mailpit.version 2>/dev/null)" != "$MAILPIT_VERSION" || ! -x .bin/mailpit ]]; then
  echo "bootstrap: building mailpit $MAILPIT_VERSION (go install, module proxy)"
  mkdir -p .bin
  GOBIN="$PWD/.bin" CGO_ENABLED=0 go install -trimpath "github.com/axllent/mailpit@$MAILPIT_VERSION"
  printf '%s' "$MAILPIT_VERSION" > .bin/mailpit.version
fi

# Deploy-file validators for tests/unit/test_infra_files.py and
# test_scaler_k8s_manifests.py, from the Go module proxy (versions pinned in
# infra/tools/go.mod): kustomize, kubeconform, and composecheck (compose-go, the
# loader `docker compose config` uses; no engine needed). Rebuilt when
# infra/tools changes.
if [[ ! -x .bin/kustomize || ! -x .bin/kubeconform || ! -x .bin/composecheck \
      || -n "$(find infra/tools -newer .bin/composecheck -type f 2>/dev/null)" ]]; then
  echo "bootstrap: building kustomize, kubeconform, composecheck (go build, module proxy)"
  mkdir -p .bin
  (cd infra/tools && CGO_ENABLED=0 go build -trimpath -o ../../.bin/ \
     sigs.k8s.io/kustomize/kustomize/v5 github.com/yannh/kubeconform/cmd/kubeconform ./composecheck)
fi
# kubeconform's Kubernetes schemas (it would fetch them from GitHub): PyPI's
# kubernetes-validate ships them; pinned by hash, unpacked for these releases.
K8S_SCHEMA_VERSIONS=(1.30.0 1.37.0)
schema_stamp="$(cat infra/tools/k8s-schemas.txt infra/tools/k8s_schemas.py; echo "${K8S_SCHEMA_VERSIONS[*]}")"
if [[ "$(cat .bin/k8s-schemas/STAMP 2>/dev/null)" != "$schema_stamp" ]]; then
  echo "bootstrap: Kubernetes schemas for ${K8S_SCHEMA_VERSIONS[*]} (PyPI kubernetes-validate)"
  wheels="$(mktemp -d)"
  python3 -m pip download -q --no-deps --only-binary=:all: --require-hashes \
    -r infra/tools/k8s-schemas.txt -d "$wheels"
  rm -rf .bin/k8s-schemas
  python3 infra/tools/k8s_schemas.py "$wheels"/kubernetes_validate-*.whl .bin/k8s-schemas "${K8S_SCHEMA_VERSIONS[@]}"
  printf '%s' "$schema_stamp" > .bin/k8s-schemas/STAMP
  rm -rf "$wheels"
fi

# The AsyncAPI parser (npm @asyncapi/parser, pinned by infra/asyncapi/package-lock.json)
# that tests/unit/test_asyncapi.py validates GET /asyncapi.json's document with.
# Installed into .bin/asyncapi (npm ci, npm registry); again when infra/asyncapi changes.
if [[ ! -f .bin/asyncapi/STAMP || -n "$(find infra/asyncapi -newer .bin/asyncapi/STAMP -type f 2>/dev/null)" ]]; then
  echo "bootstrap: installing the AsyncAPI parser (npm ci, npm registry)"
  rm -rf .bin/asyncapi && mkdir -p .bin/asyncapi
  cp infra/asyncapi/package.json infra/asyncapi/package-lock.json infra/asyncapi/validate.mjs .bin/asyncapi/
  (cd .bin/asyncapi && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  touch .bin/asyncapi/STAMP
fi

uv sync --frozen --all-packages -q
echo "bootstrap: ok"
