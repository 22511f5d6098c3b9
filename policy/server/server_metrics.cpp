#include "policy/server/detail/server_metrics.hpp"

#include <sstream>

namespace leap::policy {

void server_metrics::count_request(const std::string& route) {
  std::lock_guard lock(mutex_);
  ++requests_[route];
}

void server_metrics::count_response(int status) {
  std::lock_guard lock(mutex_);
  ++responses_[status];
}

void server_metrics::count_fault(fault_kind kind) {
  faults_[static_cast<std::size_t>(kind)].fetch_add(1, std::memory_order_relaxed);
}

void server_metrics::add_tokens(std::int64_t prompt, std::int64_t generated) {
  prompt_tokens_.fetch_add(prompt, std::memory_order_relaxed);
  generation_tokens_.fetch_add(generated, std::memory_order_relaxed);
}

std::string server_metrics::render(std::int64_t weight_version, bool paused) const {
  std::ostringstream out;
  const auto header = [&](const char* name, const char* type, const char* help) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  };
  {
    std::lock_guard lock(mutex_);
    header("leap_policy_requests_total", "counter", "HTTP requests received, by route.");
    for (const auto& [route, n] : requests_) {
      out << "leap_policy_requests_total{route=\"" << route << "\"} " << n << '\n';
    }
    header("leap_policy_responses_total", "counter", "HTTP responses sent, by status code.");
    for (const auto& [code, n] : responses_) {
      out << "leap_policy_responses_total{code=\"" << code << "\"} " << n << '\n';
    }
  }
  header("leap_policy_faults_injected_total", "counter", "Faults injected, by kind.");
  for (std::size_t k = 1; k < faults_.size(); ++k) {
    out << "leap_policy_faults_injected_total{kind=\"" << to_string(static_cast<fault_kind>(k))
        << "\"} " << faults_[k].load(std::memory_order_relaxed) << '\n';
  }
  const auto prompt = prompt_tokens_.load(std::memory_order_relaxed);
  const auto generated = generation_tokens_.load(std::memory_order_relaxed);
  const auto run = running.load(std::memory_order_relaxed);
  const auto wait = waiting.load(std::memory_order_relaxed);
  header("leap_policy_prompt_tokens_total", "counter", "Prompt tokens of generation requests.");
  out << "leap_policy_prompt_tokens_total " << prompt << '\n';
  header("leap_policy_generation_tokens_total", "counter", "Tokens generated.");
  out << "leap_policy_generation_tokens_total " << generated << '\n';
  header("leap_policy_requests_in_flight", "gauge",
         "Generation requests in the server (running or waiting).");
  out << "leap_policy_requests_in_flight " << run + wait << '\n';
  header("leap_policy_weight_version", "gauge", "The weight version responses report.");
  out << "leap_policy_weight_version " << weight_version << '\n';
  header("leap_policy_weight_deltas_total", "counter",
         "Weight deltas over the broadcast, staged or refused (then the full weights follow).");
  out << "leap_policy_weight_deltas_total{outcome=\"staged\"} "
      << deltas_staged.load(std::memory_order_relaxed) << '\n';
  out << "leap_policy_weight_deltas_total{outcome=\"refused\"} "
      << deltas_refused.load(std::memory_order_relaxed) << '\n';
  header("leap_policy_paused", "gauge", "1 while generation is paused.");
  out << "leap_policy_paused " << (paused ? 1 : 0) << '\n';
  header("vllm:num_requests_running", "gauge", "Requests generating now (vLLM's name).");
  out << "vllm:num_requests_running " << run << '\n';
  header("vllm:num_requests_waiting", "gauge", "Requests waiting to generate (vLLM's name).");
  out << "vllm:num_requests_waiting " << wait << '\n';
  header("vllm:prompt_tokens_total", "counter", "Prompt tokens (vLLM's name).");
  out << "vllm:prompt_tokens_total " << prompt << '\n';
  header("vllm:generation_tokens_total", "counter", "Generated tokens (vLLM's name).");
  out << "vllm:generation_tokens_total " << generated << '\n';
  return out.str();
}

}  // namespace leap::policy
