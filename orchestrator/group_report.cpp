#include "orchestrator/group_report.hpp"

#include <array>
#include <charconv>

namespace leap {

std::string to_string(const group_key& key) {
  return "step " + std::to_string(key.step + 1) + " | " + leap::to_string(key.split) + " group " +
         std::to_string(key.group);
}

log::ids log_ids(const group_key& key, std::int64_t rollout) {
  log::ids ids;
  ids.step = static_cast<std::int64_t>(key.step) + 1;
  ids.group = key.group;
  ids.rollout = rollout;
  return ids;
}

std::string turn_request_id(const std::string& run_id, const group_key& key, std::uint32_t rollout,
                            int turn) {
  return run_id + "/" + std::to_string(key.step) + "/" + leap::to_string(key.split) + "/" +
         std::to_string(key.group) + "/" + std::to_string(rollout) + "/" + std::to_string(turn);
}

log::ids log_ids_of_request(std::string_view request_id) {
  // The five fields after the run id, right to left: turn, rollout, group, split, step.
  std::array<std::string_view, 5> fields;
  std::string_view rest = request_id;
  for (std::size_t i = fields.size(); i-- > 0;) {
    const auto slash = rest.rfind('/');
    if (slash == std::string_view::npos) {
      return {};
    }
    fields[i] = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
  }
  auto number = [](std::string_view text, std::int64_t& out) {
    const auto* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, out);
    return !text.empty() && ec == std::errc{} && ptr == end && out >= 0;
  };
  std::int64_t step = 0;
  std::int64_t group = 0;
  std::int64_t rollout = 0;
  std::int64_t turn = 0;
  if (!number(fields[0], step) || !parse_split_kind(fields[1]) || !number(fields[2], group) ||
      !number(fields[3], rollout) || !number(fields[4], turn)) {
    return {};
  }
  return log::ids{std::string(rest), step + 1, group, rollout};
}

}  // namespace leap
