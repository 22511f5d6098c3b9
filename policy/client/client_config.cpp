#include "policy/client/client.hpp"
#include "policy/client/detail/dialect.hpp"

namespace leap::policy {

std::string generate_route(const client_config& config) {
  if (!config.generate_path.empty()) {
    return config.generate_path;
  }
  return std::string(dialect_of(config.flavour).generate_route());
}

status validate_client_config(const client_config& config) {
  if (config.endpoints.empty()) {
    return error{"endpoints: at least one endpoint is required"};
  }
  for (std::size_t i = 0; i < config.endpoints.size(); ++i) {
    const auto& e = config.endpoints[i];
    const std::string where = "endpoints[" + std::to_string(i) + "]";
    if (e.base_url.rfind("http://", 0) != 0 && e.base_url.rfind("https://", 0) != 0) {
      return error{where + ".base_url: '" + e.base_url + "' must start with http:// or https://"};
    }
    if (e.max_in_flight < 1) {
      return error{where + ".max_in_flight: must be at least 1"};
    }
  }
  if (config.max_pending < 0) {
    return error{"max_pending: must not be negative"};
  }
  if (config.connect_timeout.count() <= 0) {
    return error{"connect_timeout: must be positive"};
  }
  if (config.request_timeout.count() <= 0) {
    return error{"request_timeout: must be positive"};
  }
  if (config.turn_deadline.count() <= 0) {
    return error{"turn_deadline: must be positive"};
  }
  if (config.vocab_size < 0) {
    return error{"vocab_size: must not be negative"};
  }
  if (config.fallback_vocab_size < 0) {
    return error{"fallback_vocab_size: must not be negative"};
  }
  if (config.max_context_tokens < 0) {
    return error{"max_context_tokens: must not be negative"};
  }
  if (config.retry.max_attempts < 1) {
    return error{"retry.max_attempts: must be at least 1"};
  }
  if (config.retry.max_resumes < 0) {
    return error{"retry.max_resumes: must not be negative"};
  }
  if (config.retry.base_backoff.count() < 0 ||
      config.retry.max_backoff < config.retry.base_backoff) {
    return error{"retry: need 0 <= base_backoff <= max_backoff"};
  }
  if (!(config.retry.jitter >= 0.0 && config.retry.jitter <= 1.0)) {
    return error{"retry.jitter: must lie in [0, 1]"};
  }
  for (int s : config.retry.retry_statuses) {
    if (s == 400) {
      return error{"retry.retry_statuses: 400 is never retried (the request is invalid)"};
    }
    if (s < 400 || s > 599) {
      return error{"retry.retry_statuses: " + std::to_string(s) + " is not an HTTP error status"};
    }
  }
  if (config.health.path.empty() || config.health.path[0] != '/') {
    return error{"health.path: must start with '/'"};
  }
  if (config.health.interval.count() <= 0) {
    return error{"health.interval: must be positive"};
  }
  if (config.health.timeout.count() <= 0) {
    return error{"health.timeout: must be positive"};
  }
  if (config.health.down_after_failures < 1) {
    return error{"health.down_after_failures: must be at least 1"};
  }
  if (!config.generate_path.empty() && config.generate_path[0] != '/') {
    return error{"generate_path: must start with '/'"};
  }
  return ok_status();
}

}  // namespace leap::policy
