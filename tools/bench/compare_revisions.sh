#!/usr/bin/env bash
# Two source trees side by side on one machine: each built from clean and timed, then the CPU
# benchmarks of the README run interleaved (base, new, base, new, ...), so that a noisy machine
# weighs on both alike. For "did this change make the build slower or the code slower?".
#
#   tools/bench/compare_revisions.sh BASE_SRC NEW_SRC OUT [PHASE...]   (phases: build tests bench)
#
# BASE_SRC, NEW_SRC: source trees, e.g. `git worktree add DIR REV` or
# `mkdir DIR && git archive REV | tar -x -C DIR`. Each is built by its own tools/dev.sh into
# OUT/base-build and OUT/new-build (LEAP_TORCH and LEAP_DEPS_BUNDLE pass through, so a GPU host
# without packages works as for tools/gpu/check.sh), with no compiler cache.
#   build   prints, per tree: wall seconds, and CPU seconds (user + sys of every compiler and
#           linker): the CPU seconds divided by 2 are what a 2-core machine needs at best, whatever
#           the load on this one. LEAP_JOBS as in dev.sh. LEAP_COMPARE_TOGETHER=1: both trees
#           build at the same time, each with half the jobs, so that the same load falls on both
#           (the fair comparison on a shared or noisy machine).
#   tests   ctest over each built tree (as dev.sh test runs it, without the lint), one tree after
#           the other, or both at once with LEAP_COMPARE_TOGETHER=1 (half the jobs each); per
#           tree: wall seconds, CPU seconds of every test process, and ctest's summary line.
#   bench   runs each benchmark LEAP_BENCH_ROUNDS times (default 2) per tree, interleaved, pinned
#           to the CPUs in LEAP_BENCH_CPUS (default 0,1: a 2-core machine), output in OUT/bench;
#           LEAP_BENCH_ONLY="learner_cpu client ..." runs only those (labels as printed).
set -euo pipefail

if [[ $# -lt 3 || $1 == -h || $1 == --help ]]; then
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
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

# One tree's clean build, timed: "NAME build: WALL s wall, USER s user + SYS s sys".
build_tree() {
  local name=$1 src=$2 jobs=$3
  rm -rf "$out/$name-build"
  log "building $name ($src) into $out/$name-build with $jobs job(s)"
  local TIMEFORMAT="$name build: %R s wall, %U s user + %S s sys"
  # The subshell's `time` counts the CPU of every child: the compilers and the linker.
  time (CCACHE_DISABLE=1 LEAP_JOBS=$jobs LEAP_BUILD_DIR="$out/$name-build" "$src/tools/dev.sh" \
    build >"$out/$name-build.log" 2>&1) || {
    log "$name build failed; the end of $out/$name-build.log:"
    tail -30 "$out/$name-build.log" >&2
    return 1
  }
}

# One tree's tests, timed like its build; ctest's summary line after the times.
test_tree() {
  local name=$1 src=$2 jobs=$3
  log "testing $name ($out/$name-build) with $jobs job(s)"
  local TIMEFORMAT="$name tests: %R s wall, %U s user + %S s sys"
  local rc=0
  time (cd "$src" && ctest --test-dir "$out/$name-build" --output-on-failure -j "$jobs" \
    >"$out/$name-tests.log" 2>&1) || rc=$?
  printf '%s tests: %s (exit %d; %s)\n' "$name" \
    "$(grep -E 'tests passed|tests failed' "$out/$name-tests.log" | tail -1)" "$rc" \
    "$out/$name-tests.log"
}

# Runs STEP (build_tree or test_tree) for both trees: one after the other with every job, or at
# once with half the jobs each. The times print on stderr as each tree ends.
both_trees() {
  local step=$1 jobs=${LEAP_JOBS:-$(nproc)}
  if [[ ${LEAP_COMPARE_TOGETHER:-0} == 1 ]]; then
    local half=$((jobs / 2 > 0 ? jobs / 2 : 1)) rc=0
    "$step" base "$base_src" "$half" &
    local base_pid=$!
    "$step" new "$new_src" "$half" &
    local new_pid=$!
    wait "$base_pid" || rc=1
    wait "$new_pid" || rc=1
    return "$rc"
  fi
  "$step" base "$base_src" "$jobs" && "$step" new "$new_src" "$jobs"
}

phase_build() { both_trees build_tree; }
phase_tests() { both_trees test_tree; }

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
    tests) phase_tests ;;
    bench) phase_bench ;;
    *)
      log "unknown phase '$phase' (build, tests, bench)"
      exit 2
      ;;
  esac
done
