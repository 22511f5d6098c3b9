// `leap run CONFIG --seeds ...`: one config run once per seed, each in its own folder under the
// config's run folder (launch.hpp, "seeds"). The command runs them; this file says what each seed's
// run is, so that the daemon and the tests read the same rule.
#include "tools/launch/launch.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

namespace leap::launch {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t max_seeds = 1000;

result<std::uint64_t> parse_seed(std::string_view text, std::string_view item) {
  std::uint64_t value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || ptr != end) {
    return error{"--seeds: '" + std::string(item) +
                 "' is not a seed (a non-negative integer) or a range A-B"};
  }
  return value;
}

// `path` moved from under `from` to the same place under `to`; unchanged when it is not inside
// `from` (or is `from` itself, which no path key should name).
std::string moved_under(const std::string& path, const fs::path& from, const fs::path& to) {
  if (path.empty()) {
    return path;
  }
  const fs::path rel = fs::path(path).lexically_normal().lexically_relative(from);
  if (rel.empty() || rel == "." || *rel.begin() == "..") {
    return path;
  }
  return (to / rel).string();
}

}  // namespace

result<std::vector<std::uint64_t>> parse_seeds(std::string_view text) {
  std::vector<std::uint64_t> seeds;
  std::set<std::uint64_t> seen;
  if (text.empty()) {
    return error{"--seeds: empty; expected seeds such as 1,2,3 or a range 1-3"};
  }
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    const auto item = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (item.empty()) {
      return error{"--seeds '" + std::string(text) + "': an empty item"};
    }
    std::uint64_t first = 0;
    std::uint64_t last = 0;
    if (const auto dash = item.find('-'); dash != std::string_view::npos) {
      auto a = parse_seed(item.substr(0, dash), item);
      auto b = parse_seed(item.substr(dash + 1), item);
      if (!a) {
        return a.err();
      }
      if (!b) {
        return b.err();
      }
      if (*b < *a) {
        return error{"--seeds: the range '" + std::string(item) + "' ends below its start"};
      }
      first = *a;
      last = *b;
    } else {
      auto a = parse_seed(item, item);
      if (!a) {
        return a.err();
      }
      first = last = *a;
    }
    if (last - first >= max_seeds) {
      return error{"--seeds: more than " + std::to_string(max_seeds) + " seeds"};
    }
    for (std::uint64_t s = first;; ++s) {
      if (!seen.insert(s).second) {
        return error{"--seeds: seed " + std::to_string(s) + " is given twice"};
      }
      seeds.push_back(s);
      if (seeds.size() > max_seeds) {
        return error{"--seeds: more than " + std::to_string(max_seeds) + " seeds"};
      }
      if (s == last) {
        break;
      }
    }
    if (comma == std::string_view::npos) {
      break;
    }
    start = comma + 1;
  }
  return seeds;
}

std::string seed_run_dir(const std::string& run_dir, std::uint64_t seed) {
  return (fs::path(run_dir) / ("seed-" + std::to_string(seed))).string();
}

experiment_config seed_config(const experiment_config& base, std::uint64_t seed) {
  experiment_config c = base;
  const fs::path from = fs::path(base.experiment.run_dir).lexically_normal();
  const fs::path to = seed_run_dir(base.experiment.run_dir, seed);
  c.experiment.seed = seed;
  c.experiment.run_dir = to.string();
  for (std::string* path : {&c.learner.model_path, &c.learner.checkpoint_dir, &c.policy.model,
                            &c.policy.tokenizer, &c.verifier.cache_dir}) {
    *path = moved_under(*path, from, to);
  }
  return c;
}

result<run_preflight> preflight_seed(const experiment_config& base, std::uint64_t seed,
                                     const std::string& source) {
  const std::string text = render_config(seed_config(base, seed));
  return preflight_run_text(text, source + " (seed " + std::to_string(seed) + ")", {});
}

result<bool> run_finished(const std::string& run_dir, const std::string& name, int steps) {
  const fs::path store_path = store_path_of_run_dir(run_dir);
  std::error_code ec;
  if (!fs::exists(store_path / "CURRENT", ec)) {
    return false;
  }
  store_options options;
  options.read_only = true;
  options.create_if_missing = false;
  auto store = trajectory_store::open(store_path, options);
  if (!store) {
    return store.err();
  }
  auto run = (*store)->get_run(name);
  if (!run) {
    return run.err();
  }
  if (!*run || (*run)->status != run_status::finished) {
    return false;
  }
  auto done = (*store)->steps(name);
  if (!done) {
    return done.err();
  }
  return done->size() >= static_cast<std::size_t>(std::max(steps, 0));
}

}  // namespace leap::launch
