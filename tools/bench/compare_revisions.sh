#!/usr/bin/env bash
# Two source trees side by side on one machine: each built from clean and timed, then the CPU
# benchmarks of the README run interleaved (base, new, base, new, ...), so that a noisy machine
# weighs on both alike. For "did this change make the build slower or the code slower?".
#
#   tools/bench/compare_revisions.sh BASE_SRC NEW_SRC OUT [PHASE...]   (phases: build bench)
#
# BASE_SRC, NEW_SRC: source trees, e.g. `git worktree add DIR REV` or
# `mkdir DIR && git archive REV | tar -x -C DIR`. Each is built by its own tools/dev.sh into
# OUT/base-build and OUT/new-build (LEAP_TORCH and LEAP_DEPS_BUNDLE pass through, so a GPU host
# without packages works as for tools/gpu/check.sh), with no compiler cache.
#   build   prints, per tree: wall seconds, and CPU seconds (user + sys of every compiler and
#           linker): the CPU seconds divided by 2 are what a 2-core machine needs at best, whatever
#           the load on this one. LEAP_JOBS as in dev.sh.
#   bench   runs each benchmark LEAP_BENCH_ROUNDS times (default 2) per tree, interleaved, pinned
#           to the CPUs in LEAP_BENCH_CPUS (default 0,1: a 2-core machine), output in OUT/bench;
#           LEAP_BENCH_ONLY="learner_cpu client ..." runs only those (labels as printed).
set -euo pipefail

if [[ $# -lt 3 || $1 == -h || $1 == --help ]]; then
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
base_src=$(cd "$1" && pwd)
new_src=$(cd "$2" && pwd)
mkdir -p "$3"
out=$(cd "$3" && pwd)
shift 3
phases=("$@")
[[ ${#phases[@]} -gt 0 ]] || phases=(build bench)
rounds=${LEAP_BENCH_ROUNDS:-2}
cpus=${LEAP_BENCH_CPUS:-0,1}

log() { printf 'compare_revisions: %s\n' "$*" >&2; }

phase_build() {
  local name src
  for name in base new; do
    [[ $name == base ]] && src=$base_src || src=$new_src
    rm -rf "$out/$name-build"
    log "building $name ($src) into $out/$name-build"
    local TIMEFORMAT="$name build: %R s wall, %U s user + %S s sys"
    # The subshell's `time` counts the CPU of every child: the compilers and the linker.
    time (CCACHE_DISABLE=1 LEAP_BUILD_DIR="$out/$name-build" "$src/tools/dev.sh" build \
      >"$out/$name-build.log" 2>&1) || {
      log "$name build failed; the end of $out/$name-build.log:"
      tail -30 "$out/$name-build.log" >&2
      return 1
    }
  done
}

# One benchmark on one tree: its output to OUT/bench/<label>.<tree>.<round>.txt, and its wall time.
bench_one() {
  local label=$1 tree=$2 round=$3 src
  shift 3
  [[ $tree == base ]] && src=$base_src || src=$new_src
  if [[ -n ${LEAP_BENCH_ONLY:-} && " $LEAP_BENCH_ONLY " != *" $label "* ]]; then
    return 0
  fi
  local file=$out/bench/$label.$tree.$round.txt
  local start=$SECONDS
  # bench_sandbox finds its suite relative to the tree it was built from.
  (cd "$src" && taskset -c "$cpus" "$out/$tree-build/bin/$@") >"$file" 2>&1 ||
    echo "exit $?" >>"$file"
  printf '%-12s %-4s round %s: %4d s  %s\n' "$label" "$tree" "$round" "$((SECONDS - start))" \
    "$(tail -1 "$file")"
}

phase_bench() {
  mkdir -p "$out/bench"
  # A bundle's libraries are found by RPATH into its unpacked root, which a fresh copy of the tree
  # may lack: unpack it again.
  if [[ -n ${LEAP_DEPS_BUNDLE:-} ]]; then
    "$new_src/tools/dev.sh" deps >/dev/null
  fi
  local round
  for ((round = 1; round <= rounds; ++round)); do
    # ABBA: the tree that runs second in a pair is not always the same one.
    local tree order=(base new)
    ((round % 2 == 1)) || order=(new base)
    for tree in "${order[@]}"; do
      bench_one client "$tree" "$round" bench_policy_client --seconds 10
      bench_one overhead "$tree" "$round" bench_pipeline overhead
      bench_one schedules "$tree" "$round" bench_pipeline schedules --steps 6
      bench_one dcp "$tree" "$round" bench_pipeline dcp
      bench_one sandbox_cpp "$tree" "$round" bench_sandbox --kind cpp --candidates 16 --workers 1,2
      bench_one learner_cpu "$tree" "$round" bench_learner --preset tiny --batch 288 --seq 80 \
        --skip-sampling --steps 8 --device cpu
    done
  done
  log "outputs: $out/bench (label.tree.round.txt)"
}

for phase in "${phases[@]}"; do
  case $phase in
    build) phase_build ;;
    bench) phase_bench ;;
    *)
      log "unknown phase '$phase' (build, bench)"
      exit 2
      ;;
  esac
done
