#include "orchestrator/retry.hpp"

#include <algorithm>

namespace leap {

retry_counts& retry_counts::operator+=(const retry_counts& o) {
  admitted += o.admitted;
  requeued += o.requeued;
  recovered += o.recovered;
  exhausted += o.exhausted;
  evicted += o.evicted;
  return *this;
}

std::size_t retry_plan::retried() const {
  return static_cast<std::size_t>(
      std::count_if(retries.begin(), retries.end(), [](const auto& r) { return r.has_value(); }));
}

retry_plan plan_step(retry_buffer& buffer, const retry_config& config, std::uint64_t step,
                     const std::vector<std::size_t>& fresh) {
  retry_plan plan;
  if (retry_enabled(config)) {
    const auto delay = static_cast<std::uint64_t>(std::max(config.delay, 1));
    std::vector<retry_entry> kept;
    for (auto& e : buffer.entries) {
      if (plan.tasks.size() < fresh.size() && e.failed_step + delay <= step) {
        ++e.attempts;
        plan.tasks.push_back(static_cast<std::size_t>(e.task));
        plan.retries.emplace_back(e);
      } else {
        kept.push_back(e);
      }
    }
    buffer.entries = std::move(kept);
  }
  for (std::size_t i = 0; plan.tasks.size() < fresh.size(); ++i) {
    plan.tasks.push_back(fresh[i]);
    plan.retries.emplace_back(std::nullopt);
  }
  return plan;
}

retry_counts settle(retry_buffer& buffer, const retry_config& config, std::uint64_t step,
                    const std::vector<retry_outcome>& outcomes) {
  retry_counts counts;
  if (!retry_enabled(config)) {
    return counts;
  }
  const auto waiting = [&](std::size_t task) {
    return std::any_of(buffer.entries.begin(), buffer.entries.end(),
                       [&](const retry_entry& e) { return e.task == task; });
  };
  for (const auto& o : outcomes) {
    if (o.retry) {
      if (!o.all_failed) {
        ++counts.recovered;
      } else if (o.retry->attempts < static_cast<std::uint32_t>(std::max(config.attempts, 1))) {
        auto again = *o.retry;
        again.failed_step = step;
        buffer.entries.push_back(again);
        ++counts.requeued;
      } else {
        ++counts.exhausted;
      }
    } else if (o.all_failed && !waiting(o.task)) {
      buffer.entries.push_back({o.task, step, step, 0});
      ++counts.admitted;
    }
  }
  // Requeued entries go to the back, behind younger ones: the oldest first failure is not what
  // is evicted first, the longest-waiting entry is (FIFO on the last failure).
  while (buffer.entries.size() > config.buffer) {
    buffer.entries.erase(buffer.entries.begin());
    ++counts.evicted;
  }
  buffer.total += counts;
  return counts;
}

}  // namespace leap
