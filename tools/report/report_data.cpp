#include "tools/report/report_data.hpp"

#include "orchestrator/config.hpp"
#include "storage/replay_data.hpp"
#include "storage/trajectory_store.hpp"

#include <algorithm>
#include <filesystem>

namespace leap::report {

result<std::vector<run_input>> load_runs(const run_source& source, std::size_t buckets,
                                         const std::function<void(const std::string&)>& progress) {
  const auto store_path = store_path_of_run_dir(source.run_dir);
  std::error_code ec;
  if (!std::filesystem::is_directory(store_path, ec)) {
    return error{source.run_dir + ": not a run folder (no store at " + store_path.string() + ")"};
  }
  store_options options;
  options.read_only = true;
  options.create_if_missing = false;
  auto opened = trajectory_store::open(store_path, options);
  if (!opened) {
    return opened.err();
  }
  const auto& store = **opened;
  auto runs = store.runs();
  if (!runs) {
    return runs.err();
  }

  std::vector<run_input> out;
  for (const auto& run : *runs) {
    auto config =
        parse_config(run.config_yaml, source.run_dir + " (stored config of run '" + run.id + "')");
    if (!config) {
      return config.err();
    }
    run_input in;
    in.run_dir = source.run_dir;
    in.run_id = run.id;
    in.group = source.label.empty() ? config->experiment.name : source.label;
    in.status = to_string(run.status);
    in.seed = config->experiment.seed;

    // One scan, as load_replay_data() does it (the same replay_group_of() per group), that also
    // keeps the verifier timings of the turns: no second pass over a large store.
    replay_data data;
    data.run_id = run.id;
    group_query query;
    query.run_id = run.id;
    query.decode.tokens = false;
    const status scanned = store.for_each_group(query, [&](group_record&& g) -> status {
      data.max_turns = std::max(data.max_turns, g.max_turns);
      data.groups.push_back(replay_group_of(g));
      for (const auto& r : g.rollouts) {
        for (const auto& t : r.turns) {
          // The verified turns, as replay counts verifier jobs.
          if (t.finish == finish_reason::error || t.text.empty()) {
            continue;
          }
          in.compile_ms.push_back(t.timings.compile_ms);
          in.run_ms.push_back(t.timings.run_ms);
        }
      }
      return ok_status();
    });
    if (!scanned) {
      return scanned.err();
    }
    auto steps = store.steps(run.id);
    if (!steps) {
      return steps.err();
    }
    data.steps = std::move(*steps);
    auto retries = store.retry_steps(run.id);
    if (!retries) {
      return retries.err();
    }
    data.retries = std::move(*retries);
    auto profiles = load_step_profiles(store, run.id);
    if (!profiles) {
      return profiles.err();
    }
    data.profiles = std::move(*profiles);

    for (const auto& [step, ms] : elapsed_since_start(data.steps, run.created_unix_ms)) {
      in.minutes[step] = ms / 60000.0;
    }
    in.stored_groups = data.groups.size();
    in.replay = build_replay_report(data, buckets);
    if (progress) {
      progress(source.run_dir + ": run '" + run.id + "' (" + in.status +
               "): " + std::to_string(data.steps.size()) + " completed steps, " +
               std::to_string(data.groups.size()) + " groups, " +
               std::to_string(in.compile_ms.size()) + " verified turns");
    }
    out.push_back(std::move(in));
  }
  return out;
}

}  // namespace leap::report
