// Weight sync, side by side: seconds from "the learner's step is done" to "the served copy holds
// the new weights and has run one forward pass on them" (what the next request would wait for),
// for each way the weights can travel, on one model shape. The served copy is a second
// learner::policy in this process, as the embedded server's is; the HTTP round trips of a sync
// (milliseconds) are not in these numbers, so that shapes the byte-level server cannot serve
// (Qwen2's vocabulary) can be timed.
//
//   disk       policy::save of a step folder (safetensors) + reload_weights from it: vLLM's
//              /collective_rpc reload_weights and SGLang's /update_weights_from_disk do this work
//   in_memory  copy_weights_from: the embedded server (policy.weight_sync in_memory)
//   gloo       learner::broadcast_sender -> broadcast_receiver over c10d gloo (host memory), then
//              commit: the nccl weight-transfer engine's path on a CPU build
//   nccl       the same over c10d NCCL, learner on --device, server on --server-device (NCCL needs
//              two different GPUs)
// One table row per method; methods that this build or host cannot run print why.
//
//   bench_weight_sync --preset qwen2-7b --device cuda:0 --server-device cuda:1 --dtype bfloat16
#include "learner/model_config.hpp"
#include "learner/policy.hpp"
#include "learner/weight_broadcast.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace {

using leap::learner::model_config;
using leap::learner::policy;
using clock_type = std::chrono::steady_clock;

// Shapes of public checkpoints (learner::model_preset) or "small" (a few million parameters, quick
// on a CPU). Errors: an unknown name.
leap::result<model_config> preset(const std::string& name) {
  if (name != "small") return leap::learner::model_preset(name);
  model_config c;
  c.model_type = "qwen2";
  c.qkv_bias = true;
  c.rope_theta = 1e6;
  c.tie_word_embeddings = true;
  c.vocab_size = 4096;
  c.hidden_size = 256;
  c.intermediate_size = 704;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = c.hidden_size / c.num_attention_heads;
  return c;
}

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

struct row {
  std::string method;
  double sync_s = -1;     // the weights moved and swapped in
  double request_s = -1;  // plus one forward pass on them
  std::string note;
};

// One short forward on the served copy, synchronised: the "next request".
leap::status first_request(const policy& served, const std::string& device) {
  auto scored = served.token_logprobs({{1, 2, 3, 4, 5, 6, 7, 8}});
  if (!scored) return scored.err();
  return leap::learner::synchronize(device);
}

row timed(const std::string& method, const std::string& device,
          const std::function<leap::status()>& sync, const policy& served) {
  row r;
  r.method = method;
  const auto start = clock_type::now();
  if (auto s = sync(); !s) {
    r.note = s.err().message;
    return r;
  }
  if (auto s = leap::learner::synchronize(device); !s) {
    r.note = s.err().message;
    return r;
  }
  r.sync_s = seconds_since(start);
  if (auto s = first_request(served, device); !s) {
    r.note = s.err().message;
    return r;
  }
  r.request_s = seconds_since(start);
  return r;
}

row broadcast(const std::string& method, const std::string& learner_device,
              const std::string& server_device, const policy& learner, policy& served) {
  auto sender = leap::learner::broadcast_sender::listen("127.0.0.1", 0, 2, std::chrono::minutes(5));
  if (!sender) return {method, -1, -1, sender.err().message};
  leap::learner::broadcast_rendezvous rv;
  rv.master_port = (*sender)->port();
  auto joining = std::async(std::launch::async, [&] {
    return leap::learner::broadcast_receiver::join(rv, server_device, std::chrono::minutes(5));
  });
  if (auto c = (*sender)->connect(learner_device); !c) return {method, -1, -1, c.err().message};
  auto receiver = joining.get();
  if (!receiver) return {method, -1, -1, receiver.err().message};
  const auto layout = leap::learner::broadcast_layout(learner);
  // Timed from here: the group is formed once per run, not per step.
  return timed(
      method, server_device,
      [&]() -> leap::status {
        auto received = std::async(std::launch::async,
                                   [&] { return (*receiver)->receive(layout, served); });
        if (auto s = (*sender)->send(learner); !s) return s;
        if (auto s = received.get(); !s) return s;
        return (*receiver)->commit(served);
      },
      served);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Weight sync: disk vs in-memory vs c10d broadcast, one model shape"};
  std::string preset_name = "small";
  std::string device = "cpu";
  std::string server_device;
  std::string dtype = "float32";
  std::string dir = (std::filesystem::temp_directory_path() / "leap-bench-weight-sync").string();
  app.add_option("--preset", preset_name, "small, or a public shape: qwen2-0.5b, qwen2-1.5b, qwen2-7b, qwen3-0.6b, ...")
      ->capture_default_str();
  app.add_option("--device", device, "the learner's device: cpu, cuda or cuda:N")
      ->capture_default_str();
  app.add_option("--server-device", server_device, "the served copy's device; default --device");
  app.add_option("--dtype", dtype, "float32, bfloat16, float16")->capture_default_str();
  app.add_option("--dir", dir, "scratch folder for the disk method (a disk to measure)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (server_device.empty()) server_device = device;

  const auto chosen = preset(preset_name);
  if (!chosen) {
    std::cerr << "bench_weight_sync: error: " << chosen.err().message << "\n";
    return 2;
  }
  const model_config& config = *chosen;
  leap::learner::policy_options lo;
  lo.device = device;
  lo.dtype = dtype;
  // Random weights are drawn on the host, one value at a time (the same seed gives the same model
  // on every device): minutes for a 7B shape. Drawn once; the served copy is loaded from a saved
  // folder (timings do not depend on the values).
  std::cerr << "bench_weight_sync: drawing a random " << preset_name << " model\n";
  auto learner = policy::create_random(config, 1, lo);
  if (!learner) {
    std::cerr << "bench_weight_sync: error: " << learner.err().message << "\n";
    return 1;
  }
  leap::learner::policy_options so = lo;
  so.device = server_device;
  const std::string init_dir = dir + "/init";
  std::filesystem::remove_all(init_dir);
  if (auto s = learner->save(init_dir); !s) {
    std::cerr << "bench_weight_sync: error: " << s.err().message << "\n";
    return 1;
  }
  auto served = policy::load(init_dir, so);
  std::filesystem::remove_all(init_dir);
  if (!served) {
    std::cerr << "bench_weight_sync: error: " << served.err().message << "\n";
    return 1;
  }
  std::int64_t bytes = 0;
  for (const auto& t : leap::learner::broadcast_layout(*learner)) {
    std::int64_t n = dtype == "float32" ? 4 : 2;
    for (auto d : t.shape) n *= d;
    bytes += n;
  }
  std::vector<row> rows;
  // Warm-up forward so that the first timed request does not pay one-off initialisation.
  (void)first_request(*served, server_device);

  const std::string step_dir = dir + "/step";
  std::filesystem::remove_all(step_dir);
  double save_s = 0;
  rows.push_back(timed(
      "disk", server_device,
      [&]() -> leap::status {
        const auto start = clock_type::now();
        if (auto s = learner->save(step_dir); !s) return s;
        save_s = seconds_since(start);
        return served->reload_weights(step_dir);
      },
      *served));
  if (rows.back().sync_s >= 0) {
    char note[96];
    std::snprintf(note, sizeof note, "save %.3f s, reload %.3f s (page cache, no fsync)", save_s,
                  rows.back().sync_s - save_s);
    rows.back().note = note;
  }
  std::filesystem::remove_all(step_dir);
  rows.push_back(timed(
      "in_memory", server_device, [&] { return served->copy_weights_from(*learner); }, *served));

  const auto backends = leap::learner::broadcast_backends();
  auto has = [&](const char* b) {
    return std::find(backends.begin(), backends.end(), b) != backends.end();
  };
  const bool on_cuda = device.starts_with("cuda") || server_device.starts_with("cuda");
  if (!has("gloo")) {
    rows.push_back({"gloo", -1, -1, "not in this build (gloo headers: Debian's libgloo-dev)"});
  } else if (on_cuda && has("nccl")) {
    rows.push_back({"gloo", -1, -1, "cuda devices use NCCL in this build"});
  } else {
    rows.push_back(broadcast("gloo", device, server_device, *learner, *served));
  }
  if (!has("nccl")) {
    rows.push_back({"nccl", -1, -1, "not in this build (a CUDA LibTorch with nccl.h)"});
  } else if (!on_cuda || device == server_device ||
             (device == "cuda" && server_device == "cuda:0") ||
             (device == "cuda:0" && server_device == "cuda")) {
    rows.push_back({"nccl", -1, -1, "needs --device and --server-device on two different GPUs"});
  } else {
    rows.push_back(broadcast("nccl", device, server_device, *learner, *served));
  }

  std::printf("# bench_weight_sync preset=%s device=%s server_device=%s dtype=%s bytes=%.2f GiB\n",
              preset_name.c_str(), device.c_str(), server_device.c_str(), dtype.c_str(),
              static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  std::printf("%-10s %10s %12s  %s\n", "method", "sync_s", "request_s", "note");
  for (const auto& r : rows) {
    if (r.sync_s < 0) {
      std::printf("%-10s %10s %12s  %s\n", r.method.c_str(), "-", "-", r.note.c_str());
    } else {
      std::printf("%-10s %10.3f %12.3f  %s\n", r.method.c_str(), r.sync_s, r.request_s,
                  r.note.c_str());
    }
  }
  return 0;
}
