#include "orchestrator/turn_profile.hpp"

#include <algorithm>
#include <charconv>
#include <limits>

namespace leap {

std::optional<turn_ref> turn_of_request(std::string_view request_id) {
  // The five fields after the run id, right to left: turn, rollout, group, split, step.
  std::array<std::string_view, 5> fields;
  std::string_view rest = request_id;
  for (std::size_t i = fields.size(); i-- > 0;) {
    const auto slash = rest.rfind('/');
    if (slash == std::string_view::npos) {
      return std::nullopt;
    }
    fields[i] = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
  }
  auto number = [](std::string_view text, std::uint64_t& out, std::uint64_t most) {
    const auto* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, out);
    return !text.empty() && ec == std::errc{} && ptr == end && out <= most;
  };
  constexpr auto u32_most = std::numeric_limits<std::uint32_t>::max();
  std::uint64_t step = 0;
  std::uint64_t group = 0;
  std::uint64_t rollout = 0;
  std::uint64_t turn = 0;
  auto split = parse_split_kind(fields[1]);
  if (rest.empty() || !number(fields[0], step, std::numeric_limits<std::uint64_t>::max()) ||
      !split || !number(fields[2], group, u32_most) || !number(fields[3], rollout, u32_most) ||
      !number(fields[4], turn, u32_most)) {
    return std::nullopt;
  }
  return turn_ref{std::string(rest),
                  step,
                  *split,
                  static_cast<std::uint32_t>(group),
                  static_cast<std::uint32_t>(rollout),
                  static_cast<std::uint32_t>(turn)};
}

std::size_t bottleneck_class_index(std::string_view name) {
  const auto* found = std::find(bottleneck_class_names.begin(), bottleneck_class_names.end(), name);
  return found == bottleneck_class_names.end()
             ? bottleneck_class_names.size() - 1
             : static_cast<std::size_t>(found - bottleneck_class_names.begin());
}

void profile_counts::add(const turn_profile_record& profile) {
  ++profiles;
  for (const auto& k : profile.kernels) {
    ++kernels[bottleneck_class_index(k.bottleneck)];
  }
  seconds += profile.seconds;
}

void profile_counts::add(const profile_counts& other) {
  profiles += other.profiles;
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    kernels[i] += other.kernels[i];
  }
  seconds += other.seconds;
}

std::string profile_metric_of_class(std::size_t index) {
  std::string name = "profile.";
  for (const char c : bottleneck_class_names.at(index)) {
    name.push_back(c == '-' ? '_' : c);
  }
  return name;
}

void add_profile_metrics(const profile_counts& counts, std::map<std::string, double>& metrics) {
  if (counts.profiles == 0) {
    return;
  }
  metrics["profile.turns"] = counts.profiles;
  metrics["profile.seconds"] = counts.seconds;
  for (std::size_t i = 0; i < counts.kernels.size(); ++i) {
    metrics[profile_metric_of_class(i)] = counts.kernels[i];
  }
}

}  // namespace leap
