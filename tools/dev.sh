#!/usr/bin/env bash
# The one set-up script: installs what is missing (Debian packages, npm test dependencies), builds,
# and runs the main job or the whole test suite. Idempotent and quick when everything is there.
#
#   tools/dev.sh run [CONFIG]   install, build, run the main job (default: configs/quickstart.yaml)
#   tools/dev.sh test           install, build, run every test suite (what CI runs)
#   tools/dev.sh deps           install missing dependencies only
#   tools/dev.sh build [TARGET...]  configure and build (only the TARGETs when named, e.g.
#                               sandbox_tests bench_sandbox)
#   tools/dev.sh lint [BASE]    clang-format on every C++ source; clang-tidy (.clang-tidy's checks)
#                               on the C++ files changed since BASE (default HEAD~1: the last commit);
#                               `test` runs it after the build
#   tools/dev.sh lint --all [DIR...]  clang-format as above; clang-tidy on every .cpp under the DIRs
#                               (default: the folders kept tidy-clean, `tidy_clean` below; `.` is the
#                               whole tree), LEAP_JOBS at a time
#   tools/dev.sh bundle DIR     download the Debian packages the build needs, with their
#                               dependencies, into DIR (for a host without package access)
#
# On a host without package access (an air-gapped GPU cluster): run `bundle DIR` on a Debian 12
# machine, copy DIR over, and there set LEAP_DEPS_BUNDLE=DIR: `build`, `test` and `run` then unpack
# the .debs into DIR/root and build against them instead of installing anything. LEAP_TORCH=pip
# builds against the LibTorch inside the pip `torch` of `python3` (CUDA) instead of Debian's (CPU).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${LEAP_BUILD_DIR:-"$root/build"}
jobs=${LEAP_JOBS:-$(nproc)}
bundle_dir=${LEAP_DEPS_BUNDLE:-}
torch_from=${LEAP_TORCH:-debian}

# Debian packages the build, the tests and the tools need (python3-torch: the kernelbench task
# kind's harness on the CPU). Keep in sync with the README.
packages=(
  g++ cmake ninja-build pkg-config git
  libcaf-dev libcurl4-openssl-dev nlohmann-json3-dev librocksdb-dev libtorch-dev
  libgtest-dev libgmock-dev libyaml-cpp-dev libcli11-dev libspdlog-dev libcpp-httplib-dev
  libpcre2-dev libicu-dev  # tokenizer/: the pre-tokenizers' Unicode regexes, Unicode normalization
  libssl-dev  # common/crypto.hpp: SHA-256, HMAC-SHA256 and nonces from libcrypto (and caf::openssl)
  prometheus-cpp-dev  # orchestrator/telemetry and the daemon's /metrics: registry, text exposition
  python3 python3-torch nodejs npm
  pybind11-dev python3-dev  # kernelbench: load_inline's extension builds (torch's headers need both)
  libjs-chart.js chromium  # leap report: Chart.js embedded at build time; the e2e test renders in chromium
  # LibTorch's CPU matrix products go through libblas.so.3, which is Debian's reference BLAS unless
  # OpenBLAS provides it: with it the CPU learner and the embedded model run several times faster.
  libopenblas0-pthread
  # gloo's headers: the learner's c10d weight broadcast (learner/weight_broadcast.hpp) over gloo on
  # the CPU; without them the build leaves that path out (CMake says so).
  libgloo-dev
  clang-format clang-tidy  # tools/dev.sh lint: the style, enforced by `test`
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
# A project whose files changed since its install is installed again: its install script may
# derive files from them (tests/tokenizer/reference computes the reference ids).
install_npm() {
  local lock dir
  while IFS= read -r lock; do
    dir=$(dirname "$lock")
    if [[ ! -d $dir/node_modules || -n $(find "$dir" -maxdepth 1 -type f -newer "$dir/node_modules") ]]; then
      log "npm ci in ${dir#"$root"/}"
      (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) && touch "$dir/node_modules"
    fi
  done < <(find "$root/tests" -name package-lock.json -not -path '*/node_modules/*')
}

# What a bundle carries: the libraries the build links and their headers, with every dependency
# except the toolchain's own (glibc, libstdc++, libgcc) and OpenSSL's runtime, which any host that
# runs Python has and which must stay the host's (Python's ssl module loads it too). No compilers,
# CMake or LibTorch: a GPU host brings those (LEAP_TORCH=pip).
bundled=(
  libcaf-dev libcurl4-openssl-dev nlohmann-json3-dev librocksdb-dev libgtest-dev libgmock-dev
  libyaml-cpp-dev libcli11-dev libspdlog-dev libcpp-httplib-dev libpcre2-dev libicu-dev libjs-chart.js
  libssl-dev prometheus-cpp-dev
)
not_bundled='gcc-[0-9]+-base|libc-dev-bin|libc6|libc6-dev|libcrypt-dev|libcrypt1|libgcc-s1|libstdc\+\+6|linux-libc-dev|libnsl-dev|libnsl2|libtirpc.*|rpcsvc-proto|catch2|libssl3'

bundle() {
  local dir=${1:?usage: tools/dev.sh bundle DIR}
  mkdir -p "$dir/debs"
  dir=$(cd "$dir" && pwd)
  local names
  names=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances --no-pre-depends "${bundled[@]}" |
    grep -E '^[a-z0-9]' | sort -u | grep -vxE "$not_bundled")
  # shellcheck disable=SC2086 # one word per package name
  (cd "$dir/debs" && apt-get download $names >/dev/null)
  log "bundle: $(find "$dir/debs" -name '*.deb' | wc -l) packages, $(du -sh "$dir/debs" | cut -f1) in $dir/debs"
  log "on the host without packages: LEAP_DEPS_BUNDLE=$dir LEAP_TORCH=pip tools/dev.sh build"
}

# Unpacks the bundle once into DIR/root (dpkg-deb needs no root and touches nothing outside it).
unpack_bundle() {
  local stamp=$bundle_dir/root/.unpacked deb
  [[ -d $bundle_dir/debs ]] || { log "LEAP_DEPS_BUNDLE=$bundle_dir has no debs/ folder (make one with: tools/dev.sh bundle DIR)"; exit 2; }
  if [[ ! -f $stamp || -n $(find "$bundle_dir/debs" -name '*.deb' -newer "$stamp") ]]; then
    log "unpacking $(find "$bundle_dir/debs" -name '*.deb' | wc -l) packages into $bundle_dir/root"
    mkdir -p "$bundle_dir/root"
    for deb in "$bundle_dir"/debs/*.deb; do dpkg-deb -x "$deb" "$bundle_dir/root"; done
    # Some packages' CMake files name their libraries by absolute path (/usr/lib/...libsnappy.so):
    # point those at the unpacked copies.
    find "$bundle_dir/root/usr" -name '*.cmake' -path '*/cmake/*' -exec sed -i -E \
      "s#(^|[\"; (])/usr/(lib|include)#\\1$bundle_dir/root/usr/\\2#g" {} +
    # libssl-dev's libcrypto.so and libssl.so name libcrypto.so.3 and libssl.so.3, which stay the
    # host's (not bundled): point them at the host's copies, so that CMake's FindOpenSSL finds a
    # library and the build links the runtime it will load.
    local link name host_copy
    for link in "$bundle_dir"/root/usr/lib/*/libcrypto.so "$bundle_dir"/root/usr/lib/*/libssl.so; do
      [[ -L $link && ! -e $link ]] || continue
      name=$(basename "$(readlink "$link")")
      # awk reads to the end: an early exit would fail the pipeline with SIGPIPE (pipefail).
      host_copy=$(/sbin/ldconfig -p | awk -v n="$name" '$1 == n && !found { print $NF; found = 1 }')
      if [[ -n $host_copy ]]; then ln -sf "$host_copy" "$link"; else log "the host has no $name (OpenSSL 3's runtime)"; fi
    done
    touch "$stamp"
  fi
}

deps() {
  if [[ -n $bundle_dir ]]; then
    bundle_dir=$(cd "$bundle_dir" && pwd)
    unpack_bundle
    local tool
    for tool in cmake ninja g++; do
      command -v "$tool" >/dev/null || { log "$tool is not on PATH (a bundle carries libraries, not tools)"; exit 2; }
    done
    return 0
  fi
  install_packages
  install_npm
}

# Configures the build folder; build() then builds what it is given (everything by default).
configure() {
  local args=()
  # A fresh folder (CI, a fresh clone) builds the test suites in batches (LEAP_UNITY_TESTS in
  # CMakeLists.txt); an existing one keeps its setting, so a developer's edit rebuilds one file.
  [[ -f $build_dir/CMakeCache.txt ]] || args+=(-G Ninja -DLEAP_UNITY_TESTS="${LEAP_UNITY_TESTS:-ON}")
  if [[ -n $bundle_dir ]]; then
    local usr=$bundle_dir/root/usr libdir
    libdir=$usr/lib/$(gcc -dumpmachine)
    # DT_RPATH rather than RUNPATH (--disable-new-dtags): the loader then also looks in the bundle
    # for the libraries that bundled libraries need (librocksdb's libsnappy, libcurl's nghttp2).
    args+=(-DCMAKE_PREFIX_PATH="$usr" -DCMAKE_BUILD_RPATH="$libdir"
      -DCMAKE_EXE_LINKER_FLAGS="-Wl,--disable-new-dtags" -DCMAKE_SHARED_LINKER_FLAGS="-Wl,--disable-new-dtags"
      -DLEAP_CHARTJS="$usr/share/javascript/chart.js/chart.min.js")
  fi
  case $torch_from in
    debian) ;;
    pip)
      local torch_dir
      torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))') ||
        { log "LEAP_TORCH=pip: python3 cannot import torch"; exit 2; }
      args+=(-DTorch_DIR="$torch_dir/share/cmake/Torch")
      ;;
    *) log "LEAP_TORCH=$torch_from: expected debian or pip"; exit 2 ;;
  esac
  # LEAP_CMAKE_ARGS: more -D options, e.g. -DLEAP_WITH_NCCL=OFF.
  # shellcheck disable=SC2206 # split into words on purpose
  args+=(${LEAP_CMAKE_ARGS:-})
  cmake -S "$root" -B "$build_dir" "${args[@]}" -DCMAKE_BUILD_TYPE="${LEAP_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
}

build() {
  configure
  cmake --build "$build_dir" -j "$jobs" "$@"
}

# The project's own C++ sources: the task suite and the adversarial candidates are data (what a
# policy would write), kept byte for byte as they are.
cxx_sources() {
  git -C "$root" ls-files -- '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h' |
    grep -v -E '^(sandbox/suite|tests/sandbox/adversarial)/' || true
}

# The folders whose every .cpp passes clang-tidy (`lint --all` checks them): every library and
# tools/. tests/ is checked file by file as commits touch it.
tidy_clean=(actors common learner orchestrator policy sandbox storage tokenizer tools)

# clang-format on every source, exit status 1 when one differs.
lint_format() {
  local -a sources
  mapfile -t sources < <(cxx_sources)
  if ! (cd "$root" && clang-format --dry-run --Werror "${sources[@]}" 2>"$build_dir/format.txt"); then
    grep -E '^[^ ].*(warning|error):' "$build_dir/format.txt" | cut -d: -f1 | sort -u | sed 's/^/  /' >&2
    log "lint: these files differ from .clang-format; fix with: clang-format -i FILE"
    return 1
  fi
}

# clang-tidy on every .cpp under the folders given (default: tidy_clean), LEAP_JOBS at a time: the
# full check the per-commit one cannot be (on 2 cores it takes minutes; see the README).
lint_all() {
  local bad=0
  local -a dirs files
  dirs=("$@")
  [[ ${#dirs[@]} -gt 0 ]] || dirs=("${tidy_clean[@]}")
  lint_format || bad=1
  mapfile -t files < <(git -C "$root" ls-files -- "${dirs[@]/%//*.cpp}" |
    { grep -v -E '^(sandbox/suite|tests/sandbox/adversarial)/' || true; })
  [[ ${#files[@]} -gt 0 ]] || { log "lint --all: no .cpp file under ${dirs[*]}"; exit 2; }
  log "lint --all: clang-tidy on ${#files[@]} file(s) under ${dirs[*]}, $jobs at a time"
  # xargs exits 123 when any file had a finding.
  export -f tidy_one log
  export root build_dir
  (cd "$root" && printf '%s\0' "${files[@]}" | xargs -0 -n 1 -P "$jobs" bash -c 'tidy_one "$1"' _) ||
    bad=1
  return "$bad"
}

# clang-tidy on one .cpp; its findings on stderr and exit status 1 when it has any.
tidy_one() {
  local out
  out=$(cd "$root" && clang-tidy -p "$build_dir" --quiet --warnings-as-errors='*' "$1" 2>/dev/null) && return 0
  # clang 14 cannot parse LibTorch's headers with libstdc++ 12 (a static_assert on c10::IValue
  # fails inside /usr/include): a compiler error in a system header is not a finding in ours.
  # The checks' own findings (and compiler errors in our files) still fail.
  if grep -E '(error|warning): ' <<<"$out" | grep -v -E '^/usr/.*\[clang-diagnostic-error\]$' | grep -q .; then
    grep -v -E '^/usr/.*\[clang-diagnostic-error\]$' <<<"$out" >&2
    return 1
  fi
  log "lint: $1: clang-tidy cannot parse the system headers it includes (LibTorch); its own checks found nothing"
}

# clang-format on every source, clang-tidy on the .cpp files changed since $1 (a changed header
# brings the .cpp of the same name). Needs a configured build (compile_commands.json).
lint() {
  local base=${1:-${LEAP_LINT_BASE:-HEAD~1}} bad=0 f
  local -a changed
  lint_format || bad=1
  git -C "$root" rev-parse --verify --quiet "$base^{commit}" >/dev/null ||
    { log "lint: no commit '$base' to compare with (set LEAP_LINT_BASE)"; exit 2; }
  mapfile -t changed < <(cd "$root" && git diff --name-only --diff-filter=d "$base" -- |
    grep -v -E '^(sandbox/suite|tests/sandbox/adversarial)/' | grep -E '\.(cpp|hpp)$' |
    sed 's/\.hpp$/.cpp/' | sort -u | while read -r f; do [[ -f $f ]] && echo "$f"; done)
  if [[ ${#changed[@]} -gt 0 ]]; then
    log "lint: clang-tidy on ${#changed[@]} file(s) changed since $base"
    for f in "${changed[@]}"; do
      tidy_one "$f" || bad=1
    done
  fi
  return "$bad"
}

case ${1:-help} in
  deps) deps ;;
  build)
    deps
    if [[ $# -ge 2 ]]; then build --target "${@:2}"; else build; fi
    ;;
  lint)
    deps
    configure
    if [[ ${2:-} == --all ]]; then lint_all "${@:3}"; else lint "${2:-}"; fi
    ;;
  test)
    deps
    build
    lint
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
  bundle) bundle "${2:-}" ;;
  help|-h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) log "unknown command '$1' (try: run, test, deps, build, lint, bundle)"; exit 2 ;;
esac
