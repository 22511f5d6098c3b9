#include "actors/node_protocol.hpp"

#include <caf/actor_system_config.hpp>

namespace leap::actors {

void register_node_message_types(caf::actor_system_config& config) {
  config.add_message_types<caf::id_block::leap_node>();
}

}  // namespace leap::actors
