#!/usr/bin/env python3
"""Checks the task suite: every task is well formed, every solution passes, every wrong candidate fails.

It is a standalone author's tool, independent of the sandbox engine: it generates its own harness from
each task's "args" (seeded uniform inputs in "range", reference and solve on separate copies, comparison
with atol + rtol * |expected|), so a disagreement between it and the engine points at one of the two.

  cpp     g++ -O2 harness + reference.cpp + candidate, run twice (outputs zero-filled, then filled with a
          sentinel, so a candidate that relies on either initial content is caught).
  python  tests.py and hidden_tests.py run against the candidate as solution.py, every test_* function
          called, with a stand-in for the judge's leap_testing module (raises).
  cuda    --cuda-mode compile (default, no GPU needed): reference.cpp compiles with g++; the candidate
          compiles with nvcc -c and links against a stub that calls solve() with the exact parameter
          types, so a wrong signature is a link error. --cuda-mode run (needs a GPU): the full harness
          (cudaMalloc per argument, copy in, solve, synchronise, copy back, compare), like cpp.

A wrong candidate must fail; its label says how: compile_error/syntax_error must fail to compile (or
import), timeout must time out, forbidden_* must contain a forbidden identifier; any other label must
fail at run time (crash, CUDA error, timeout or mismatch). In compile mode a cuda candidate whose bug
only shows at run time is reported as "unproven", not as a pass.

nvcc is found through $NVCC, then PATH, then /usr/local/cuda/bin/nvcc; g++ through $CXX or PATH.
Exit status 0 when everything holds, 1 otherwise.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

# The suite's kinds, each a folder here and a name of the engine's task_kind table
# (common/enums/task_kind.hpp); tests/common/enums_test.cpp checks both, and EXT, so that this
# standalone tool (it runs without a build) cannot drift from the engine's names.
KINDS = ("cuda", "cpp", "python")
# What a python task's tests may import: the solution, the judge's helpers and the standard library
# modules the suite uses (random: the judge's process seeds it from os.urandom, which the
# candidate's process never sees).
PY_TEST_IMPORTS = {"solution", "leap_testing", "random", "itertools", "collections", "string", "math"}
TYPES = {"float": "float", "double": "double", "int": "int"}
ROLES = ("input", "output", "inout", "scalar")
DEFAULT_TOL = {"float": (1e-5, 1e-5), "double": (1e-5, 1e-5), "int": (0.0, 0.0)}
EXT = {"cuda": ".cu", "cpp": ".cpp", "python": ".py"}
BUILD_ONLY_LABELS = {"compile_error", "syntax_error", "wrong_signature"}
SEED_DEFAULT = 1234
SENTINEL = -7777


def find_nvcc():
    env = os.environ.get("NVCC")
    if env:
        return env
    found = shutil.which("nvcc")
    if found:
        return found
    fallback = "/usr/local/cuda/bin/nvcc"
    return fallback if os.path.exists(fallback) else None


def find_cxx():
    return os.environ.get("CXX") or shutil.which("g++") or "g++"


def run(cmd, cwd=None, timeout=None, env=None):
    """Returns (status, output) with status 'ok', 'fail', 'timeout'; output is stdout+stderr.

    The command runs in its own process group, and the whole group is killed on a time-out, so a hung
    candidate (or a compiler's children) never outlives its check."""
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        raw, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        raw, _ = p.communicate()
        return "timeout", raw.decode("utf-8", "replace")
    out = raw.decode("utf-8", "replace")
    if p.returncode < 0:
        return "fail", out + "\n[killed by signal %d]" % -p.returncode
    return ("ok" if p.returncode == 0 else "fail"), out


# ---------------------------------------------------------------------------------------------------
# task.json checks


def count_expr(expr, scalars):
    """Evaluates a count: an integer, a scalar's name, or a '*'-product of both."""
    if isinstance(expr, int):
        return expr
    total = 1
    for part in str(expr).split("*"):
        part = part.strip()
        if re.fullmatch(r"\d+", part):
            total *= int(part)
        elif part in scalars:
            total *= int(scalars[part])
        else:
            raise ValueError("count '%s' names '%s', which is no scalar arg" % (expr, part))
    return total


def signature(args, func="solve"):
    params = []
    for a in args:
        t = TYPES[a["type"]]
        if a["role"] == "input":
            params.append("const %s* %s" % (t, a["name"]))
        elif a["role"] in ("output", "inout"):
            params.append("%s* %s" % (t, a["name"]))
        else:
            params.append("%s %s" % (t, a["name"]))
    return "void %s(%s)" % (func, ", ".join(params))


def check_task(task_dir, kind, name):
    """Returns (task dict, list of problems)."""
    problems = []
    path = os.path.join(task_dir, "task.json")
    try:
        with open(path) as f:
            task = json.load(f)
    except (OSError, ValueError) as e:
        return None, ["task.json: %s" % e]
    if task.get("id") != "%s/%s" % (kind, name):
        problems.append("id '%s' is not '%s/%s'" % (task.get("id"), kind, name))
    if task.get("kind") != kind:
        problems.append("kind '%s' does not match folder '%s'" % (task.get("kind"), kind))
    if task.get("difficulty") not in (1, 2, 3):
        problems.append("difficulty must be 1, 2 or 3")
    if not isinstance(task.get("category"), str) or not task["category"]:
        problems.append("category missing")
    prompt = task.get("prompt")
    if not isinstance(prompt, str) or len(prompt) < 40:
        problems.append("prompt missing or too short")
        prompt = ""
    ext = EXT[kind]
    if not os.path.isfile(os.path.join(task_dir, "solution" + ext)):
        problems.append("solution%s missing" % ext)
    wrong_dir = os.path.join(task_dir, "wrong")
    wrongs = sorted(f for f in os.listdir(wrong_dir) if f.endswith(ext)) if os.path.isdir(wrong_dir) else []
    if len(wrongs) < 2:
        problems.append("fewer than 2 wrong candidates")
    for w in wrongs:
        if not re.fullmatch(r"[a-z0-9_]+" + re.escape(ext), w):
            problems.append("wrong candidate name '%s' is not snake_case" % w)
    if kind == "python":
        # tests.py is what feedback may quote; hidden_tests.py (required in this suite) is never shown.
        for name in ("tests.py", "hidden_tests.py"):
            tests = os.path.join(task_dir, name)
            if not os.path.isfile(tests):
                problems.append("%s missing" % name)
                continue
            src = open(tests).read()
            imported = re.findall(r"^from solution import (.+)$", src, re.M)
            if not imported:
                problems.append("%s does not import from solution" % name)
            for line in imported:
                for n in line.split(","):
                    n = n.strip()
                    if n and n not in prompt:
                        problems.append("prompt does not name '%s', which %s imports" % (n, name))
            for m in re.findall(r"^(?:from|import) (\w+)", src, re.M):
                if m not in PY_TEST_IMPORTS:
                    problems.append("%s imports '%s' (allowed: %s)" % (name, m, ", ".join(sorted(PY_TEST_IMPORTS))))
            found = len(re.findall(r"^def test_\w+\(\):", src, re.M))
            if found < (2 if name == "hidden_tests.py" else 1):
                problems.append("%s has %d test_* functions (at least %d)" % (
                    name, found, 2 if name == "hidden_tests.py" else 1))
        return task, problems
    if not os.path.isfile(os.path.join(task_dir, "reference.cpp")):
        problems.append("reference.cpp missing")
    args = task.get("args")
    if not isinstance(args, list) or not args:
        problems.append("args missing")
        return task, problems
    scalars = {}
    names = set()
    for i, a in enumerate(args):
        where = "args[%d]" % i
        if not isinstance(a, dict) or not re.fullmatch(r"[A-Za-z_]\w*", str(a.get("name", ""))):
            problems.append("%s: bad name" % where)
            continue
        if a["name"] in names:
            problems.append("%s: duplicate name '%s'" % (where, a["name"]))
        names.add(a["name"])
        if a.get("type") not in TYPES:
            problems.append("%s: type must be one of %s" % (where, sorted(TYPES)))
        if a.get("role") not in ROLES:
            problems.append("%s: role must be one of %s" % (where, ROLES))
        if a.get("role") == "scalar":
            if not isinstance(a.get("value"), (int, float)):
                problems.append("%s: scalar without numeric value" % where)
            else:
                scalars[a["name"]] = a["value"]
    for i, a in enumerate(args):
        if a.get("role") in ("input", "output", "inout"):
            try:
                if count_expr(a.get("count"), scalars) <= 0:
                    problems.append("args[%d]: count must be positive" % i)
            except ValueError as e:
                problems.append("args[%d]: %s" % (i, e))
        if a.get("role") in ("input", "inout"):
            r = a.get("range")
            if not (isinstance(r, list) and len(r) == 2 and r[0] <= r[1]):
                problems.append("args[%d]: range [lo, hi] required for %s" % (i, a.get("role")))
    if not any(a.get("role") in ("output", "inout") for a in args):
        problems.append("no output or inout arg")
    if not problems:
        sig = signature(args)
        if sig not in prompt:
            problems.append("prompt does not state the signature '%s'" % sig)
    return task, problems


# ---------------------------------------------------------------------------------------------------
# harness generation (cpp and cuda)


def c_literal(value, t):
    if t == "int":
        return str(int(value))
    text = repr(float(value))
    return text + ("f" if t == "float" else "")


def harness_source(task, cuda):
    args = task["args"]
    scalars = {a["name"]: a["value"] for a in args if a["role"] == "scalar"}
    tol = task.get("tolerance", {})
    seed = int(task.get("seed", SEED_DEFAULT))
    proto_ref = signature(args, "reference") + ";"
    proto_sol = signature(args, "solve") + ";"
    L = []
    L.append("#include <cmath>\n#include <cstdio>\n#include <cstdlib>\n#include <random>\n#include <vector>")
    if cuda:
        L.append("#include <cuda_runtime.h>")
    L.append(proto_ref)
    L.append(proto_sol)
    if cuda:
        L.append("""#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \\
  std::printf("cuda error %s at %s\\n", cudaGetErrorName(e_), #x); return 3; } } while (0)""")
    L.append("""template <class T> static int compare(const char* name, const std::vector<T>& e,
    const std::vector<T>& g, double atol, double rtol) {
  long bad = 0, first = -1; double worst = 0.0;
  for (size_t i = 0; i < e.size(); ++i) {
    double ev = (double)e[i], gv = (double)g[i];
    double err = std::fabs(gv - ev), lim = atol + rtol * std::fabs(ev);
    if (!(err <= lim)) { if (first < 0) first = (long)i; ++bad; }
    else if (lim > 0 && err / lim > worst) worst = err / lim;
  }
  if (bad) { std::printf("MISMATCH %s: %ld of %zu wrong, first at %ld: expected %.9g got %.9g\\n",
      name, bad, e.size(), first, (double)e[first], (double)g[first]); return 1; }
  std::printf("ok %s worst_err_over_tol %.3g\\n", name, worst);
  return 0;
}""")
    L.append("int main(int argc, char** argv) {")
    L.append("  const bool sentinel = argc > 1 && argv[1][0] == '1';")
    L.append("  const unsigned offset = argc > 2 ? (unsigned)std::atoi(argv[2]) : 0u;")
    L.append("  std::mt19937 rng(%du + offset);" % seed)
    for a in args:
        t, n = TYPES[a["type"]], a["name"]
        if a["role"] == "scalar":
            L.append("  const %s %s = %s;" % (t, n, c_literal(a["value"], t)))
            continue
        cnt = count_expr(a["count"], scalars)
        L.append("  std::vector<%s> %s_ref(%d), %s_got;" % (t, n, cnt, n))
        if a["role"] in ("input", "inout"):
            lo, hi = a["range"]
            if t == "int":
                L.append("  { std::uniform_int_distribution<int> d(%d, %d); for (auto& v : %s_ref) v = d(rng); }"
                         % (int(lo), int(hi), n))
            else:
                L.append("  { std::uniform_real_distribution<%s> d(%s, %s); for (auto& v : %s_ref) v = d(rng); }"
                         % (t, c_literal(lo, t), c_literal(hi, t), n))
        else:
            L.append("  for (auto& v : %s_ref) v = sentinel ? (%s)%d : (%s)0;" % (n, t, SENTINEL, t))
        L.append("  %s_got = %s_ref;" % (n, n))
    call_ref = ", ".join(a["name"] if a["role"] == "scalar" else a["name"] + "_ref.data()" for a in args)
    L.append("  reference(%s);" % call_ref)
    if cuda:
        for a in args:
            if a["role"] == "scalar":
                continue
            t, n = TYPES[a["type"]], a["name"]
            L.append("  %s* %s_dev = nullptr;" % (t, n))
            L.append("  CK(cudaMalloc((void**)&%s_dev, %s_got.size() * sizeof(%s)));" % (n, n, t))
            L.append("  CK(cudaMemcpy(%s_dev, %s_got.data(), %s_got.size() * sizeof(%s), cudaMemcpyHostToDevice));"
                     % (n, n, n, t))
        call = ", ".join(a["name"] if a["role"] == "scalar" else a["name"] + "_dev" for a in args)
        L.append("  solve(%s);" % call)
        L.append("  CK(cudaGetLastError());")
        L.append("  CK(cudaDeviceSynchronize());")
        for a in args:
            if a["role"] in ("output", "inout"):
                t, n = TYPES[a["type"]], a["name"]
                L.append("  CK(cudaMemcpy(%s_got.data(), %s_dev, %s_got.size() * sizeof(%s), cudaMemcpyDeviceToHost));"
                         % (n, n, n, t))
    else:
        call = ", ".join(a["name"] if a["role"] == "scalar" else a["name"] + "_got.data()" for a in args)
        L.append("  solve(%s);" % call)
    L.append("  int failed = 0;")
    for a in args:
        if a["role"] in ("output", "inout"):
            atol, rtol = DEFAULT_TOL[a["type"]]
            if a["type"] != "int":
                atol, rtol = tol.get("atol", atol), tol.get("rtol", rtol)
            L.append('  failed |= compare("%s", %s_ref, %s_got, %r, %r);' % (a["name"], a["name"], a["name"],
                                                                          float(atol), float(rtol)))
    L.append("  return failed;\n}")
    return "\n".join(L) + "\n"


def stub_source(task):
    """A main that only calls solve() with the exact parameter types: linking proves the signature."""
    args = task["args"]
    L = ["#include <cstddef>", signature(args, "solve") + ";", "int main(int argc, char**) {",
         "  if (argc < 1000) return 0;"]
    vals = []
    for a in args:
        t, n = TYPES[a["type"]], a["name"]
        if a["role"] == "scalar":
            L.append("  %s %s = %s;" % (t, n, c_literal(a["value"], t)))
        elif a["role"] == "input":
            L.append("  const %s* %s = nullptr;" % (t, n))
        else:
            L.append("  %s* %s = nullptr;" % (t, n))
        vals.append(n)
    L.append("  solve(%s);\n  return 0;\n}" % ", ".join(vals))
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------------------------------------------
# per-candidate checks; each returns (outcome, detail) where outcome is 'pass' or one of
# 'compile', 'forbidden', 'runtime', 'timeout', 'mismatch', 'unproven'.


def forbidden_hit(task, source):
    for word in task.get("forbidden", []):
        if word in source:
            return word
    return None


def classify_run(status, out):
    if status == "timeout":
        return "timeout"
    if status == "ok":
        return "pass"
    return "mismatch" if "MISMATCH" in out else "runtime"


class Checker:
    def __init__(self, opts):
        self.opts = opts
        self.cxx = find_cxx()
        self.nvcc = find_nvcc()

    def nvcc_cmd(self, *rest):
        return [self.nvcc, "-arch=" + self.opts.arch, "-std=c++17", "-O2"] + list(rest)

    def prepare(self, task, task_dir, work):
        """Compiles the per-task parts once: reference object and harness or stub object."""
        kind = task["kind"]
        ref_obj = os.path.join(work, "reference.o")
        st, out = run([self.cxx, "-std=c++17", "-O2", "-c", os.path.join(task_dir, "reference.cpp"),
                       "-o", ref_obj], timeout=120)
        if st != "ok":
            return "reference.cpp does not compile:\n" + out
        if kind == "cpp":
            src = os.path.join(work, "harness.cpp")
            open(src, "w").write(harness_source(task, cuda=False))
            st, out = run([self.cxx, "-std=c++17", "-O2", "-c", src, "-o", os.path.join(work, "harness.o")],
                          timeout=120)
        elif self.opts.cuda_mode == "run":
            src = os.path.join(work, "harness.cu")
            open(src, "w").write(harness_source(task, cuda=True))
            st, out = run(self.nvcc_cmd("-c", src, "-o", os.path.join(work, "harness.o")), timeout=300)
        else:
            src = os.path.join(work, "stub.cu")
            open(src, "w").write(stub_source(task))
            st, out = run(self.nvcc_cmd("-c", src, "-o", os.path.join(work, "harness.o")), timeout=300)
        if st != "ok":
            return "harness does not compile:\n" + out
        return None

    def check_native(self, task, cand, work, tag):
        kind = task["kind"]
        src_text = open(cand).read()
        word = forbidden_hit(task, src_text)
        if word:
            return "forbidden", "uses '%s'" % word
        exe = os.path.join(work, tag + ".bin")
        obj = os.path.join(work, tag + ".o")
        if kind == "cpp":
            st, out = run([self.cxx, "-std=c++17", "-O2", "-c", cand, "-o", obj], timeout=120)
            if st == "ok":
                st, out = run([self.cxx, obj, os.path.join(work, "harness.o"), os.path.join(work, "reference.o"),
                               "-o", exe], timeout=120)
        else:
            st, out = run(self.nvcc_cmd("-c", cand, "-o", obj), timeout=300)
            if st == "ok":
                st, out = run(self.nvcc_cmd(obj, os.path.join(work, "harness.o"), os.path.join(work, "reference.o"),
                                            "-o", exe), timeout=300)
        if st != "ok":
            return "compile", compile_summary(out.replace(os.path.dirname(cand) + os.sep, ""))
        if kind == "cuda" and self.opts.cuda_mode == "compile":
            return "unproven", "compiles and links; needs a GPU run"
        # Zero-filled outputs on --repeat different input seeds (races and missing barriers are not
        # deterministic, and some bugs depend on the data), then sentinel-filled outputs once. A
        # candidate must give the same verdict every time.
        modes = [("0", str(k)) for k in range(max(1, self.opts.repeat))] + [("1", "0")]
        results = []
        for mode, offset in modes:
            st, out = run([exe, mode, offset], cwd=work, timeout=self.opts.timeout)
            outcome = classify_run(st, out)
            results.append((mode, outcome, out.strip()))
            if outcome == "timeout":
                break
        failing = [r for r in results if r[1] != "pass"]
        if not failing:
            return "pass", results[0][2].replace("\n", "; ")
        if len(failing) < len(results):
            passing = [r for r in results if r[1] == "pass"]
            return "weak:" + failing[0][1], "passed %d of %d runs (%s), e.g. %s-filled: %s" % (
                len(passing), len(results), "fills " + "".join(r[0] for r in results),
                "zero" if passing[0][0] == "0" else "sentinel", first_lines(failing[0][2]))
        return failing[0][1], first_lines(failing[0][2])

    def check_python(self, task, task_dir, cand, work, record=None):
        for name in ("tests.py", "hidden_tests.py"):
            if os.path.isfile(os.path.join(task_dir, name)):
                shutil.copy(os.path.join(task_dir, name), os.path.join(work, name))
        shutil.copy(cand, os.path.join(work, "solution.py"))
        runner = os.path.join(work, "run_tests.py")
        open(runner, "w").write(PY_RUNNER)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1"}
        if record:
            env["RECORD_CALLS"] = record
        st, out = run([sys.executable, "-I", runner], cwd=work, timeout=self.opts.timeout, env=env)
        if st == "timeout":
            return "timeout", "ran past %ss" % self.opts.timeout
        if st == "ok":
            return "pass", out.strip().splitlines()[-1] if out.strip() else ""
        if "IMPORT-ERROR" in out and ("SyntaxError" in out or "IndentationError" in out):
            return "compile", compile_summary(out)
        # The summary line first: it says whether the hidden tests alone catch the candidate.
        lines = out.strip().splitlines()
        return "mismatch", first_lines("\n".join(lines[-1:] + lines[:-1]))


# Runs tests.py, then hidden_tests.py, in the candidate's own process (the engine's judge runs them in
# another); leap_testing stands in for the judge's module of that name.
PY_RUNNER = r'''
import os, sys, traceback, types
sys.path.insert(0, os.getcwd())


class CandidateError(Exception):
    pass


class _Raises:
    def __init__(self, name):
        self.name = name
        self.exception = None

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None:
            raise AssertionError("expected the call to raise %s; it returned" % self.name)
        if self.name in [c.__name__ for c in type(exc).__mro__]:
            self.exception = exc
            return True
        return False


if os.environ.get("RECORD_CALLS"):
    # Records what the candidate answered to each call of the visible tests, for the leak check.
    import copy, pickle
    import solution
    table = {}

    def _recording(name, fn):
        def call(*args, **kwargs):
            key = (name, repr((args, kwargs)))
            try:
                result = fn(*args, **kwargs)
            except Exception as e:
                table[key] = ("raise", type(e).__name__, str(e))
                raise
            table[key] = ("ok", copy.deepcopy(result))
            return result
        return call

    for name, value in list(vars(solution).items()):
        if callable(value) and not name.startswith("_"):
            setattr(solution, name, _recording(name, value))
leap_testing = types.ModuleType("leap_testing")
leap_testing.CandidateError = CandidateError
leap_testing.raises = _Raises
sys.modules["leap_testing"] = leap_testing
summary = []
failed = []
for module in ("tests",) if os.environ.get("RECORD_CALLS") else ("tests", "hidden_tests"):
    if not os.path.isfile(module + ".py"):
        continue
    try:
        m = __import__(module)
    except SyntaxError:
        print("IMPORT-ERROR"); traceback.print_exc(limit=1); sys.exit(2)
    except BaseException as e:
        if module == "tests":
            print("IMPORT-ERROR"); traceback.print_exc(limit=1); sys.exit(2)
        failed.append("%s: import: %s: %s" % (module, type(e).__name__, str(e)[:200]))
        summary.append("%s import failed" % module)
        continue
    names = [n for n, v in list(vars(m).items()) if n.startswith("test_") and callable(v)]
    bad = 0
    for n in names:
        try:
            getattr(m, n)()
        except BaseException as e:
            bad += 1
            failed.append("%s.%s: %s: %s" % (module, n, type(e).__name__, str(e)[:200]))
    summary.append("%s %d of %d passed" % (module, len(names) - bad, len(names)))
    if not names:
        failed.append("%s: no test_* function" % module)
if os.environ.get("RECORD_CALLS"):
    with open(os.environ["RECORD_CALLS"], "wb") as f:
        pickle.dump(table, f)
for f in failed:
    print("FAILED", f)
print("; ".join(summary))
sys.exit(1 if failed else 0)
'''


# A wrong candidate that also answers every call the visible tests make as the solution did: what a
# policy can write after feedback quoted the visible tests' asserts. Only the hidden tests can fail it.
PY_LEAKY = r'''
import builtins, copy, pickle
with open(%(table)r, "rb") as _f:
    _TABLE = pickle.load(_f)
with open(%(wrong)r) as _f:
    exec(compile(_f.read(), "wrong.py", "exec"))


def _answering(name, fn):
    def call(*args, **kwargs):
        hit = _TABLE.get((name, repr((args, kwargs))))
        if hit is None:
            return fn(*args, **kwargs)
        if hit[0] == "raise":
            raise getattr(builtins, hit[1], Exception)(hit[2])
        return copy.deepcopy(hit[1])
    return call


for _name, _value in list(globals().items()):
    if callable(_value) and not _name.startswith("_") and _name not in ("builtins", "copy", "pickle"):
        globals()[_name] = _answering(_name, _value)
'''


def compile_summary(text):
    # "error" as a word (not inside a file name such as compile_error.cu), or a Python "...Error:".
    errors = [l.strip() for l in text.splitlines()
              if re.search(r"(?<![\w/.-])error\b|Error:|undefined reference", l)]
    return " | ".join(errors[:3])[:400] if errors else first_lines(text)


def first_lines(text, n=4):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return " | ".join(lines[:n])[:400]


def expected_ok(label, outcome):
    """Whether a wrong candidate's outcome matches its label; None when it cannot be decided here."""
    if outcome == "pass":
        return False
    if label in BUILD_ONLY_LABELS:
        return outcome == "compile"
    if label.startswith("forbidden"):
        return outcome == "forbidden"
    if outcome == "unproven":
        return None
    if outcome in ("compile", "forbidden") or outcome.startswith("weak:"):
        return False  # a run-time bug must compile and fail at run time
    if label == "timeout":
        return outcome == "timeout"
    return True


def validate_task(checker, suite, kind, name):
    task_dir = os.path.join(suite, kind, name)
    task, problems = check_task(task_dir, kind, name)
    rows = []  # (candidate, expected, outcome, verdict, detail)
    if problems or task is None:
        return [("task.json", "-", "invalid", "BAD", "; ".join(problems))]
    ext = EXT[kind]
    cands = [("solution" + ext, os.path.join(task_dir, "solution" + ext))]
    wrong_dir = os.path.join(task_dir, "wrong")
    for w in sorted(os.listdir(wrong_dir)):
        if w.endswith(ext):
            cands.append(("wrong/" + w, os.path.join(wrong_dir, w)))
    if kind != "python" and forbidden_hit(task, open(cands[0][1]).read()):
        return [("solution" + ext, "pass", "forbidden", "BAD", "solution uses a forbidden identifier")]
    with tempfile.TemporaryDirectory(prefix="suite_") as work:
        if kind != "python":
            err = checker.prepare(task, task_dir, work)
            if err:
                return [("harness", "-", "compile", "BAD", first_lines(err, 8))]
        for i, (label_path, path) in enumerate(cands):
            if kind == "python":
                sub = os.path.join(work, "c%d" % i)
                os.mkdir(sub)
                outcome, detail = checker.check_python(task, task_dir, path, sub)
            else:
                outcome, detail = checker.check_native(task, path, work, "c%d" % i)
            if i == 0:
                if outcome == "pass":
                    verdict = "OK"
                elif outcome == "unproven":
                    verdict = "OK"  # compiled and linked; the run needs a GPU
                    outcome, detail = "builds", detail
                else:
                    verdict = "BAD"
                rows.append((label_path, "pass", outcome, verdict, detail))
            else:
                label = os.path.basename(path)[: -len(ext)]
                ok = expected_ok(label, outcome)
                verdict = {True: "OK", False: "BAD", None: "UNPROVEN"}[ok]
                rows.append((label_path, label, outcome, verdict, detail))
        if kind == "python":
            rows += leak_rows(checker, task, task_dir, cands, work)
    return rows


# Wrong candidates whose bug shows on one input only, an input the visible tests hold (the empty one):
# answering it as the visible test expects is the fix, so their leak check may pass.
LEAK_FIXES = {
    ("python/longest_unique_substring", "edge_case"): "wrong only for the empty string",
    ("python/run_length_encode", "edge_case"): "wrong (a crash) only for the empty string",
    ("python/spiral_order", "crash_on_empty"): "wrong (a crash) only for the empty matrix",
}


def leak_rows(checker, task, task_dir, cands, work):
    """Each run-time wrong candidate, given the solution's answers to the visible tests' calls, must
    still fail (on the hidden tests): else a debug turn could pass by hard-coding what feedback quoted."""
    table = os.path.join(work, "visible_calls.pkl")
    sub = os.path.join(work, "record")
    os.mkdir(sub)
    outcome, detail = checker.check_python(task, task_dir, cands[0][1], sub, record=table)
    if outcome != "pass" or not os.path.isfile(table):
        return [("visible calls", "pass", outcome, "BAD", "recording the solution's answers: " + detail)]
    rows = []
    for i, (label_path, path) in enumerate(cands[1:]):
        label = os.path.basename(path)[:-3]
        if label in BUILD_ONLY_LABELS or label == "timeout":
            continue
        sub = os.path.join(work, "leak%d" % i)
        os.mkdir(sub)
        leaky = os.path.join(sub, "leaky_candidate.py")
        with open(leaky, "w") as f:
            f.write(PY_LEAKY % {"table": table, "wrong": os.path.abspath(path)})
        outcome, detail = checker.check_python(task, task_dir, leaky, sub)
        verdict = "BAD" if outcome == "pass" else "OK"
        if outcome == "pass":
            fix = LEAK_FIXES.get((task.get("id"), label))
            verdict = "OK" if fix else "BAD"
            detail = ("passes once it answers the visible tests' calls: " +
                      ("%s, so answering it is the fix" % fix if fix else "the hidden tests miss this bug"))
        rows.append((label_path + " + visible answers", label + "+answers", outcome, verdict, detail))
    return rows


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", default=here, help="suite root (default: this script's folder)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds (default: all)")
    ap.add_argument("--task", action="append", default=[], help="only task ids containing this (repeatable)")
    ap.add_argument("--cuda-mode", choices=("compile", "run"), default="compile")
    ap.add_argument("--arch", default="sm_90a", help="nvcc -arch (default: sm_90a)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per candidate run (default: 10)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs with zero-filled outputs and seeds seed, seed+1, ... per candidate, before one "
                         "sentinel-filled run (default: 3)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="tasks checked in parallel (default: 2)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every candidate, not only problems")
    ap.add_argument("--json", help="also write every row to this JSON file")
    opts = ap.parse_args()

    kinds = [k.strip() for k in opts.kinds.split(",") if k.strip()]
    checker = Checker(opts)
    if "cuda" in kinds and not checker.nvcc:
        print("error: nvcc not found (set NVCC, put it on PATH, or install /usr/local/cuda)")
        return 1
    jobs = []
    for kind in kinds:
        root = os.path.join(opts.suite, kind)
        if not os.path.isdir(root):
            continue
        for name in sorted(os.listdir(root)):
            tid = "%s/%s" % (kind, name)
            if os.path.isdir(os.path.join(root, name)) and (not opts.task or any(t in tid for t in opts.task)):
                jobs.append((kind, name))
    all_rows = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        futures = {pool.submit(validate_task, checker, opts.suite, k, n): (k, n) for k, n in jobs}
        for fut in concurrent.futures.as_completed(futures):
            kind, name = futures[fut]
            rows = fut.result()
            for r in rows:
                all_rows.append(("%s/%s" % (kind, name),) + r)
                if opts.verbose or r[3] != "OK":
                    print("%-8s %-34s %-30s %-10s %s" % (r[3], "%s/%s" % (kind, name), r[0], r[2], r[4]),
                          flush=True)
    all_rows.sort()
    summary = {}
    for tid, cand, expected, outcome, verdict, detail in all_rows:
        kind = tid.split("/")[0]
        s = summary.setdefault(kind, {"tasks": set(), "solutions_ok": 0, "solutions_bad": 0,
                                      "wrong_ok": 0, "wrong_bad": 0, "wrong_unproven": 0, "invalid": 0})
        s["tasks"].add(tid)
        if expected == "-":
            s["invalid"] += 1
        elif expected == "pass":
            s["solutions_ok" if verdict == "OK" else "solutions_bad"] += 1
        else:
            s["wrong_" + {"OK": "ok", "BAD": "bad", "UNPROVEN": "unproven"}[verdict]] += 1
    failed = False
    for kind in kinds:
        if kind not in summary:
            continue
        s = summary[kind]
        print("%-6s tasks %3d | solutions ok %3d bad %d | wrong failing as labelled %3d, NOT %d, unproven %d"
              " | invalid %d" % (kind, len(s["tasks"]), s["solutions_ok"], s["solutions_bad"], s["wrong_ok"],
                                 s["wrong_bad"], s["wrong_unproven"], s["invalid"]))
        failed |= bool(s["solutions_bad"] or s["wrong_bad"] or s["invalid"])
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump([dict(zip(("task", "candidate", "expected", "outcome", "verdict", "detail"), r))
                       for r in all_rows], f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
