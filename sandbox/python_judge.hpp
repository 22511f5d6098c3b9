// The two programs of a python task's verification. The candidate's code runs in one sandboxed
// process (solution.py and the server, nothing else in its folder); the task's tests run in another
// (tests.py and the judge), where `from solution import f` yields proxies that send the arguments
// to the candidate's process and take its results back, as plain data both ways, over descriptor 3
// (one end of a socketpair the engine gives each process). Nothing the candidate sends can run code
// in the judge: results are decoded by json.loads into exact builtin types (None, bool, int, float,
// complex, str, bytes, bytearray, tuple, list, dict, set, frozenset), bounded in size and depth.
#pragma once

#include "common/enums/enum_names.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace leap::sandbox {

// The judge (`python3 -I -B judge.py` in a folder holding tests.py and, optionally,
// hidden_tests.py): waits for the candidate's import report on descriptor 3, runs tests.py
// unchanged with a proxy `solution` module and a `leap_testing` module (raises, CandidateError),
// calls each test_* function in definition order, then, once all of them passed, those of
// hidden_tests.py, and writes its JSON result to `.leap_result` in its working directory.
// Statuses: passed {total}; syntax_error {file, line, message, code}; import_error and failed/error
// {test, index, total, type, message, frames}; a hidden test's failed/error {hidden: true, kind:
// "wrong_value" | "exception"} and nothing else; no_tests; candidate_lost {test, index, total,
// reason: "ended" | "invalid: ...", hidden when it was in a hidden test} when the candidate's
// process ended or broke the protocol (the test that was running when it did; "" while importing);
// judge_error {type, message}. Whatever the candidate raises reaches the tests as one class,
// CandidateError (an Exception carrying the original's name, class names and message, and its
// solution.py frames for the feedback), never as its own class. After each call every argument of
// type list/dict/set/bytearray (exactly) is reported, changed or not: a digest of its final state
// (blake2b of marshal version 2), then, when the digest differs from that of the judge's own copy,
// its value; the judge writes into the test's objects what differs from them. The candidate's
// side never decides what changed; it can only report final states, which are its outputs.
const std::string& python_judge_source();

// The "status" of the judge's result, as python_judge_source() writes it. The engine handles
// candidate_lost and judge_error, python_result_feedback (feedback.hpp) the others; both switch on
// it without a `default:`, so -Wswitch names them when the judge gets a new status.
enum class python_judge_status : std::uint8_t {
  passed,
  syntax_error,
  import_error,
  failed,
  error,
  no_tests,
  candidate_lost,
  judge_error,
  unknown,  // a text the judge never writes
};

// The one name table (the JSON's text). Empty for a byte outside the enum.
constexpr std::string_view name_of(python_judge_status s) {
  switch (s) {
    case python_judge_status::passed:
      return "passed";
    case python_judge_status::syntax_error:
      return "syntax_error";
    case python_judge_status::import_error:
      return "import_error";
    case python_judge_status::failed:
      return "failed";
    case python_judge_status::error:
      return "error";
    case python_judge_status::no_tests:
      return "no_tests";
    case python_judge_status::candidate_lost:
      return "candidate_lost";
    case python_judge_status::judge_error:
      return "judge_error";
    case python_judge_status::unknown:
      return "unknown";
  }
  return {};
}

// The status a result names; `unknown` for any other text. Pure function.
[[nodiscard]] inline python_judge_status parse_python_judge_status(std::string_view text) {
  auto status = enum_names::parse<python_judge_status>(text, "python judge status");
  return status ? status.value() : python_judge_status::unknown;
}

// The candidate's side (`python3 -I -B server.py` in a folder holding solution.py): imports
// solution.py, reports the result and the names of its callables on descriptor 3, then answers
// calls until the judge closes the channel. The candidate may print freely: its stdout and stderr
// are not the channel.
const std::string& python_candidate_server_source();

}  // namespace leap::sandbox
