#!/usr/bin/env bash
# The one set-up script: installs what is missing (Debian packages, npm test dependencies), builds,
# and runs the main job or the whole test suite. Idempotent and quick when everything is there.
#
#   tools/dev.sh run [CONFIG]   install, build, run the main job (default: configs/quickstart.yaml)
#   tools/dev.sh test           install, build, run every test suite (what CI runs)
#   tools/dev.sh deps           install missing dependencies only
#   tools/dev.sh build          configure and build only
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${LEAP_BUILD_DIR:-"$root/build"}
jobs=${LEAP_JOBS:-$(nproc)}

# Debian packages the build, the tests and the tools need (python3-torch: the kernelbench task
# kind's harness on the CPU). Keep in sync with the README.
packages=(
  g++ cmake ninja-build pkg-config git
  libcaf-dev libcurl4-openssl-dev nlohmann-json3-dev librocksdb-dev libtorch-dev
  libgtest-dev libgmock-dev libyaml-cpp-dev libcli11-dev libspdlog-dev libcpp-httplib-dev
  python3 python3-torch nodejs npm
  libjs-chart.js chromium  # leap report: Chart.js embedded at build time; the e2e test renders in chromium
  # LibTorch's CPU matrix products go through libblas.so.3, which is Debian's reference BLAS unless
  # OpenBLAS provides it: with it the CPU learner and the embedded model run several times faster.
  libopenblas0-pthread
  # gloo's headers: the learner's c10d weight broadcast (learner/weight_broadcast.hpp) over gloo on
  # the CPU; without them the build leaves that path out (CMake says so).
  libgloo-dev
)

log() { printf '\033[1mdev.sh:\033[0m %s\n' "$*" >&2; }

install_packages() {
  local missing=()
  for p in "${packages[@]}"; do
    # Only look at the status line: a package that was removed leaves "deinstall" behind.
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  # Node may come from outside Debian (e.g. a newer one on PATH); then npm is not needed from apt.
  if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    local kept=()
    for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || kept+=("$p"); done
    missing=("${kept[@]}")
  fi
  [[ ${#missing[@]} -eq 0 ]] && return 0
  log "installing Debian packages: ${missing[*]}"
  local sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# npm projects used by tests (the OpenAI SDK compatibility test, ...): install from their lock files.
install_npm() {
  local lock dir
  while IFS= read -r lock; do
    dir=$(dirname "$lock")
    if [[ ! -d $dir/node_modules || $lock -nt $dir/node_modules ]]; then
      log "npm ci in ${dir#"$root"/}"
      (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) && touch "$dir/node_modules"
    fi
  done < <(find "$root/tests" -name package-lock.json -not -path '*/node_modules/*')
}

deps() {
  install_packages
  install_npm
}

build() {
  local generator=()
  [[ -f $build_dir/CMakeCache.txt ]] || generator=(-G Ninja)
  cmake -S "$root" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="${LEAP_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
  cmake --build "$build_dir" -j "$jobs" "$@"
}

case ${1:-help} in
  deps) deps ;;
  build) deps; build ;;
  test)
    deps
    build
    # Each test has its own timeout (tests/CMakeLists.txt), so a hang fails instead of stalling CI.
    # No retries: a test that fails once fails the suite.
    ctest --test-dir "$build_dir" --output-on-failure -j "$jobs"
    ;;
  run)
    deps
    build --target leap
    if [[ $# -ge 2 ]]; then
      "$build_dir/bin/leap" run "$2" "${@:3}"
    else
      # The quickstart's paths (data.train, experiment.run_dir) are relative to the repository.
      cd "$root" && "$build_dir/bin/leap" run configs/quickstart.yaml
    fi
    ;;
  help|-h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) log "unknown command '$1' (try: run, test, deps, build)"; exit 2 ;;
esac
