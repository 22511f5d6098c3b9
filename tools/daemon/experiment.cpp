#include "tools/daemon/experiment.hpp"

#include "tools/launch/launch.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace leap::daemon {
namespace {

constexpr std::array<const char*, 5> state_names = {"queued", "running", "succeeded", "failed",
                                                    "cancelled"};
constexpr std::array<const char*, 5> seed_state_names = {"queued", "running", "done", "failed",
                                                         "cancelled"};

// The last non-empty line of a log tail, trimmed: usually "leap run: error: ...".
std::string last_line(const std::string& text) {
  auto end = text.find_last_not_of(" \n\r\t");
  if (end == std::string::npos) {
    return {};
  }
  auto begin = text.rfind('\n', end);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return text.substr(begin, end - begin + 1);
}

// The line that says why a seed's child failed: `leap run --seeds N` ends with its summary line
// ("seeds of 'x': 0 finished, ... failed: seed N (exit 1)"), so the last error line above it says
// more; the last line when there is none.
std::string failure_line(const std::string& text) {
  const auto at = text.rfind("error: ");
  if (at == std::string::npos) {
    return last_line(text);
  }
  const auto begin = text.rfind('\n', at);
  return last_line(
      text.substr(0, text.find('\n', at)).substr(begin == std::string::npos ? 0 : begin + 1));
}

seed_record* find_seed(experiment_record& r, seed_state state) {
  for (auto& s : r.seeds) {
    if (s.state == state) {
      return &s;
    }
  }
  return nullptr;
}

std::string exit_words(child_exit how) {
  return how.signaled ? "leap run was killed by signal " + std::to_string(how.code)
                      : "leap run exited with status " + std::to_string(how.code);
}

// on_exited for an experiment with seeds.
experiment_record on_seed_exited(experiment_record r, child_exit how, bool daemon_stopping,
                                 const std::string& log_tail, std::int64_t now_ms) {
  const bool success = !how.signaled && how.code == 0;
  const bool interrupted = how.signaled || how.code == 130;
  seed_record* seed = find_seed(r, seed_state::running);
  if (seed != nullptr) {
    seed->exit_code = r.exit_code;
    if (success) {
      seed->state = seed_state::done;
      seed->message.clear();
    } else if (r.cancel_requested) {
      seed->state = seed_state::cancelled;
      seed->message = "cancelled";
    } else if (daemon_stopping && interrupted) {
      r.message = "interrupted by the daemon's stop at seed " + std::to_string(seed->seed) +
                  "; resumes when the daemon starts again";
      return r;
    } else {
      seed->state = seed_state::failed;
      const std::string line = failure_line(log_tail);
      seed->message = exit_words(how) + (line.empty() ? "" : ": " + line);
    }
  }
  if (r.cancel_requested) {
    cancel_open_seeds(r);
  }
  if (current_seed(r)) {
    r.message = seed == nullptr
                    ? ""
                    : "seed " + std::to_string(seed->seed) + " " + to_string(seed->state) +
                          "; next seed " + std::to_string(*current_seed(r));
    return r;  // still running, without a child: the scheduler starts the next seed
  }
  std::string failed;
  bool cancelled = false;
  for (const auto& s : r.seeds) {
    if (s.state == seed_state::failed) {
      failed += (failed.empty() ? "" : ", ") + std::to_string(s.seed) +
                (s.exit_code ? " (exit " + std::to_string(*s.exit_code) + ")" : "");
    }
    cancelled = cancelled || s.state == seed_state::cancelled;
  }
  if (cancelled) {
    r.state = experiment_state::cancelled;
    r.message = how.signaled && r.cancel_requested ? "cancelled (SIGKILL after the grace period)"
                                                   : "cancelled";
  } else if (!failed.empty()) {
    r.state = experiment_state::failed;
    r.message = "seeds failed: " + failed + " (`leap status " + r.id + "` shows why)";
  } else {
    r.state = experiment_state::succeeded;
    r.message = "";
  }
  r.finished_unix_ms = now_ms;
  return r;
}

}  // namespace

std::string to_string(seed_state s) { return seed_state_names.at(static_cast<std::size_t>(s)); }

std::optional<seed_state> parse_seed_state(const std::string& name) {
  for (std::size_t i = 0; i < seed_state_names.size(); ++i) {
    if (name == seed_state_names[i]) {
      return static_cast<seed_state>(i);
    }
  }
  return std::nullopt;
}

std::optional<std::uint64_t> current_seed(const experiment_record& r) {
  for (const auto state : {seed_state::running, seed_state::queued}) {
    for (const auto& s : r.seeds) {
      if (s.state == state) {
        return s.seed;
      }
    }
  }
  return std::nullopt;
}

void cancel_open_seeds(experiment_record& r) {
  for (auto& s : r.seeds) {
    if (s.state == seed_state::queued || s.state == seed_state::running) {
      s.state = seed_state::cancelled;
      s.message = "cancelled";
    }
  }
}

std::string to_string(experiment_state s) { return state_names.at(static_cast<std::size_t>(s)); }

std::optional<experiment_state> parse_experiment_state(const std::string& name) {
  for (std::size_t i = 0; i < state_names.size(); ++i) {
    if (name == state_names[i]) {
      return static_cast<experiment_state>(i);
    }
  }
  return std::nullopt;
}

bool is_final(experiment_state s) {
  return s == experiment_state::succeeded || s == experiment_state::failed ||
         s == experiment_state::cancelled;
}

nlohmann::json to_json(const experiment_record& r) {
  nlohmann::json j = {{"id", r.id},
                      {"seq", r.seq},
                      {"name", r.name},
                      {"state", to_string(r.state)},
                      {"config_source", r.config_source},
                      {"cwd", r.cwd},
                      {"run_dir", r.run_dir},
                      {"submitted_unix_ms", r.submitted_unix_ms},
                      {"first_started_unix_ms", r.first_started_unix_ms},
                      {"started_unix_ms", r.started_unix_ms},
                      {"finished_unix_ms", r.finished_unix_ms},
                      {"pid", r.pid},
                      {"starts", r.starts},
                      {"cancel_requested", r.cancel_requested},
                      {"cancel_deadline_unix_ms", r.cancel_deadline_unix_ms},
                      {"exit_code", nullptr},
                      {"message", r.message}};
  if (r.exit_code) {
    j["exit_code"] = *r.exit_code;
  }
  if (!r.seeds.empty()) {
    j["seeds_spec"] = r.seeds_spec;
    nlohmann::json seeds = nlohmann::json::array();
    for (const auto& s : r.seeds) {
      seeds.push_back({{"seed", s.seed},
                       {"state", to_string(s.state)},
                       {"run_dir", launch::seed_run_dir(r.run_dir, s.seed)},
                       {"starts", s.starts},
                       {"exit_code", s.exit_code ? nlohmann::json(*s.exit_code) : nullptr},
                       {"message", s.message}});
    }
    j["seeds"] = seeds;
  }
  return j;
}

result<experiment_record> record_from_json(const nlohmann::json& j) {
  experiment_record r;
  std::string field;
  try {
    if (!j.is_object()) {
      return error{"expected a JSON object"};
    }
    field = "id";
    r.id = j.at("id").get<std::string>();
    field = "seq";
    r.seq = j.at("seq").get<std::uint64_t>();
    field = "name";
    r.name = j.at("name").get<std::string>();
    field = "state";
    auto state = parse_experiment_state(j.at("state").get<std::string>());
    if (!state) {
      return error{"state: unknown state '" + j.at("state").get<std::string>() + "'"};
    }
    r.state = *state;
    field = "config_source";
    r.config_source = j.at("config_source").get<std::string>();
    field = "cwd";
    r.cwd = j.at("cwd").get<std::string>();
    field = "run_dir";
    r.run_dir = j.at("run_dir").get<std::string>();
    field = "submitted_unix_ms";
    r.submitted_unix_ms = j.at("submitted_unix_ms").get<std::int64_t>();
    field = "first_started_unix_ms";
    r.first_started_unix_ms = j.at("first_started_unix_ms").get<std::int64_t>();
    field = "started_unix_ms";
    r.started_unix_ms = j.at("started_unix_ms").get<std::int64_t>();
    field = "finished_unix_ms";
    r.finished_unix_ms = j.at("finished_unix_ms").get<std::int64_t>();
    field = "pid";
    r.pid = j.at("pid").get<int>();
    field = "starts";
    r.starts = j.at("starts").get<int>();
    field = "cancel_requested";
    r.cancel_requested = j.at("cancel_requested").get<bool>();
    field = "cancel_deadline_unix_ms";
    r.cancel_deadline_unix_ms = j.at("cancel_deadline_unix_ms").get<std::int64_t>();
    field = "exit_code";
    if (!j.at("exit_code").is_null()) {
      r.exit_code = j.at("exit_code").get<int>();
    }
    field = "message";
    r.message = j.at("message").get<std::string>();
    if (j.contains("seeds")) {
      field = "seeds_spec";
      r.seeds_spec = j.at("seeds_spec").get<std::string>();
      for (const auto& s : j.at("seeds")) {
        field = "seeds";
        seed_record seed;
        seed.seed = s.at("seed").get<std::uint64_t>();
        auto state = parse_seed_state(s.at("state").get<std::string>());
        if (!state) {
          return error{"seeds: seed " + std::to_string(seed.seed) + ": unknown state '" +
                       s.at("state").get<std::string>() + "'"};
        }
        seed.state = *state;
        seed.starts = s.at("starts").get<int>();
        if (!s.at("exit_code").is_null()) {
          seed.exit_code = s.at("exit_code").get<int>();
        }
        seed.message = s.at("message").get<std::string>();
        r.seeds.push_back(seed);
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return error{field + ": " + e.what()};
  }
  if (!is_valid_id(r.id)) {
    return error{"id: '" + r.id + "' is not an experiment id"};
  }
  return r;
}

std::string id_of(std::uint64_t seq) { return "e" + std::to_string(seq); }

bool is_valid_id(const std::string& id) {
  if (id.size() < 2 || id.size() > 21 || id[0] != 'e') {
    return false;
  }
  return std::all_of(id.begin() + 1, id.end(), [](char c) { return c >= '0' && c <= '9'; });
}

result<experiment_record> on_started(experiment_record r, int pid, std::int64_t now_ms) {
  const bool restart = r.state == experiment_state::running && r.pid == 0;
  if (r.state != experiment_state::queued && !restart) {
    return error{r.id + " is " + to_string(r.state) + (r.pid != 0 ? " with a child" : "") +
                 "; only a queued experiment, or a running one without a child, starts"};
  }
  r.state = experiment_state::running;
  r.pid = pid;
  r.starts += 1;
  r.started_unix_ms = now_ms;
  if (r.first_started_unix_ms == 0) {
    r.first_started_unix_ms = now_ms;
  }
  r.message = restart ? "resumed from its run folder (start " + std::to_string(r.starts) + ")" : "";
  if (!r.seeds.empty()) {
    seed_record* seed = find_seed(r, seed_state::running);
    const bool resumed = seed != nullptr;
    if (seed == nullptr) {
      seed = find_seed(r, seed_state::queued);
    }
    if (seed == nullptr) {
      return error{r.id + " has no seed left to start"};
    }
    seed->state = seed_state::running;
    seed->starts += 1;
    std::size_t index = 0;
    while (&r.seeds[index] != seed) {
      ++index;
    }
    r.message =
        "seed " + std::to_string(seed->seed) + " (" + std::to_string(index + 1) + " of " +
        std::to_string(r.seeds.size()) + ")" +
        (resumed ? " resumed from its run folder (start " + std::to_string(seed->starts) + ")"
                 : "");
  }
  return r;
}

experiment_record on_exited(experiment_record r, child_exit how, bool daemon_stopping,
                            const std::string& log_tail, std::int64_t now_ms) {
  r.pid = 0;
  r.exit_code = how.signaled ? 128 + how.code : how.code;
  if (!r.seeds.empty()) {
    return on_seed_exited(std::move(r), how, daemon_stopping, log_tail, now_ms);
  }
  const bool success = !how.signaled && how.code == 0;
  // `leap run` exits 130 after a clean stop on SIGTERM/SIGINT.
  const bool interrupted = how.signaled || how.code == 130;
  if (success) {
    r.state = experiment_state::succeeded;
    r.message = r.cancel_requested ? "finished before the cancel took effect" : "";
  } else if (r.cancel_requested) {
    r.state = experiment_state::cancelled;
    r.message = how.signaled ? "cancelled (SIGKILL after the grace period)" : "cancelled";
  } else if (daemon_stopping && interrupted) {
    // Stays running: the next start of the daemon starts its child again on the run folder.
    r.message = "interrupted by the daemon's stop; resumes when the daemon starts again";
    return r;
  } else {
    r.state = experiment_state::failed;
    const std::string line = last_line(log_tail);
    r.message = (how.signaled ? "leap run was killed by signal " + std::to_string(how.code)
                              : "leap run exited with status " + std::to_string(how.code)) +
                (line.empty() ? "" : ": " + line);
  }
  r.finished_unix_ms = now_ms;
  return r;
}

result<experiment_record> on_cancel(experiment_record r, std::int64_t now_ms,
                                    std::int64_t grace_ms) {
  if (is_final(r.state)) {
    return error{r.id + " is already " + to_string(r.state)};
  }
  if (r.cancel_requested) {
    return error{r.id + " is already being cancelled"};
  }
  if (r.state == experiment_state::queued || r.pid == 0) {
    r.state = experiment_state::cancelled;
    r.finished_unix_ms = now_ms;
    r.message = "cancelled";
    cancel_open_seeds(r);
    return r;
  }
  r.cancel_requested = true;
  r.cancel_deadline_unix_ms = now_ms + grace_ms;
  r.message = "cancel requested: SIGTERM sent, SIGKILL after the grace period";
  return r;
}

std::vector<std::string> to_start(const std::vector<experiment_record>& records, int max_concurrent,
                                  bool stopping) {
  if (stopping) {
    return {};
  }
  std::vector<const experiment_record*> resume;
  std::vector<const experiment_record*> queued;
  int live = 0;
  for (const auto& r : records) {
    if (r.state == experiment_state::running && r.pid != 0) {
      ++live;
    }
    if (r.state == experiment_state::running && r.pid == 0 && !r.cancel_requested) {
      resume.push_back(&r);
    }
    if (r.state == experiment_state::queued) {
      queued.push_back(&r);
    }
  }
  const auto by_seq = [](const auto* a, const auto* b) { return a->seq < b->seq; };
  std::sort(resume.begin(), resume.end(), by_seq);
  std::sort(queued.begin(), queued.end(), by_seq);
  std::vector<std::string> out;
  for (const auto* list : {&resume, &queued}) {
    for (const auto* r : *list) {
      if (live >= max_concurrent) {
        return out;
      }
      out.push_back(r->id);
      ++live;
    }
  }
  return out;
}

std::string tail_lines(const std::string& text, std::size_t n) {
  if (n == 0) {
    return {};
  }
  std::size_t end = text.size();
  // A trailing newline ends the last line; it does not start an empty one.
  std::size_t pos = end;
  if (pos > 0 && text[pos - 1] == '\n') {
    --pos;
  }
  std::size_t lines = 0;
  while (pos > 0) {
    const auto nl = text.rfind('\n', pos - 1);
    if (nl == std::string::npos) {
      return text;
    }
    if (++lines == n) {
      return text.substr(nl + 1);
    }
    pos = nl;
  }
  return text;
}

}  // namespace leap::daemon
