#include "sandbox/feedback.hpp"

#include "common/durable_file.hpp"
#include "common/lines.hpp"
#include "sandbox/kernelbench.hpp"
#include "sandbox/process.hpp"
#include "sandbox/profile.hpp"
#include "sandbox/python_judge.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <regex>
#include <signal.h>
#include <sstream>
#include <vector>

namespace leap::sandbox {
namespace {

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) {
    out += l;
    out += '\n';
  }
  return out;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string signal_description(int signal) {
  switch (signal) {
    case SIGSEGV:
      return "segmentation fault: an invalid memory access";
    case SIGABRT:
      return "aborted: a failed assert, an uncaught exception or abort()";
    case SIGFPE:
      return "arithmetic error, e.g. an integer division by zero";
    case SIGBUS:
      return "bus error: a misaligned or invalid memory access";
    case SIGILL:
      return "illegal instruction";
    case SIGXFSZ:
      return "it wrote a file larger than allowed";
    case SIGXCPU:
      return "CPU time limit exceeded";
    case SIGKILL:
      return "killed, e.g. for using too much memory or too many processes";
    case SIGPIPE:
      return "broken pipe";
    default:
      return "terminated by a signal";
  }
}

}  // namespace

std::string strip_host_paths(std::string_view text) {
  static const std::regex compiler_tmp(
      R"((/tmp/)?(tmpxft_[0-9a-fA-F_-]+|cc[A-Za-z0-9]{6})[\w.-]*)");
  static const std::regex abs_path(R"((^|[\s'"`(<\[=,])/(?:[\w.+@-]+/)*([\w.+@-]+))");
  std::string out = std::regex_replace(std::string(text), compiler_tmp, "<tmp>");
  out = std::regex_replace(out, abs_path, "$1$2");
  return out;
}

std::string trim_to_budget(std::string text, std::size_t budget) {
  if (text.size() <= budget) {
    return text;
  }
  const std::string marker_prefix = "\n[... ";
  const std::size_t reserve = 48;
  std::size_t cut = budget > reserve ? budget - reserve : 0;
  const auto newline = text.rfind('\n', cut);
  if (newline != std::string::npos && newline > cut / 2) {
    cut = newline;
  }
  const std::size_t dropped = text.size() - cut;
  text.resize(cut);
  text += marker_prefix + std::to_string(dropped) + " more characters cut]";
  if (text.size() > budget) {
    text.resize(budget);
  }
  return text;
}

std::string compile_feedback(std::string_view log, std::string_view candidate_file,
                             std::string_view signature, const feedback_options& options) {
  static const std::regex gcc_diag(
      R"(^([^\s:][^:]*):(\d+):(\d+): (fatal error|error|warning|note): (.*)$)");
  static const std::regex gcc_context(
      R"(^([^\s:][^:]*):(\d+):(\d+):\s+(required from|in .*instantiat).*$)");
  static const std::regex nvcc_diag(
      R"(^([^\s(][^(]*)\((\d+)\): (catastrophic error|error|warning|remark|note)[^:]*: (.*)$)");
  static const std::regex undefined_ref(R"(undefined reference to [`'](.*)'$)");
  static const std::regex multiple_def(R"(multiple definition of [`'](.*)';?)");
  std::vector<std::string> lines;
  std::vector<std::string>
      files;  // per line: the file a diagnostic names, as the compiler wrote it
  for (auto& l : split_lines(log)) {
    if (l.size() > 400) {
      l = l.substr(0, 400) + " ...";
    }
    std::smatch fm;
    if (std::regex_match(l, fm, gcc_diag) || std::regex_match(l, fm, gcc_context) ||
        std::regex_match(l, fm, nvcc_diag)) {
      files.push_back(fm[1].str());
    } else {
      files.emplace_back();
    }
    lines.push_back(strip_host_paths(l));
    if (lines.size() > 2000) {
      break;
    }
  }
  const std::string cand(candidate_file);

  std::vector<std::string> errors;
  std::vector<std::string> link_errors;
  int total_errors = 0;
  std::string last_context;  // the candidate's line that instantiated a library template
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    std::smatch m;
    if (std::regex_search(line, m, undefined_ref)) {
      const std::string symbol = m[1].str();
      std::string text;
      if (symbol.rfind("solve(", 0) == 0 || symbol == "solve") {
        text =
            "Linking failed: solve is not defined with the required signature. Define exactly:\n "
            " " +
            std::string(signature) + "\n(at namespace scope, not static, not extern \"C\").";
      } else {
        text = "Linking failed: undefined reference to `" + symbol +
               "' (it is declared or called but never defined; "
               "only the standard library" +
               (cand.ends_with(".cu") ? " and the CUDA runtime are" : " is") + " linked).";
      }
      if (std::find(link_errors.begin(), link_errors.end(), text) == link_errors.end()) {
        link_errors.push_back(text);
      }
      continue;
    }
    if (std::regex_search(line, m, multiple_def)) {
      const std::string symbol = m[1].str();
      const std::string text =
          symbol == "main"
              ? "Linking failed: do not define main(); the harness provides it and calls solve()."
              : "Linking failed: multiple definition of `" + symbol + "'.";
      if (std::find(link_errors.begin(), link_errors.end(), text) == link_errors.end()) {
        link_errors.push_back(text);
      }
      continue;
    }
    bool is_error = false;
    std::string file;
    // The file as the compiler named it: "/x/solution.cpp" (a #line trick) is not the candidate's.
    file = files[i];
    if (std::regex_match(line, m, gcc_diag)) {
      is_error = m[4].str() == "error" || m[4].str() == "fatal error";
    } else if (std::regex_match(line, m, nvcc_diag)) {
      is_error = m[3].str() == "error" || m[3].str() == "catastrophic error";
    } else if (std::regex_match(line, m, gcc_context)) {
      if (file == cand && m[4].str() == "required from") {
        last_context = m[1].str() + ":" + m[2].str() + ":" + m[3].str();
      }
      continue;
    }
    if (!is_error) {
      continue;
    }
    ++total_errors;
    if (static_cast<int>(errors.size()) >= options.max_compiler_errors) {
      continue;
    }
    // Only the candidate's own file is quoted: a diagnostic located elsewhere (a library header, a
    // name given by #line, the harness) keeps its message, whose names the compiler lexed from the
    // verified includes or the candidate's own text, but never the excerpt, which the compiler
    // re-reads from whatever file the location names.
    if (file != cand) {
      if (file.rfind("harness", 0) == 0) {
        continue;  // harness internals never reach the model
      }
      std::string entry = line;
      if (!last_context.empty()) {
        entry.append("  (instantiated from ").append(last_context).append(")");
      }
      errors.push_back(std::move(entry) + "\n");
      continue;
    }
    if (static_cast<int>(errors.size()) >= options.max_compiler_errors) {
      continue;
    }
    std::vector<std::string> entry{line};
    // The excerpt and caret lines that follow, up to the next diagnostic or a blank line.
    for (std::size_t j = i + 1; j < lines.size() && entry.size() < 6; ++j) {
      const std::string& next = lines[j];
      if (next.empty() || std::regex_match(next, gcc_diag) || std::regex_match(next, nvcc_diag) ||
          std::regex_match(next, gcc_context) || starts_with(next, "In file included from") ||
          starts_with(next, "                 from ") || next.find(": In ") != std::string::npos ||
          next.find("error detected in the compilation") != std::string::npos ||
          starts_with(next, "compilation terminated")) {
        break;
      }
      entry.push_back(next);
    }
    errors.push_back(join(entry));
  }

  std::string out;
  const int shown = static_cast<int>(errors.size());
  if (!errors.empty()) {
    out = "Compilation failed:\n";
    for (const auto& e : errors) {
      out += e;
    }
    if (total_errors > shown) {
      out += "(" + std::to_string(total_errors - shown) + " more error" +
             (total_errors - shown == 1 ? "" : "s") + " not shown; fix these first)\n";
    }
  } else if (!link_errors.empty()) {
    for (const auto& e : link_errors) {
      out += e + "\n";
    }
  } else {
    // Unrecognised shape: the last lines that cannot quote a file (no excerpts, no include chains,
    // no diagnostics located elsewhere).
    std::vector<std::string> tail;
    for (const auto& l : lines) {
      if (l.empty() || starts_with(l, "collect2:") || l.find("ld returned") != std::string::npos) {
        continue;
      }
      if (l[0] == ' ' || l[0] == '\t' || l.find(" | ") != std::string::npos ||
          starts_with(l, "In file included") || l.find(": In ") != std::string::npos ||
          std::regex_match(l, gcc_context) || std::regex_match(l, gcc_diag) ||
          std::regex_match(l, nvcc_diag)) {
        continue;
      }
      tail.push_back(l);
    }
    if (tail.size() > 15) {
      tail.erase(tail.begin(), tail.end() - 15);
    }
    out = "Compilation failed:\n" + join(tail);
  }
  while (!out.empty() && out.back() == '\n') {
    out.pop_back();
  }
  return trim_to_budget(out, options.char_budget);
}

std::string mismatch_feedback(const mismatch& m) {
  const std::string trial =
      "trial " + std::to_string(m.trial + 1) + " of " + std::to_string(m.trials);
  if (m.modified_input) {
    return "Wrong answer: solve() wrote into its input '" + m.arg + "' (" + trial +
           "); inputs are read-only, write only to the outputs.";
  }
  if (m.expected_count != m.got_count) {
    return "Wrong answer: output '" + m.arg + "' (" + trial + ") has " +
           std::to_string(m.got_count) + " elements, expected " + std::to_string(m.expected_count) +
           ".";
  }
  std::string out = "Wrong answer: output '" + m.arg + "' (" + trial + ")";
  if (m.relative_l2_failed) {
    out += " is too far from the expected result as a whole: relative L2 error " +
           number(m.relative_l2) + " (every element is within atol=" + number(m.atol) +
           " but the result is not close).";
  } else {
    out += ": " + std::to_string(m.bad_elements) + " of " + std::to_string(m.expected_count) +
           " elements differ by more than atol=" + number(m.atol) + " + rtol=" + number(m.rtol) +
           " * |expected|.";
  }
  out += "\nmax abs error " + number(m.max_abs_error) + ", max rel error " +
         number(m.max_rel_error) + ".";
  out += "\nWorst at index " + std::to_string(m.worst_index) + ": expected " + number(m.expected) +
         ", got " + number(m.got) + ".";
  return out;
}

std::string stderr_tail(std::string_view stderr_text, std::size_t max_chars) {
  std::vector<std::string> kept;
  for (const auto& l : split_lines(stderr_text)) {
    if (starts_with(l, "LEAP_HARNESS_ERROR")) {
      continue;
    }
    kept.push_back(l);
  }
  while (!kept.empty() && kept.back().empty()) {
    kept.pop_back();
  }
  // The last lines that fit, newest last: gathered from the end, then put in order.
  std::vector<std::string> lines;
  std::size_t size = 0;
  for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
    std::string line = strip_host_paths(*it);
    if (size + line.size() + 1 > max_chars) {
      break;
    }
    size += line.size() + 1;
    lines.push_back(std::move(line));
  }
  std::string tail;
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    tail += *it;
    tail += '\n';
  }
  while (!tail.empty() && tail.back() == '\n') {
    tail.pop_back();
  }
  return tail;
}

std::string signal_feedback(int signal, std::string_view stderr_text) {
  std::string out = "Runtime error: the program was killed by " + signal_name(signal) + " (" +
                    signal_description(signal) + ").";
  const std::string tail = stderr_tail(stderr_text, 600);
  if (!tail.empty()) {
    out += "\nIts last output on stderr:\n" + tail;
  }
  return out;
}

std::string exit_feedback(int code, std::string_view stderr_text) {
  std::string out =
      "Runtime error: the program exited with code " + std::to_string(code) + " before finishing.";
  const std::string tail = stderr_tail(stderr_text, 600);
  if (!tail.empty()) {
    out += "\nIts last output on stderr:\n" + tail;
  }
  return out;
}

std::string timeout_feedback(double limit_seconds, bool cpu) {
  return std::string("Time limit exceeded: the program did not finish within ") +
         number(limit_seconds) + " s of " + (cpu ? "CPU time" : "wall-clock time") +
         " and was killed (an infinite loop, a deadlock, or far too slow an algorithm?).";
}

std::string scratch_feedback(const run_result& r, const resource_limits& limits) {
  // Sizes to two or three digits and no exact count: what a run leaves must not become a channel
  // for what it was given (a hidden test's input).
  const std::string limit = format_bytes(limits.scratch_bytes);
  const std::uint64_t max_entries = scratch_entry_limit(limits);
  std::string what;
  if (r.scratch_left_entries > max_entries) {
    what = "more than " + std::to_string(max_entries) +
           " files and folders in its working folder; the limit is " + std::to_string(max_entries) +
           " and " + limit;
  } else if (r.scratch_left_bytes > limits.scratch_bytes) {
    what = format_bytes(r.scratch_left_bytes) + " in its working folder; the limit is " + limit +
           ", each file counted at its full size (a sparse file's holes too) and each folder as "
           "4 KiB";
  } else {
    what = "a folder in its working folder that could not be read; the limit is " + limit;
  }
  return "Runtime error: the program left " + what +
         ". Nothing it wrote was kept: write only the files the task asks for.";
}

std::string harness_error_feedback(const harness_failure& e, std::string_view stderr_text) {
  std::string out;
  switch (e.kind) {
    case harness_failure_kind::cuda:
      out = "CUDA error " + e.name + " while " + e.where + ": " + e.text + ".";
      if (e.name == "cudaErrorIllegalAddress") {
        out += "\nA kernel read or wrote out of bounds; check every index against its size.";
      }
      if (e.name == "cudaErrorAssert") {
        out += "\nA device-side assert failed.";
      }
      if (e.name == "cudaErrorLaunchOutOfResources" || e.name == "cudaErrorInvalidConfiguration") {
        out +=
            "\nCheck the launch configuration (block size at most 1024, shared memory, registers).";
      }
      break;
    case harness_failure_kind::cuda_init:
      // Only reached when the engine's own probe of the GPU passed: the program itself broke CUDA.
      out = "Runtime error: CUDA could not be initialised in your program (" + e.name + ": " +
            e.text +
            "), although the GPU works; does a global or constructor of yours call CUDA or change "
            "the environment?";
      break;
    case harness_failure_kind::keeper:  // the engine makes it the slot's error first
    case harness_failure_kind::threads:
    case harness_failure_kind::stream:
    case harness_failure_kind::channel:
    case harness_failure_kind::other:
      out = "Runtime error while " + e.where + ": " + e.text + ".";
      break;
  }
  const std::string tail = stderr_tail(stderr_text, 400);
  if (!tail.empty()) {
    out += "\nThe program's last output on stderr:\n" + tail;
  }
  return out;
}

namespace {

std::string frames_text(const nlohmann::json& frames) {
  std::string out;
  if (!frames.is_array()) {
    return out;
  }
  for (const auto& f : frames) {
    out += "  " + f.value("file", std::string{}) + " line " + std::to_string(f.value("line", 0)) +
           ", in " + f.value("function", std::string{}) + ": " + f.value("code", std::string{}) +
           "\n";
  }
  return out;
}

std::string exception_line(const nlohmann::json& j) {
  std::string type = j.value("type", std::string("Exception"));
  std::string message = j.value("message", std::string{});
  return message.empty() ? type : type + ": " + strip_host_paths(message);
}

}  // namespace

result<categorized_feedback> python_result_feedback(std::string_view result_json) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(result_json);
  } catch (const nlohmann::json::exception& e) {
    return error{std::string("unreadable python runner result: ") + e.what()};
  }
  const std::string status_text = j.value("status", std::string{});
  const python_judge_status status = parse_python_judge_status(status_text);
  switch (status) {
    case python_judge_status::passed:
      return categorized_feedback{verdict_category::pass,
                                  "All " + std::to_string(j.value("total", 0)) + " tests passed."};
    case python_judge_status::syntax_error: {
      const std::string file = j.value("file", std::string{});
      if (file != "solution.py") {
        return error{"the task's " + file +
                     " has a syntax error: " + j.value("message", std::string{})};
      }
      std::string text = "Syntax error in your code, line " + std::to_string(j.value("line", 0)) +
                         ": " + j.value("message", std::string{});
      const std::string code = j.value("code", std::string{});
      if (!code.empty()) {
        text += "\n  " + code;
      }
      return categorized_feedback{verdict_category::compile, text};
    }
    case python_judge_status::import_error: {
      std::string text = "Importing your code failed: " + exception_line(j);
      const std::string frames = frames_text(j.value("frames", nlohmann::json::array()));
      if (!frames.empty()) {
        text += "\n" + frames;
      }
      while (!text.empty() && text.back() == '\n') {
        text.pop_back();
      }
      return categorized_feedback{verdict_category::runtime, text};
    }
    case python_judge_status::failed:
    case python_judge_status::error: {
      const bool failed = status == python_judge_status::failed;
      if (j.value("hidden", false)) {
        // Only the kind: a quoted hidden test could be hard-coded in the next turn.
        return categorized_feedback{
            failed ? verdict_category::wrong_answer : verdict_category::runtime,
            std::string("A hidden test failed: ") +
                (failed ? "your function returned a wrong value (or left an argument wrong)"
                        : "your function raised an exception") +
                ". Every visible test passed; hidden tests check other inputs and are never shown. "
                "Make the function correct for every input the task allows, not only for the "
                "visible tests."};
      }
      const int index = j.value("index", 0);
      const int total = j.value("total", 0);
      std::string text = "Test " + j.value("test", std::string{}) + " (" +
                         std::to_string(index + 1) + " of " + std::to_string(total) + ") " +
                         (failed ? "failed" : "raised an exception") + ":\n";
      text += frames_text(j.value("frames", nlohmann::json::array()));
      text += exception_line(j);
      return categorized_feedback{
          failed ? verdict_category::wrong_answer : verdict_category::runtime, text};
    }
    case python_judge_status::no_tests:
      return error{"the task's tests.py defines no test_* function"};
    case python_judge_status::candidate_lost:  // the engine's to handle, before it asks here
    case python_judge_status::judge_error:
    case python_judge_status::unknown:
      break;
  }
  return error{"python runner reported unknown status '" + status_text + "'"};
}

namespace {

// A number the judge wrote (NaN and infinities arrive as the strings "nan", "inf").
std::string number_field(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) {
    return "?";
  }
  const auto& v = j[key];
  if (v.is_number()) {
    return number(v.get<double>());
  }
  if (v.is_string()) {
    return v.get<std::string>().substr(0, 20);
  }
  return "?";
}

std::string string_field(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>().substr(0, 300)
                                               : std::string{};
}

const char* const k_unknown_kernelbench_status =
    "Runtime error: the harness's status file holds no result it knows; do not write files named "
    ".leap_status.";

std::string kernel_list(const nlohmann::json& names) {
  std::string out;
  if (!names.is_array()) {
    return out;
  }
  for (const auto& n : names) {
    if (!n.is_string() || out.size() > 400) {
      continue;
    }
    out += (out.empty() ? "" : ", ") + n.get<std::string>().substr(0, 80);
  }
  return out;
}

}  // namespace

namespace {

categorized_feedback kernelbench_feedback_of(const nlohmann::json& j) {
  const kernelbench_status status =
      parse_kernelbench_status(j.is_object() ? string_field(j, "status") : std::string{});
  auto int_field = [&](const char* key) {
    return j.contains(key) && j[key].is_number_integer() ? j[key].get<long long>() : 0LL;
  };
  // A timed repetition is judged like a trial: it says so, since the candidate's code then saw
  // its model called again on fresh inputs.
  const std::string trial =
      j.is_object() && j.contains("timed_call")
          ? std::string("a timed repetition after the trials, on fresh inputs")
          : "trial " + std::to_string(int_field("trial") + 1) +
                (j.is_object() && j.contains("trials")
                     ? " of " + std::to_string(int_field("trials"))
                     : "");
  switch (status) {
    case kernelbench_status::passed:
      return {verdict_category::pass, "Correct on all " + std::to_string(int_field("trials")) +
                                          " trials (" + string_field(j, "device") + ")."};
    case kernelbench_status::syntax_error: {
      std::string text = "Syntax error in your code, line " + std::to_string(int_field("line")) +
                         ": " + string_field(j, "message");
      const std::string code = string_field(j, "code");
      if (!code.empty()) {
        text += "\n  " + code;
      }
      return {verdict_category::compile, text};
    }
    case kernelbench_status::import_error:
    case kernelbench_status::error: {
      std::string text =
          std::string(status == kernelbench_status::import_error ? "Loading your code failed: "
                                                                 : "Running ModelNew failed: ") +
          exception_line(j);
      const std::string frames = frames_text(j.value("frames", nlohmann::json::array()));
      if (!frames.empty()) {
        text += "\n" + frames;
      }
      while (!text.empty() && text.back() == '\n') {
        text.pop_back();
      }
      return {verdict_category::runtime, text};
    }
    case kernelbench_status::mismatch: {
      const std::string when = string_field(j, "when");
      std::string text = "Wrong answer: " +
                         (j.contains("what") ? string_field(j, "what") : std::string("output")) +
                         " (" + trial + (when.empty() ? "" : ", ModelNew run " + when) + ")";
      if (j.contains("got_shape")) {
        text += " has shape " + string_field(j, "got_shape") + ", expected " +
                string_field(j, "expected_shape") + ".";
      } else if (j.contains("got_dtype")) {
        text += " has dtype " + string_field(j, "got_dtype") + ", expected " +
                string_field(j, "expected_dtype") +
                " (return the reference's dtype; a lower precision is a different result).";
      } else if (j.contains("bad")) {
        text += ": " + std::to_string(int_field("bad")) + " of " +
                std::to_string(int_field("total")) +
                " elements differ by more than atol=" + number_field(j, "atol") +
                " + rtol=" + number_field(j, "rtol") + " * |expected| (relative L2 error " +
                number_field(j, "rel_l2") + ").";
        if (int_field("bad") == 0) {
          text = "Wrong answer: " + string_field(j, "what") + " (" + trial +
                 ") is too far from the expected result as a whole: relative L2 error " +
                 number_field(j, "rel_l2") +
                 " (every element is within atol=" + number_field(j, "atol") +
                 " + rtol=" + number_field(j, "rtol") +
                 " * |expected| but the result is not close).";
        }
        text += "\nmax abs error " + number_field(j, "max_abs") + ", max rel error " +
                number_field(j, "max_rel") + ".";
        text += "\nWorst at flat index " + std::to_string(int_field("index")) + " (shape " +
                string_field(j, "shape") + "): expected " + number_field(j, "expected") + ", got " +
                number_field(j, "got") + ".";
      } else {
        text +=
            ": expected " + string_field(j, "expected") + ", got " + string_field(j, "got") + ".";
      }
      return {verdict_category::wrong_answer, text};
    }
    case kernelbench_status::modified_input:
      return {verdict_category::wrong_answer,
              "Wrong answer: ModelNew.forward modified its input " +
                  std::to_string(int_field("input")) + " (argument " +
                  std::to_string(int_field("input") + 1) + " of forward) in place (" + trial +
                  "); inputs are read-only, write your results to new tensors."};
    case kernelbench_status::no_own_kernel: {
      const bool cuda = string_field(j, "device") == "cuda";
      std::string text =
          "Not accepted: the outputs are correct, but ModelNew.forward " +
          std::string(
              cuda ? "launched no CUDA kernel of its own"
                   : "ran no kernel of its own (no call into a native extension module your code "
                     "compiled)") +
          " (" + trial +
          "). The task asks for custom kernels (torch.utils.cpp_extension.load_inline" +
          (cuda ? ", or Triton" : "") + "); PyTorch's own operators and libraries do not count.";
      const std::string seen = kernel_list(j.value("other", nlohmann::json::array()));
      if (!seen.empty()) {
        text += "\nKernels that ran, all PyTorch's: " + seen;
      }
      return {verdict_category::wrong_answer, text};
    }
    case kernelbench_status::incomplete:
      return {verdict_category::runtime,
              "Runtime error: the program stopped before the harness finished all trials; do not "
              "call exit(), "
              "os._exit() or write the harness's files."};
    case kernelbench_status::ok:  // the program's own word, never the judge's: not a verdict
    case kernelbench_status::judge_error:  // the engine's infrastructure error, never a verdict
    case kernelbench_status::unknown:
      break;
  }
  return {verdict_category::runtime, k_unknown_kernelbench_status};
}

}  // namespace

categorized_feedback kernelbench_result_feedback(std::string_view result_json) {
  try {
    return kernelbench_feedback_of(nlohmann::json::parse(result_json, nullptr, false));
  } catch (const nlohmann::json::exception&) {
    // A field of the wrong type: the candidate wrote the status file.
    return {verdict_category::runtime, k_unknown_kernelbench_status};
  }
}

std::string append_profile_feedback(std::string verdict_text, std::string_view profile_text,
                                    std::size_t budget) {
  // A profile line cut below this says nothing a model can act on; the verdict's text alone is
  // better than a stub.
  constexpr std::size_t min_room = 80;
  const std::string_view separator = "\n\n";
  if (profile_text.empty() || verdict_text.size() + separator.size() + min_room > budget) {
    return verdict_text;
  }
  verdict_text += separator;
  const std::size_t room = budget - verdict_text.size();
  verdict_text += trim_to_budget(std::string(profile_text), room);
  return verdict_text;
}

}  // namespace leap::sandbox
