// Encoding throughput of tokenizer/ on one thread, and the memory a loaded tokenizer holds.
//
//   bench_tokenizer --tokenizer DIR --corpus CORPUS.jsonl [--passes N]
//
// CORPUS.jsonl has one JSON string per line (tests/tokenizer/reference/corpus.cjs writes it). The
// first pass starts with an empty word cache (cold); the next passes reuse it (warm), as a
// long-running server does. The id count and an FNV-1a hash of all ids let the figures of
// bench_tokenizer_js.cjs and bench_tokenizer_hf.py be checked to come from identical ids.
#include "tokenizer/tokenizer.hpp"
#include "tools/bench/bench_main.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <exception>
#include <fstream>
#include <malloc.h>
#include <sched.h>
#include <string>
#include <vector>

namespace {

// CPU seconds of this thread: on a shared machine wall time also counts the time others ran.
double cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

long rss_kib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::stol(line.substr(6));
    }
  }
  return -1;
}

std::size_t heap_in_use() {
  malloc_trim(0);
  return mallinfo2().uordblks;
}

int parse_and_run(int argc, char** argv) {
  std::string dir;
  std::string corpus_path;
  int passes = 3;
  CLI::App app{"Encoding throughput of a Hugging Face tokenizer.json on one thread"};
  app.add_option("--tokenizer", dir, "Folder with tokenizer.json (and tokenizer_config.json)")
      ->required();
  app.add_option("--corpus", corpus_path, "One JSON string per line")->required();
  app.add_option("--passes", passes, "Passes over the corpus (the first is cold)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  // One core: the figure is single-thread speed, comparable with the other two benchmarks.
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  sched_setaffinity(0, sizeof one, &one);

  std::vector<std::string> texts;
  std::size_t bytes = 0;
  {
    std::ifstream in(corpus_path);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", corpus_path.c_str());
      return 1;
    }
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) {
        continue;
      }
      texts.push_back(nlohmann::json::parse(line).get<std::string>());
      bytes += texts.back().size();
    }
  }

  const std::size_t heap_before = heap_in_use();
  const long rss_before = rss_kib();
  const auto t0 = std::chrono::steady_clock::now();
  auto loaded = leap::tokenizer::hf_tokenizer::load(dir);
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!loaded) {
    std::fprintf(stderr, "%s\n", loaded.err().message.c_str());
    return 1;
  }
  const auto& tok = loaded.value();
  const std::size_t heap_after = heap_in_use();
  const long rss_after = rss_kib();

  std::printf("tokenizer: %s (vocabulary %d)\n", dir.c_str(), tok.vocab_size());
  std::printf("corpus: %zu strings, %.2f MB\n", texts.size(), static_cast<double>(bytes) / 1e6);
  std::printf("load: %.2f s; memory held: %.1f MiB heap in use, %.1f MiB RSS growth\n", load_s,
              static_cast<double>(heap_after - heap_before) / (1 << 20),
              static_cast<double>(rss_after - rss_before) / 1024.0);
  std::printf("%-6s %10s %12s %14s %10s %12s %12s %18s\n", "pass", "seconds", "MB/s", "tokens/s",
              "cpu s", "MB/cpu-s", "tokens", "fnv1a(ids)");
  std::vector<std::vector<leap::tokenizer::token_id>> all;
  for (int p = 0; p < passes; ++p) {
    all.clear();
    std::uint64_t hash = 1469598103934665603ULL;
    std::size_t tokens = 0;
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = cpu_s();
    for (const auto& s : texts) {
      all.push_back(tok.encode(s));
    }
    const double s_encode =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double cpu = cpu_s() - cpu_start;
    for (const auto& ids : all) {
      tokens += ids.size();
      for (const auto id : ids) {
        hash = (hash ^ static_cast<std::uint32_t>(id)) * 1099511628211ULL;
      }
    }
    const double s = s_encode;
    std::printf("%-6s %10.3f %12.2f %14.0f %10.3f %12.2f %12zu %18llx\n", p == 0 ? "cold" : "warm",
                s, static_cast<double>(bytes) / 1e6 / s, static_cast<double>(tokens) / s, cpu,
                static_cast<double>(bytes) / 1e6 / cpu, tokens,
                static_cast<unsigned long long>(hash));
  }
  // Decoding, one call per string (a server decodes each answer), and whether it gives the text
  // back.
  std::vector<std::string> decoded(all.size());
  const auto start = std::chrono::steady_clock::now();
  std::size_t out_bytes = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    decoded[i] = tok.decode(all[i]);
    out_bytes += decoded[i].size();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Why a string does not come back (tokenizer.hpp's classify_round_trip), outside the timing.
  std::size_t classes[3] = {0, 0, 0};
  std::vector<std::size_t> others;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto c = leap::tokenizer::classify_round_trip(tok, texts[i], decoded[i]);
    ++classes[static_cast<int>(c)];
    if (c == leap::tokenizer::round_trip::other && others.size() < 3) {
      others.push_back(i);
    }
  }
  std::printf(
      "decode: %.3f s, %.2f MB/s; %zu of %zu strings come back byte for byte, %zu as the "
      "file's normalizer wrote them (e.g. NFC; no decoder undoes it), %zu otherwise\n",
      s, static_cast<double>(out_bytes) / 1e6 / s, classes[0], all.size(), classes[1], classes[2]);
  for (const auto i : others) {
    const auto shown = [](const std::string& t) {
      return nlohmann::json(t).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    };
    std::printf("  string %zu: %s\n  decoded:   %s\n", i, shown(texts[i]).c_str(),
                shown(decoded[i]).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return leap::bench::main_of("bench_tokenizer", parse_and_run, argc, argv);
}
