// Python tasks: the candidate runs in its own sandboxed process and the tests in the judge's, with
// arguments, results, argument changes and exceptions crossing between them as plain data. Real
// python3, real sandboxed processes.
#include "sandbox/engine.hpp"
#include "sandbox/python_judge.hpp"
#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

namespace leap::sandbox {
namespace {

using testing::fenced;
using testing::shared_engine;

task python_task(const std::string& id, const std::string& tests) {
  task t;
  t.id = "python/" + id;
  t.kind = task_kind::python;
  t.tests = tests;
  return t;
}

struct python_case {
  std::string name;
  std::string code;
  verdict_category expected;
  std::string feedback_contains;
};

void run_cases(const task& t, const std::vector<python_case>& cases) {
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto v = shared_engine().verify(t, fenced("python", c.code));
    ASSERT_TRUE(v.ok()) << v.err().message;
    EXPECT_EQ(to_string(v->category), std::string(to_string(c.expected))) << v->feedback << "\n"
                                                                          << v->diagnostics;
    EXPECT_NE(v->feedback.find(c.feedback_contains), std::string::npos) << v->feedback;
    EXPECT_EQ(v->feedback.find("/tmp"), std::string::npos) << v->feedback;
  }
}

TEST(PythonTest, PlainDataCrossesBothWays) {
  // Every literal type as argument and result, keyword arguments, and the subclasses a solution
  // may well return (Counter for a dict, a namedtuple for a tuple) compared as their plain values.
  const task t = python_task("echo", R"PY(from solution import echo, counts, pair, nothing

INF = float("inf")


def test_round_trip():
    values = [None, True, False, 0, -7, 2**100, 1.5, INF, -INF, 1 + 2j, "", "text\n\u00e9", b"\x00\xff",
              (), (1, (2, "x")), [], [1, [2, [3]]], {}, {"a": 1, (1, 2): [3], 4: {"b": None}}, set(), {1, "a", (2,)},
              frozenset({3}), bytearray(b"ab")]
    for v in values:
        got = echo(v)
        assert type(got) is type(v), (type(got), type(v))
        assert got == v
    nan = echo(float("nan"))
    assert nan != nan
    assert echo(v=[1, 2], scale=3) == [[1, 2], 3]


def test_subclasses_as_plain_values():
    assert counts("abca") == {"a": 2, "b": 1, "c": 1}
    assert type(counts("x")) is dict
    assert pair(1, 2) == (1, 2)
    assert nothing() is None
)PY");
  const std::string good = R"PY(import collections


def echo(v, scale=None):
    print("debug output on stdout", v)
    return v if scale is None else [v, scale]


def counts(s):
    return collections.Counter(s)


Pair = collections.namedtuple("Pair", "a b")


def pair(a, b):
    return Pair(a, b)


def nothing():
    pass
)PY";
  run_cases(t, {{"plain_data", good, verdict_category::pass, "All 2 tests passed"}});
}

TEST(PythonTest, ArgumentChangesReachTheTest) {
  // An in-place algorithm is judged on the test's own objects, nested containers keeping their
  // identity; a function that must not modify its input is caught when it does.
  const task t = python_task("in_place", R"PY(from solution import sort_rows, keep


def test_in_place():
    m = [[3, 1, 2], [9, 8]]
    first = m[0]
    assert sort_rows(m) is None
    assert m == [[1, 2, 3], [8, 9]]
    assert first == [1, 2, 3]
    d = {"k": [2, 1]}
    sort_rows(d["k"] and [d["k"]])
    assert d == {"k": [1, 2]}


def test_input_unchanged():
    data = [5, 1, 4]
    assert keep(data) == [1, 4, 5]
    assert data == [5, 1, 4]
)PY");
  run_cases(t, {{"in_place",
                 "def sort_rows(m):\n    for row in m:\n        row.sort()\n\ndef keep(xs):\n    "
                 "return sorted(xs)\n",
                 verdict_category::pass, "All 2 tests passed"},
                {"mutates_input",
                 "def sort_rows(m):\n    for row in m:\n        row.sort()\n\ndef keep(xs):\n    "
                 "xs.sort()\n    return xs\n",
                 verdict_category::wrong_answer, "assert data == [5, 1, 4]"},
                {"not_in_place",
                 "def sort_rows(m):\n    return [sorted(r) for r in m]\n\ndef keep(xs):\n    "
                 "return sorted(xs)\n",
                 verdict_category::wrong_answer, "assert sort_rows(m) is None"}});
}

TEST(PythonTest, ExceptionsReachTheTestsAsOneJudgeClass) {
  // Whatever the candidate raises is a CandidateError in the tests (its name, class names and
  // message kept), never its own class: `except ValueError` no longer catches it, raises() does,
  // and a StopIteration cannot end the tests' map() as if the values ran out.
  const task t = python_task("raises", R"PY(from leap_testing import CandidateError, raises
from solution import check


def test_value_error_expected():
    with raises("ValueError") as caught:
        check(-1)
    assert "negative" in str(caught.exception)
    assert caught.exception.name in ("ValueError", "Bad")
    try:
        check(-2)
    except ValueError:
        assert False, "the candidate's own class reached the test"
    except CandidateError as e:
        assert "ValueError" in e.names and e.message == str(e)


def test_normal():
    assert check(2) == 4
    assert all(map(check, [1, 2, 3]))
)PY");
  run_cases(
      t, {{"raises_value_error",
           "def check(x):\n    if x < 0:\n        raise ValueError('negative input')\n    "
           "return x * x\n",
           verdict_category::pass, "All 2 tests passed"},
          // A subclass of ValueError is a ValueError for raises(): its class names cross too.
          {"raises_a_value_error_subclass",
           "class Bad(ValueError):\n    pass\n\ndef check(x):\n    if x < 0:\n        raise "
           "Bad('negative input')\n    return x * x\n",
           verdict_category::pass, "All 2 tests passed"},
          {"raises_type_error",
           "def check(x):\n    if x < 0:\n        raise TypeError('negative input')\n    return "
           "x * x\n",
           verdict_category::runtime, "TypeError: negative input"},
          {"returns_instead", "def check(x):\n    return x * x\n", verdict_category::wrong_answer,
           "expected the call to raise ValueError"},
          // Its own exception class: reported under the candidate's name, with its frames.
          {"custom_exception",
           "class Bad(Exception):\n    pass\n\ndef check(x):\n    if x < 0:\n        raise "
           "Bad('negative input')\n    return x * x\n",
           verdict_category::runtime, "Bad: negative input"},
          {"frames", "def check(x):\n    return helper(x)\n\ndef helper(x):\n    return x / 0\n",
           verdict_category::runtime, "solution.py line 5, in helper: return x / 0"},
          // Re-raised as the builtin, this StopIteration ended map() at once and all() was True.
          {"stop_iteration",
           "def check(x):\n    if x < 0:\n        raise ValueError('negative')\n"
           "    raise StopIteration\n",
           verdict_category::runtime, "StopIteration"},
          // A SyntaxError from a call is the candidate's runtime error, never the task's broken
          // tests.py.
          {"syntax_error_raised",
           "def check(x):\n    raise SyntaxError('bad', ('tests.py', 1, 1, 'x'))\n",
           verdict_category::runtime, "SyntaxError"},
          {"system_exit", "import sys\n\ndef check(x):\n    sys.exit(3)\n",
           verdict_category::runtime, "SystemExit"},
          {"keyboard_interrupt", "def check(x):\n    raise KeyboardInterrupt\n",
           verdict_category::runtime, "KeyboardInterrupt"}});
}

TEST(PythonTest, HiddenTestsFeedbackSaysOnlyTheirKind) {
  // tests.py is quoted in feedback; hidden_tests.py runs after it passed and only the kind of its
  // failure is told: never its code, name, inputs, expected values, nor what the candidate printed,
  // raised or exited with while running it (all of which could carry the hidden inputs).
  task t = python_task("hidden", R"PY(from solution import double


def test_visible():
    assert double(2) == 4
)PY");
  t.hidden_tests = R"PY(from solution import double


def test_secret_name_s3cr3t():
    assert double(31337) == 62674
    assert double(-5) == -10
)PY";
  const std::vector<std::string> never = {"31337", "62674", "s3cr3t", "hidden_tests.py", "line"};
  struct hidden_case {
    std::string name;
    std::string code;
    verdict_category expected;
    std::string feedback_contains;
  };
  const std::vector<hidden_case> cases{
      {"correct", "def double(x):\n    return 2 * x\n", verdict_category::pass,
       "All 2 tests passed"},
      {"visible_answer_only", "def double(x):\n    return {2: 4}.get(x, 0)\n",
       verdict_category::wrong_answer,
       "A hidden test failed: your function returned a wrong value"},
      {"visible_failure_is_quoted", "def double(x):\n    return x\n",
       verdict_category::wrong_answer, "assert double(2) == 4"},
      {"raises_with_its_input",
       "def double(x):\n    if x != 2:\n        raise ValueError('input was %r' % x)\n    return "
       "4\n",
       verdict_category::runtime, "A hidden test failed: your function raised an exception"},
      {"raises_a_class_named_by_its_input",
       "def double(x):\n    if x != 2:\n        raise type('E%d' % x, (Exception,), {})()\n    "
       "return 4\n",
       verdict_category::runtime, "A hidden test failed: your function raised an exception"},
      {"prints_and_exits_with_its_input",
       "import os, sys\n\ndef double(x):\n    if x != 2:\n        print('input', x, "
       "file=sys.stderr, flush=True)\n        os._exit(x % 256)\n    return 4\n",
       verdict_category::runtime, "during a hidden test"},
      {"hangs_in_a_hidden_test", "def double(x):\n    while x != 2:\n        pass\n    return 4\n",
       verdict_category::timeout, "stopped during a hidden test"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto v = shared_engine().verify(t, fenced("python", c.code));
    ASSERT_TRUE(v.ok()) << v.err().message;
    EXPECT_EQ(to_string(v->category), std::string(to_string(c.expected))) << v->feedback;
    EXPECT_NE(v->feedback.find(c.feedback_contains), std::string::npos) << v->feedback;
    if (c.name != "visible_failure_is_quoted") {
      for (const auto& secret : never) {
        EXPECT_EQ(v->feedback.find(secret), std::string::npos)
            << "the feedback quotes '" << secret << "':\n"
            << v->feedback;
      }
      EXPECT_EQ(v->feedback.find("E31337"), std::string::npos) << v->feedback;
      EXPECT_EQ(v->feedback.find("code 105"), std::string::npos) << v->feedback;  // 31337 % 256
    }
  }
}

TEST(PythonTest, TheJudgeDecidesWhatAnArgumentCallChanged) {
  // Every list/dict/set/bytearray argument is reported after each call, and the judge compares it
  // with its own object: a large argument changed in place reaches the test, one left alone stays
  // the test's own object, an argument turned into something unsendable fails the call, and a
  // subclass argument (sent as its plain value) is never written back, nor breaks the channel.
  const task t = python_task("arguments", R"PY(import collections

from solution import reverse_in_place, total, spoil, bump


def test_large_change_comes_back():
    data = list(range(300000))
    assert reverse_in_place(data) is None
    assert data[0] == 299999 and data[-1] == 0


def test_unchanged_stays():
    data = [[1, 2], [3]]
    inner = data[0]
    assert total(data) == 6
    assert data == [[1, 2], [3]] and data[0] is inner


def test_unsendable_change():
    try:
        spoil([1, 2])
    except Exception as e:
        assert "cannot be sent back" in str(e), str(e)
    else:
        assert False, "expected an error"


def test_subclass_argument():
    c = collections.Counter("aab")
    assert bump(c) == 3
    assert c == {"a": 2, "b": 1}
)PY");
  run_cases(t, {{"arguments",
                 "def reverse_in_place(xs):\n    xs.reverse()\n\ndef total(m):\n    return "
                 "sum(map(sum, m))\n\ndef spoil(xs):\n    xs.append(object())\n    return 1\n\n"
                 "def bump(c):\n    c['z'] = 9\n    return 3\n",
                 verdict_category::pass, "All 4 tests passed"}});
}

TEST(PythonTest, WhatCannotBeSentFailsTheTurnOnly) {
  const task t = python_task("objects", R"PY(from solution import make


def test_make():
    assert make(3) == [0, 1, 2]
)PY");
  run_cases(t, {{"generator", "def make(n):\n    return (i for i in range(n))\n",
                 verdict_category::runtime, "generator is not plain data"},
                {"instance", "class Box:\n    pass\n\ndef make(n):\n    return Box()\n",
                 verdict_category::runtime, "Box is not plain data"},
                {"cycle", "def make(n):\n    x = []\n    x.append(x)\n    return x\n",
                 verdict_category::runtime, "nested more than"},
                {"too_many_items", "def make(n):\n    return [0] * 20_000_000\n",
                 verdict_category::runtime, "more than"}});
}

TEST(PythonTest, TheCandidateEndingOrHangingIsNamedByTest) {
  const task t = python_task("lifecycle", R"PY(from solution import f


def test_first():
    assert f(1) == 1


def test_second():
    assert f(2) == 2
)PY");
  run_cases(t,
            {{"exits_in_second_test",
              "import os\n\ndef f(x):\n    if x == 2:\n        os._exit(0)\n    return x\n",
              verdict_category::runtime, "during test test_second (2 of 2)"},
             {"killed_in_first_test",
              "import os, signal\n\ndef f(x):\n    os.kill(os.getpid(), signal.SIGSEGV)\n",
              verdict_category::runtime, "SIGSEGV"},
             {"hangs_in_second_test", "def f(x):\n    while x == 2:\n        pass\n    return x\n",
              verdict_category::timeout, "stopped during test test_second (2 of 2)"},
             {"closes_the_channel", "import os\n\ndef f(x):\n    os.close(3)\n    return x\n",
              verdict_category::runtime, "test_first (1 of 2)"},
             {"prints_a_lot",
              "import sys\n\ndef f(x):\n    sys.stdout.write('x' * 1000000)\n    print('All 2 "
              "tests passed.')\n    return x\n",
              verdict_category::pass, "All 2 tests passed"}});
}

TEST(PythonTest, ArgumentsTheTestsCannotSendAreReported) {
  const task t = python_task("bad_args", R"PY(from solution import f


def test_lambda():
    assert f(lambda: 1) == 1
)PY");
  run_cases(t, {{"lambda_arg", "def f(g):\n    return g()\n", verdict_category::runtime,
                 "cannot be sent"}});
}

TEST(PythonTest, ABrokenPythonIsAnInfrastructureErrorConfirmedByAProbe) {
  // `false` stands for a python3 that fails at once: no judge result, and the engine's own probe
  // fails too, so the engine says infrastructure (the only error a python run can return).
  engine_config config = testing::test_engine_config();
  config.python = "false";
  auto e = engine::create(config);
  ASSERT_TRUE(e.ok()) << e.err().message;
  const task t = testing::python_add_task();
  auto v = (*e)->verify(t, fenced("python", "def add(a, b):\n    return a + b\n"));
  ASSERT_FALSE(v.ok()) << to_string(v->category) << ": " << v->feedback;
  EXPECT_EQ(infrastructure_slot(v.err()), -1) << v.err().message;
}

TEST(PythonTest, TheCandidatesFolderHoldsNoTests) {
  // The candidate sees its own folder only: solution.py and the server, never tests.py.
  const task t = python_task("folder", R"PY(from solution import listing


def test_listing():
    assert listing() == ["server.py", "solution.py"]
)PY");
  run_cases(t, {{"listing",
                 "import os\n\ndef listing():\n    return sorted(f for f in os.listdir('.') if not "
                 "f.startswith('.'))\n",
                 verdict_category::pass, "All 1 tests passed"}});
}

TEST(PythonTest, SourcesAreSeparate) {
  // The judge's source never holds a test and the server's never the judge's proxy machinery.
  EXPECT_NE(python_judge_source().find("def _call("), std::string::npos);
  EXPECT_EQ(python_candidate_server_source().find("def _call("), std::string::npos);
  EXPECT_EQ(python_candidate_server_source().find("tests.py"), std::string::npos);
}

}  // namespace
}  // namespace leap::sandbox
