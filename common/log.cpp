#include "common/log.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>

namespace leap::log {
namespace {

spdlog::level::level_enum to_spdlog(level l) {
  switch (l) {
    case level::trace:
      return spdlog::level::trace;
    case level::debug:
      return spdlog::level::debug;
    case level::info:
      return spdlog::level::info;
    case level::warn:
      return spdlog::level::warn;
    case level::error:
      return spdlog::level::err;
    case level::off:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

// One logger for the process, replaced whole by setup() so that its name (the component) is part
// of the pattern; readers take a copy of the shared pointer under the mutex.
std::mutex logger_mutex;
std::shared_ptr<spdlog::logger> the_logger;
level the_level = level::info;

std::shared_ptr<spdlog::logger> make_logger(std::string_view component, level least) {
  // stderr_sink_mt: unbuffered writes under spdlog's mutex, flushed at once (a crash loses no
  // line, and lines of several threads never interleave).
  auto logger = std::make_shared<spdlog::logger>(std::string(component),
                                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %n | %l | %v", spdlog::pattern_time_type::utc);
  logger->set_level(to_spdlog(least));
  logger->flush_on(spdlog::level::trace);
  return logger;
}

std::shared_ptr<spdlog::logger> logger() {
  std::lock_guard lock(logger_mutex);
  if (!the_logger) {
    the_logger = make_logger("leap", the_level);
  }
  return the_logger;
}

}  // namespace

std::string fields(const ids& i) {
  std::string out;
  if (!i.run.empty()) {
    out += "run " + i.run + " | ";
  }
  if (i.step >= 0) {
    out += "step " + std::to_string(i.step) + " | ";
  }
  if (i.group >= 0) {
    out += "group " + std::to_string(i.group) + " | ";
  }
  if (i.rollout >= 0) {
    out += "rollout " + std::to_string(i.rollout) + " | ";
  }
  return out;
}

void setup(std::string_view component, level least) {
  auto fresh = make_logger(component, least);
  std::lock_guard lock(logger_mutex);
  the_logger = std::move(fresh);
  the_level = least;
}

void set_level(level least) {
  std::lock_guard lock(logger_mutex);
  the_level = least;
  if (the_logger) {
    the_logger->set_level(to_spdlog(least));
  }
}

level current_level() {
  std::lock_guard lock(logger_mutex);
  return the_level;
}

void write(level severity, std::string_view text, const ids& i) {
  if (severity == level::off) {
    return;
  }
  const auto l = logger();
  const auto s = to_spdlog(severity);
  if (!l->should_log(s)) {
    return;
  }
  l->log(s, "{}{}", fields(i), text);
}

}  // namespace leap::log
