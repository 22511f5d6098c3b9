#include "tools/launch/metrics.hpp"

#include "common/durable_file.hpp"
#include "common/log.hpp"
#include "policy/client/client.hpp"
#include "sandbox/verifier.hpp"

#include <chrono>
#include <cstdio>

namespace leap::launch {

run_metrics::run_metrics(std::filesystem::path run_dir, run_metrics_options options,
                         policy::policy_client* client, sandbox::verifier* verifier)
    : run_dir_(std::move(run_dir)),
      options_(options),
      client_(client),
      verifier_(verifier),
      telemetry_(std::make_shared<telemetry::run_telemetry>(registry_)) {
  thread_ = std::thread([this] { loop(); });
}

run_metrics::~run_metrics() { stop(); }

void run_metrics::request_write() {
  {
    std::lock_guard lock(mutex_);
    requested_ = true;
  }
  wake_.notify_one();
}

void run_metrics::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopped_) {
      return;
    }
    stopped_ = true;
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) {
    thread_.join();
  }
  // The writer is gone: nothing samples the client or the verifier any more.
  client_ = nullptr;
  verifier_ = nullptr;
  write();
}

status run_metrics::last_status() const {
  std::lock_guard lock(mutex_);
  return last_;
}

std::uint64_t run_metrics::writes() const {
  std::lock_guard lock(mutex_);
  return writes_;
}

void run_metrics::loop() {
  std::unique_lock lock(mutex_);
  const bool periodic = options_.interval_s > 0;
  const auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(periodic ? options_.interval_s : 1.0));
  while (!stopping_) {
    if (periodic) {
      wake_.wait_for(lock, interval, [this] { return stopping_ || requested_; });
    } else {
      wake_.wait(lock, [this] { return stopping_ || requested_; });
    }
    if (stopping_) {
      break;
    }
    requested_ = false;
    lock.unlock();
    write();
    lock.lock();
  }
}

void run_metrics::write() {
  auto& t = *telemetry_;
  if (verifier_ != nullptr) {
    const auto load = verifier_->load();
    t.compile_queue.set(static_cast<double>(load.compile_queued));
    t.run_queue.set(static_cast<double>(load.run_queued));
    t.compiling.set(static_cast<double>(load.compiling));
    t.running.set(static_cast<double>(load.running));
  }
  if (client_ != nullptr) {
    t.policy_in_flight.set(static_cast<double>(client_->stats().in_flight));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  t.tokens_per_second.set(tokens_rate_.update(t.generated_tokens.value(), seconds));

  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  const auto snap = registry_.take(now);
  // Replaced whole, so that a reader (the daemon, a scraper) never sees a torn file.
  auto written =
      write_file_durably((run_dir_ / "metrics.prom").string(), telemetry::to_prometheus(snap));
  if (written) {
    written = write_file_durably((run_dir_ / "metrics.json").string(), telemetry::to_json(snap));
  }
  bool full = false;
  {
    std::lock_guard lock(mutex_);
    if (!written && is_full_disk(written.err()) && options_.on_full_disk && !reported_full_) {
      reported_full_ = full = true;
    } else if (!written && last_) {
      // Once per failure streak: a run does not stop for other failures of its metrics files.
      log::warn("metrics: " + written.err().message);
    }
    last_ = written;
    ++writes_;
  }
  if (full) {
    options_.on_full_disk(written.err());
  }
}

}  // namespace leap::launch
