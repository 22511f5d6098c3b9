#!/usr/bin/env bash
# On a GPU machine, after building learner/standalone into BUILD: the comparison with transformers,
# then the update benchmark of ours and of transformers + PyTorch eager with the same loss.
#   learner/standalone/run_gpu_checks.sh BUILD [PRESET] [BATCH] [SEQ]
# PRESET: qwen2-0.5b (default), qwen2-1.5b, qwen3-0.6b, qwen3-1.7b, qwen3-8b.
# Results go to $OUT (or /tmp/leap-gpu-checks).
set -uo pipefail
build=$1
preset=${2:-qwen2-0.5b}
batch=${3:-8}
seq=${4:-2048}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${OUT:-/tmp/leap-gpu-checks}
work=$(mktemp -d)
mkdir -p "$out"
status=0
# Both families against transformers: Qwen2 (q/k/v biases) and Qwen3 (q/k norms, explicit head_dim).
for family in qwen2 qwen3; do
  python3 "$here/make_hf_reference.py" "$work/hf-$family" "$work/reference-$family.safetensors" cuda \
    "$family" 2>&1 | tee "$out/hf_reference_$family.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
  "$build/learner_hf_check" "$work/hf-$family" "$work/reference-$family.safetensors" cuda "$family" 2>&1 |
    tee "$out/hf_check_$family.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
done
"$build/bench_learner" --device cuda --dtype bfloat16 --preset "$preset" --batch "$batch" --seq "$seq" --steps 3 \
  --micro-batch-tokens 16384 --sample-tokens 128 --n 8 2>&1 | tee "$out/bench_ours.txt"
"$build/bench_learner" --device cuda --dtype bfloat16 --preset "$preset" --batch "$batch" --seq "$seq" --steps 3 \
  --micro-batch-tokens 16384 --checkpointing --skip-sampling 2>&1 | tee "$out/bench_ours_checkpointing.txt"
python3 "$here/bench_hf.py" "$preset" "$batch" "$seq" 3 2>&1 | tee "$out/bench_hf.txt"
rm -rf "$work"
exit $status
