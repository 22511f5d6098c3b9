// The clients of `leap daemon`'s control API: `leap submit CONFIG`, `leap status [ID]`,
// `leap cancel ID`, `leap logs ID`. Each finds the daemon's port and token in its home (--home,
// else $LEAP_HOME, else the default home), sends one request and prints the answer; a daemon's
// error is printed as its message and gives exit status 1.
#include "orchestrator/config.hpp"
#include "tools/daemon/client.hpp"
#include "tools/daemon/home.hpp"
#include "tools/leap/command.hpp"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

namespace leap::cli {
namespace {

struct client_options {
  std::string home;
  std::string id;
  std::string config;
  std::string seeds;  // --seeds as given; empty: one run of the config
  std::size_t tail = 0;
  bool json = false;
};

int fail(const std::string& command, const std::string& message) {
  std::cerr << "leap " << command << ": error: " << message << "\n";
  return 1;
}

void add_home_option(CLI::App* cmd, client_options* options) {
  cmd->add_option("--home", options->home,
                  "The daemon's home. Default: $LEAP_HOME, else $XDG_STATE_HOME/leap, else "
                  "~/.local/state/leap");
}

result<daemon::daemon_client> connect(const client_options& options) {
  auto home = daemon::resolve_home(options.home);
  if (!home) {
    return home.err();
  }
  return daemon::daemon_client::open(*home);
}

std::string local_time(std::int64_t unix_ms) {
  if (unix_ms <= 0) {
    return "-";
  }
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &tm);
  return text;
}

// The body as JSON, or an error naming what came back.
result<nlohmann::json> parse_body(const daemon::client_reply& reply) {
  auto j = nlohmann::json::parse(reply.body, nullptr, false);
  if (j.is_discarded()) {
    return error{"the daemon sent something that is not JSON: " + reply.body};
  }
  return j;
}

// `text` as a query parameter's value: the daemon checks what the user typed, so every byte
// arrives as typed.
std::string query_value(const std::string& text) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0 || c == ',' || c == '-') {
      out += c;
    } else {
      out += '%';
      out += hex[u >> 4];
      out += hex[u & 15];
    }
  }
  return out;
}

int submit(const client_options& options) {
  auto text = read_config_file(options.config);
  if (!text) {
    return fail("submit", text.err().message);
  }
  auto client = connect(options);
  if (!client) {
    return fail("submit", client.err().message);
  }
  std::error_code ec;
  const auto cwd = std::filesystem::current_path(ec);
  const std::string path = options.seeds.empty()
                               ? "/v1/experiments"
                               : "/v1/experiments?seeds=" + query_value(options.seeds);
  auto reply = client->post(path, *text, "application/yaml",
                            {{"X-Leap-Config-Name", options.config}, {"X-Leap-Cwd", cwd.string()}});
  if (!reply) {
    return fail("submit", reply.err().message);
  }
  if (reply->status != 201) {
    return fail("submit", daemon::error_message(*reply));
  }
  auto j = parse_body(*reply);
  if (!j) {
    return fail("submit", j.err().message);
  }
  if (options.json) {
    std::cout << j->dump(2) << "\n";
  } else {
    std::cout << (*j)["id"].get<std::string>() << ": '" << (*j)["name"].get<std::string>()
              << "' queued | run folder " << (*j)["run_dir"].get<std::string>();
    if (j->contains("seeds")) {
      std::cout << " | seeds " << (*j)["seeds_spec"].get<std::string>() << " in "
                << (*j)["run_dir"].get<std::string>() << "/seed-N";
    }
    std::cout << "\n";
  }
  return 0;
}

void print_record(const nlohmann::json& r) {
  const auto exit_code = r["exit_code"].is_null() ? "-" : std::to_string(r["exit_code"].get<int>());
  std::printf("id:          %s\n", r["id"].get<std::string>().c_str());
  std::printf("name:        %s\n", r["name"].get<std::string>().c_str());
  std::printf("state:       %s%s\n", r["state"].get<std::string>().c_str(),
              r["cancel_requested"].get<bool>() && r["state"] == "running" ? " (cancelling)" : "");
  std::printf("config:      %s\n", r["config_source"].get<std::string>().c_str());
  std::printf("run folder:  %s\n", r["run_dir"].get<std::string>().c_str());
  std::printf("submitted:   %s\n", local_time(r["submitted_unix_ms"].get<std::int64_t>()).c_str());
  std::printf("started:     %s\n", local_time(r["started_unix_ms"].get<std::int64_t>()).c_str());
  std::printf("finished:    %s\n", local_time(r["finished_unix_ms"].get<std::int64_t>()).c_str());
  std::printf("starts:      %d\n", r["starts"].get<int>());
  std::printf("pid:         %d\n", r["pid"].get<int>());
  std::printf("exit status: %s\n", exit_code.c_str());
  if (!r["message"].get<std::string>().empty()) {
    std::printf("message:     %s\n", r["message"].get<std::string>().c_str());
  }
  if (r.contains("seeds")) {
    std::printf("seeds:       %s\n", r["seeds_spec"].get<std::string>().c_str());
    for (const auto& s : r["seeds"]) {
      const std::string message = s["message"].get<std::string>();
      std::printf("  seed %-6llu %-10s %s%s\n",
                  static_cast<unsigned long long>(s["seed"].get<std::uint64_t>()),
                  s["state"].get<std::string>().c_str(), s["run_dir"].get<std::string>().c_str(),
                  message.empty() || message == "cancelled" ? "" : (" | " + message).c_str());
    }
  }
}

int status(const client_options& options) {
  auto client = connect(options);
  if (!client) {
    return fail("status", client.err().message);
  }
  if (!options.id.empty()) {
    auto reply = client->get("/v1/experiments/" + options.id);
    if (!reply) {
      return fail("status", reply.err().message);
    }
    if (reply->status != 200) {
      return fail("status", daemon::error_message(*reply));
    }
    auto j = parse_body(*reply);
    if (!j) {
      return fail("status", j.err().message);
    }
    if (options.json) {
      std::cout << j->dump(2) << "\n";
    } else {
      print_record(*j);
    }
    return 0;
  }
  auto daemon_reply = client->get("/v1/status");
  if (!daemon_reply) {
    return fail("status", daemon_reply.err().message);
  }
  auto list_reply = client->get("/v1/experiments");
  if (!list_reply) {
    return fail("status", list_reply.err().message);
  }
  if (daemon_reply->status != 200) {
    return fail("status", daemon::error_message(*daemon_reply));
  }
  if (list_reply->status != 200) {
    return fail("status", daemon::error_message(*list_reply));
  }
  auto d = parse_body(*daemon_reply);
  auto l = parse_body(*list_reply);
  if (!d) {
    return fail("status", d.err().message);
  }
  if (!l) {
    return fail("status", l.err().message);
  }
  if (options.json) {
    std::cout << nlohmann::json{{"daemon", *d}, {"experiments", (*l)["experiments"]}}.dump(2)
              << "\n";
    return 0;
  }
  const auto& counts = (*d)["experiments"];
  std::printf(
      "daemon %s on 127.0.0.1:%d | max_concurrent %d | up %.0fs | %d running, %d queued, "
      "%d succeeded, %d failed, %d cancelled\n",
      (*d)["state"].get<std::string>().c_str(), (*d)["settings"]["port"].get<int>(),
      (*d)["settings"]["max_concurrent"].get<int>(), (*d)["uptime_s"].get<double>(),
      counts["running"].get<int>(), counts["queued"].get<int>(), counts["succeeded"].get<int>(),
      counts["failed"].get<int>(), counts["cancelled"].get<int>());
  const auto& list = (*l)["experiments"];
  if (list.empty()) {
    return 0;
  }
  std::printf("\n%-6s %-10s %-16s %-19s %6s  %s\n", "ID", "STATE", "NAME", "SUBMITTED", "STARTS",
              "RUN FOLDER");
  for (const auto& r : list) {
    std::printf("%-6s %-10s %-16s %-19s %6d  %s\n", r["id"].get<std::string>().c_str(),
                r["state"].get<std::string>().c_str(), r["name"].get<std::string>().c_str(),
                local_time(r["submitted_unix_ms"].get<std::int64_t>()).c_str(),
                r["starts"].get<int>(), r["run_dir"].get<std::string>().c_str());
  }
  return 0;
}

int cancel(const client_options& options) {
  auto client = connect(options);
  if (!client) {
    return fail("cancel", client.err().message);
  }
  auto reply = client->post("/v1/experiments/" + options.id + "/cancel", "", "text/plain");
  if (!reply) {
    return fail("cancel", reply.err().message);
  }
  if (reply->status != 200) {
    return fail("cancel", daemon::error_message(*reply));
  }
  auto j = parse_body(*reply);
  if (!j) {
    return fail("cancel", j.err().message);
  }
  if ((*j)["state"] == "cancelled") {
    std::cout << options.id << ": cancelled\n";
  } else {
    std::cout << options.id << ": cancelling (leap run got SIGTERM; it stores what it has and "
              << "exits; `leap status " << options.id << "` shows when it is done)\n";
  }
  return 0;
}

int logs(const client_options& options) {
  auto client = connect(options);
  if (!client) {
    return fail("logs", client.err().message);
  }
  std::string path = "/v1/experiments/" + options.id + "/logs";
  if (options.tail > 0) {
    path += "?tail=" + std::to_string(options.tail);
  }
  auto reply = client->get(path);
  if (!reply) {
    return fail("logs", reply.err().message);
  }
  if (reply->status != 200) {
    return fail("logs", daemon::error_message(*reply));
  }
  std::cout << reply->body;
  std::cout.flush();
  return 0;
}

void add_submit(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<client_options>();
  auto* cmd = app.add_subcommand(
      "submit",
      "Queue an experiment config on the running `leap daemon`. The daemon validates it first "
      "(errors name file, line and key); relative paths in it are relative to this folder.");
  cmd->add_option("config", options->config, "Experiment config (YAML)")->required();
  cmd->add_option("--seeds", options->seeds,
                  "Run the config once per seed, one after the other, as `leap run --seeds` "
                  "does: 1,2,3 or 1-3 (or 1-3,7); seed N runs in RUN_DIR/seed-N. `leap status ID` "
                  "shows each seed's state; a cancel cancels the seeds left; a restarted daemon "
                  "skips the finished seeds");
  cmd->add_flag("--json", options->json, "Print the daemon's JSON record");
  add_home_option(cmd, options.get());
  cmd->callback([options, exit_code] { *exit_code = submit(*options); });
}

void add_status(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<client_options>();
  auto* cmd = app.add_subcommand(
      "status", "Show the daemon and its experiments, or one experiment in detail.");
  cmd->add_option("id", options->id, "Experiment id (e.g. e3); all when left out");
  cmd->add_flag("--json", options->json, "Print the daemon's JSON");
  add_home_option(cmd, options.get());
  cmd->callback([options, exit_code] { *exit_code = status(*options); });
}

void add_cancel(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<client_options>();
  auto* cmd = app.add_subcommand(
      "cancel",
      "Cancel an experiment: a queued one at once, a running one by SIGTERM to its leap run "
      "(SIGKILL after the daemon's grace period).");
  cmd->add_option("id", options->id, "Experiment id (e.g. e3)")->required();
  add_home_option(cmd, options.get());
  cmd->callback([options, exit_code] { *exit_code = cancel(*options); });
}

void add_logs(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<client_options>();
  auto* cmd = app.add_subcommand(
      "logs", "Print an experiment's log (the output of its leap run, every start of it).");
  cmd->add_option("id", options->id, "Experiment id (e.g. e3)")->required();
  cmd->add_option("--tail", options->tail, "Only the last N lines")->check(CLI::PositiveNumber);
  add_home_option(cmd, options.get());
  cmd->callback([options, exit_code] { *exit_code = logs(*options); });
}

}  // namespace

LEAP_COMMAND("submit", add_submit);
LEAP_COMMAND("status", add_status);
LEAP_COMMAND("cancel", add_cancel);
LEAP_COMMAND("logs", add_logs);

}  // namespace leap::cli
