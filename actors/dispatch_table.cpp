#include "actors/dispatch_table.hpp"

#include <algorithm>

namespace leap::actors {

dispatch_table::target_id dispatch_table::add_target(std::string name) {
  target_stats t;
  t.name = std::move(name);
  targets_.push_back(std::move(t));
  return targets_.size() - 1;
}

void dispatch_table::set_up(target_id target, std::size_t capacity) {
  auto& t = targets_.at(target);
  if (!t.up) {
    ++t.joins;
  }
  t.up = true;
  t.capacity = capacity;
}

void dispatch_table::set_capacity(target_id target, std::size_t capacity) {
  auto& t = targets_.at(target);
  if (t.up) {
    t.capacity = capacity;
  }
}

std::vector<dispatch_table::job_id> dispatch_table::set_down(target_id target) {
  auto& t = targets_.at(target);
  t.up = false;
  // Oldest first: job ids grow with arrival, so sorting restores the order the jobs came in.
  std::vector<job_id> lost;
  for (auto& [id, job] : jobs_) {
    if (std::find(job.attempts.begin(), job.attempts.end(), target) != job.attempts.end()) {
      lost.push_back(id);
    }
  }
  std::sort(lost.begin(), lost.end());
  std::vector<job_id> requeued;
  for (const job_id id : lost) {
    auto& job = jobs_.at(id);
    while (drop_attempt(job, target)) {
      ++t.lost;
    }
    if (!job.judged && job.attempts.empty()) {
      requeued.push_back(id);
    }
  }
  // Front of the queue, keeping their order: they have waited longest.
  queue_.insert(queue_.begin(), requeued.begin(), requeued.end());
  totals_.resent += requeued.size();
  for (const job_id id : lost) {
    forget_if_settled(id);
  }
  return requeued;
}

dispatch_table::job_id dispatch_table::add_job() {
  const job_id id = next_job_++;
  jobs_.emplace(id, job_state{});
  queue_.push_back(id);
  ++totals_.jobs;
  return id;
}

std::vector<dispatch_table::assignment> dispatch_table::assign() {
  std::vector<assignment> out;
  while (!queue_.empty()) {
    // The target with the most free slots; ties go to the lowest index (a stable order).
    std::size_t best_free = 0;
    target_id best = 0;
    for (target_id i = 0; i < targets_.size(); ++i) {
      const auto& t = targets_[i];
      if (!t.up || t.in_flight >= t.capacity) {
        continue;
      }
      const std::size_t free = t.capacity - t.in_flight;
      if (free > best_free) {
        best_free = free;
        best = i;
      }
    }
    if (best_free == 0) {
      break;
    }
    const job_id id = queue_.front();
    queue_.pop_front();
    auto& t = targets_[best];
    ++t.in_flight;
    ++t.sent;
    jobs_.at(id).attempts.push_back(best);
    out.push_back({id, best});
  }
  return out;
}

dispatch_table::verdict_kind dispatch_table::complete(job_id id, target_id target) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    ++totals_.duplicates;
    return verdict_kind::duplicate;
  }
  auto& job = it->second;
  drop_attempt(job, target);
  if (job.judged) {
    ++totals_.duplicates;
    forget_if_settled(id);
    return verdict_kind::duplicate;
  }
  // The first verdict counts, even from an attempt that was given up on: it is a real verdict,
  // and the copy sent elsewhere (if any) will be dropped when it answers.
  job.judged = true;
  ++totals_.judged;
  ++targets_.at(target).judged;
  queue_.erase(std::remove(queue_.begin(), queue_.end(), id), queue_.end());
  forget_if_settled(id);
  return verdict_kind::accepted;
}

bool dispatch_table::fail(job_id id, target_id target) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    return false;
  }
  auto& job = it->second;
  if (!drop_attempt(job, target)) {
    return false;
  }
  ++targets_.at(target).lost;
  if (job.judged || !job.attempts.empty()) {
    forget_if_settled(id);
    return false;
  }
  queue_.push_front(id);
  ++totals_.resent;
  return true;
}

std::size_t dispatch_table::open_jobs() const {
  return static_cast<std::size_t>(
      std::count_if(jobs_.begin(), jobs_.end(), [](const auto& j) { return !j.second.judged; }));
}

std::size_t dispatch_table::free_slots() const {
  std::size_t free = 0;
  for (const auto& t : targets_) {
    if (t.up && t.capacity > t.in_flight) {
      free += t.capacity - t.in_flight;
    }
  }
  return free;
}

bool dispatch_table::any_up() const {
  return std::any_of(targets_.begin(), targets_.end(), [](const auto& t) { return t.up; });
}

bool dispatch_table::drop_attempt(job_state& job, target_id target) {
  auto it = std::find(job.attempts.begin(), job.attempts.end(), target);
  if (it == job.attempts.end()) {
    return false;
  }
  job.attempts.erase(it);
  auto& t = targets_.at(target);
  if (t.in_flight > 0) {
    --t.in_flight;
  }
  return true;
}

void dispatch_table::forget_if_settled(job_id id) {
  auto it = jobs_.find(id);
  if (it != jobs_.end() && it->second.judged && it->second.attempts.empty()) {
    jobs_.erase(it);
  }
}

}  // namespace leap::actors
