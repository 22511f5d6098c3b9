// bench_learner: tokens per second (and peak accelerator memory) of the learner's update step and
// of KV-cache sampling, for a random-weight model of a chosen shape, on CPU or GPU.
//
//   bench_learner                                   # small model on CPU, a few seconds
//   bench_learner --device cuda --dtype bfloat16 --preset qwen2-0.5b --batch 8 --seq 2048
//   bench_learner --skip-sampling --world-size 2    # data parallel: ranks 1.. are
//                                                   # leap-learner-rank processes (cuda: one GPU
//                                                   each)
//
// The update is the real one (chunked log-probs, clipped surrogate, AdamW with float32 masters,
// gradient clipping); sampling decodes `n` completions of one prompt. Numbers are printed as text
// and as one JSON line per measurement (prefixed "json: ") for scripts.
#include "learner/policy.hpp"
#include "learner/rank_workers.hpp"
#include "learner/trainer.hpp"
#include "tools/bench/bench_main.hpp"
#include "tools/bench/learner_presets.hpp"

#include <CLI/CLI.hpp>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <sys/resource.h>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

struct bench_args {
  std::string device = "cpu";
  std::string dtype = "float32";
  std::string preset = "small";
  std::int64_t batch = 4;
  std::int64_t seq = 256;
  std::int64_t steps = 3;
  std::int64_t warmup = 1;
  std::int64_t micro_batch_tokens = 8192;
  std::int64_t logprob_chunk = 1024;
  bool checkpointing = false;
  std::int64_t prompt = 32;
  std::int64_t sample_tokens = 64;
  std::int64_t n = 8;
  bool skip_update = false;
  bool skip_sampling = false;
  std::string trace;  // Chrome trace of one more update step, if set
  int world_size = 1;
  std::string master = "127.0.0.1:29517";
};

// Ranks 1..world_size-1 of a data-parallel update: leap-learner-rank from this binary's folder,
// on `device` (cuda: rank r on cuda:r).
leap::result<leap::learner::rank_workers> spawn_ranks(const bench_args& a,
                                                      const std::string& self) {
  const auto slash = self.rfind('/');
  leap::learner::rank_workers_options o;
  o.executable = (slash == std::string::npos ? std::string(".") : self.substr(0, slash)) +
                 "/leap-learner-rank";
  o.master = a.master;
  o.world_size = a.world_size;
  for (int r = 0; r < a.world_size; ++r) {
    o.devices.push_back(a.device == "cuda" ? "cuda:" + std::to_string(r) : a.device);
  }
  return leap::learner::rank_workers::spawn(o);
}

double max_rss_gib(const rusage& u) { return static_cast<double>(u.ru_maxrss) / (1024.0 * 1024.0); }

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

double gib(std::int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

int fail(const std::string& what, const leap::error& e) {
  std::cerr << "bench_learner: error: " << what << ": " << e.message << "\n";
  return 1;
}

int run(int argc, char** argv) {
  bench_args a;
  CLI::App app{"Benchmark of the LibTorch learner: update and sampling tokens/s"};
  app.add_option("--device", a.device, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--dtype", a.dtype, "float32, bfloat16, float16, float64")->capture_default_str();
  app.add_option(
         "--preset", a.preset,
         "model shape: tiny, small, qwen2-0.5b, qwen2-1.5b, qwen3-0.6b, qwen3-1.7b, qwen3-8b")
      ->capture_default_str();
  app.add_option("--batch", a.batch, "sequences per update")->capture_default_str();
  app.add_option("--seq", a.seq, "tokens per sequence")->capture_default_str();
  app.add_option("--steps", a.steps, "timed update steps")->capture_default_str();
  app.add_option("--warmup", a.warmup, "untimed update steps first")->capture_default_str();
  app.add_option("--micro-batch-tokens", a.micro_batch_tokens, "padded tokens per forward/backward")
      ->capture_default_str();
  app.add_option("--logprob-chunk", a.logprob_chunk, "positions per log-prob chunk")
      ->capture_default_str();
  app.add_flag("--checkpointing", a.checkpointing, "recompute layers in the backward pass");
  app.add_option("--prompt", a.prompt, "sampling: prompt tokens")->capture_default_str();
  app.add_option("--sample-tokens", a.sample_tokens, "sampling: tokens per completion")
      ->capture_default_str();
  app.add_option("--n", a.n, "sampling: completions decoded together")->capture_default_str();
  app.add_flag("--skip-update", a.skip_update, "only benchmark sampling");
  app.add_flag("--skip-sampling", a.skip_sampling, "only benchmark the update");
  app.add_option("--world-size", a.world_size,
                 "data-parallel ranks for the update; ranks 1.. run leap-learner-rank from this "
                 "binary's folder (cuda: rank r on cuda:r)")
      ->capture_default_str();
  app.add_option("--master", a.master, "host:port of the data-parallel group's store")
      ->capture_default_str();
  app.add_option(
      "--trace", a.trace,
      "after the timed steps, profile one more update and write its Chrome trace "
      "(kernels and the trainer's phases) to this file; see tools/bench/trace_summary.py");
  CLI11_PARSE(app, argc, argv);
  leap::learner::keep_freed_host_memory();  // as `leap` does: CPU numbers otherwise measure faults

  const auto chosen = leap::bench::learner_preset(a.preset);
  if (!chosen) {
    return fail("--preset", chosen.err());
  }
  const auto& config = *chosen;
  leap::learner::policy_options popts;
  popts.device = a.device;
  popts.dtype = a.dtype;
  popts.logprob_chunk = a.logprob_chunk;
  popts.activation_checkpointing = a.checkpointing;
  const auto t_init = clock_type::now();
  auto created = leap::learner::policy::create_random(config, 1, popts);
  if (!created) {
    return fail("creating the model", created.err());
  }
  std::printf(
      "model %s (vocab %lld, hidden %lld, layers %lld, heads %lld/%lld) on %s as %s, built in %.1f "
      "s\n",
      a.preset.c_str(), static_cast<long long>(config.vocab_size),
      static_cast<long long>(config.hidden_size), static_cast<long long>(config.num_hidden_layers),
      static_cast<long long>(config.num_attention_heads),
      static_cast<long long>(config.num_key_value_heads), created->device().c_str(),
      created->dtype().c_str(), seconds_since(t_init));

  std::mt19937_64 engine(7);
  std::uniform_int_distribution<std::int32_t> token(
      0, static_cast<std::int32_t>(config.vocab_size - 1));

  if (!a.skip_sampling) {
    std::vector<std::int32_t> prompt(static_cast<std::size_t>(a.prompt));
    for (auto& t : prompt) {
      t = token(engine);
    }
    leap::learner::sampling_params sp;
    sp.max_tokens = a.sample_tokens;
    sp.n = a.n;
    sp.temperature = 1.0;
    sp.seed = 3;
    auto warm_up = sp;  // a short run first: allocator and kernels
    warm_up.max_tokens = 2;
    (void)created->sample(prompt, warm_up);
    (void)leap::learner::reset_peak_memory(a.device);
    const auto start = clock_type::now();
    auto out = created->sample(prompt, sp);
    (void)leap::learner::synchronize(a.device);
    const double s = seconds_since(start);
    if (!out) {
      return fail("sampling", out.err());
    }
    std::int64_t generated = 0;
    for (const auto& c : *out) {
      generated += static_cast<std::int64_t>(c.token_ids.size());
    }
    const auto mem = leap::learner::memory_stats(a.device);
    const double peak = mem ? gib(mem->peak_allocated_bytes) : 0.0;
    std::printf("sampling: %lld tokens (n %lld x %lld) in %.3f s: %.1f tokens/s, peak %.2f GiB\n",
                static_cast<long long>(generated), static_cast<long long>(a.n),
                static_cast<long long>(a.sample_tokens), s, static_cast<double>(generated) / s,
                peak);
    std::printf(
        "json: "
        "{\"bench\":\"sampling\",\"preset\":\"%s\",\"device\":\"%s\",\"dtype\":\"%s\",\"n\":%lld,"
        "\"tokens\":%lld,\"seconds\":%.6f,\"tokens_per_second\":%.3f,\"peak_gib\":%.3f}\n",
        a.preset.c_str(), a.device.c_str(), a.dtype.c_str(), static_cast<long long>(a.n),
        static_cast<long long>(generated), s, static_cast<double>(generated) / s, peak);
  }

  if (!a.skip_update) {
    leap::learner::trainer_options topts;
    topts.optimizer.lr = 1e-6;
    topts.batching.micro_batch_tokens = a.micro_batch_tokens;
    std::optional<leap::learner::rank_workers> ranks;
    if (a.world_size > 1) {
      auto spawned = spawn_ranks(a, argv[0]);
      if (!spawned) {
        return fail("spawning the data-parallel ranks", spawned.err());
      }
      ranks = std::move(*spawned);
      topts.distributed.world_size = a.world_size;
      topts.distributed.master = a.master;
    }
    auto t = leap::learner::trainer::create(std::move(*created), topts);
    if (!t) {
      return fail("creating the trainer", t.err());
    }
    // Prompt (first eighth) untrained, the rest trained; behaviour log-probs need not be the
    // model's for timing (the arithmetic is the same).
    leap::learner::update_batch batch;
    for (std::int64_t i = 0; i < a.batch; ++i) {
      leap::learner::sequence s;
      const auto n = static_cast<std::size_t>(a.seq);
      s.token_ids.resize(n);
      for (auto& x : s.token_ids) {
        x = token(engine);
      }
      s.loss_mask.assign(n, 1);
      std::fill(s.loss_mask.begin(),
                s.loss_mask.begin() + static_cast<std::ptrdiff_t>(std::max<std::size_t>(1, n / 8)),
                0);
      s.behaviour_logprobs.assign(n, -std::log(static_cast<float>(config.vocab_size)));
      s.advantages.assign(n, i % 2 == 0 ? 1.0F : -1.0F);
      batch.sequences.push_back(std::move(s));
    }
    for (std::int64_t i = 0; i < a.warmup; ++i) {
      if (auto r = t->update(batch); !r) {
        return fail("warm-up update", r.err());
      }
    }
    (void)leap::learner::reset_peak_memory(a.device);
    double total = 0;
    for (std::int64_t i = 0; i < a.steps; ++i) {
      const auto start = clock_type::now();
      auto r = t->update(batch);
      (void)leap::learner::synchronize(a.device);
      const double s = seconds_since(start);
      if (!r) {
        return fail("update", r.err());
      }
      total += s;
      const auto tokens = a.batch * a.seq;
      std::printf(
          "update %lld: %lld tokens in %.3f s: %.1f tokens/s (loss %.4f, grad norm %.3f, entropy "
          "%.3f)\n",
          static_cast<long long>(i) + 1, static_cast<long long>(tokens), s,
          static_cast<double>(tokens) / s, r->summary.loss, r->summary.grad_norm,
          r->summary.entropy);
    }
    const auto mem = leap::learner::memory_stats(a.device);
    const double peak = mem ? gib(mem->peak_allocated_bytes) : 0.0;
    const double tps = static_cast<double>(a.batch * a.seq * a.steps) / total;
    if (!a.trace.empty()) {
      namespace prof = torch::profiler::impl;
      const std::set<prof::ActivityType> activities{prof::ActivityType::CPU,
                                                    prof::ActivityType::CUDA};
      const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
      torch::autograd::profiler::prepareProfiler(config, activities);
      torch::autograd::profiler::enableProfiler(config, activities);
      auto r = t->update(batch);
      (void)leap::learner::synchronize(a.device);
      auto result = torch::autograd::profiler::disableProfiler();
      if (!r) {
        return fail("traced update", r.err());
      }
      try {
        result->save(a.trace);
      } catch (const std::exception& e) {  // a LibTorch built without Kineto cannot write traces
        const std::string what = e.what();
        std::cerr << "bench_learner: error: writing the trace '" << a.trace
                  << "': " << what.substr(0, what.find('\n')) << "\n";
        return 1;
      }
      std::printf("trace of one update written to %s\n", a.trace.c_str());
    }
    std::printf("update: mean %.1f tokens/s over %lld steps (batch %lld x %lld), peak %.2f GiB\n",
                tps, static_cast<long long>(a.steps), static_cast<long long>(a.batch),
                static_cast<long long>(a.seq), peak);
    std::printf(
        "json: "
        "{\"bench\":\"update\",\"preset\":\"%s\",\"device\":\"%s\",\"dtype\":\"%s\",\"batch\":%lld,"
        "\"seq\":%lld,\"steps\":%lld,\"checkpointing\":%s,\"tokens_per_second\":%.3f,\"peak_gib\":%"
        ".3f}\n",
        a.preset.c_str(), a.device.c_str(), a.dtype.c_str(), static_cast<long long>(a.batch),
        static_cast<long long>(a.seq), static_cast<long long>(a.steps),
        a.checkpointing ? "true" : "false", tps, peak);
    if (a.world_size > 1) {
      { const auto release = std::move(*t); }  // the ranks exit when rank 0's trainer goes away
      rusage self{};
      ::getrusage(RUSAGE_SELF, &self);
      std::printf("data parallel: %d ranks, %.1f tokens/s in all; max RSS rank 0 %.2f GiB",
                  a.world_size, tps, max_rss_gib(self));
      std::string rss = "[" + std::to_string(max_rss_gib(self));
      const auto ended = ranks->wait();
      for (int r = 1; r < a.world_size; ++r) {
        const double gib = static_cast<double>(ranks->max_rss_kib(r)) / (1024.0 * 1024.0);
        std::printf(", rank %d %.2f GiB", r, gib);
        rss += "," + std::to_string(gib);
      }
      if (!ended) {
        std::fprintf(stderr, "\nbench_learner: %s\n", ended.err().message.c_str());
      }
      std::printf(
          "\njson: {\"bench\":\"update_dp\",\"world_size\":%d,\"tokens_per_second\":%.3f,"
          "\"max_rss_gib\":%s]}\n",
          a.world_size, tps, rss.c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return leap::bench::main_of("bench_learner", run, argc, argv); }
