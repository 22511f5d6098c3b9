// The run's live metrics (internal to the library): the registry and the run's metric set
// (orchestrator/run_telemetry.hpp), and a writer thread that renders them to RUN_DIR/metrics.prom
// (Prometheus text) and RUN_DIR/metrics.json every `interval_s` seconds and whenever a step ends,
// each file replaced atomically (temporary file + rename), so `leap daemon` (which serves the file
// on /metrics with an experiment label) or any reader never sees a torn file.
//
// Before each write the writer samples what no actor event reports: the sandbox's queues and busy
// workers, the policy client's requests on the wire, and the generated tokens per second since the
// previous write.
#pragma once

#include "common/result.hpp"
#include "orchestrator/run_telemetry.hpp"
#include "orchestrator/telemetry.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace leap::policy {
class policy_client;
}
namespace leap::sandbox {
class verifier;
}

namespace leap::launch {

struct run_metrics_options {
  // Seconds between writes of the metrics files; 0 writes only at each step's end and at exit.
  // Default: 5
  double interval_s = 5.0;
  // Called once, on the writer thread, when a write fails because the disk is full: a run whose
  // folder is full ends (its store would fail at its next write). Other failures are warned about
  // and retried at the next write. Empty: warned about like the others.
  std::function<void(const error&)> on_full_disk;
};

class run_metrics {
 public:
  // `client` and `verifier` are sampled until stop(); either may be null. Starts the writer thread.
  run_metrics(std::filesystem::path run_dir, run_metrics_options options,
              policy::policy_client* client, sandbox::verifier* verifier);
  ~run_metrics();
  run_metrics(const run_metrics&) = delete;
  run_metrics& operator=(const run_metrics&) = delete;

  [[nodiscard]] std::shared_ptr<telemetry::run_telemetry> telemetry() const { return telemetry_; }
  // Asks the writer thread for a write now (a step ended). Never blocks. Thread-safe.
  void request_write();
  // Stops the writer, forgets the sampled objects (which may then go away) and writes the files a
  // last time. Idempotent.
  void stop();
  // The last write's error, or ok. Thread-safe.
  [[nodiscard]] status last_status() const;
  [[nodiscard]] std::uint64_t writes() const;

 private:
  void loop();
  void write();  // on the writer thread, or after it stopped

  std::filesystem::path run_dir_;
  run_metrics_options options_;
  policy::policy_client* client_;
  sandbox::verifier* verifier_;
  telemetry::registry registry_;
  std::shared_ptr<telemetry::run_telemetry> telemetry_;
  telemetry::rate_meter tokens_rate_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool requested_ = false;
  bool stopping_ = false;
  bool stopped_ = false;
  status last_ = ok_status();
  bool reported_full_ = false;
  std::uint64_t writes_ = 0;
  std::thread thread_;
};

}  // namespace leap::launch
