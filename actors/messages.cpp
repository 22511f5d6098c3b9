#include "actors/messages.hpp"

#include <chrono>

namespace leap::actors {

void register_message_types(caf::actor_system_config& config) {
  config.add_message_types<caf::id_block::leap>();
}

double clock_ms() {
  // One epoch per process so that activities of different actors compare.
  static const auto epoch = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - epoch)
      .count();
}

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace leap::actors
