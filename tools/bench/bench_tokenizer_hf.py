#!/usr/bin/env python3
"""Encoding throughput of Hugging Face `tokenizers` (the Rust library) on one thread, on the corpus
bench_tokenizer reads, for a side-by-side comparison (see bench_tokenizer.sh).

  python3 tools/bench/bench_tokenizer_hf.py --tokenizer DIR --corpus CORPUS.jsonl [--passes N]

Two figures: `encode` called once per string (what a server does per request), and `encode_batch`
over the whole corpus with Rayon limited to one thread (the library's own loop, without Python's
per-call cost).
"""
import argparse
import json
import os
import time

# One thread: set before the library starts its Rayon pool.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import tokenizers  # noqa: E402


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def fnv1a(all_ids):
    h = 1469598103934665603
    for ids in all_ids:
        for i in ids:
            h = ((h ^ i) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--passes", type=int, default=3)
    a = p.parse_args()
    with open(a.corpus, encoding="utf-8") as f:
        texts = [json.loads(line) for line in f if line.strip()]
    size = sum(len(t.encode("utf-8")) for t in texts)
    before = rss_kib()
    t0 = time.perf_counter()
    tok = tokenizers.Tokenizer.from_file(os.path.join(a.tokenizer, "tokenizer.json"))
    load_s = time.perf_counter() - t0
    after = rss_kib()
    print(f"tokenizer: {a.tokenizer} (tokenizers {tokenizers.__version__})")
    print(f"corpus: {len(texts)} strings, {size / 1e6:.2f} MB")
    print(f"load: {load_s:.2f} s; memory held: {(after - before) / 1024:.1f} MiB RSS growth")
    print("pass              seconds         MB/s       tokens/s      cpu s     MB/cpu-s       tokens         fnv1a(ids)")
    for mode in ("encode", "encode_batch"):
        for n in range(a.passes):
            start = time.perf_counter()
            cpu_start = time.process_time()
            if mode == "encode":
                all_ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
            else:
                all_ids = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
            s = time.perf_counter() - start
            cpu = time.process_time() - cpu_start
            tokens = sum(len(i) for i in all_ids)
            label = f"{mode} {'cold' if n == 0 else 'warm'}"
            print(f"{label:<17} {s:10.3f} {size / 1e6 / s:12.2f} {tokens / s:14.0f} {cpu:10.3f} {size / 1e6 / cpu:12.2f} "
                  f"{tokens:12d} {fnv1a(all_ids):18x}")
    # The round trip classes the C++ bench prints: back byte for byte, back as the file's
    # normalizer wrote it (normalize_str; e.g. NFC), or otherwise.
    normalizer = tok.normalizer
    exact = normalized = other = 0
    for t, ids in zip(texts, all_ids):
        back = tok.decode(ids, skip_special_tokens=False)
        if back == t:
            exact += 1
        elif normalizer is not None and back == normalizer.normalize_str(t):
            normalized += 1
        else:
            other += 1
    print(f"decode: {exact} of {len(texts)} strings come back byte for byte, {normalized} as the "
          f"file's normalizer wrote them, {other} otherwise")


if __name__ == "__main__":
    main()
