// Feedback text, data-driven: input (compiler log, mismatch, runner result) -> exact expected text.
#include "sandbox/feedback.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <tuple>

namespace leap::sandbox {
namespace {

const char* k_signature = "void solve(const float* x, float* y, int n)";

struct log_case {
  std::string name;
  std::string file;
  std::string log;
  std::string expected;
};

TEST(FeedbackTest, CompilerLogs) {
  const std::vector<log_case> cases{
      {"gcc_errors_without_notes_and_system_headers", "solution.cpp",
       "solution.cpp: In function 'void solve(const float*, float*, int)':\n"
       "solution.cpp:4:14: error: no matching function for call to 'push_back(const char [2])'\n"
       "    4 |   v.push_back(\"a\");\n"
       "      |   ~~~~~~~~~~~^~~~~\n"
       "In file included from /usr/include/c++/12/vector:64,\n"
       "                 from solution.cpp:1:\n"
       "/usr/include/c++/12/bits/stl_vector.h:1276:7: note: candidate: 'void "
       "std::vector<_Tp>::push_back(const value_type&)' (near match)\n"
       " 1276 |       push_back(const value_type& __x)\n"
       "      |       ^~~~~~~~~\n"
       "solution.cpp:5:10: error: 'k' was not declared in this scope\n"
       "    5 |   y[0] = k;\n"
       "      |          ^\n",
       "Compilation failed:\n"
       "solution.cpp:4:14: error: no matching function for call to 'push_back(const char [2])'\n"
       "    4 |   v.push_back(\"a\");\n"
       "      |   ~~~~~~~~~~~^~~~~\n"
       "solution.cpp:5:10: error: 'k' was not declared in this scope\n"
       "    5 |   y[0] = k;\n"
       "      |          ^"},
      {"nvcc_errors", "solution.cu",
       "solution.cu(1): error: identifier \"q\" is undefined\n"
       "  __attribute__((global)) void k(float* y) { y[0] = q; }\n"
       "                                                    ^\n"
       "\n"
       "solution.cu(2): error: identifier \"undefined_fn\" is undefined\n"
       "  void solve(const float* x, float* y, int n) { k<<<1,1>>>(y); undefined_fn(); }\n"
       "                                                               ^\n"
       "\n"
       "2 errors detected in the compilation of \"solution.cu\".\n",
       "Compilation failed:\n"
       "solution.cu(1): error: identifier \"q\" is undefined\n"
       "  __attribute__((global)) void k(float* y) { y[0] = q; }\n"
       "                                                    ^\n"
       "solution.cu(2): error: identifier \"undefined_fn\" is undefined\n"
       "  void solve(const float* x, float* y, int n) { k<<<1,1>>>(y); undefined_fn(); }\n"
       "                                                               ^"},
      {"undefined_solve_is_a_signature_hint", "solution.cpp",
       "/usr/bin/ld: harness.o: in function `(anonymous namespace)::leap_call(unsigned long, int, "
       "bool)':\n"
       "harness.cpp:(.text+0x2c4): undefined reference to `solve(float const*, float*, int)'\n"
       "collect2: error: ld returned 1 exit status\n",
       "Linking failed: solve is not defined with the required signature. Define exactly:\n"
       "  void solve(const float* x, float* y, int n)\n"
       "(at namespace scope, not static, not extern \"C\")."},
      {"main_defined_twice", "solution.cpp",
       "/usr/bin/ld: /tmp/ccAbCdEf.o: in function `main':\n"
       "solution.cpp:(.text.startup+0x0): multiple definition of `main'; "
       "harness.o:harness.cpp:(.text.startup+0x0): first defined here\n"
       "collect2: error: ld returned 1 exit status\n",
       "Linking failed: do not define main(); the harness provides it and calls solve()."},
      {"undefined_library_symbol", "solution.cu",
       "/usr/bin/ld: /tmp/tmpxft_00001234_00000000-11_solution.o: in function `solve(float const*, "
       "float*, int)':\n"
       "tmpxft_00001234_00000000-6_solution.cudafe1.cpp:(.text+0x45): undefined reference to "
       "`helper(int)'\n"
       "collect2: error: ld returned 1 exit status\n",
       "Linking failed: undefined reference to `helper(int)' (it is declared or called but never "
       "defined; only the "
       "standard library and the CUDA runtime are linked)."},
      {"only_the_first_three_errors", "solution.cpp",
       "solution.cpp:1:1: error: a\nsolution.cpp:2:1: error: b\nsolution.cpp:3:1: error: "
       "c\nsolution.cpp:4:1: error: d\n",
       "Compilation failed:\nsolution.cpp:1:1: error: a\nsolution.cpp:2:1: error: "
       "b\nsolution.cpp:3:1: error: c\n"
       "(1 more error not shown; fix these first)"},
      {"error_inside_a_system_header_loses_its_path", "solution.cpp",
       "/usr/include/c++/12/bits/stl_vector.h:1276:7: error: static assertion failed\n",
       "Compilation failed:\nstl_vector.h:1276:7: error: static assertion failed"},
      {"unrecognised_log_shows_its_tail", "solution.cpp",
       "cc1plus: out of memory allocating 123 bytes\n",
       "Compilation failed:\ncc1plus: out of memory allocating 123 bytes"},
      // Real g++ 12 / nvcc 13 logs of files other than the candidate's: no excerpt of them is
      // quoted.
      {"included_host_file_is_not_quoted", "solution.cpp",
       "In file included from solution.cpp:1:\n"
       "/etc/passwd:1:5: error: found ':' in nested-name-specifier, expected '::'\n"
       "    1 | root:x:0:0:root:/root:/bin/bash\n"
       "      |     ^\n"
       "      |     ::\n"
       "solution.cpp:2:18: error: 'q' was not declared in this scope\n"
       "    2 | int f() { return q; }\n"
       "      |                  ^\n",
       "Compilation failed:\n"
       "passwd:1:5: error: found ':' in nested-name-specifier, expected '::'\n"
       "solution.cpp:2:18: error: 'q' was not declared in this scope\n"
       "    2 | int f() { return q; }\n"
       "      |                  ^"},
      {"line_directive_naming_a_host_file_is_not_quoted", "solution.cpp",
       "/etc/passwd:1:1: error: 'root' does not name a type\n"
       "    1 | root:x:0:0:root:/root:/bin/bash\n"
       "      | ^~~~\n",
       "Compilation failed:\npasswd:1:1: error: 'root' does not name a type"},
      {"line_directive_naming_another_solution_file_is_not_quoted", "solution.cpp",
       "/srv/suite/cpp/x/solution.cpp:3:1: error: 'secret' does not name a type\n"
       "    3 | secret line of another file\n"
       "      | ^~~~~~\n",
       "Compilation failed:\nsolution.cpp:3:1: error: 'secret' does not name a type"},
      {"library_template_error_names_the_candidate_line", "solution.cpp",
       "In file included from /usr/include/c++/12/bits/stl_algobase.h:71,\n"
       "                 from /usr/include/c++/12/algorithm:60,\n"
       "                 from solution.cpp:1:\n"
       "/usr/include/c++/12/bits/predefined_ops.h: In instantiation of 'constexpr bool "
       "__gnu_cxx::__ops::_Iter_less_iter::operator()(_Iterator1, _Iterator2) const [with "
       "_Iterator1 = P*; _Iterator2 = P*]':\n"
       "/usr/include/c++/12/bits/stl_algo.h:4820:18:   required from 'void std::sort(_RAIter, "
       "_RAIter) [with _RAIter = P*]'\n"
       "solution.cpp:4:12:   required from here\n"
       "/usr/include/c++/12/bits/predefined_ops.h:45:23: error: no match for 'operator<' (operand "
       "types are 'P' and 'P')\n"
       "   45 |       { return *__it1 < *__it2; }\n"
       "      |                ~~~~~~~^~~~~~~~\n",
       "Compilation failed:\n"
       "predefined_ops.h:45:23: error: no match for 'operator<' (operand types are 'P' and 'P')  "
       "(instantiated from "
       "solution.cpp:4:12)"},
      {"nvcc_included_host_file_is_not_quoted", "solution.cu",
       "/etc/passwd(1): error: this declaration has no storage class or type specifier\n"
       "  root:x:0:0:root:/root:/bin/bash\n"
       "  ^\n"
       "\n"
       "/etc/passwd(1): error: expected a \";\"\n"
       "  root:x:0:0:root:/root:/bin/bash\n"
       "      ^\n",
       "Compilation failed:\n"
       "passwd(1): error: this declaration has no storage class or type specifier\n"
       "passwd(1): error: expected a \";\""},
      {"unrecognised_log_drops_excerpts", "solution.cpp",
       "some tool: something failed\n    1 | root:x:0:0:root:/root:/bin/bash\n  root:x:0:0\nIn "
       "file included from x\n",
       "Compilation failed:\nsome tool: something failed"},
  };
  feedback_options options;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string got = compile_feedback(c.log, c.file, k_signature, options);
    EXPECT_EQ(got, c.expected);
    EXPECT_EQ(got.find("root:x"), std::string::npos);
    EXPECT_EQ(got.find("secret line"), std::string::npos);
  }
}

TEST(FeedbackTest, CompilerFeedbackRespectsTheBudget) {
  std::string log;
  for (int i = 1; i <= 3; ++i) {
    log += "solution.cpp:" + std::to_string(i) + ":1: error: " + std::string(300, 'x') + "\n";
  }
  feedback_options options;
  options.char_budget = 200;
  const std::string text = compile_feedback(log, "solution.cpp", k_signature, options);
  EXPECT_LE(text.size(), 200U);
  EXPECT_NE(text.find("more characters cut]"), std::string::npos) << text;
  EXPECT_EQ(text, compile_feedback(log, "solution.cpp", k_signature, options));  // deterministic
}

struct mismatch_case {
  std::string name;
  mismatch m;
  std::string expected;
};

TEST(FeedbackTest, Mismatches) {
  mismatch elementwise;
  elementwise.arg = "y";
  elementwise.trial = 1;
  elementwise.trials = 3;
  elementwise.expected_count = elementwise.got_count = 4096;
  elementwise.bad_elements = 12;
  elementwise.worst_index = 4095;
  elementwise.expected = 0.5;
  elementwise.got = 0;
  elementwise.max_abs_error = 0.5;
  elementwise.max_rel_error = 1;
  elementwise.atol = 1e-5;
  elementwise.rtol = 1e-5;
  mismatch input = elementwise;
  input.arg = "x";
  input.modified_input = true;
  mismatch l2 = elementwise;
  l2.bad_elements = 0;
  l2.relative_l2_failed = true;
  l2.relative_l2 = 1;
  l2.expected = 1e-7;
  l2.max_abs_error = 1e-7;
  mismatch size = elementwise;
  size.got_count = 10;
  const std::vector<mismatch_case> cases{
      {"elementwise", elementwise,
       "Wrong answer: output 'y' (trial 2 of 3): 12 of 4096 elements differ by more than "
       "atol=1e-05 + rtol=1e-05 * "
       "|expected|.\nmax abs error 0.5, max rel error 1.\nWorst at index 4095: expected 0.5, got "
       "0."},
      {"modified_input", input,
       "Wrong answer: solve() wrote into its input 'x' (trial 2 of 3); inputs are read-only, write "
       "only to the outputs."},
      {"relative_l2", l2,
       "Wrong answer: output 'y' (trial 2 of 3) is too far from the expected result as a whole: "
       "relative L2 error 1 "
       "(every element is within atol=1e-05 but the result is not close).\nmax abs error 1e-07, "
       "max rel error 1.\n"
       "Worst at index 4095: expected 1e-07, got 0."},
      {"size", size, "Wrong answer: output 'y' (trial 2 of 3) has 10 elements, expected 4096."},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(mismatch_feedback(c.m), c.expected);
  }
}

TEST(FeedbackTest, RuntimeErrors) {
  EXPECT_EQ(signal_feedback(SIGSEGV, ""),
            "Runtime error: the program was killed by SIGSEGV (segmentation fault: an invalid "
            "memory access).");
  EXPECT_EQ(signal_feedback(SIGABRT,
                            "terminate called after throwing an instance of 'std::bad_alloc'\n  "
                            "what():  std::bad_alloc\n"),
            "Runtime error: the program was killed by SIGABRT (aborted: a failed assert, an "
            "uncaught exception or abort()).\n"
            "Its last output on stderr:\nterminate called after throwing an instance of "
            "'std::bad_alloc'\n  what():  std::bad_alloc");
  EXPECT_EQ(exit_feedback(2, "bad things at /home/user/secret/file.txt\n"),
            "Runtime error: the program exited with code 2 before finishing.\nIts last output on "
            "stderr:\nbad things at file.txt");
  EXPECT_EQ(timeout_feedback(10, false),
            "Time limit exceeded: the program did not finish within 10 s of wall-clock time and "
            "was killed (an infinite "
            "loop, a deadlock, or far too slow an algorithm?).");

  const harness_failure he{harness_failure_kind::cuda, "cudaErrorIllegalAddress",
                           "running solve() (synchronising after it)",
                           "an illegal memory access was encountered"};
  EXPECT_EQ(harness_error_feedback(he, "some output\n"),
            "CUDA error cudaErrorIllegalAddress while running solve() (synchronising after it): an "
            "illegal memory access "
            "was encountered.\nA kernel read or wrote out of bounds; check every index against its "
            "size.\n"
            "The program's last output on stderr:\nsome output");
}

// Every kind of failure the harness reports has its own words: CUDA by name with advice, a CUDA
// initialisation the program broke, and where and what for the rest (and for a forged kind).
TEST(FeedbackTest, HarnessFailureKinds) {
  EXPECT_EQ(harness_error_feedback({harness_failure_kind::cuda_init, "cudaErrorNoDevice",
                                    "initialising CUDA", "no CUDA-capable device is detected"},
                                   ""),
            "Runtime error: CUDA could not be initialised in your program (cudaErrorNoDevice: no "
            "CUDA-capable device is detected), although the GPU works; does a global or "
            "constructor of yours call CUDA or change the environment?");
  EXPECT_EQ(harness_error_feedback({harness_failure_kind::cuda, "cudaErrorAssert",
                                    "running solve()", "device-side assert triggered"},
                                   ""),
            "CUDA error cudaErrorAssert while running solve(): device-side assert triggered.\nA "
            "device-side assert failed.");
  for (const auto kind : {harness_failure_kind::threads, harness_failure_kind::stream,
                          harness_failure_kind::channel, harness_failure_kind::other}) {
    SCOPED_TRACE(to_string(kind));
    EXPECT_EQ(
        harness_error_feedback({kind, "left_running", "checking threads after solve() returned",
                                "1 thread(s) were still running"},
                               "LEAP_HARNESS_ERROR x\nlast words\n"),
        "Runtime error while checking threads after solve() returned: 1 thread(s) were still "
        "running.\nThe program's last output on stderr:\nlast words");
  }
}

struct runner_case {
  std::string name;
  std::string json;
  verdict_category category;
  std::string expected;
};

TEST(FeedbackTest, PythonRunnerResults) {
  const std::vector<runner_case> cases{
      {"passed", R"J({"status":"passed","total":4})J", verdict_category::pass,
       "All 4 tests passed."},
      {"assertion",
       R"J({"status":"failed","test":"test_small","index":1,"total":3,"type":"AssertionError","message":"",
        "frames":[{"file":"tests.py","line":7,"function":"test_small","code":"assert add(1, 2) == 3"}]})J",
       verdict_category::wrong_answer,
       "Test test_small (2 of 3) failed:\n  tests.py line 7, in test_small: assert add(1, 2) == "
       "3\nAssertionError"},
      {"exception",
       R"J({"status":"error","test":"test_div","index":0,"total":1,"type":"ZeroDivisionError",
        "message":"division by zero","frames":[{"file":"tests.py","line":3,"function":"test_div","code":"div(1, 0)"},
        {"file":"solution.py","line":2,"function":"div","code":"return a / b"}]})J",
       verdict_category::runtime,
       "Test test_div (1 of 1) raised an exception:\n  tests.py line 3, in test_div: div(1, 0)\n"
       "  solution.py line 2, in div: return a / b\nZeroDivisionError: division by zero"},
      {"syntax",
       R"J({"status":"syntax_error","file":"solution.py","line":1,"message":"expected ':'","code":"def f(a)"})J",
       verdict_category::compile, "Syntax error in your code, line 1: expected ':'\n  def f(a)"},
      {"import",
       R"J({"status":"import_error","type":"ImportError","message":"cannot import name 'add' from 'solution' (/tmp/solution.py)","frames":[]})J",
       verdict_category::runtime,
       "Importing your code failed: ImportError: cannot import name 'add' from 'solution' "
       "(solution.py)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto fb = python_result_feedback(c.json);
    ASSERT_TRUE(fb.ok()) << fb.err().message;
    EXPECT_EQ(fb->category, c.category);
    EXPECT_EQ(fb->text, c.expected);
  }
  // A hidden test's failure: only its kind, whatever else the result holds.
  for (
      const auto& [json, category, kind] :
      {std::tuple{
           R"J({"status":"failed","hidden":true,"kind":"wrong_value","test":"test_s3cret","message":"assert f(31337) == 5","frames":[{"file":"hidden_tests.py","line":7,"function":"test_s3cret","code":"assert f(31337) == 5"}]})J",
           verdict_category::wrong_answer, "returned a wrong value"},
       std::tuple{
           R"J({"status":"error","hidden":true,"kind":"exception","type":"E31337","message":"input 31337"})J",
           verdict_category::runtime, "raised an exception"}}) {
    auto fb = python_result_feedback(json);
    ASSERT_TRUE(fb.ok()) << fb.err().message;
    EXPECT_EQ(fb->category, category);
    EXPECT_EQ(fb->text.rfind("A hidden test failed: ", 0), 0U) << fb->text;
    EXPECT_NE(fb->text.find(kind), std::string::npos) << fb->text;
    for (const char* secret : {"31337", "s3cret", "hidden_tests.py", "line 7"}) {
      EXPECT_EQ(fb->text.find(secret), std::string::npos) << fb->text;
    }
  }
  EXPECT_FALSE(python_result_feedback(
                   R"J({"status":"syntax_error","file":"tests.py","line":1,"message":"x"})J")
                   .ok());
  EXPECT_FALSE(python_result_feedback(
                   R"J({"status":"syntax_error","file":"hidden_tests.py","line":1,"message":"x"})J")
                   .ok());
  EXPECT_FALSE(python_result_feedback(R"J({"status":"no_tests"})J").ok());
  EXPECT_FALSE(python_result_feedback("not json").ok());
}

TEST(FeedbackTest, KernelBenchRunnerResults) {
  const std::vector<runner_case> cases{
      {"shape",
       R"J({"status":"mismatch","trial":0,"trials":3,"what":"output 0","expected_shape":"[16, 16]","got_shape":"[16]"})J",
       verdict_category::wrong_answer,
       "Wrong answer: output 0 (trial 1 of 3) has shape [16], expected [16, 16]."},
      {"values",
       R"J({"status":"mismatch","trial":2,"trials":3,"what":"output 0","shape":"[4, 4]","bad":3,"total":16,
        "max_abs":0.5,"max_rel":2,"rel_l2":0.25,"index":5,"expected":1.5,"got":"nan","atol":0.01,"rtol":0.01})J",
       verdict_category::wrong_answer,
       "Wrong answer: output 0 (trial 3 of 3): 3 of 16 elements differ by more than "
       "atol=0.01 + rtol=0.01 * |expected| (relative L2 error 0.25).\nmax abs error 0.5, max rel "
       "error 2.\n"
       "Worst at flat index 5 (shape [4, 4]): expected 1.5, got nan."},
      {"dtype",
       R"J({"status":"mismatch","trial":0,"trials":3,"what":"output 0","expected_dtype":"float32","got_dtype":"bfloat16"})J",
       verdict_category::wrong_answer,
       "Wrong answer: output 0 (trial 1 of 3) has dtype bfloat16, expected float32 (return the "
       "reference's dtype; a lower "
       "precision is a different result)."},
      {"modified", R"J({"status":"modified_input","trial":1,"trials":3,"input":0})J",
       verdict_category::wrong_answer,
       "Wrong answer: ModelNew.forward modified its input 0 (argument 1 of forward) in place "
       "(trial 2 of 3); inputs are "
       "read-only, write your results to new tensors."},
      {"forged_no_gpu", R"J({"status":"no_gpu","message":"x"})J", verdict_category::runtime,
       "Runtime error: the harness's status file holds no result it knows; do not write files "
       "named .leap_status."},
      {"wrong_types", R"J({"status":"error","type":5,"frames":"x"})J", verdict_category::runtime,
       "Runtime error: the harness's status file holds no result it knows; do not write files "
       "named .leap_status."},
      {"not_json", "not json", verdict_category::runtime,
       "Runtime error: the harness's status file holds no result it knows; do not write files "
       "named .leap_status."},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto fb = kernelbench_result_feedback(c.json);
    EXPECT_EQ(fb.category, c.category);
    EXPECT_EQ(fb.text, c.expected);
  }
}

TEST(FeedbackTest, ScratchOverTheBudgetNamesTheLimit) {
  const resource_limits limits;  // 256 MiB, 16384 files and folders
  run_result r;
  r.scratch_exceeded = true;
  r.scratch_left_bytes = 30 * (63ULL << 20) + 4096;
  r.scratch_left_entries = 31;
  const std::string sparse = scratch_feedback(r, limits);
  EXPECT_EQ(sparse.rfind("Runtime error: the program left 1.8 GiB in its working folder; the limit "
                         "is 256 MiB",
                         0),
            0U)
      << sparse;
  EXPECT_NE(sparse.find("sparse"), std::string::npos) << sparse;
  // Rounded sizes, no exact counts: nothing a run leaves becomes a channel for its inputs.
  EXPECT_EQ(sparse.find("31"), std::string::npos) << sparse;
  r.scratch_left_bytes = 5 << 20;
  r.scratch_left_entries = 20000;
  const std::string many = scratch_feedback(r, limits);
  EXPECT_NE(many.find("more than 16384 files and folders"), std::string::npos) << many;
  EXPECT_EQ(many.find("20000"), std::string::npos) << many;
}

TEST(FeedbackTest, HostPathsAreStripped) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"In file included from /usr/include/c++/12/vector:64,", "In file included from vector:64,"},
      {"/work/x/sandbox/suite/cpp/a/reference.cpp:3: oops", "reference.cpp:3: oops"},
      {"ld: /tmp/ccAbCdEf.o: in function", "ld: <tmp>: in function"},
      {"a/b relative stays", "a/b relative stays"},
  };
  for (const auto& [in, out] : cases) {
    EXPECT_EQ(strip_host_paths(in), out) << in;
  }
}

TEST(FeedbackTest, TrimToBudget) {
  EXPECT_EQ(trim_to_budget("short", 100), "short");
  std::string lines;
  for (int i = 0; i < 50; ++i) {
    lines += "line " + std::to_string(i) + "\n";
  }
  const std::string trimmed = trim_to_budget(lines, 120);
  EXPECT_LE(trimmed.size(), 120U);
  EXPECT_EQ(trimmed.rfind("line 0\n", 0), 0U);
  EXPECT_NE(trimmed.find("more characters cut]"), std::string::npos);
}

}  // namespace
}  // namespace leap::sandbox
