#include "sandbox/python_judge.hpp"

namespace leap::sandbox {
namespace {

// Both programs share the framing (a 4-byte big-endian length, then the bytes) and the codec for
// what the candidate sends (tagged JSON: {"t": [...]} a tuple, {"d": [[k, v], ...]} a dict,
// {"s"|"f":
// [...]} a set or frozenset, {"b"|"y": hex} bytes or bytearray, {"c": [re, im]} a complex). The
// judge sends arguments with marshal (fast, and only the candidate's own process decodes them).
const char* const k_codec =
    R"PY(# --- codec: plain data only, both ways (shared by the judge and the candidate's server) ---
import json
import os
import struct

_CHANNEL = 3
_PLAIN = frozenset((int, float, str, bool, type(None)))
_MAX_DEPTH = 200
_MAX_ITEMS = 8_000_000
_RESULT_LIMIT = 16 << 20


def _arg_limit(request_bytes):
    # An argument sent back may be larger than the limit of a result when the test sent a large one.
    return _RESULT_LIMIT + 4 * request_bytes


def _digest(v):
    # The state of a mutable argument, compared by the judge with that of its own copy: equal digests
    # spare sending a large unchanged argument back. b"" when it cannot be taken (the judge then asks
    # for the value itself). marshal version 2 writes no back-references, so equal plain values give
    # equal bytes (a set's order may differ between the processes: that only costs a transfer).
    import marshal
    try:
        from _blake2 import blake2b
    except ImportError:
        from hashlib import blake2b
    try:
        return blake2b(marshal.dumps(v, 2), digest_size=16).digest()
    except BaseException:
        return b""


class _Unsendable(Exception):
    pass


def _enc(v, depth, budget):
    t = type(v)
    if t in _PLAIN:
        return v
    if depth > _MAX_DEPTH:
        raise _Unsendable("it is nested more than %d levels deep" % _MAX_DEPTH)
    if t is list:
        budget[0] -= len(v)
        if budget[0] < 0:
            raise _Unsendable("it holds more than %d items" % _MAX_ITEMS)
        if set(map(type, v)) <= _PLAIN:
            return v
        return [_enc(x, depth + 1, budget) for x in v]
    if t is tuple:
        budget[0] -= len(v)
        if budget[0] < 0:
            raise _Unsendable("it holds more than %d items" % _MAX_ITEMS)
        return {"t": [_enc(x, depth + 1, budget) for x in v]}
    if t is dict:
        budget[0] -= 2 * len(v)
        if budget[0] < 0:
            raise _Unsendable("it holds more than %d items" % _MAX_ITEMS)
        return {"d": [[_enc(k, depth + 1, budget), _enc(x, depth + 1, budget)] for k, x in v.items()]}
    if t is set or t is frozenset:
        budget[0] -= len(v)
        if budget[0] < 0:
            raise _Unsendable("it holds more than %d items" % _MAX_ITEMS)
        return {"s" if t is set else "f": [_enc(x, depth + 1, budget) for x in v]}
    if t is bytes:
        return {"b": v.hex()}
    if t is bytearray:
        return {"y": v.hex()}
    if t is complex:
        return {"c": [v.real, v.imag]}
    # Subclasses of plain types (Counter, defaultdict, OrderedDict, namedtuple, IntEnum, ...) go as
    # their plain value: the receiver compares plain values, never the sender's classes.
    for base in (bool, int, float, str, complex, bytes, bytearray, tuple, list, frozenset, set):
        if isinstance(v, base):
            return _enc(base(v), depth, budget)
    if isinstance(v, dict):
        return _enc(dict(v), depth, budget)
    raise _Unsendable("a %s is not plain data (send None, bool, int, float, complex, str, bytes, "
                      "tuple, list, dict or set)" % t.__name__)


def _dumps(v):
    try:
        return json.dumps(_enc(v, 0, [_MAX_ITEMS]), separators=(",", ":")).encode()
    except _Unsendable:
        raise
    except (ValueError, TypeError, RecursionError, MemoryError) as e:
        raise _Unsendable("it cannot be encoded (%s)" % type(e).__name__)


def _hook(o):
    if len(o) != 1:
        raise ValueError("bad object")
    (k, v), = o.items()
    if k == "t" and type(v) is list:
        return tuple(v)
    if k == "d" and type(v) is list:
        d = {}
        for pair in v:
            if type(pair) is not list or len(pair) != 2:
                raise ValueError("bad dict")
            d[pair[0]] = pair[1]
        return d
    if k == "s" and type(v) is list:
        return set(v)
    if k == "f" and type(v) is list:
        return frozenset(v)
    if k == "b" and type(v) is str:
        return bytes.fromhex(v)
    if k == "y" and type(v) is str:
        return bytearray.fromhex(v)
    if k == "c" and type(v) is list and len(v) == 2 and all(type(x) in (int, float) for x in v):
        return complex(v[0], v[1])
    raise ValueError("bad tag")


def _loads(data):
    return json.loads(data.decode(), object_hook=_hook)


class _Closed(Exception):
    pass


def _send(*frames):
    out = bytearray()
    for f in frames:
        out += struct.pack(">I", len(f))
        out += f
    view = memoryview(out)
    while view:
        try:
            n = os.write(_CHANNEL, view[:1 << 20])
        except InterruptedError:
            continue
        except OSError as e:
            raise _Closed(str(e))
        view = view[n:]


def _read_exact(n):
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = os.read(_CHANNEL, min(n - len(buf), 1 << 20))
        except InterruptedError:
            continue
        except OSError as e:
            raise _Closed(str(e))
        if not chunk:
            raise _Closed("end of channel")
        buf += chunk
    return bytes(buf)


def _recv(limit):
    (n,) = struct.unpack(">I", _read_exact(4))
    if n > limit:
        raise ValueError("a message of %d bytes (limit %d)" % (n, limit))
    return _read_exact(n)
)PY";

}  // namespace

const std::string& python_judge_source() {
  static const std::string source =
      std::string(
          "# LEAP python judge (generated): runs tests.py; the candidate runs in another "
          "process.\n") +
      k_codec +
      R"PY(# --- the judge: runs tests.py; `solution` is a proxy whose functions call the candidate's process ---
import builtins
import marshal
import sys
import types

_FROM_CANDIDATE = 16 << 20
_HEADER_LIMIT = 1 << 16
_lost = []  # why the channel to the candidate broke, once it has: sticky for the rest of the run
_MUTABLE = (list, dict, set, bytearray)  # argument types whose state after the call comes back


class _CandidateLost(BaseException):
    """The candidate's process ended or broke the protocol; no test can pass after this."""


class CandidateError(Exception):
    """Whatever the candidate's code raised, as one class of the judge's: never the original class,
    so that no exception of the candidate's (StopIteration ending a map(), SystemExit, an exception
    the test expects from its own code) can act in the tests as its class would. .name is the
    original's class name, .names the names of its classes (its MRO), .message its message."""

    def __init__(self, name, names, message):
        super().__init__(message)
        self.name = name
        self.names = tuple(names)
        self.message = message

    def __str__(self):
        return self.message


class _Raises:
    def __init__(self, name):
        if type(name) is not str:
            raise TypeError("raises() takes the name of an exception class, e.g. raises('ValueError')")
        self.name = name
        self.exception = None

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None:
            raise AssertionError("expected the call to raise %s; it returned" % self.name)
        if isinstance(exc, CandidateError) and self.name in exc.names:
            self.exception = exc
            return True
        return False


def raises(name):
    """`with raises("ValueError"):` passes when the candidate's code inside raised a ValueError (or a
    subclass of one); another exception goes on, no exception fails the test."""
    return _Raises(name)


def _testing_module():
    m = types.ModuleType("leap_testing")
    m.CandidateError = CandidateError
    m.raises = raises
    return m


def _lose(why):
    if not _lost:
        _lost.append(why)
    raise _CandidateLost(_lost[0])


def _text(v, limit):
    if type(v) is not str:
        raise ValueError("not a string")
    return v[:limit]


def _remote_frames(frames):
    out = []
    if type(frames) is not list:
        raise ValueError("bad frames")
    for f in frames[:8]:
        if type(f) is not dict or type(f.get("line")) is not int:
            raise ValueError("bad frame")
        out.append({"file": "solution.py", "line": f["line"], "function": _text(f.get("function", ""), 100),
                    "code": _text(f.get("code", ""), 300)})
    return out


def _remote_exception(h):
    name = _text(h.get("type"), 100)
    names = h.get("names", [name])
    if type(names) is not list or len(names) > 64:
        raise ValueError("bad names")
    names = [_text(n, 100) for n in names]
    exc = CandidateError(name, names, _text(h.get("message", ""), 2000))
    exc._leap_type = name
    exc._leap_frames = _remote_frames(h.get("frames", []))
    return exc


def _sync(old, new):
    # Writes the candidate's changes of an argument into the test's own object, keeping the identity
    # of nested containers where their shape allows it.
    t = type(old)
    if t is list:
        if len(old) == len(new):
            for i, (o, n) in enumerate(zip(old, new)):
                if type(o) is type(n) and type(o) in _MUTABLE:
                    _sync(o, n)
                else:
                    old[i] = n
        else:
            old[:] = new
    elif t is dict:
        items = []
        for k, n in new.items():
            o = old.get(k, None) if k in old else None
            if k in old and type(o) is type(n) and type(o) in _MUTABLE:
                _sync(o, n)
                items.append((k, o))
            else:
                items.append((k, n))
        old.clear()
        old.update(items)
    elif t is set:
        old.clear()
        old.update(new)
    elif t is bytearray:
        old[:] = new


def _unchanged(old, new):
    try:
        return type(old) is type(new) and bool(old == new)
    except BaseException:
        return False


def _marshallable(v, depth):
    t = type(v)
    if t in _PLAIN or t is bytes or t is complex:
        return True
    if depth > _MAX_DEPTH:
        return False
    if t is list or t is tuple or t is set or t is frozenset:
        return set(map(type, v)) <= _PLAIN or all(_marshallable(x, depth + 1) for x in v)
    if t is dict:
        return all(_marshallable(k, depth + 1) and _marshallable(x, depth + 1) for k, x in v.items())
    return False


def _call(name, args, kwargs):
    if _lost:
        raise _CandidateLost(_lost[0])
    values = list(args) + list(kwargs.values())
    # Every argument of a mutable builtin type is reported after the call, whatever the call did, and
    # the judge decides what changed against the test's own object (which the call never touched: only
    # a copy crossed): a digest of each comes back, and the judge asks for the value of each whose
    # digest is not that of its own copy.
    back = [i for i, v in enumerate(values) if type(v) in _MUTABLE]
    call = (name, list(args), dict(kwargs), back)
    try:
        # marshal is fast for the common case; it would turn a bytearray into bytes and refuses subclasses.
        request = b"M" + marshal.dumps(call) if _marshallable(call, 0) else b"J" + _dumps(call)
    except (ValueError, _Unsendable) as e:
        raise TypeError("the arguments of %s() cannot be sent to the candidate's process: %s" % (name, e))
    unsendable = None
    try:
        _send(request)
        own = [_digest(values[i]) for i in back]  # while the candidate's call runs
        header = json.loads(_recv(_HEADER_LIMIT).decode())
        if type(header) is not dict or type(header.get("ok")) is not bool:
            raise ValueError("bad reply")
        result = _loads(_recv(_FROM_CANDIDATE)) if header["ok"] else None
        fetch = []
        for i, mine in zip(back, own):
            digest = _recv(64)
            if not digest or digest != mine:
                fetch.append(i)
        updates = []
        if back:
            _send(json.dumps(fetch).encode())
            limit = _arg_limit(len(request))
            for i in fetch:
                data = _recv(limit)
                if data[:1] == b"!":  # the candidate's side could not encode it
                    if unsendable is None:
                        unsendable = "argument %d of %s() cannot be sent back after the call: %s" % (
                            i + 1, name, data[1:400].decode("utf-8", "replace"))
                    continue
                new = _loads(data)
                if type(new) is not type(values[i]):
                    raise ValueError("bad argument update")
                if not _unchanged(values[i], new):
                    updates.append((i, new))
        for i, new in updates:
            _sync(values[i], new)
        exc = None if header["ok"] else _remote_exception(header)
    except _Closed:
        _lose("ended")
    except _CandidateLost:
        raise
    except BaseException as e:
        _lose("invalid: %s" % type(e).__name__)
    if exc is None and unsendable is not None:
        exc = CandidateError("TypeError", ("TypeError", "Exception", "BaseException"), unsendable)
        exc._leap_type, exc._leap_frames = "TypeError", []
    if exc is not None:
        raise exc
    return result


def _proxy(name):
    def call(*args, **kwargs):
        return _call(name, args, kwargs)
    call.__name__ = call.__qualname__ = name
    return call


def _frames(exc):
    import traceback  # only on failures: it costs the startup of every run

    keep = []
    for f in traceback.extract_tb(exc.__traceback__):
        if f.filename == "tests.py":
            keep.append({"file": "tests.py", "line": f.lineno, "function": f.name, "code": (f.line or "").strip()})
    return keep + list(getattr(exc, "_leap_frames", []))


def _exception_fields(exc):
    return {"type": getattr(exc, "_leap_type", type(exc).__name__), "message": str(exc)[:2000], "frames": _frames(exc)}


def _compile(name):
    try:
        with open(name, encoding="utf-8") as f:
            return compile(f.read(), name, "exec"), None
    except FileNotFoundError:
        return None, None
    except SyntaxError as e:
        return None, {"status": "syntax_error", "file": name, "line": e.lineno or 0, "message": str(e.msg),
                      "code": (e.text or "").rstrip()}


def _module(name, code):
    m = types.ModuleType(name)
    m.__file__ = name + ".py"
    sys.modules[name] = m
    exec(code, m.__dict__)
    return [getattr(m, n) for n, v in list(vars(m).items()) if n.startswith("test_") and callable(v)]


def _hidden_failure(e):
    # Only its kind: nothing of a hidden test (its arguments, expected values, line, source, the
    # candidate's message or exception class, which could carry its arguments) leaves the judge.
    if isinstance(e, CandidateError):
        return {"status": "error", "hidden": True, "kind": "exception"}
    return {"status": "failed", "hidden": True, "kind": "wrong_value"}


def _judge(finish):
    visible, broken = _compile("tests.py")
    if broken is None and visible is None:
        broken = {"status": "no_tests"}
    if broken is None:
        hidden, broken = _compile("hidden_tests.py")
    if broken is not None:
        finish(broken)
        return
    # The candidate's module: its import result first.
    try:
        hello = json.loads(_recv(_HEADER_LIMIT).decode())
        if type(hello) is not dict or type(hello.get("ok")) is not bool:
            raise ValueError("bad hello")
        if not hello["ok"]:
            syntax = hello.get("syntax")
            if syntax is not None:
                if type(syntax) is not dict or type(syntax.get("line")) is not int:
                    raise ValueError("bad syntax report")
                finish({"status": "syntax_error", "file": "solution.py", "line": syntax["line"],
                        "message": _text(syntax.get("message", ""), 500), "code": _text(syntax.get("code", ""), 300)})
                return
            exc = _remote_exception(hello)
            finish({"status": "import_error", "type": exc._leap_type, "message": str(exc), "frames": exc._leap_frames})
            return
        names = hello.get("names")
        if type(names) is not list or len(names) > 10000 or any(type(n) is not str or not n.isidentifier() for n in names):
            raise ValueError("bad names")
    except _Closed:
        finish({"status": "candidate_lost", "reason": "ended", "test": "", "index": 0, "total": 0})
        return
    except BaseException as e:
        finish({"status": "candidate_lost", "reason": "invalid: %s" % type(e).__name__, "test": "", "index": 0,
                "total": 0})
        return
    solution = types.ModuleType("solution")
    for n in names:
        if not n.startswith("__"):  # the module's own attributes stay the judge's
            setattr(solution, n, _proxy(n))
    sys.modules["solution"] = solution
    sys.modules["leap_testing"] = _testing_module()
    try:
        tests = _module("tests", visible)
    except BaseException as e:
        if _lost:
            finish({"status": "candidate_lost", "reason": _lost[0], "test": "", "index": 0, "total": 0})
            return
        finish(dict(_exception_fields(e), status="import_error"))
        return
    if not tests:
        finish({"status": "no_tests"})
        return
    for index, test in enumerate(tests):
        where = {"test": test.__name__, "index": index, "total": len(tests)}
        try:
            test()
            failure = None
        except AssertionError as e:
            failure = dict(_exception_fields(e), status="failed")
        except BaseException as e:
            failure = dict(_exception_fields(e), status="error")
        if _lost:
            finish(dict(where, status="candidate_lost", reason=_lost[0]))
            return
        if failure is not None:
            finish(dict(failure, **where))
            return
    # The hidden tests, only once every visible one passed; a failure says that a hidden test failed
    # and its kind, nothing else (the module's own code counts as a hidden test).
    total = len(tests)
    if hidden is not None:
        lost = {"status": "candidate_lost", "hidden": True, "test": "", "index": 0, "total": 0}
        try:
            hidden_tests = _module("hidden_tests", hidden)
            failure = None
        except BaseException as e:
            hidden_tests = []
            failure = _hidden_failure(e)
        for test in hidden_tests:
            try:
                test()
            except BaseException as e:
                failure = _hidden_failure(e)
            if _lost or failure is not None:
                break
        if _lost:
            finish(dict(lost, reason=_lost[0]))
            return
        if failure is not None:
            finish(failure)
            return
        total += len(hidden_tests)
    finish({"status": "passed", "total": total})


def _main():
    def finish(res):
        data = json.dumps(res).encode()
        fd = os.open(".leap_result", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, data)
        os.close(fd)

    try:
        _judge(finish)
    except BaseException as e:
        finish({"status": "judge_error", "type": type(e).__name__, "message": str(e)[:500]})


_main()
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
)PY";
  return source;
}

const std::string& python_candidate_server_source() {
  static const std::string source =
      std::string(
          "# LEAP python candidate server (generated): answers the judge's calls with "
          "solution.py.\n") +
      k_codec +
      R"PY(# --- the candidate's side: imports solution.py and answers calls from the judge on descriptor 3 ---
import marshal
import sys

_exit = os._exit
_ARGS_LIMIT = 1 << 30


def _solution_frames(exc, path):
    keep = []
    try:
        import traceback  # only on failures: it costs the startup of every run

        for f in traceback.extract_tb(exc.__traceback__):
            if f.filename == path:
                keep.append({"line": f.lineno or 0, "function": str(f.name)[:100], "code": (f.line or "").strip()[:300]})
    except BaseException:
        pass
    return keep[-8:]


def _describe(exc):
    try:
        message = str(exc)[:2000]
    except BaseException:
        message = ""
    try:
        names = [str(c.__name__)[:100] for c in type(exc).__mro__][:64]
    except BaseException:
        names = []
    return {"type": type(exc).__name__[:100], "names": names, "message": message}


def _header(obj):
    return json.dumps(obj).encode()


def _serve():
    path = os.path.join(os.getcwd(), "solution.py")
    sys.path.insert(0, os.getcwd())
    try:
        import solution
    except SyntaxError as e:
        _send(_header({"ok": False, "syntax": {"line": e.lineno or 0, "message": str(e.msg)[:500],
                                               "code": (e.text or "").rstrip()[:300]}}))
        return
    except BaseException as e:
        h = _describe(e)
        h.update({"ok": False, "frames": _solution_frames(e, path)})
        _send(_header(h))
        return
    functions = {}
    for name, value in list(vars(solution).items()):
        if isinstance(name, str) and name.isidentifier() and not name.startswith("__") and callable(value):
            functions[name] = value
    _send(_header({"ok": True, "names": sorted(functions)}))
    while True:
        try:
            request_bytes = _recv(_ARGS_LIMIT)
            request = (marshal.loads(request_bytes[1:]) if request_bytes[:1] == b"M"
                       else _loads(request_bytes[1:]))
        except _Closed:
            return
        fn_name, args, kwargs, back = request
        values = list(args) + list(kwargs.values())
        fn = functions.get(fn_name)
        try:
            if fn is None:
                raise NameError("name '%s' is not defined" % fn_name)
            result = fn(*args, **kwargs)
            ok = True
        except BaseException as e:
            ok = False
            reply = dict(_describe(e), ok=False, frames=_solution_frames(e, path))
        if ok:
            try:
                data = _dumps(result)
                if len(data) > _RESULT_LIMIT:
                    raise _Unsendable("it is %d bytes encoded, more than the %d allowed" % (len(data), _RESULT_LIMIT))
                reply = {"ok": True}
            except BaseException as e:
                ok = False
                reply = {"ok": False, "type": "TypeError", "names": ["TypeError", "Exception", "BaseException"],
                         "message": "the value returned by %s() cannot be sent back: %s" % (fn_name, e), "frames": []}
        # A digest of every argument the judge named, changed or not; then the values it asks for (those
        # whose digest differs from that of its own copy): the judge decides what changed.
        _send(_header(reply), *([data] if ok else []), *[_digest(values[i]) for i in back])
        if back:
            try:
                fetch = json.loads(_recv(_ARGS_LIMIT).decode())
            except _Closed:
                return
            limit = _arg_limit(len(request_bytes))
            frames = []
            for i in fetch:
                try:
                    now = _dumps(values[i])
                    if len(now) > limit:
                        raise _Unsendable("it is %d bytes encoded, more than the %d allowed" % (len(now), limit))
                except BaseException as e:
                    now = b"!" + str(e)[:300].encode("utf-8", "replace")
                frames.append(now)
            _send(*frames)


try:
    _serve()
except _Closed:
    pass
sys.stdout.flush()
sys.stderr.flush()
_exit(0)
)PY";
  return source;
}

}  // namespace leap::sandbox
