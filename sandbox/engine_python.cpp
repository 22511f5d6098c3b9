// The python pipeline of the engine: the candidate's process and the judge's, joined by a socket,
// and the probe of the python slot.
#include "sandbox/engine.hpp"
#include "sandbox/engine_parts.hpp"
#include "sandbox/python_judge.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <signal.h>
#include <sys/socket.h>
#include <system_error>
#include <thread>
#include <unistd.h>

namespace leap::sandbox {

using detail::k_max_result_json_bytes;
using detail::memory_feedback;
using detail::run_file;

result<verdict> engine::run_python(const task& t, const prepared_candidate& p) {
  // Two sandboxed processes: the candidate's (solution.py and the server) and the judge's (tests.py
  // and the judge), joined by a socketpair as their descriptor 3. Only data crosses it; the verdict
  // is the judge's, written in a folder of the judge's uid that the candidate cannot reach.
  auto cand_dir = scratch_dir::create(config_.scratch_root, "py-");
  if (!cand_dir) {
    return cand_dir.err();
  }
  auto judge_dir = scratch_dir::create(config_.scratch_root, "pyjudge-");
  if (!judge_dir) {
    return judge_dir.err();
  }
  std::vector<run_file> judge_files{{"tests.py", &t.tests}, {"judge.py", &python_judge_source()}};
  if (!t.hidden_tests.empty()) {
    judge_files.push_back({"hidden_tests.py", &t.hidden_tests});
  }
  if (auto s = detail::write_run_files(
          cand_dir->path(),
          {{"solution.py", &p.code}, {"server.py", &python_candidate_server_source()}});
      !s) {
    return s.err();
  }
  if (auto s = detail::write_run_files(judge_dir->path(), judge_files); !s) {
    return s.err();
  }
  int channel[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, channel) < 0) {
    return infrastructure_error(
        -1, std::string("socketpair for a python run: ") + std::strerror(errno));
  }
  run_request cand;
  cand.argv = {config_.python, "-I", "-B", "server.py"};
  cand.working_dir = cand_dir->path();
  cand.env = run_env(-1);
  cand.limits = config_.python_limits;
  cand.readonly_paths = readonly_paths_;
  cand.pass_fd = channel[1];
  run_request judge = cand;
  judge.argv.back() = "judge.py";
  judge.working_dir = judge_dir->path();
  judge.pass_fd = channel[0];
  // The judge outlives the candidate's limits: a candidate that hangs is killed first, and the
  // judge reports which test it was in.
  judge.limits.wall = cand.limits.wall + std::max<std::chrono::milliseconds>(
                                             std::chrono::seconds(5), cand.limits.wall / 2);
  if (judge.limits.cpu_seconds > 0) {
    judge.limits.cpu_seconds += 5;
  }
  judge.limits.output_cap_bytes = 16 << 10;

  std::optional<result<run_result>> cand_run;
  std::thread cand_thread;
  try {
    cand_thread = std::thread([&] { cand_run = run_isolated(cand); });
  } catch (const std::system_error& e) {
    ::close(channel[0]);
    ::close(channel[1]);
    return infrastructure_error(-1, std::string("no thread for a python run: ") + e.what());
  }
  auto judge_run = run_isolated(judge);
  cand_thread.join();
  if (!cand_run->ok()) {
    return infrastructure_error(
        -1, cand_run->err().wrap("starting the candidate's python process").message);
  }
  if (!judge_run) {
    return infrastructure_error(-1, judge_run.err().wrap("starting the python judge").message);
  }
  const run_result& c = cand_run->value();
  const run_result& j = *judge_run;

  verdict v;
  v.run_ms = static_cast<double>(c.wall.count()) / 1000.0;
  v.diagnostics = c.isolation + "\ncandidate " + std::to_string(c.wall.count() / 1000) +
                  " ms, judge " + std::to_string(j.wall.count() / 1000) + " ms\n" +
                  c.stderr_text.substr(0, 2000);
  if (!j.stderr_text.empty()) {
    v.diagnostics += "\n--- judge\n" + j.stderr_text.substr(0, 2000);
  }
  auto finish = [&](verdict_category category, std::string text) {
    v.category = category;
    v.passed = category == verdict_category::pass;
    v.feedback = trim_to_budget(std::move(text), config_.feedback.char_budget);
    return v;
  };
  if (c.memory_exceeded) {
    return finish(verdict_category::runtime, memory_feedback(cand.limits));
  }
  if (c.scratch_exceeded) {
    return finish(verdict_category::runtime, scratch_feedback(c, cand.limits));
  }
  // How the candidate's process ended, when that explains a lost channel. During a hidden test
  // only the kind (timeout or runtime): its exit code, signal and output could carry the hidden
  // inputs it was given.
  auto candidate_ended = [&](const std::string& during, bool hidden) -> verdict {
    const std::string where = during.empty() ? std::string{} : "\nIt was stopped " + during + ".";
    if (c.timed_out) {
      return finish(
          verdict_category::timeout,
          timeout_feedback(std::chrono::duration<double>(cand.limits.wall).count(), false) + where);
    }
    if (!c.exited && c.signal == SIGXCPU) {
      return finish(verdict_category::timeout,
                    timeout_feedback(cand.limits.cpu_seconds, true) + where);
    }
    if (hidden) {
      return finish(verdict_category::runtime,
                    "Runtime error: the program ended (exited or crashed) " + during +
                        ", after every visible test passed.");
    }
    std::string text;
    if (!c.exited) {
      text = signal_feedback(c.signal, c.stderr_text);
    } else {
      text = "Runtime error: the program exited with code " + std::to_string(c.exit_code) + " " +
             during + ", before the tests finished (do not call exit() or os._exit()).";
      const std::string tail = stderr_tail(c.stderr_text, 600);
      if (!tail.empty()) {
        text += "\nIts last output on stderr:\n" + tail;
      }
    }
    return finish(verdict_category::runtime, text);
  };

  auto text = read_untrusted_file(judge_dir->path() / ".leap_result", k_max_result_json_bytes);
  nlohmann::json result = text ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
  if (!result.is_object()) {
    if (c.timed_out || (!c.exited && c.signal == SIGXCPU)) {
      return candidate_ended("", false);
    }
    // The judge ran no candidate code, so a judge that wrote nothing is either the host's python
    // failing (the probe says so) or data from the candidate that it could not handle.
    if (auto probe = probe_python(); !probe) {
      return probe.err();
    }
    v.diagnostics += "\n--- judge ended without a result: " +
                     (j.timed_out ? std::string("timed out")
                      : j.exited  ? "exit code " + std::to_string(j.exit_code)
                                  : signal_name(j.signal));
    return finish(verdict_category::runtime,
                  "Runtime error: the tests could not be completed against your program.");
  }
  switch (parse_python_judge_status(result.value("status", std::string{}))) {
    case python_judge_status::candidate_lost: {
      const std::string test = result.value("test", std::string{});
      const bool hidden = result.value("hidden", false);
      const std::string during = hidden ? "during a hidden test"
                                 : test.empty()
                                     ? "while being imported"
                                     : "during test " + test + " (" +
                                           std::to_string(result.value("index", 0) + 1) + " of " +
                                           std::to_string(result.value("total", 0)) + ")";
      if (result.value("reason", std::string{}) == "ended" || !c.exited || c.exit_code != 0) {
        return candidate_ended(during, hidden);
      }
      return finish(verdict_category::runtime,
                    "Runtime error: the program broke the channel to the tests " + during +
                        " (do not write to or close descriptor 3).");
    }
    case python_judge_status::judge_error: {
      if (auto probe = probe_python(); !probe) {
        return probe.err();
      }
      v.diagnostics += "\n--- judge error: " + result.value("type", std::string{}) + ": " +
                       result.value("message", std::string{});
      return finish(verdict_category::runtime,
                    "Runtime error: the tests could not be completed against your program.");
    }
    case python_judge_status::passed:
    case python_judge_status::syntax_error:
    case python_judge_status::import_error:
    case python_judge_status::failed:
    case python_judge_status::error:
    case python_judge_status::no_tests:
    case python_judge_status::unknown:
      break;  // the test's outcome (or the task's fault): python_result_feedback's to word
  }
  auto fb = python_result_feedback(*text);
  if (!fb) {
    return fb.err().wrap(t.id);
  }
  return finish(fb->category, fb->text);
}

status engine::probe_python() {
  auto dir = scratch_dir::create(config_.scratch_root, "probe-");
  if (!dir) {
    return dir.err();
  }
  run_request request;
  request.argv = {config_.python, "-I", "-B", "-c", "import json, marshal, struct, traceback"};
  request.working_dir = dir->path();
  request.env = run_env(-1);
  request.limits = config_.python_limits;
  request.readonly_paths = readonly_paths_;
  auto r = run_isolated(request);
  if (!r) {
    return infrastructure_error(-1, r.err().wrap("probing " + config_.python).message);
  }
  if (!r->exited || r->exit_code != 0) {
    return infrastructure_error(-1, "'" + config_.python + "' does not run in the sandbox (" +
                                        (r->timed_out ? std::string("timed out")
                                         : r->exited  ? "exit code " + std::to_string(r->exit_code)
                                                      : signal_name(r->signal)) +
                                        "): " + r->stderr_text.substr(0, 300));
  }
  return ok_status();
}

}  // namespace leap::sandbox
