// The two programs of a python task's verification. The candidate's code runs in one sandboxed
// process (solution.py and the server, nothing else in its folder); the task's tests run in another
// (tests.py and the judge), where `from solution import f` yields proxies that send the arguments
// to the candidate's process and take its results back, as plain data both ways, over descriptor 3
// (one end of a socketpair the engine gives each process). Nothing the candidate sends can run code
// in the judge: results are decoded by json.loads into exact builtin types (None, bool, int, float,
// complex, str, bytes, bytearray, tuple, list, dict, set, frozenset), bounded in size and depth.
#pragma once

#include <string>

namespace leap::sandbox {

// The judge (`python3 -I -B judge.py` in a folder holding tests.py): waits for the candidate's
// import report on descriptor 3, runs tests.py unchanged with a proxy `solution` module, calls each
// test_* function in definition order and writes its JSON result to `.leap_result` in its working
// directory. Statuses: passed {total}; syntax_error {file, line, message, code}; import_error and
// failed/error {test, index, total, type, message, frames}; no_tests; candidate_lost {test, index,
// total, reason: "ended" | "invalid: ..."} when the candidate's process ended or broke the protocol
// (the test that was running when it did; "" while importing); judge_error {type, message}.
// A candidate's exception comes back as (type name, message, its solution.py frames) and is
// re-raised in the test as that builtin exception class (SyntaxError excepted), else as
// CandidateError; changes the call made to list/dict/set/bytearray arguments are written back into
// the test's objects.
const std::string& python_judge_source();

// The candidate's side (`python3 -I -B server.py` in a folder holding solution.py): imports
// solution.py, reports the result and the names of its callables on descriptor 3, then answers
// calls until the judge closes the channel. The candidate may print freely: its stdout and stderr
// are not the channel.
const std::string& python_candidate_server_source();

}  // namespace leap::sandbox
