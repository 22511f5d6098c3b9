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
//   ipc        learner::ipc_exporter snapshot -> a served copy in ANOTHER process (this binary
//              started again with --ipc-server, on --server-device) that opens the handle, stages,
//              commits and runs the forward pass: policy.weight_sync ipc's path (cuda only; CUDA
//              opens no handle in its own process, so this row's server is a subprocess). The
//              pipe round trips to the subprocess (microseconds) are in its numbers.
// One table row per method; methods that this build or host cannot run print why.
//
//   bench_weight_sync --preset qwen2-7b --device cuda:0 --server-device cuda:1 --dtype bfloat16
//
// --delta-steps N (issue 33): instead, a learner in --learner-dtype (float32: master weights) takes
// N real AdamW steps (lr --lr, a scored batch of random sequences) and after each the served copies
// (in --dtype) are synced twice, side by side: in full (save a step folder in the served dtype +
// reload_weights, the disk path) and by delta (learner/weight_delta.hpp: write the changed
// elements + apply them with their checksums). Bytes are the files written; seconds include
// computing, writing, reading and applying. At the end the two served copies are compared bit for
// bit. Where a c10d group can form between --device and --server-device (gloo on the CPU; NCCL
// between two different GPUs) the same steps are also synced over the broadcast path, a third and
// a fourth served copy: the full broadcast (the learner's weights, in --learner-dtype, received,
// committed in the served dtype) and the delta broadcast (prepare_delta: compare in memory, then
// the changed tensors sparse or whole, received, rebuilt, checksummed, committed). Its bytes are
// the tensors broadcast.
//
//   bench_weight_sync --preset qwen2-0.5b --device cuda --dtype bfloat16 --delta-steps 5 --lr 1e-6
//   bench_weight_sync --preset qwen2-0.5b --device cuda:0 --server-device cuda:1
//       --dtype bfloat16 --delta-steps 5 --lr 1e-6    (one command: adds the broadcast columns
//       over NCCL)
#include "learner/model_config.hpp"
#include "learner/policy.hpp"
#include "learner/trainer.hpp"
#include "learner/weight_broadcast.hpp"
#include "learner/weight_delta.hpp"
#include "learner/weight_ipc.hpp"
#include "tools/bench/bench_main.hpp"
#include "tools/bench/learner_presets.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <signal.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

using leap::learner::model_config;
using leap::learner::policy;
using clock_type = std::chrono::steady_clock;

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
  if (!scored) {
    return scored.err();
  }
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
  if (!sender) {
    return {method, -1, -1, sender.err().message};
  }
  leap::learner::broadcast_rendezvous rv;
  rv.master_port = (*sender)->port();
  auto joining = std::async(std::launch::async, [&] {
    return leap::learner::broadcast_receiver::join(rv, server_device, std::chrono::minutes(5));
  });
  if (auto c = (*sender)->connect(learner_device); !c) {
    return {method, -1, -1, c.err().message};
  }
  auto receiver = joining.get();
  if (!receiver) {
    return {method, -1, -1, receiver.err().message};
  }
  const auto layout = leap::learner::broadcast_layout(learner);
  // Timed from here: the group is formed once per run, not per step.
  return timed(
      method, server_device,
      [&]() -> leap::status {
        auto received =
            std::async(std::launch::async, [&] { return (*receiver)->receive(layout, served); });
        if (auto s = (*sender)->send(learner); !s) {
          return s;
        }
        if (auto s = received.get(); !s) {
          return s;
        }
        return (*receiver)->commit(served);
      },
      served);
}

// The --ipc-server side: loads the served copy from `model_dir` on `device`, says "ready", then per
// line of update_info on stdin receives, commits and synchronises ("synced"), runs the next request
// ("requested"); "error <message>" instead where a step fails. Ends at end of input.
int ipc_server(const std::string& model_dir, const std::string& device, const std::string& dtype) {
  leap::learner::policy_options so;
  so.device = device;
  so.dtype = dtype;
  auto served = policy::load(model_dir, so);
  if (!served) {
    std::printf("error %s\n", served.err().message.c_str());
    return 1;
  }
  (void)first_request(*served, device);
  std::printf("ready\n");
  std::fflush(stdout);
  leap::learner::ipc_receiver receiver;
  std::string line;
  while (std::getline(std::cin, line)) {
    auto info = leap::learner::parse_ipc_update_info(nlohmann::json::parse(line, nullptr, false));
    leap::status s = info ? receiver.receive(*info, *served) : leap::status(info.err());
    if (s) {
      s = receiver.commit(*served);
    }
    if (s) {
      s = leap::learner::synchronize(device);
    }
    if (!s) {
      std::printf("error %s\n", s.err().message.c_str());
      std::fflush(stdout);
      continue;
    }
    std::printf("synced\n");
    std::fflush(stdout);
    if (auto r = first_request(*served, device); !r) {
      std::printf("error %s\n", r.err().message.c_str());
    } else {
      std::printf("requested\n");
    }
    std::fflush(stdout);
  }
  return 0;
}

// A child process speaking line by line over two pipes.
struct child_process {
  pid_t pid = -1;
  FILE* to = nullptr;
  FILE* from = nullptr;

  static leap::result<child_process> start(std::vector<std::string> args) {
    int in[2];
    int out[2];
    if (::pipe(in) != 0 || ::pipe(out) != 0) {
      return leap::error{"pipe failed"};
    }
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (auto& a : args) {
      argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    child_process c;
    c.pid = ::fork();
    if (c.pid < 0) {
      return leap::error{"fork failed"};
    }
    if (c.pid == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::close(in[1]);
      ::close(out[0]);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    c.to = ::fdopen(in[1], "w");
    c.from = ::fdopen(out[0], "r");
    return c;
  }
  // The next line, or "error <why>" at end of output.
  std::string read_line() const {
    char buffer[4096];
    if (std::fgets(buffer, sizeof buffer, from) == nullptr) {
      return "error the ipc server exited";
    }
    std::string line = buffer;
    if (!line.empty() && line.back() == '\n') {
      line.pop_back();
    }
    return line;
  }
  void stop() {
    if (to) {
      std::fclose(to);  // end of input: the server returns
    }
    if (from) {
      std::fclose(from);
    }
    int status = 0;
    if (pid > 0) {
      ::waitpid(pid, &status, 0);
    }
  }
};

// The ipc row: `learner` exported and snapshot here, the served copy (from `model_dir`) in a
// subprocess on `server_device`.
row ipc_row(const std::string& self, const std::string& model_dir, const std::string& server_device,
            const std::string& dtype, const policy& learner) {
  auto exporter = leap::learner::ipc_exporter::create(learner);
  if (!exporter) {
    return {"ipc", -1, -1, exporter.err().message};
  }
  auto child = child_process::start(
      {self, "--ipc-server", model_dir, "--server-device", server_device, "--dtype", dtype});
  if (!child) {
    return {"ipc", -1, -1, child.err().message};
  }
  row r{"ipc", -1, -1, ""};
  if (const auto ready = child->read_line(); ready != "ready") {
    r.note = ready;
  } else {
    const std::string info =
        leap::learner::render_ipc_update_info((*exporter)->info()).dump() + "\n";
    // Timed from here: the buffer is exported once per run, not per step.
    const auto start = clock_type::now();
    if (auto s = (*exporter)->snapshot(learner); !s) {
      r.note = s.err().message;
    } else {
      std::fputs(info.c_str(), child->to);
      std::fflush(child->to);
      if (const auto synced = child->read_line(); synced != "synced") {
        r.note = synced;
      } else {
        r.sync_s = seconds_since(start);
        if (const auto requested = child->read_line(); requested != "requested") {
          r.note = requested;
        } else {
          r.request_s = seconds_since(start);
          r.note = "server in a subprocess on " + server_device;
        }
      }
    }
  }
  child->stop();
  return r;
}

std::int64_t folder_bytes(const std::string& dir) {
  std::int64_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) {
      n += static_cast<std::int64_t>(e.file_size(ec));
    }
  }
  return n;
}

struct delta_options {
  std::string preset;
  std::string device;
  std::string server_device;
  std::string dtype;          // served
  std::string learner_dtype;  // the trainer's
  std::string dir;
  int steps = 0;
  double lr = 1e-6;
  int sequences = 4;
  int sequence_length = 64;
};

// Random token sequences scored by the learner itself (on-policy), a completion after a quarter,
// advantages alternating +1 / -1: a real gradient, a real AdamW step.
leap::result<leap::learner::update_batch> random_batch(const policy& p, const delta_options& o,
                                                       std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> token(
      0, static_cast<std::int32_t>(p.config().vocab_size) - 1);
  leap::learner::update_batch batch;
  for (int i = 0; i < o.sequences; ++i) {
    leap::learner::sequence s;
    for (int t = 0; t < o.sequence_length; ++t) {
      s.token_ids.push_back(token(rng));
    }
    auto logp = p.token_logprobs({s.token_ids});
    if (!logp) {
      return logp.err();
    }
    s.behaviour_logprobs = (*logp)[0];
    s.loss_mask.assign(s.token_ids.size(), 0);
    for (std::size_t t = s.token_ids.size() / 4; t < s.token_ids.size(); ++t) {
      s.loss_mask[t] = 1;
    }
    s.advantages.assign(s.token_ids.size(), i % 2 == 0 ? 1.0F : -1.0F);
    batch.sequences.push_back(std::move(s));
  }
  return batch;
}

// Why no c10d group can join `device` and `server_device` here ("" when one can): gloo for two
// CPU ends, NCCL for two different GPUs.
std::string broadcast_unavailable(const std::string& device, const std::string& server_device) {
  const auto backends = leap::learner::broadcast_backends();
  auto has = [&](const char* b) {
    return std::find(backends.begin(), backends.end(), b) != backends.end();
  };
  const bool cpu = device == "cpu" && server_device == "cpu";
  if (cpu) {
    return has("gloo") ? "" : "no c10d gloo in this build";
  }
  if (!has("nccl")) {
    return "no c10d NCCL in this build";
  }
  auto index = [](const std::string& d) { return d == "cuda" ? std::string("cuda:0") : d; };
  if (!device.starts_with("cuda") || !server_device.starts_with("cuda") ||
      index(device) == index(server_device)) {
    return "NCCL needs --device and --server-device on two different GPUs";
  }
  return "";
}

// The broadcast columns of delta_bench: one group, a receiver for each served copy's update.
struct broadcast_pair {
  std::unique_ptr<leap::learner::broadcast_sender> sender;
  std::unique_ptr<leap::learner::broadcast_receiver> receiver;

  static leap::result<broadcast_pair> form(const std::string& device,
                                           const std::string& server_device) {
    auto sender =
        leap::learner::broadcast_sender::listen("127.0.0.1", 0, 2, std::chrono::minutes(5));
    if (!sender) {
      return sender.err();
    }
    leap::learner::broadcast_rendezvous rv;
    rv.master_port = (*sender)->port();
    auto joining = std::async(std::launch::async, [&] {
      return leap::learner::broadcast_receiver::join(rv, server_device, std::chrono::minutes(5));
    });
    if (auto c = (*sender)->connect(device); !c) {
      return c.err();
    }
    auto receiver = joining.get();
    if (!receiver) {
      return receiver.err();
    }
    return broadcast_pair{std::move(*sender), std::move(*receiver)};
  }
};

int delta_bench(const model_config& config, const delta_options& o) {
  auto fail = [](const leap::error& e) {
    std::cerr << "bench_weight_sync: error: " << e.message << "\n";
    return 1;
  };
  leap::learner::policy_options lo;
  lo.device = o.device;
  lo.dtype = o.learner_dtype;
  std::cerr << "bench_weight_sync: drawing a random " << o.preset << " model on " << o.device
            << " (" << o.learner_dtype << ")\n";
  auto initial = policy::create_random_on_device(config, 1, lo);
  if (!initial) {
    return fail(initial.err());
  }
  const std::string init_dir = o.dir + "/init";
  std::filesystem::remove_all(init_dir);
  if (auto s = initial->save(init_dir, o.dtype, std::int64_t{5} << 30, leap::durability::unsynced);
      !s) {
    return fail(s.err());
  }
  leap::learner::policy_options so;
  so.device = o.server_device;
  so.dtype = o.dtype;
  auto by_full = policy::load(init_dir, so);
  auto by_delta = policy::load(init_dir, so);
  if (!by_full || !by_delta) {
    return fail(by_full ? by_delta.err() : by_full.err());
  }
  leap::learner::trainer_options to;
  to.optimizer.lr = o.lr;
  auto trainer = leap::learner::trainer::create(std::move(*initial), to);
  if (!trainer) {
    return fail(trainer.err());
  }
  leap::learner::weight_delta_sender sender(o.dtype);
  if (auto s = sender.reset(trainer->current_policy(), 0); !s) {
    return fail(s.err());
  }
  // The broadcast path, where a group can form: a full and a delta copy, one sender for both.
  const std::string no_broadcast = broadcast_unavailable(o.device, o.server_device);
  std::optional<broadcast_pair> group;
  std::optional<policy> by_bcast_full;
  std::optional<policy> by_bcast_delta;
  leap::learner::weight_delta_sender bcast_sender(o.dtype);
  if (no_broadcast.empty()) {
    auto formed = broadcast_pair::form(o.device, o.server_device);
    auto a = policy::load(init_dir, so);
    auto b = policy::load(init_dir, so);
    if (!formed || !a || !b) {
      return fail(!formed ? formed.err() : (!a ? a.err() : b.err()));
    }
    group = std::move(*formed);
    by_bcast_full = std::move(*a);
    by_bcast_delta = std::move(*b);
    if (auto s = bcast_sender.reset(trainer->current_policy(), 0); !s) {
      return fail(s.err());
    }
  }
  const auto full_layout = leap::learner::broadcast_layout(trainer->current_policy());
  std::int64_t bcast_full_b = 0;
  for (const auto& t : full_layout) {
    std::int64_t n = t.dtype == "float64" ? 8 : (t.dtype == "float32" ? 4 : 2);
    for (auto d : t.shape) {
      n *= d;
    }
    bcast_full_b += n;
  }
  std::printf(
      "# bench_weight_sync --delta-steps preset=%s device=%s server_device=%s served=%s "
      "learner=%s lr=%g batch=%dx%d\n",
      o.preset.c_str(), o.device.c_str(), o.server_device.c_str(), o.dtype.c_str(),
      o.learner_dtype.c_str(), o.lr, o.sequences, o.sequence_length);
  if (!no_broadcast.empty()) {
    std::printf("# broadcast columns: none (%s)\n", no_broadcast.c_str());
  }
  std::printf("%4s %10s %8s %12s %12s %8s %9s %9s %9s %9s %7s %10s %10s %8s %8s\n", "step",
              "changed%", "tensors", "full_MiB", "delta_MiB", "bytes_x", "full_s", "delta_s",
              "write_s", "apply_s", "time_x", "bfull_MiB", "bdelta_MiB", "bfull_s", "bdelta_s");
  const double mib = 1024.0 * 1024.0;
  double full_total_s = 0;
  double delta_total_s = 0;
  double bcast_full_total_s = 0;
  double bcast_delta_total_s = 0;
  std::int64_t bcast_delta_total_b = 0;
  std::int64_t full_total_b = 0;
  std::int64_t delta_total_b = 0;
  for (int step = 1; step <= o.steps; ++step) {
    auto batch = random_batch(trainer->current_policy(), o, static_cast<std::uint64_t>(step));
    if (!batch) {
      return fail(batch.err());
    }
    if (auto r = trainer->update(*batch); !r) {
      return fail(r.err());
    }
    if (auto s = leap::learner::synchronize(o.device); !s) {
      return fail(s.err());
    }
    const std::string full_dir = o.dir + "/full";
    const std::string delta_dir = o.dir + "/delta";
    std::filesystem::remove_all(full_dir);
    std::filesystem::remove_all(delta_dir);

    auto start = clock_type::now();
    if (auto s = trainer->current_policy().save(full_dir, o.dtype, std::int64_t{5} << 30,
                                                leap::durability::unsynced);
        !s) {
      return fail(s.err());
    }
    if (auto s = by_full->reload_weights(full_dir); !s) {
      return fail(s.err());
    }
    if (auto s = leap::learner::synchronize(o.server_device); !s) {
      return fail(s.err());
    }
    const double full_s = seconds_since(start);
    const std::int64_t full_b = folder_bytes(full_dir);

    start = clock_type::now();
    auto stats = sender.write_delta(trainer->current_policy(), step, delta_dir);
    if (!stats) {
      return fail(stats.err());
    }
    const double write_s = seconds_since(start);
    if (auto s = leap::learner::apply_weight_delta(*by_delta, delta_dir); !s) {
      return fail(s.err());
    }
    if (auto s = leap::learner::synchronize(o.server_device); !s) {
      return fail(s.err());
    }
    const double delta_s = seconds_since(start);
    if (auto s = sender.commit(); !s) {
      return fail(s.err());
    }
    const std::int64_t delta_b = folder_bytes(delta_dir);

    // The broadcast path: the full weights, then the delta, each received into its own copy.
    double bfull_s = -1;
    double bdelta_s = -1;
    std::int64_t bdelta_b = 0;
    if (group) {
      start = clock_type::now();
      auto received = std::async(std::launch::async, [&] {
        return group->receiver->receive(full_layout, *by_bcast_full);
      });
      if (auto s = group->sender->send(trainer->current_policy()); !s) {
        return fail(s.err());
      }
      if (auto s = received.get(); !s) {
        return fail(s.err());
      }
      if (auto s = group->receiver->commit(*by_bcast_full); !s) {
        return fail(s.err());
      }
      if (auto s = leap::learner::synchronize(o.server_device); !s) {
        return fail(s.err());
      }
      bfull_s = seconds_since(start);

      start = clock_type::now();
      auto prepared = bcast_sender.prepare_delta(trainer->current_policy(), step);
      if (!prepared) {
        return fail(prepared.err());
      }
      auto got = std::async(std::launch::async, [&] {
        return group->receiver->receive_delta(prepared->layout, *by_bcast_delta);
      });
      if (auto s = group->sender->send_delta(*prepared); !s) {
        return fail(s.err());
      }
      if (auto s = got.get(); !s) {
        return fail(s.err());
      }
      if (auto s = group->receiver->commit(*by_bcast_delta); !s) {
        return fail(s.err());
      }
      if (auto s = leap::learner::synchronize(o.server_device); !s) {
        return fail(s.err());
      }
      bdelta_s = seconds_since(start);
      bdelta_b = prepared->stats.bytes;
      if (auto s = bcast_sender.commit(); !s) {
        return fail(s.err());
      }
      bcast_full_total_s += bfull_s;
      bcast_delta_total_s += bdelta_s;
      bcast_delta_total_b += bdelta_b;
    }
    full_total_s += full_s;
    delta_total_s += delta_s;
    full_total_b += full_b;
    delta_total_b += delta_b;
    std::printf(
        "%4d %10.4f %4lld/%-3lld %12.2f %12.3f %8.1f %9.3f %9.3f %9.3f %9.3f %7.2f %10.2f %10.3f "
        "%8.3f %8.3f\n",
        step,
        100.0 * static_cast<double>(stats->changed_elements) /
            static_cast<double>(std::max<std::int64_t>(1, stats->total_elements)),
        static_cast<long long>(stats->changed_tensors), static_cast<long long>(stats->tensors),
        static_cast<double>(full_b) / mib, static_cast<double>(delta_b) / mib,
        static_cast<double>(full_b) / static_cast<double>(std::max<std::int64_t>(1, delta_b)),
        full_s, delta_s, write_s, delta_s - write_s, full_s / delta_s,
        static_cast<double>(group ? bcast_full_b : 0) / mib, static_cast<double>(bdelta_b) / mib,
        bfull_s, bdelta_s);
    std::filesystem::remove_all(full_dir);
    std::filesystem::remove_all(delta_dir);
  }
  bool identical = true;
  for (const auto& name : by_full->parameter_names()) {
    auto a = by_full->parameter(name);
    auto b = by_delta->parameter(name);
    identical = identical && a && b && a->data == b->data;
    if (by_bcast_delta) {
      auto c = by_bcast_delta->parameter(name);
      identical = identical && a && c && a->data == c->data;
    }
  }
  if (o.steps > 0) {
    std::printf("# mean per sync: full %.2f MiB %.3f s, delta %.3f MiB %.3f s; served copies %s\n",
                static_cast<double>(full_total_b) / mib / o.steps, full_total_s / o.steps,
                static_cast<double>(delta_total_b) / mib / o.steps, delta_total_s / o.steps,
                identical ? "bit-identical" : "DIFFER");
    if (group) {
      std::printf(
          "# mean per sync, broadcast: full %.2f MiB %.3f s, delta %.3f MiB %.3f s (%.1fx fewer "
          "bytes, %.2fx the speed)\n",
          static_cast<double>(bcast_full_b) / mib, bcast_full_total_s / o.steps,
          static_cast<double>(bcast_delta_total_b) / mib / o.steps, bcast_delta_total_s / o.steps,
          static_cast<double>(bcast_full_b) * o.steps /
              static_cast<double>(std::max<std::int64_t>(1, bcast_delta_total_b)),
          bcast_full_total_s / std::max(1e-9, bcast_delta_total_s));
    }
  }
  std::filesystem::remove_all(init_dir);
  return identical ? 0 : 1;
}

int run(int argc, char** argv) {
  CLI::App app{"Weight sync: disk vs in-memory vs c10d broadcast vs CUDA IPC, one model shape"};
  std::string preset_name = "small";
  std::string device = "cpu";
  std::string server_device;
  std::string dtype = "float32";
  std::string dir = (std::filesystem::temp_directory_path() / "leap-bench-weight-sync").string();
  app.add_option(
         "--preset", preset_name,
         "tiny, small, or a public shape: qwen2-0.5b, qwen2-1.5b, qwen2-7b, qwen3-0.6b, ...")
      ->capture_default_str();
  app.add_option("--device", device, "the learner's device: cpu, cuda or cuda:N")
      ->capture_default_str();
  app.add_option("--server-device", server_device, "the served copy's device; default --device");
  app.add_option("--dtype", dtype, "float32, bfloat16, float16")->capture_default_str();
  app.add_option("--dir", dir, "scratch folder for the disk method (a disk to measure)")
      ->capture_default_str();
  delta_options delta;
  delta.learner_dtype = "float32";
  app.add_option("--delta-steps", delta.steps,
                 "full vs delta sync after this many real optimizer steps (0: the methods table)")
      ->capture_default_str();
  app.add_option("--learner-dtype", delta.learner_dtype, "--delta-steps: the trainer's dtype")
      ->capture_default_str();
  app.add_option("--lr", delta.lr, "--delta-steps: AdamW's learning rate")->capture_default_str();
  app.add_option("--sequences", delta.sequences, "--delta-steps: sequences per step")
      ->capture_default_str();
  app.add_option("--sequence-length", delta.sequence_length, "--delta-steps: tokens per sequence")
      ->capture_default_str();
  std::string ipc_server_model;
  app.add_option("--ipc-server", ipc_server_model,
                 "(internal) serve the ipc row's copy of this model folder over stdin/stdout");
  CLI11_PARSE(app, argc, argv);
  if (server_device.empty()) {
    server_device = device;
  }
  if (!ipc_server_model.empty()) {
    return ipc_server(ipc_server_model, server_device, dtype);
  }

  const auto chosen = leap::bench::learner_preset(preset_name);
  if (!chosen) {
    std::cerr << "bench_weight_sync: error: " << chosen.err().message << "\n";
    return 2;
  }
  const model_config& config = *chosen;
  if (delta.steps > 0) {
    delta.preset = preset_name;
    delta.device = device;
    delta.server_device = server_device;
    delta.dtype = dtype;
    delta.dir = dir;
    return delta_bench(config, delta);
  }
  leap::learner::policy_options lo;
  lo.device = device;
  lo.dtype = dtype;
  // Random weights drawn on the learner's device (create_random's host draw, the same on every
  // device, takes minutes at 7B). Drawn once; the served copy is loaded from a saved folder
  // (timings do not depend on the values).
  std::cerr << "bench_weight_sync: drawing a random " << preset_name << " model on " << device
            << "\n";
  auto learner = policy::create_random_on_device(config, 1, lo);
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
  if (!served) {
    std::cerr << "bench_weight_sync: error: " << served.err().message << "\n";
    return 1;
  }
  std::int64_t bytes = 0;
  for (const auto& t : leap::learner::broadcast_layout(*learner)) {
    std::int64_t n = dtype == "float32" ? 4 : 2;
    for (auto d : t.shape) {
      n *= d;
    }
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
        if (auto s = learner->save(step_dir); !s) {
          return s;
        }
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

  if (!device.starts_with("cuda") || !server_device.starts_with("cuda")) {
    rows.push_back({"ipc", -1, -1, "needs --device and --server-device on cuda (one host)"});
  } else {
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    rows.push_back(ec ? row{"ipc", -1, -1, "cannot find this binary: " + ec.message()}
                      : ipc_row(self.string(), init_dir, server_device, dtype, *learner));
  }
  std::filesystem::remove_all(init_dir);

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

}  // namespace

int main(int argc, char** argv) {
  return leap::bench::main_of("bench_weight_sync", run, argc, argv);
}
