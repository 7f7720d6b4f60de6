#!/usr/bin/env bash
# Prepares a fresh machine (Node 20+ and npm, nothing else) to build, test and demo Stormlog:
# installs pnpm when missing, installs the workspace's dependencies from the lockfile, and the system tools some
# tests need. Safe to run again; non-interactive (CI=true, no stdin). Usage: bash scripts/setup.sh
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

PNPM_VERSION="$(node -p 'require("./package.json").packageManager.split("@")[1]' 2>/dev/null || echo 12.21.0)"
PNPM_MAJOR="${PNPM_VERSION%%.*}"

export TURBO_TELEMETRY_DISABLED=1
export DO_NOT_TRACK=1
export DEBIAN_FRONTEND=noninteractive
# Corepack (the fallback below) cannot verify the signatures of recent pnpm releases.
export COREPACK_INTEGRITY_KEYS=0

log() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }
is_root() { [ "$(id -u)" = "0" ]; }
# Network steps get a time limit, so a stuck download fails with a message instead of hanging CI.
with_timeout() {
  local seconds="$1"
  shift
  if command -v timeout >/dev/null 2>&1; then timeout "$seconds" "$@"; else "$@"; fi
}

APT_UPDATED=0
apt_install() {
  command -v apt-get >/dev/null 2>&1 || return 1
  is_root || return 1
  if [ "$APT_UPDATED" = 0 ]; then
    with_timeout 300 apt-get update -qq >/dev/null && APT_UPDATED=1
  fi
  with_timeout 900 apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

check_node() {
  command -v node >/dev/null 2>&1 || die "Node.js 20 or newer is required: https://nodejs.org"
  command -v npm >/dev/null 2>&1 || die "npm is required (it comes with Node.js)."
  local major
  major="$(node -p 'process.versions.node.split(".")[0]')"
  [ "$major" -ge 20 ] || die "Node.js $(node --version) is too old; install Node.js 20 or newer."
  log "node $(node --version), npm $(npm --version)"
}

pnpm_ok() {
  command -v pnpm >/dev/null 2>&1 || return 1
  local v
  v="$(pnpm --version 2>/dev/null)" || return 1
  [ "${v%%.*}" = "$PNPM_MAJOR" ]
}

ensure_pnpm() {
  if pnpm_ok; then
    log "pnpm $(pnpm --version)"
    return
  fi
  log "installing pnpm@$PNPM_VERSION (npm i -g)"
  local out
  out="$(mktemp)"
  if ! with_timeout 600 npm install -g --no-audit --no-fund "pnpm@$PNPM_VERSION" >"$out" 2>&1 || ! pnpm_ok; then
    tail -n 20 "$out" >&2 || true
    log "npm i -g did not give a working pnpm; trying corepack"
    if command -v corepack >/dev/null 2>&1; then
      with_timeout 120 corepack enable pnpm >"$out" 2>&1 || tail -n 20 "$out" >&2 || true
      with_timeout 600 corepack prepare "pnpm@$PNPM_VERSION" --activate >"$out" 2>&1 || tail -n 20 "$out" >&2 || true
    fi
  fi
  rm -f "$out"
  hash -r
  pnpm_ok || die "could not install pnpm@$PNPM_VERSION. Install it yourself (npm i -g pnpm@$PNPM_VERSION, with a
  writable npm prefix: npm config set prefix ~/.local and ~/.local/bin on PATH), then run this script again."
  log "pnpm $(pnpm --version)"
}

install_dependencies() {
  # confirmModulesPurge=false: never ask (there is no stdin in CI) before replacing a stale node_modules.
  if [ -f pnpm-lock.yaml ]; then
    log "pnpm install --frozen-lockfile"
    with_timeout 1800 pnpm install --frozen-lockfile --config.confirmModulesPurge=false
  else
    log "no pnpm-lock.yaml; pnpm install"
    with_timeout 1800 pnpm install --config.confirmModulesPurge=false
  fi
  # Persistently, so that later `pnpm build` calls in another shell do not print turbo's telemetry notice.
  pnpm exec turbo telemetry disable >/dev/null 2>&1 || true
}

# A C compiler: tests build small native stand-ins (e.g. a fake NVML library) to exercise FFI code.
ensure_gcc() {
  if command -v gcc >/dev/null 2>&1; then
    log "gcc $(gcc -dumpversion)"
    return
  fi
  log "installing gcc"
  apt_install gcc libc6-dev || log "warning: gcc is missing and could not be installed; tests that compile native stand-ins will fail"
}

# Python 3 (standard library only): a test reads our sinks with scripts/python-interop/check_sink.py, the
# Python loader's rules applied by Python itself.
ensure_python3() {
  if command -v python3 >/dev/null 2>&1; then
    log "$(python3 --version 2>&1)"
    return
  fi
  log "installing python3"
  apt_install python3-minimal || log "warning: python3 is missing and could not be installed; the Python interop test will fail"
}

# Headless Chromium (Debian's `chromium`, at /usr/bin/chromium): the page tests of @stormlog/report open the
# HTML report in it through playwright-core, which downloads no browser of its own.
ensure_chromium() {
  if command -v chromium >/dev/null 2>&1; then
    log "$(chromium --version 2>/dev/null || echo chromium)"
    return
  fi
  if is_root; then
    log "installing chromium"
    apt_install chromium || log "warning: chromium could not be installed; page tests will fail"
  else
    log "warning: chromium is missing and this is not root; install it (apt-get install -y chromium) for page tests"
  fi
}

# A real Prometheus server scrapes `stormlog track --prometheus-port` in the CLI's tests.
ensure_prometheus() {
  if command -v prometheus >/dev/null 2>&1 || [ -x /usr/bin/prometheus ]; then
    log "prometheus $(prometheus --version 2>/dev/null | head -n 1 | awk '{print $3}')"
    return
  fi
  if is_root; then
    log "installing prometheus"
    apt_install prometheus || log "warning: prometheus could not be installed; the Prometheus scrape test will fail"
  else
    log "warning: prometheus is missing and this is not root; install it (apt-get install -y prometheus) for the scrape test"
  fi
}

prepare_test_prerequisites() {
  ensure_gcc
  ensure_python3
  ensure_prometheus
  ensure_chromium
}

main() {
  check_node
  ensure_pnpm
  install_dependencies
  prepare_test_prerequisites
  log "done. Next: pnpm demo, or pnpm build && pnpm test"
}

main "$@"
