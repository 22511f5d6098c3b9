#!/usr/bin/env bash
# The GPU checks of the README, on a GPU host: builds against the pip `torch`'s CUDA LibTorch and
# runs the phases named on the command line, each with its own log in OUT (default /tmp/leap-gpu).
#   tools/gpu/check.sh [PHASE...]     (default: build tests loop vllm)
#     build   LEAP_TORCH=pip tools/dev.sh build into build-cuda (with LEAP_DEPS_BUNDLE when set:
#             a host without packages builds against the .debs of `tools/dev.sh bundle DIR`)
#     tests   the tests that touch the GPU or LibTorch: the sandbox's cuda, kernelbench and
#             adversarial tests, the learner suite, weight sync, the e2e runs of the torch learner
#     suite   every test suite (ctest)
#     loop    configs/gpu_loop.yaml: learner, embedded server and the cuda tasks on one GPU; then
#             the same with 2 compile workers; `leap replay` of both
#     quickstart  configs/quickstart.yaml on the suite's cuda tasks (the scripted policy answers
#             with each task's known good and wrong kernels, so nvcc and the GPU runs do real work),
#             16 and 2 compile workers, each with 1 and 4 runs per GPU, side by side
#     deltabench  bench_weight_sync --delta-steps: full vs delta weight sync after real AdamW steps
#             (SYNC_PRESETS, default qwen2-0.5b qwen2-1.5b; bf16 served, float32 learner, lr 1e-6;
#             SYNC_SERVER_DEVICE=cuda:1 on two GPUs adds the NCCL broadcast's full and delta columns)
#     sandbox only the sandbox on the GPU: builds sandbox_tests into build-cuda (no full build) and
#             runs the sandbox's cuda, kernelbench and adversarial tests
#     sandboxbench  bench_sandbox for cpp and cuda (SANDBOX_BENCH_KINDS: also kernelbench, and
#             kbext: a load_inline CUDA candidate's first and later verifications) from this tree
#             and from BASE_SRC (another source tree, e.g. `git archive REV | tar -x -C DIR`),
#             interleaved ABBA (SANDBOX_BENCH_ROUNDS=1: AB only), side by side
#     kbbatch  the KernelBench batch (issue 30): bench_sandbox --batch over
#             tools/bench/kernelbench_batch/gpu (64 candidates: load_inline CUDA, Triton,
#             PyTorch-only, wrong and crashing, 4 problems of levels 1 and 2), 16 compile workers,
#             one GPU run slot, in one device call. First the base (BASE_SRC, built with this
#             tree's bench_sandbox.cpp; unset or unbuildable: this tree with --build-in-run), which
#             builds every extension in its run (a minute each): a seeded random prefix one at a
#             time for KBBATCH_BASE_SECONDS (default 90), and its whole batch projected. Then this
#             tree on as many candidates as fit the rest of KBBATCH_BUDGET (seconds for the phase,
#             default 570) at about 6 s each, at most KBBATCH_CANDIDATES (default 64); its
#             progress lines carry its figures so far. KBBATCH_ARGS: more flags for both;
#             KBBATCH_BASE_SECONDS=0 runs no base (on a warm machine: the whole batch in one call)
#     kbverify  one load_inline CUDA candidate through `leap verify`, each a fresh process: cold
#             (empty cache), `--prepare` then the first verify, the same answer three times more,
#             and two other sources with the same load_inline request (wall seconds and
#             verdicts); KBVERIFY_COLD=0 skips the cold one, KBVERIFY_PREPARED=0 all after it,
#             KBVERIFY_WARM=0 the warm and same-request ones; each verdict's run phases;
#             then one process verifying the answer KBVERIFY_REPEAT times (default 4), its later
#             runs fed to a judge started ahead of them (`leap verify --repeat`), judges
#             KBVERIFY_STANDBY_DEPTH runs ahead (default 1)
#     kbheaders  nvcc over a load_inline CUDA source with torch/extension.h, with the builder's
#             stand-in giving torch's types for it, and with its narrow set, side by side (the
#             stand-ins read from the builder's own source)
#     timingcost  what --timing adds to a verification: cuda/matmul_square and the KernelBench
#             2048^2 matmul, untimed and timed (TIMINGCOST_REPS, default 20) alternating,
#             TIMINGCOST_RUNS times each (default 5) on one cache; median verify and run seconds
#     profilecost  what profiling costs per candidate: cuda/matmul_square and a load_inline
#             scale-add verified without and with `--profile passing`, alternating,
#             PROFILECOST_RUNS times each (default 3) on one cache; the profiling run's seconds
#     kbcosts  a KernelBench run's fixed costs on this host: torch's import, a CUDA context, two
#             side by side, inputs to the device (no build)
#     timingab  a small kernel's time across verifications, BASE_SRC's tree (its `leap` built
#             beside) against this one: TIMING_AB_RUNS rounds (default 12) of cuda/matmul_square
#             verified with --timing 100, alternating, each tree on its own cache; the stability
#             of each side (per verification: quartiles, clocks)
#     kbtimingab  KernelBench's timed calls, BASE_SRC's tree against this one: a matmul with a
#             Triton epilogue and a small SiLU (KBTIMINGAB_LABELS) verified KBTIMINGAB_RUNS times
#             (default 5) per tree with --timing 100, alternating; stability and do_bench beside
#     timing  the timing protocol's stability (tools/gpu/timing_check.py): a KernelBench problem
#             (a 4096^2 fp32 matmul with a Triton epilogue) verified TIMING_KB_RUNS times (default
#             5) on one compile cache, as a training run's verifications are (its baselines timed
#             once: the speedup's CV is the candidate's), and TIMING_BASELINE_RUNS times (default
#             5) each on a fresh cache (the baselines' own CV), interleaved, a new round started
#             while the phase is under TIMING_BUDGET seconds (default 270: about 40 s a fresh
#             verification, 12 s a shared one); before them the suite's cuda/matmul_square
#             TIMING_RUNS times (default 10) on one compile cache (its host reference timed once
#             and kept: the speedup's CV is the candidate's) and TIMING_CUDA_FRESH_RUNS times
#             (default 3) each on a fresh cache (the reference's own CV), interleaved; all with
#             --timing TIMING_REPS (default 20). TIMING_KB_RUNS=0 TIMING_BASELINE_RUNS=0: the
#             suite's kernel only.
#             Then the agreement with do_bench and KernelBench's loop on the verified KernelBench
#             problems (TIMING_AGREE=1: four more kernels for that table, minutes more; their
#             runs' scratch TIMING_AGREE_SCRATCH, default 24GiB of host memory; each
#             verification cut at TIMING_AGREE_LIMIT seconds, default 300; TIMING_AGREE_LABELS:
#             only these of matmul_relu silu_small matmul_relu_big softmax_rows add_large)
#     inflightlearn  the learning quickstart with the learner and the embedded server on the GPU:
#             configs/learn_digits.yaml (streaming, on-policy) against
#             configs/learn_digits_inflight.yaml (staleness 1, policy.inflight_updates), seeds
#             INFLIGHT_SEEDS (default 1 2 3) with the arms alternating, INFLIGHT_STEPS steps each
#             (default 60), INFLIGHT_MAX_TOKENS tokens a turn at most (default 8; longer turns
#             give a sync more turns to land inside); per run its wall seconds, pass@1 and pass@2
#             over the last 10 steps, the first step whose 5-step pass@1 mean reached 0.10, and
#             how many stored turns a sync cut (two or more weight segments)
#     outputcopy  the output copy a KernelBench candidate can skip (docs/threat-model.md): a problem
#             `a * scale + b` over OUTPUTCOPY_ELEMENTS floats (default 1 << 27, 512 MiB each)
#             verified with --timing 100 by an honest candidate (the same expression) and by one
#             that computes into the judge's output view found in the runner's frame and returns
#             it, alternating OUTPUTCOPY_RUNS times each (default 3) on one cache; per verification
#             the verdict, the candidate's median and the speedup. The two are the same math: a
#             protocol that charges both alike shows the same time
#     vllm    configs/leap_cuda.yaml with its paths pointed at this repository, 2 steps of 8 tasks,
#             1024 tokens per turn and the learner on cuda (the shipped file's 32 x 8192 takes
#             minutes a step with a random model that never stops early), against
#             `leap serve-policy --model` on the GPU standing in for vLLM (flavour vllm), the weights
#             moving through CUDA IPC (policy.weight_sync ipc, the server's ipc engine)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-/tmp/leap-gpu}
build=${LEAP_BUILD_DIR:-$root/build-cuda}
mkdir -p "$out"
cd "$root" || exit 2
# The sandbox tests' python (kernelbench) is the one that imports torch, wherever it lives.
export LEAP_SANDBOX_TEST_PYTHON=${LEAP_SANDBOX_TEST_PYTHON:-$(command -v python3)}
# Never let NCCL or PyTorch use NVLink multicast on shared hosts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
phases=("$@")
[[ ${#phases[@]} -gt 0 ]] || phases=(build tests loop vllm)
status=0
# The binaries find the bundle's libraries by RPATH into DIR/root: a later call on a fresh copy of
# the tree (the device tool keeps build outputs, not always the unpacked bundle) unpacks it again.
if [[ -n ${LEAP_DEPS_BUNDLE:-} ]]; then "$root/tools/dev.sh" deps || exit 2; fi
step() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

phase_build() {
  LEAP_TORCH=pip LEAP_BUILD_DIR="$build" "$root/tools/dev.sh" build 2>&1 | grep -E -B2 -A12 'error|FAILED' | head -60
  local rc=${PIPESTATUS[0]}
  if [[ $rc -ne 0 ]]; then
    echo "== the build failed; again without the NCCL weight broadcast"
    LEAP_CMAKE_ARGS=-DLEAP_WITH_NCCL=OFF LEAP_TORCH=pip LEAP_BUILD_DIR="$build" "$root/tools/dev.sh" build 2>&1 |
      grep -E -B2 -A12 'error|FAILED' | head -40
    rc=${PIPESTATUS[0]}
  fi
  return "$rc"
}

# Which libstdc++ the binaries bind to (the top CMakeLists.txt says why it must be the first
# NEEDED): the link command, the NEEDED order and the shadowing test, on leap-torch, the program
# that loads LibTorch (`leap` links none and hands it the commands that need it).
phase_link() {
  local cmd first
  cmd=$(cd "$build" && ninja -t commands bin/leap-torch | tail -1)
  echo "$cmd" | tr ' ' '\n' | grep -n -m3 -E 'stdc|push-state|new-dtags'
  readelf -d "$build/bin/leap-torch" | grep NEEDED | head -6
  "$build/tests/link_tests" --gtest_brief=1
  echo "verify (uses the sandbox's scratch_dir), as built: exit $(verify_probe "$build/bin/leap-torch")"
  LD_DEBUG=bindings "$build/bin/leap-torch" verify --task cpp/axpby \
    --candidate sandbox/suite/cpp/axpby/solution.cpp >/dev/null 2>"$out/bindings.txt"
  grep -m3 'filesystem.*remove_all' "$out/bindings.txt"
  # Two other ways to bind libstdc++ first, relinked beside the build: the library as the first
  # input file; libstdc++ linked statically.
  first=$(g++ -print-file-name=libstdc++.so.6)
  (cd "$build" && eval "${cmd/ -o bin\/leap-torch / -o bin/leap-first $first }") &&
    echo "libstdc++ as first input: exit $(verify_probe "$build/bin/leap-first")"
  readelf -d "$build/bin/leap-first" | grep -m2 NEEDED
  (cd "$build" && eval "$(echo "${cmd/ -o bin\/leap-torch / -o bin/leap-static -static-libstdc++ }" |
    sed 's/-Wl,--push-state,--no-as-needed,-lstdc++,--pop-state//')") &&
    echo "static libstdc++: exit $(verify_probe "$build/bin/leap-static")"
}

# Exit status of `leap verify` on a suite solution (0: pass; 139: the crash of issue 15).
verify_probe() {
  "$1" verify --task cpp/axpby --candidate sandbox/suite/cpp/axpby/solution.cpp >/dev/null 2>&1
  echo $?
}

phase_tests() {
  local t=$build/tests rc=0
  "$t/learner_tests" --gtest_brief=1 || rc=1
  "$t/actors_tests" --gtest_brief=1 --gtest_filter='*Broadcast*:*Torch*:RemoteProfileGpuTest.*' || rc=1
  "$t/e2e_tests" --gtest_brief=1 --gtest_filter='LeapRunTorch.*:ServePolicyModel.*:LearnDigitsE2E.*' || rc=1
  # The sandbox suite runs alone (it checks host-wide that no sandbox uid survives a test).
  "$t/sandbox_tests" --gtest_brief=1 \
    --gtest_filter='CudaCompileTest.*:CudaGpuTest.*:KernelBench*:Adversarial.*:Corpus/*:EngineTest.*' || rc=1
  return $rc
}

phase_suite() {
  ctest --test-dir "$build" -j "$(nproc)" --timeout 900 2>&1 | tail -40
  return "${PIPESTATUS[0]}"
}

# $1: run folder name, $2: compile workers
loop_run() {
  local dir=runs/$1
  rm -rf "$dir"
  sed -e "s|run_dir: runs/gpu_loop|run_dir: $dir|" -e "s|runs/gpu_loop/model|$dir/model|g" \
    -e "s|compile_workers: 0 .*|compile_workers: $2|" configs/gpu_loop.yaml >"$out/$1.yaml"
  "$build/bin/leap" run --quiet "$out/$1.yaml" || return 1
  "$build/bin/leap" replay "$dir"
}

phase_loop() {
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
  loop_run gpu_loop "$(nproc)" && loop_run gpu_loop_2workers 2
}

# $1: run folder name, $2: compile workers, $3: runs per GPU
quickstart_run() {
  local dir=runs/$1
  rm -rf "$dir"
  sed -e "s|run_dir: runs/quickstart |run_dir: $dir |" -e "s|task_kinds: \[cpp, python\]|task_kinds: [cuda]|" \
    -e "s|compile_workers: 2|compile_workers: $2|" -e "s|gpu_slots: 0|gpu_slots: 1\n  runs_per_gpu: $3|" \
    -e "s|^  steps: 4|  steps: ${QUICKSTART_STEPS:-4}|" configs/quickstart.yaml >"$out/$1.yaml"
  "$build/bin/leap" run --quiet "$out/$1.yaml" || return 1
  "$build/bin/leap" replay "$dir" | sed -n '/^training/,/^$/p'
  # Per verification: how long nvcc took and how long the job waited for a compile worker.
  "$build/bin/leap" export "$dir" --format csv --out "$out/$1.csv" && python3 - "$out/$1.csv" <<'PY'
import csv, statistics, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if float(r["compile_ms"] or 0) > 0]
for key in ("compile_ms", "compile_queue_ms", "run_ms"):
    v = sorted(float(r[key] or 0) for r in rows)
    if v:
        print(f"{key}: n {len(v)} median {statistics.median(v):.0f} p90 {v[int(0.9 * (len(v) - 1))]:.0f} max {v[-1]:.0f}")
PY
}

# QUICKSTART_WORKERS: the compile-worker counts to run (default: 16 2), each with every count of
# QUICKSTART_RUNS_PER_GPU (runs sharing the GPU; default: 1 4), side by side; QUICKSTART_STEPS:
# the run's steps (default 4).
phase_quickstart() {
  LEAP_TORCH=pip LEAP_BUILD_DIR="$build" "$root/tools/dev.sh" build leap 2>&1 |
    grep -E -B2 -A12 'error|FAILED' | head -40
  local w r
  for w in ${QUICKSTART_WORKERS:-16 2}; do
    for r in ${QUICKSTART_RUNS_PER_GPU:-1 4}; do
      echo "== $w compile workers, $r runs per GPU"
      quickstart_run "quickstart_cuda_${w}w_${r}r" "$w" "$r" || return 1
    done
  done
}

phase_vllm() {
  local dir=runs/leap_cuda_serve port=18000 rc
  rm -rf "$dir" && mkdir -p "$dir"
  "$build/bin/leap" init-model --preset small --out "$dir/model" --seed 0 || return 1
  sed -e "s|run_dir: runs/leap_cuda|run_dir: $dir|" -e "s|steps: 200|steps: 2|" \
    -e "s|data/cuda/train.jsonl|sandbox/suite|" -e "s|data/cuda/validation.jsonl|sandbox/suite|" \
    -e "s|model_path: models/policy|model_path: $dir/model|" \
    -e "s|127.0.0.1:8000|127.0.0.1:$port|" -e "s|batch_size: 32|batch_size: 8|" \
    -e "s|max_tokens: 8192|max_tokens: 1024|" -e "s|^  kind: torch|  kind: torch\n  device: cuda|" \
    -e "s|^  flavour: vllm|  flavour: vllm\n  weight_sync: ipc|" \
    configs/leap_cuda.yaml >"$out/leap_cuda.yaml"
  diff configs/leap_cuda.yaml "$out/leap_cuda.yaml"
  # The ipc weight-transfer engine: the server copies each step's weights out of the learner's
  # exported CUDA buffer (policy.weight_sync ipc, added by the sed above).
  "$build/bin/leap" serve-policy --model "$dir/model" --model-name policy --device cuda \
    --weight-transfer-config '{"backend": "ipc"}' --port "$port" >"$out/serve-policy.log" 2>&1 &
  local server=$!
  "$build/bin/leap" run --quiet "$out/leap_cuda.yaml"
  rc=$?
  kill "$server"; wait "$server"
  tail -5 "$out/serve-policy.log"
  "$build/bin/leap" replay "$dir"
  return "$rc"
}

# The learner against transformers on random tiny models of both families (Qwen2: q/k/v biases;
# Qwen3: q/k norms, explicit head_dim): logits and log-probs.
phase_hfcheck() {
  local work=/tmp/leap-hf family rc=0 check
  check=$(find "$build" -name learner_hf_check -type f | head -1)
  mkdir -p "$work"
  for family in qwen2 qwen3; do
    python3 learner/standalone/make_hf_reference.py "$work/hf-$family" "$work/ref-$family.safetensors" \
      cuda "$family" || rc=1
    "$check" "$work/hf-$family" "$work/ref-$family.safetensors" cuda "$family" || rc=1
  done
  return $rc
}

# Weight sync side by side (disk, in memory, ipc with the server in a subprocess on the same GPU;
# nccl needs two GPUs) for the 0.5B, 1.5B and 7B Qwen2
# shapes in bf16, and the disk's own write and read speed to compare the disk method with.
phase_syncbench() {
  local preset
  dd if=/dev/zero of=/tmp/leap-dd bs=1M count=4096 conv=fsync 2>&1 | tail -1
  sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null
  dd if=/tmp/leap-dd of=/dev/null bs=1M 2>&1 | tail -1
  rm -f /tmp/leap-dd
  for preset in ${SYNC_PRESETS:-qwen2-0.5b qwen2-1.5b qwen2-7b}; do
    "$build/bin/bench_weight_sync" --preset "$preset" --device cuda --dtype bfloat16 --dir /tmp/leap-sync
  done
}

# The tokenizer benchmark against Hugging Face's Rust library (python3's `tokenizers`), one core.
# TOKDIR holds tokenizer.json(.gz), tokenizer_config.json and corpus.jsonl(.gz) (the npm reference
# files, which a GPU host cannot install).
phase_tokbench() {
  local src=${TOKDIR:-.gpu/tok} dir=/tmp/leap-tok
  mkdir -p "$dir" && cp "$src"/* "$dir"/ && gunzip -f "$dir"/*.gz
  taskset -c 0 "$build/bin/bench_tokenizer" --tokenizer "$dir" --corpus "$dir/corpus.jsonl" --passes 3
  taskset -c 0 python3 tools/bench/bench_tokenizer_hf.py --tokenizer "$dir" --corpus "$dir/corpus.jsonl" --passes 3
}

# Delta against full weight sync after real optimizer steps (issue 33), with only the bench built.
phase_deltabench() {
  LEAP_TORCH=pip LEAP_BUILD_DIR="$build" "$root/tools/dev.sh" build bench_weight_sync 2>&1 |
    grep -E -B2 -A12 'error|FAILED' | head -40
  local preset
  for preset in ${SYNC_PRESETS:-qwen2-0.5b qwen2-1.5b}; do
    "$build/bin/bench_weight_sync" --preset "$preset" --device cuda:0 \
      --server-device "${SYNC_SERVER_DEVICE:-cuda:0}" --dtype bfloat16 --learner-dtype float32 \
      --lr 1e-6 --delta-steps "${DELTA_STEPS:-5}" --dir /tmp/leap-delta || return 1
  done
}

# The sandbox's GPU tests, with only their target built.
phase_sandbox() {
  LEAP_TORCH=pip LEAP_BUILD_DIR="$build" "$root/tools/dev.sh" build sandbox_tests 2>&1 |
    grep -E -B2 -A12 'error|FAILED' | head -40
  "$build/tests/sandbox_tests" --gtest_brief=1 \
    --gtest_filter="${SANDBOX_FILTER:-CudaCompileTest.*:CudaGpuTest.*:KernelBench*:Adversarial.*:Corpus/*:EngineTest.*}"
}

# `leap` from BASE_SRC's tree into $1 (with this tree's dev.sh) and from this tree, side by side.
build_leap_beside_base() {
  cp "$root/tools/dev.sh" "$BASE_SRC/tools/dev.sh"
  (cd "$BASE_SRC" && LEAP_TORCH=pip LEAP_BUILD_DIR="$1" tools/dev.sh build leap 2>&1 |
    grep -E -A5 'error|FAILED' | head -20) &
  LEAP_TORCH=pip LEAP_BUILD_DIR="$build" "$root/tools/dev.sh" build leap 2>&1 |
    grep -E -A5 'error|FAILED' | head -20
  wait
}

# The timing protocol's figures (issue 31): a suite cuda kernel and a KernelBench problem verified
# repeatedly with --timing 20, each a fresh `leap verify` process, on one compile cache (the
# reference's times kept there: the speedup's spread across verifications is the candidate's) and
# on fresh caches (the reference timed every time: its own spread), then the same KernelBench
# kernels timed by triton's do_bench and KernelBench's own loop beside the judge's medians.
phase_timingab() {
  [[ -n ${BASE_SRC:-} ]] || { echo "timingab: set BASE_SRC"; return 2; }
  local base=/tmp/leap-timing-base d=$out/timingab i tree bin
  build_leap_beside_base "$base"
  rm -rf "$d" && mkdir -p "$d"
  for i in $(seq 1 "${TIMING_AB_RUNS:-12}"); do
    for tree in base new; do
      bin=$build/bin/leap
      [[ $tree == new ]] || bin=$base/bin/leap
      "$bin" verify --timing 100 --json --gpu 0 --task cuda/matmul_square \
        --candidate sandbox/suite/cuda/matmul_square/solution.cu --cache-dir "$d/cache-$tree" \
        >>"$d/${tree}_shared.jsonl" 2>>"$d/$tree.err"
    done
  done
  python3 "$root/tools/gpu/timing_check.py" stability "$d/base_shared.jsonl" "$d/new_shared.jsonl"
}

# KernelBench's timed calls, BASE_SRC's tree against this one: problems of timing_check.py
# (KBTIMINGAB_LABELS, default a 2048^2 matmul with a Triton epilogue and a 4096-element SiLU)
# verified with --timing 100 KBTIMINGAB_RUNS times (default 5) per tree, alternating, each tree on
# its own cache; each side's stability, then both trees' medians beside do_bench's.
phase_kbtimingab() {
  [[ -n ${BASE_SRC:-} ]] || { echo "kbtimingab: set BASE_SRC"; return 2; }
  local base=/tmp/leap-timing-base d=$out/kbtimingab py=$LEAP_SANDBOX_TEST_PYTHON i tree bin label name
  build_leap_beside_base "$base"
  rm -rf "$d" && mkdir -p "$d"
  python3 "$root/tools/gpu/timing_check.py" write "$d"
  for i in $(seq 1 "${KBTIMINGAB_RUNS:-5}"); do
    for label in ${KBTIMINGAB_LABELS:-matmul_relu:problem silu_small:small_problem}; do
      name=${label#*:} label=${label%%:*}
      for tree in base new; do
        bin=$build/bin/leap
        [[ $tree == new ]] || bin=$base/bin/leap
        "$bin" verify --timing 100 --json --gpu 0 --task "$d/$name.py" --python "$py" \
          --candidate "$d/${name/problem/solution}.py" --cache-dir "$d/cache-$tree" \
          >>"$d/${label}_${tree}.jsonl" 2>>"$d/$tree.err"
      done
    done
  done
  python3 "$root/tools/gpu/timing_check.py" stability "$d"/*_base.jsonl "$d"/*_new.jsonl
  for tree in base new; do
    for f in "$d"/*_"$tree".jsonl; do
      label=$(basename "$f" "_$tree.jsonl")
      sed "s/^{/{\"label\":\"$label\",/" "$f" | grep -m1 '^{'
    done >"$d/judged_$tree.jsonl"
    echo "== $tree against do_bench"
    "$py" "$root/tools/gpu/timing_check.py" agree "$d" "$d/judged_$tree.jsonl"
  done
}

phase_timing() {
  LEAP_TORCH=pip LEAP_BUILD_DIR="$build" "$root/tools/dev.sh" build leap 2>&1 |
    grep -E -B2 -A12 'error|FAILED' | head -40
  local d=$out/timing py=$LEAP_SANDBOX_TEST_PYTHON i start=$SECONDS
  local budget=${TIMING_BUDGET:-270} kb=${TIMING_KB_RUNS:-5} base=${TIMING_BASELINE_RUNS:-5}
  local leap=("$build/bin/leap" verify --timing "${TIMING_REPS:-20}" --json --gpu 0)
  local problem=(--task "$d/matmul4k_problem.py" --candidate "$d/matmul4k_solution.py" --python "$py")
  rm -rf "$d" && mkdir -p "$d"
  python3 "$root/tools/gpu/timing_check.py" write "$d"
  # The suite's cuda kernel first: about 2 s a verification. `shared`: one compile cache, whose
  # kept reference time every verification after the first reads (timing_note says "kept from");
  # `fresh`: a cache each, so each times the reference again.
  local suite=(--task cuda/matmul_square --candidate sandbox/suite/cuda/matmul_square/solution.cu)
  for ((i = 1; i <= ${TIMING_RUNS:-10} || i <= ${TIMING_CUDA_FRESH_RUNS:-3}; i++)); do
    ((i > ${TIMING_RUNS:-10})) ||
      "${leap[@]}" "${suite[@]}" --cache-dir "$d/cache" >>"$d/cuda_matmul_square_shared.jsonl"
    if ((i <= ${TIMING_CUDA_FRESH_RUNS:-3})); then
      "${leap[@]}" "${suite[@]}" --cache-dir "$d/fresh" >>"$d/cuda_matmul_square_fresh.jsonl"
      rm -rf "$d/fresh"
    fi
  done
  grep -o '"timing_note":"[^"]*"' "$d/cuda_matmul_square_shared.jsonl" | sort | uniq -c
  # The KernelBench problem's stability, both ways, interleaved so that a cut by the budget leaves
  # both sets alike: `shared`, every verification on one compile cache, as a training run's
  # verifications are (the baselines timed once, kept in the cache: the speedup's spread is the
  # candidate's); `fresh`, each on a cache of its own, so each times both baselines again (their
  # own spread).
  for ((i = 1; i <= kb || i <= base; i++)); do
    if ((SECONDS - start >= budget)); then
      echo "timing: TIMING_BUDGET of $budget s spent after $((i - 1)) KernelBench round(s)"
      break
    fi
    ((i > kb)) || "${leap[@]}" "${problem[@]}" --cache-dir "$d/cache" >>"$d/kb_matmul4k_shared.jsonl"
    if ((i <= base)); then
      "${leap[@]}" "${problem[@]}" --cache-dir "$d/fresh" >>"$d/kb_matmul4k_fresh.jsonl"
      rm -rf "$d/fresh"
    fi
  done
  # The agreement table's other kernels (TIMING_AGREE=1), one verification each: minutes more.
  # Their outputs for 3 trials and 8 timing sets pass through their runs' scratch (the 2 x 512 MiB
  # add's 5.5 GiB; its 11 GiB of inputs the judge draws from their seeds), more than the default
  # 4 GiB, hence TIMING_AGREE_SCRATCH.
  local label name f
  if [[ ${TIMING_AGREE:-0} == 1 ]]; then
    # Smallest reference data first (the 8192^2 matmul 8.3 GiB, the softmax 11, the add 16.5).
    for label in matmul_relu:problem silu_small:small_problem matmul_relu_big:big_problem \
      softmax_rows:softmax_problem add_large:add_problem; do
      name=${label#*:} label=${label%%:*}
      [[ " ${TIMING_AGREE_LABELS:-$label} " == *" $label "* ]] || continue
      # Bounded each, so that one slow problem leaves the others' figures (on an H100 the
      # 2 x 512 MiB add was not done after 4 minutes when its inputs travelled too).
      timeout "${TIMING_AGREE_LIMIT:-300}" "${leap[@]}" --cache-dir "$d/cache" \
        --scratch-bytes "${TIMING_AGREE_SCRATCH:-24GiB}" --task "$d/$name.py" \
        --candidate "$d/${name/problem/solution}.py" --python "$py" >>"$d/kb_$label.jsonl" ||
        echo "timing: $label ended with exit $? (TIMING_AGREE_LIMIT ${TIMING_AGREE_LIMIT:-300} s)"
      # Where a large problem's time went: the reference's cases, the build, the run's steps.
      python3 - "$d/kb_$label.jsonl" "$label" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        v = json.loads(line)
        print("%s: %s, verify %.1f s (compile %.1f s, run %.1f s); reference: %s" % (
            sys.argv[2], v.get("category"), v.get("verify_ms", 0) / 1e3, v.get("compile_ms", 0) / 1e3,
            v.get("run_ms", 0) / 1e3, v.get("reference", "-")))
        if v.get("run_phases_ms"):
            print("  phases (ms): " + ", ".join("%s %.0f" % (n, ms) for n, ms in v["run_phases_ms"]))
PY
    done
  fi
  python3 "$root/tools/gpu/timing_check.py" stability "$d"/*.jsonl
  for label in matmul4k matmul_relu silu_small add_large softmax_rows matmul_relu_big; do
    f=$d/kb_$label.jsonl
    [[ -f $f ]] || f=$d/kb_${label}_shared.jsonl
    [[ -f $f ]] && sed "s/^{/{\"label\":\"$label\",/" "$f" | grep -m1 '^{'
  done >"$d/judged.jsonl"
  "$py" "$root/tools/gpu/timing_check.py" agree "$d" "$d/judged.jsonl"
}

# bench_sandbox, base (BASE_SRC) and new interleaved: base new new base.
phase_sandboxbench() {
  local base=/tmp/leap-sandbox-base rc=0 round tree
  [[ -n ${BASE_SRC:-} ]] || { echo "sandboxbench: set BASE_SRC"; return 2; }
  # The base tree builds with this tree's dev.sh (the same flags; `build TARGET...` is newer) and
  # this tree's benchmark (the same measurement; kinds it learned since run against the old engine).
  cp "$root/tools/dev.sh" "$BASE_SRC/tools/dev.sh"
  cp "$root/tools/bench/bench_sandbox.cpp" "$BASE_SRC/tools/bench/bench_sandbox.cpp"
  for tree in new base; do
    local dir=$build src=$root
    [[ $tree == new ]] || { dir=$base; src=$BASE_SRC; }
    LEAP_TORCH=pip LEAP_BUILD_DIR="$dir" "$src/tools/dev.sh" build bench_sandbox 2>&1 |
      grep -E -B2 -A12 'error|FAILED' | head -20
  done
  for round in $(seq 1 "${SANDBOX_BENCH_ROUNDS:-2}"); do
    local order=(base new)
    ((round == 1)) || order=(new base)
    for tree in "${order[@]}"; do
      local bin=$build/bin/bench_sandbox src=$root
      [[ $tree == new ]] || { bin=$base/bin/bench_sandbox; src=$BASE_SRC; }
      echo "-- $tree, round $round"
      local kind
      for kind in ${SANDBOX_BENCH_KINDS:-cpp cuda}; do
        if [[ $kind == cuda ]]; then
          (cd "$src" && "$bin" --kind cuda --gpu 0 --candidates 12 --workers 1,16) || rc=1
        elif [[ $kind == kernelbench ]]; then
          # Seconds a verification (two Python processes importing torch): few candidates.
          (cd "$src" && "$bin" --kind kernelbench --gpu 0 --candidates 4 --workers 1,4 \
            --python "$LEAP_SANDBOX_TEST_PYTHON") || rc=1
        elif [[ $kind == kbext ]]; then
          # A build is a minute where it happens in the run: one candidate after the first.
          (cd "$src" && "$bin" --kind kernelbench --extension --gpu 0 --candidates 1 \
            --no-throughput --python "$LEAP_SANDBOX_TEST_PYTHON") || rc=1
        else
          (cd "$src" && "$bin" --kind "$kind" --candidates 16 --workers 1,16) || rc=1
        fi
      done
    done
  done
  return $rc
}

# The KernelBench batch: the base for a fixed time, then this tree in the time left (see the
# header).
phase_kbbatch() {
  local base=/tmp/leap-kbbatch-base rc=0 start=$SECONDS left n
  local batch=(--batch "$root/tools/bench/kernelbench_batch/gpu" --gpu 0 --workers 16
    --python "$LEAP_SANDBOX_TEST_PYTHON")
  LEAP_TORCH=pip LEAP_BUILD_DIR="$build" "$root/tools/dev.sh" build bench_sandbox 2>&1 |
    grep -E -B2 -A12 'error|FAILED' | head -20
  local base_bin=$build/bin/bench_sandbox base_src=$root base_args=(--build-in-run)
  if [[ -n ${BASE_SRC:-} ]]; then
    cp "$root/tools/dev.sh" "$BASE_SRC/tools/dev.sh"
    cp "$root/tools/bench/bench_sandbox.cpp" "$BASE_SRC/tools/bench/bench_sandbox.cpp"
    rm -f "$base/bin/bench_sandbox"  # so that a failed build never runs an older one
    LEAP_TORCH=pip LEAP_BUILD_DIR="$base" "$BASE_SRC/tools/dev.sh" build bench_sandbox 2>&1 |
      grep -E -B2 -A12 'error|FAILED' | head -20
    if [[ -x $base/bin/bench_sandbox ]]; then
      base_bin=$base/bin/bench_sandbox base_src=$BASE_SRC base_args=()
    else
      echo "kbbatch: the base did not build: this tree with --build-in-run instead"
    fi
  fi
  # KBBATCH_BASE_SECONDS=0: no base (its projection was measured before), so that this tree's
  # whole batch fits one call on a machine that built it in an earlier call.
  if [[ ${KBBATCH_BASE_SECONDS:-90} != 0 ]]; then
    echo "-- base ${base_args[*]:-$BASE_SRC} at $(date -u +%H:%M:%S) ($((SECONDS - start)) s into the phase)"
    # shellcheck disable=SC2086 # KBBATCH_ARGS is a list of flags
    (cd "$base_src" && "$base_bin" "${batch[@]}" "${base_args[@]}" --in-flight 1 \
      --max-seconds "${KBBATCH_BASE_SECONDS:-90}" ${KBBATCH_ARGS:-}) || rc=1
  fi
  # About 6 s a verification on the one run slot, after about 70 s for torch's precompiled header
  # and the first builds.
  left=$((${KBBATCH_BUDGET:-570} - (SECONDS - start)))
  n=$(((left - 70) / 6))
  ((n <= ${KBBATCH_CANDIDATES:-64})) || n=${KBBATCH_CANDIDATES:-64}
  ((n >= 8)) || n=8
  echo "-- new at $(date -u +%H:%M:%S), $left s left in the phase: $n candidates"
  # shellcheck disable=SC2086
  (cd "$root" && "$build/bin/bench_sandbox" "${batch[@]}" --candidates "$n" ${KBBATCH_ARGS:-}) || rc=1
  return $rc
}


# The KernelBench scale-add problem (a * scale + b) over two inputs of shape $2, written to $1.
scale_add_problem() {
  cat >"$1" <<PY
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b):
        return a * self.scale + b

def get_inputs():
    return [torch.randn($2), torch.randn($2)]

def get_init_inputs():
    return [3.0]
PY
}

# The load_inline CUDA scale-add answer of kbverify's problem (its `.cu` is the one kbheaders
# compiles), written to $1.
scale_add_answer() {
  cat >"$1" <<'PY'
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cuda = """
#include <torch/extension.h>
__global__ void scale_add_kernel(const float* a, const float* b, float* out, float s, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * s + b[i];
}
torch::Tensor scale_add(torch::Tensor a, torch::Tensor b, double s) {
  auto out = torch::empty_like(a);
  long n = a.numel();
  scale_add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                             out.data_ptr<float>(), (float)s, n);
  return out;
}
"""
_ext = load_inline(name="scale_add_ext", cpp_sources="torch::Tensor scale_add(torch::Tensor a, torch::Tensor b, double s);",
                   cuda_sources=_cuda, functions=["scale_add"])


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b):
        return _ext.scale_add(a.contiguous(), b.contiguous(), self.scale)
PY
}

# One load_inline CUDA candidate through `leap verify`, each call a fresh process (issue 30's
# latency targets): cold (empty cache, torch's header built inside), `--prepare` then the first
# verify (as `leap run` and `leap verifier-node` do), the same answer again (everything cached),
# and another source with the same load_inline request (the recorder runs, the build is a hit).
phase_kbverify() {
  LEAP_TORCH=pip LEAP_BUILD_DIR="$build" "$root/tools/dev.sh" build leap 2>&1 |
    grep -E -B2 -A12 'error|FAILED' | head -40
  local d=$out/kbverify py=$LEAP_SANDBOX_TEST_PYTHON
  rm -rf "$d"
  mkdir -p "$d"
  scale_add_problem "$d/problem.py" "4096, 4096"
  scale_add_answer "$d/solution.py"
  sed 's/^import torch$/import torch  # another answer, the same request/' "$d/solution.py" >"$d/other.py"
  local verify=("$build/bin/leap" verify --json --gpu 0 --task "$d/problem.py" --python "$py")
  timed() {  # LABEL CMD...: one line with the wall seconds and the verdict's passed/compile/run
    local label=$1 t0 t1
    shift
    t0=$(date +%s.%N)
    "$@" >"$d/$label.json" 2>"$d/$label.err"
    local rc=$?
    t1=$(date +%s.%N)
    printf '%-28s rc %d  %6.1f s  %s\n' "$label" "$rc" "$(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$t0" "$t1")" \
      "$(python3 -c 'import json,sys
try:
    v = json.load(open(sys.argv[1]))
    print(json.dumps({k: x for k, x in v.items() if k not in ("feedback", "task", "run_phases_ms")})[:400])
    if v.get("run_phases_ms"):
        print("    phases (ms):", ", ".join("%s %.0f" % (n, ms) for n, ms in v["run_phases_ms"]))
except Exception as e:
    print("no verdict:", e)' "$d/$label.json")"
  }
  [[ ${KBVERIFY_COLD:-1} == 0 ]] ||
    timed cold "${verify[@]}" --cache-dir "$d/cache-cold" --candidate "$d/solution.py"
  [[ ${KBVERIFY_PREPARED:-1} == 0 ]] && return 0
  timed prepare "$build/bin/leap" verify --prepare --python "$py" --cache-dir "$d/cache"
  timed first-after-prepare "${verify[@]}" --cache-dir "$d/cache" --candidate "$d/solution.py"
  local i
  # KBVERIFY_WARM=0: straight to the one-process repeat (the warm and same-request rows skipped).
  [[ ${KBVERIFY_WARM:-1} == 0 ]] || for i in 1 2 3; do
    timed "warm-$i" "${verify[@]}" --cache-dir "$d/cache" --candidate "$d/solution.py"
  done
  [[ ${KBVERIFY_WARM:-1} == 0 ]] || for i in 1 2; do
    sed -i "1s/.*/import torch  # answer $i/" "$d/other.py"
    timed "same-request-$i" "${verify[@]}" --cache-dir "$d/cache" --candidate "$d/other.py"
  done
  # One process verifying the same answer KBVERIFY_REPEAT times (default 4): from the second on,
  # the run's judge was started ahead of its job, as in leap run or a verifier node.
  "${verify[@]}" --cache-dir "$d/cache" --candidate "$d/solution.py" \
    --repeat "${KBVERIFY_REPEAT:-4}" --standby-depth "${KBVERIFY_STANDBY_DEPTH:-1}" \
    >"$d/repeat.json" 2>"$d/repeat.err"
  echo "repeat: rc $?"
  python3 -c 'import json, sys
for line in open(sys.argv[1]):
    v = json.loads(line)
    print("  verification %d: passed %s, verify %.0f ms, run %.0f ms" % (v.get("verification", 0), v["passed"], v["verify_ms"], v["run_ms"]))
    print("    phases (ms):", ", ".join("%s %.0f" % (n, ms) for n, ms in v.get("run_phases_ms", [])))' "$d/repeat.json" ||
    tail -5 "$d/repeat.err"
}

# nvcc over a load_inline CUDA source that includes torch/extension.h, as torch's build file has
# it, against the same with the builder's stand-in for the header (torch's types only), side by
# side: what the stand-in saves a cold build's `cuda.cuda.o`.
phase_kbheaders() {
  local d=$out/kbheaders py=$LEAP_SANDBOX_TEST_PYTHON
  rm -rf "$d" && mkdir -p "$d"
  scale_add_answer "$d/solution.py"
  # The builder's own stand-ins (its definitions, read from the source the engine embeds), so that
  # what is measured is what the builder writes.
  (cd "$d" && "$py" - "$root/sandbox/kernelbench_build.cpp" <<'PY'
import os, shlex, subprocess, sys, time
import torch.utils.cpp_extension as ext
text = open(sys.argv[1]).read()
start = text.index("R\"PY(", text.index("kernelbench_builder_source()")) + 5
builder = text[start:text.index(")PY\"", start)]
stand_ins = {}
exec(builder[:builder.index('with open("request.json")')] +
     builder[builder.index("SLIM_HEADER = "):builder.index("def includes_extension_header")], stand_ins)
ext._run_ninja_build = lambda *a, **k: None
ext._import_module_from_library = lambda *a, **k: None
import ast
answer = ast.parse(open("solution.py").read())
cuda = next(n.value.value for n in answer.body
            if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "_cuda")
os.makedirs("build", exist_ok=True)
ext.load_inline(name="kbheaders", cpp_sources="torch::Tensor scale_add(torch::Tensor a, torch::Tensor b, double s);",
                cuda_sources=cuda, functions=["scale_add"], build_directory=os.path.abspath("build"))
for name, files in (("types", {"extension.h": stand_ins["SLIM_HEADER"]}),
                    ("narrow", {"extension.h": stand_ins["SLIM_HEADER"], "types.h": stand_ins["narrow_types_header"]()})):
    os.makedirs(os.path.join(name, "torch"), exist_ok=True)
    for file, body in files.items():
        with open(os.path.join(name, "torch", file), "w") as f:
            f.write(body)
v = {}
for line in open("build/build.ninja"):
    k, sep, val = line.partition(" = ")
    if sep:
        v[k] = val.strip()
base = shlex.split(v["nvcc"]) + shlex.split(v["cuda_cflags"])
post = shlex.split(v["cuda_post_cflags"])
procs = {}
t0 = time.time()
for name, extra in (("the whole header", []), ("torch's types", ["-I" + os.path.abspath("types")]),
                    ("the narrow set", ["-I" + os.path.abspath("narrow"), "-DAT_PER_OPERATOR_HEADERS"])):
    out = name.replace(" ", "_").replace("'", "") + ".o"
    command = [base[0]] + base[1:] + ["-c", "build/cuda.cu", "-o", out] + post + extra
    procs[name] = subprocess.Popen(command)
while procs:
    for name, p in list(procs.items()):
        if p.poll() is not None:
            print(f"nvcc cuda.cu with {name}: {time.time() - t0:.1f} s, exit {p.returncode}")
            del procs[name]
    time.sleep(0.05)
PY
  )
}

# The cost phases' verifications: the suite's cuda/matmul_square and the KernelBench answer
# $1/solution.py to $1/problem.py (labelled $2), each verified in two modes alternating, $3 rounds
# after a first pair that fills the cache, each verdict appended to $1/cost.jsonl with its label and
# mode. $4 and $6: the modes' names; $5 and $7: their `leap verify` flags.
alternate_verifications() {
  local d=$1 rounds=$3 i label mode task cand
  local -A flags=(["$4"]=$5 ["$6"]=$7)
  for label in cuda_matmul_square "$2"; do
    if [[ $label == cuda_* ]]; then
      task=(--task cuda/matmul_square) cand=sandbox/suite/cuda/matmul_square/solution.cu
    else
      task=(--task "$d/problem.py" --python "$LEAP_SANDBOX_TEST_PYTHON") cand=$d/solution.py
    fi
    for ((i = 0; i <= rounds; i++)); do
      for mode in "$4" "$6"; do
        # shellcheck disable=SC2086 # a mode's flags are words
        "$build/bin/leap" verify --json --gpu 0 ${flags[$mode]} "${task[@]}" --candidate "$cand" \
          --cache-dir "$d/cache" >"$d/one.json" 2>>"$d/$label.err"
        ((i == 0)) || sed "s/^{/{\"label\":\"$label\",\"mode\":\"$mode\",/" "$d/one.json" |
          grep -m1 '^{' >>"$d/cost.jsonl"
      done
    done
  done
}

# What timing costs a verification: the suite's cuda/matmul_square and the KernelBench 2048^2 matmul
# verified untimed and with --timing TIMINGCOST_REPS (default 20), alternating, TIMINGCOST_RUNS
# times each (default 5), all on one compile cache as a training run's verifications are (so the
# baselines are timed once, in a first pair that is left out); the medians of each mode's verify
# and run (GPU-slot) seconds and what timing adds. A timed run also takes its GPU alone, which
# the run seconds do not show: with verifier.runs_per_gpu 2 an untimed run holds half a GPU.
phase_timingcost() {
  LEAP_TORCH=pip LEAP_BUILD_DIR="$build" "$root/tools/dev.sh" build leap 2>&1 |
    grep -E -B2 -A12 'error|FAILED' | head -40
  local d=$out/timingcost reps=${TIMINGCOST_REPS:-20}
  rm -rf "$d" && mkdir -p "$d"
  python3 "$root/tools/gpu/timing_check.py" write "$d"
  alternate_verifications "$d" kb_matmul_relu "${TIMINGCOST_RUNS:-5}" \
    untimed "--timing 0" timed "--timing $reps"
  python3 "$root/tools/gpu/timing_check.py" cost "$d/cost.jsonl"
}

# What profiling costs per candidate (`leap verify --profile passing`): the suite's
# cuda/matmul_square and a load_inline scale-add over 16M floats, each verified without and with
# the profile, alternating, PROFILECOST_RUNS times (default 3) on one cache after a first pair that
# fills it; the profiling run's own seconds beside what it adds to a verification.
phase_profilecost() {
  LEAP_TORCH=pip LEAP_BUILD_DIR="$build" "$root/tools/dev.sh" build leap 2>&1 |
    grep -E -B2 -A12 'error|FAILED' | head -40
  local d=$out/profilecost
  rm -rf "$d" && mkdir -p "$d"
  scale_add_problem "$d/problem.py" "1 << 24"
  scale_add_answer "$d/solution.py"
  alternate_verifications "$d" kb_scale_add "${PROFILECOST_RUNS:-3}" \
    off "--profile off" passing "--profile passing"
  python3 - "$d/cost.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for label in dict.fromkeys(r["label"] for r in rows):
    off = [r for r in rows if r["label"] == label and r["mode"] == "off"]
    on = [r for r in rows if r["label"] == label and r["mode"] == "passing"]
    med = lambda rs, k: statistics.median(r[k] for r in rs) / 1000.0
    prof = [r["profile"] for r in on if "profile" in r]
    secs = statistics.median(p["seconds"] for p in prof) if prof else float("nan")
    kernels = sorted({"%s %s %.1f us" % (k["name"], k["bottleneck"], k["duration_ns"] / 1e3)
                      for p in prof for k in p["kernels"]})
    notes = sorted({p["note"] for p in prof if p["note"]})
    print("%s: %d+%d verifications, passed %d/%d; verify %.2f s without, %.2f s with the profile "
          "(+%.2f s); the profiling run %.2f s (source %s); kernels: %s%s" % (
              label, len(off), len(on), sum(r["passed"] for r in off + on), len(off) + len(on),
              med(off, "verify_ms"), med(on, "verify_ms"), med(on, "verify_ms") - med(off, "verify_ms"),
              secs, ",".join(sorted({p["source"] for p in prof})) or "none",
              "; ".join(kernels) or "none", ("; notes: " + " | ".join(notes)) if notes else ""))
PY
}

# $1: the config, $2: its run folder, $3: seed; the learner (and so the embedded server) on cuda.
inflight_config() {
  sed -e "s|runs/[a-z_]*|$2|g" -e "s|^  seed: 1\$|  seed: $3|" \
    -e "s|^  steps: 60\$|  steps: ${INFLIGHT_STEPS:-60}|" \
    -e "s|max_tokens: 8 |max_tokens: ${INFLIGHT_MAX_TOKENS:-8} |; s|max_tokens: 8\$|max_tokens: ${INFLIGHT_MAX_TOKENS:-8}|" \
    -e "s|^  kind: torch\$|  kind: torch\n  device: cuda|" "$1"
}

phase_inflightlearn() {
  LEAP_TORCH=pip LEAP_BUILD_DIR="$build" "$root/tools/dev.sh" build leap 2>&1 |
    grep -E -B2 -A12 'error|FAILED' | head -40
  local d=$out/inflightlearn seed arm run start
  rm -rf "$d" && mkdir -p "$d"
  nvidia-smi --query-gpu=name --format=csv,noheader
  for seed in ${INFLIGHT_SEEDS:-1 2 3}; do
    for arm in learn_digits learn_digits_inflight; do
      run=$d/$arm-$seed
      inflight_config "configs/$arm.yaml" "$run" "$seed" >"$run.yaml"
      grep -E "^  (seed|steps|device):|max_tokens" "$run.yaml" | tr -s ' ' | tr '\n' ' '
      echo
      start=$(date +%s%N)
      "$build/bin/leap" run --quiet "$run.yaml" >"$run.log" 2>&1 || { tail -20 "$run.log"; return 1; }
      echo "$arm $seed $((($(date +%s%N) - start) / 1000000))" >>"$d/wall.txt"
      "$build/bin/leap" replay "$run" --out "$run-replay" >/dev/null || return 1
      "$build/bin/leap" export "$run" --format csv --out "$run-turns.csv" >/dev/null || return 1
    done
  done
  python3 - "$d" <<'PY'
import csv, statistics, sys
d = sys.argv[1]
print("| arm | seed | wall s | pass@1 last 10 | pass@2 last 10 | 5-step pass@1 >= 0.10 at step | turns | cut turns |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for line in open(d + "/wall.txt"):
    arm, seed, wall_ms = line.split()
    run = "%s/%s-%s" % (d, arm, seed)
    steps = [r for r in csv.DictReader(open(run + "-replay/steps.csv")) if r["step"] != "all"]
    acc1 = [float(r["acc_at_1"] or 0) for r in steps]
    acc2 = [float(r["acc_at_2"] or 0) for r in steps]
    reached = next((i + 1 for i in range(4, len(acc1)) if statistics.mean(acc1[i - 4:i + 1]) >= 0.10), "-")
    turns = list(csv.DictReader(open(run + "-turns.csv")))
    cut = sum(1 for t in turns if len(t["weight_segments"].split()) > 1)
    print("| %s | %s | %.0f | %.3f | %.3f | %s | %d | %d |" % (
        arm, seed, float(wall_ms) / 1000, statistics.mean(acc1[-10:]), statistics.mean(acc2[-10:]), reached, len(turns), cut))
PY
}

phase_outputcopy() {
  LEAP_TORCH=pip LEAP_BUILD_DIR="$build" "$root/tools/dev.sh" build leap 2>&1 |
    grep -E -B2 -A12 'error|FAILED' | head -40
  local d=$out/outputcopy i cand
  rm -rf "$d" && mkdir -p "$d"
  scale_add_problem "$d/problem.py" "${OUTPUTCOPY_ELEMENTS:-1 << 27}"
  sed -e 's/^class Model(/class ModelNew(/' -e '/^def get_/,$d' "$d/problem.py" >"$d/honest.py"
  # The corpus's copy-skipping answer's way to the judge's output buffer, on this problem.
  sed '/^class ModelNew/,$d' "$root/tests/sandbox/adversarial/kernelbench/skip_output_copy.py" >"$d/skip_copy.py"
  cat >>"$d/skip_copy.py" <<'PY'
class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b):
        out = _judge_output_view()
        if out is None or out.shape != a.shape or out.device != a.device:
            return a * self.scale + b
        return torch.add(a * self.scale, b, out=out)  # no copy of its own to pay, were it the runner's
PY
  for ((i = 0; i < ${OUTPUTCOPY_RUNS:-3}; i++)); do
    for cand in honest skip_copy; do
      "$build/bin/leap" verify --json --gpu 0 --timing 100 --task "$d/problem.py" \
        --python "$LEAP_SANDBOX_TEST_PYTHON" --scratch-bytes "${OUTPUTCOPY_SCRATCH:-16GiB}" \
        --candidate "$d/$cand.py" --cache-dir "$d/cache" 2>>"$d/$cand.err" |
        python3 -c '
import json, sys
d = json.load(sys.stdin)
c = d.get("candidate_time") or {}
print("%-9s %-6s candidate median %s ms, speedup %s" % (sys.argv[1], d.get("category"),
      c.get("median_ms"), d.get("speedup")))' "$cand"
    done
  done
}

# What a KernelBench run's fixed costs are on this host (a warm run took 13-16 s on an H100):
# torch's import, a CUDA context, two of them side by side (the judge and the runner), and moving a
# problem's inputs to the device. No build.
phase_kbcosts() {
  local py=$LEAP_SANDBOX_TEST_PYTHON i
  local ctx="import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"
  nproc
  grep -m1 'model name' /proc/cpuinfo
  for i in 1 2 3; do /usr/bin/time -f "%e s wall, %U s user: import torch" "$py" -c "import torch"; done
  for i in 1 2; do /usr/bin/time -f "%e s wall, %U s user: import torch, a CUDA context" "$py" -c "$ctx"; done
  /usr/bin/time -f "%e s wall: two of those side by side" bash -c "\"$py\" -c \"$ctx\" & \"$py\" -c \"$ctx\" & wait"
  "$py" - <<'PY'
import time
import torch
t = time.time(); x = [torch.randn(4096, 4096) for _ in range(6)]
print("randn of 6 x 64 MiB on the host: %.2f s" % (time.time() - t))
t = time.time(); y = [a.cuda() for a in x]; torch.cuda.synchronize()
print("to the device: %.2f s" % (time.time() - t))
PY
}

for p in "${phases[@]}"; do
  step "$p"
  if ! declare -F "phase_$p" >/dev/null; then echo "unknown phase $p"; exit 2; fi
  "phase_$p" 2>&1 | tee "$out/$p.log"
  rc=${PIPESTATUS[0]}
  echo "== $p: exit $rc"
  [[ $rc -eq 0 ]] || status=1
done
exit $status
