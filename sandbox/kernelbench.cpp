#include "sandbox/kernelbench.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace leap::sandbox {
namespace {

// The data format, shared by both programs. Little-endian; every value starts with a one-byte tag.
const char* k_codec = R"PY(
import ctypes
import struct


def _leap_encode(write, v, depth=0):
    if depth > 30:
        raise ValueError("outputs nested too deeply")
    if isinstance(v, torch.Tensor):
        t = v.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.resolve_conj().resolve_neg().contiguous()
        name = str(t.dtype).replace("torch.", "").encode()
        write(b"T" + struct.pack("<B", len(name)) + name + struct.pack("<I", t.dim()))
        write(struct.pack("<%dq" % t.dim(), *t.shape))
        n = t.numel() * t.element_size()
        write(struct.pack("<Q", n))
        if n:
            write(ctypes.string_at(t.data_ptr(), n))
    elif isinstance(v, bool):
        write(b"B" + struct.pack("<B", 1 if v else 0))
    elif isinstance(v, int) and -(1 << 63) <= v < (1 << 63):
        write(b"I" + struct.pack("<q", v))
    elif isinstance(v, float):
        write(b"F" + struct.pack("<d", v))
    elif v is None:
        write(b"N")
    elif isinstance(v, str):
        b = v.encode("utf-8", "replace")
        write(b"S" + struct.pack("<I", len(b)) + b)
    elif isinstance(v, (list, tuple)):
        write((b"L" if isinstance(v, list) else b"U") + struct.pack("<I", len(v)))
        for x in v:
            _leap_encode(write, x, depth + 1)
    else:
        b = type(v).__name__.encode("utf-8", "replace")[:200]
        write(b"O" + struct.pack("<I", len(b)) + b)


def _leap_decode(buf, pos):
    tag = buf[pos:pos + 1]
    pos += 1
    if tag == b"T":
        n = buf[pos]
        name = buf[pos + 1:pos + 1 + n].decode()
        pos += 1 + n
        (nd,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        shape = struct.unpack_from("<%dq" % nd, buf, pos)
        pos += 8 * nd
        (nb,) = struct.unpack_from("<Q", buf, pos)
        pos += 8
        dtype = getattr(torch, name)
        if nb == 0:
            t = torch.empty(shape, dtype=dtype)
        else:
            t = torch.frombuffer(bytearray(buf[pos:pos + nb]), dtype=dtype).reshape(shape).clone()
        return t, pos + nb
    if tag == b"B":
        return buf[pos] != 0, pos + 1
    if tag == b"I":
        return struct.unpack_from("<q", buf, pos)[0], pos + 8
    if tag == b"F":
        return struct.unpack_from("<d", buf, pos)[0], pos + 8
    if tag == b"N":
        return None, pos
    if tag in (b"S", b"O"):
        (n,) = struct.unpack_from("<I", buf, pos)
        return buf[pos + 4:pos + 4 + n].decode("utf-8", "replace"), pos + 4 + n
    if tag in (b"L", b"U"):
        (n,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        items = []
        for _ in range(n):
            x, pos = _leap_decode(buf, pos)
            items.append(x)
        return (items if tag == b"L" else tuple(items)), pos
    raise ValueError("bad tag %r" % tag)


def _leap_flat(x):
    if isinstance(x, (list, tuple)):
        out = []
        for y in x:
            out.extend(_leap_flat(y))
        return out
    return [x]
)PY";

}  // namespace

result<own_kernel_policy> own_kernel_for(const task& t, const std::string& device) {
  if (t.own_kernel == own_kernel_policy::require && device != "cuda") {
    return error{t.id +
                 ": \"own_kernel\": \"require\" cannot be checked on the CPU (no CUDA "
                 "device on this slot: only the candidate's own process could say which "
                 "kernels ran); set \"own_kernel\": \"off\" or verify on a GPU slot"};
  }
  if (t.own_kernel) {
    return *t.own_kernel;
  }
  return device == "cuda" ? own_kernel_policy::require : own_kernel_policy::off;
}

const std::string& kernelbench_reference_source() {
  static const std::string source =
      std::string(
          R"PY(# LEAP KernelBench reference (generated): runs problem.py alone, writes inputs and expected outputs.
import importlib.util
import json
import os
import sys

import torch
)PY") +
      k_codec + R"PY(

def _leap_main():
    config = json.loads(sys.stdin.readline() or "{}")
    device = torch.device(config.get("device", "cpu"))
    trials = int(config.get("trials", 3))
    base = int(config.get("seed", 42))
    spec = importlib.util.spec_from_file_location("leap_problem", os.path.join(os.getcwd(), "problem.py"))
    problem = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(problem)
    with open("inputs.bin", "wb") as fin, open("expected.bin", "wb") as fexp:
        fin.write(b"LKBIN001" + struct.pack("<I", trials))
        fexp.write(b"LKBEXP01" + struct.pack("<I", trials))
        for trial in range(trials):
            seed = base + trial
            torch.manual_seed(seed)
            init = list(problem.get_init_inputs())
            torch.manual_seed(seed)
            inputs = list(problem.get_inputs())
            fin.write(struct.pack("<Q", seed))
            _leap_encode(fin.write, init)
            _leap_encode(fin.write, inputs)
            torch.manual_seed(seed)
            model = problem.Model(*init).to(device)
            with torch.no_grad():
                out = model(*[x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs])
            if device.type == "cuda":
                torch.cuda.synchronize()
            _leap_encode(fexp.write, _leap_flat(out))
        fin.write(b"LKBEND!!")
        fexp.write(b"LKBEND!!")


_leap_main()
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
)PY";
  return source;
}

const std::string& kernelbench_candidate_source() {
  static const std::string source =
      std::string(
          R"PY(# LEAP KernelBench candidate runner (generated; solution.py holds the candidate's ModelNew).
import importlib.util
import json
import os
import re
import sys
import traceback

_leap_status_path = os.path.join(os.getcwd(), ".leap_status")


def _leap_finish(res):
    data = json.dumps(res).encode()
    fd = os.open(_leap_status_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, data)
    os.close(fd)


def _leap_frames(exc):
    keep = []
    for f in traceback.extract_tb(exc.__traceback__):
        name = os.path.basename(f.filename)
        if name == "solution.py":
            keep.append({"file": name, "line": f.lineno, "function": f.name, "code": (f.line or "").strip()})
    return keep


# A syntax error is reported before the slow torch import.
try:
    with open(os.path.join(os.getcwd(), "solution.py")) as _f:
        compile(_f.read(), "solution.py", "exec")
except SyntaxError as e:
    _leap_finish({"status": "syntax_error", "line": e.lineno or 0, "message": str(e.msg), "code": (e.text or "").rstrip()})
    os._exit(0)

import torch
)PY") +
      k_codec + R"PY(

# Kernels of PyTorch's own libraries that are not launched inside an aten op: cuBLAS, cuDNN,
# CUTLASS, copies, and Triton kernels that torch.compile (inductor) generates.
_LEAP_LIBRARY_KERNEL = re.compile(
    r"^(void )?(at::|c10::|cutlass|cublas|cudnn|nvjet|cub::|internal::gemvx|gemv2|gemvx|splitKreduce|"
    r"sm\d+_xmma|ampere_|volta_|turing_|hopper_|Memcpy|Memset|triton_(poi|per|red|tem|for)_)|xmma_gemm")


def _leap_cuda_kernels(prof):
    """Names of the CUDA kernels launched outside every PyTorch operator (own) and inside one (other)."""
    from torch.autograd import DeviceType
    events = prof.events()
    under_op = {}
    for fe in events:
        if fe.device_type == DeviceType.CPU and fe.name.startswith(("aten::", "prim::", "cudnn", "c10d::", "inductor")):
            for k in getattr(fe, "kernels", []):
                under_op[k.name] = under_op.get(k.name, 0) + 1
    own, other = [], []
    for fe in events:
        if fe.device_type != DeviceType.CUDA:
            continue
        if under_op.get(fe.name, 0) > 0:
            under_op[fe.name] -= 1
            other.append(fe.name)
        elif _LEAP_LIBRARY_KERNEL.search(fe.name):
            other.append(fe.name)
        else:
            own.append(fe.name)
    return own, other


def _leap_own_module(obj, cwd):
    """True when obj is a function of a native extension module loaded from the candidate's folder."""
    mod = getattr(obj, "__self__", None)
    if not isinstance(mod, type(sys)):
        mod = sys.modules.get(getattr(obj, "__module__", None) or "")
    path = getattr(mod, "__file__", None) or ""
    if not path.endswith(".so"):
        return False
    path = os.path.realpath(path)
    return any(path.startswith(root + os.sep) for root in cwd)


def _leap_main():
    config = json.loads(sys.stdin.readline() or "{}")
    device = torch.device(config.get("device", "cpu"))
    require_own = config.get("own_kernel") == "require"
    if device.type == "cuda" and not torch.cuda.is_available():
        _leap_finish({"status": "error", "type": "RuntimeError", "frames": [],
                      "message": "torch sees no CUDA device in this process (did your code hide it?)"})
        return
    with open("inputs.bin", "rb") as f:
        buf = f.read()
    (trials,) = struct.unpack_from("<I", buf, 8)
    pos = 12
    cases = []
    for _ in range(trials):
        (seed,) = struct.unpack_from("<Q", buf, pos)
        init, pos = _leap_decode(buf, pos + 8)
        inputs, pos = _leap_decode(buf, pos)
        cases.append((seed, init, inputs))
    del buf
    sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.spec_from_file_location("solution", os.path.join(os.getcwd(), "solution.py"))
        candidate = importlib.util.module_from_spec(spec)
        sys.modules["solution"] = candidate
        spec.loader.exec_module(candidate)
        model_new = getattr(candidate, "ModelNew")
    except SyntaxError as e:
        _leap_finish({"status": "syntax_error", "line": e.lineno or 0, "message": str(e.msg),
                      "code": (e.text or "").rstrip()})
        return
    except BaseException as e:
        _leap_finish({"status": "import_error", "type": type(e).__name__, "message": str(e)[:2000],
                      "frames": _leap_frames(e)})
        return
    # The candidate's own folders: its working directory, HOME and TMPDIR (load_inline builds below HOME).
    cwd = [os.path.realpath(p) for p in (os.getcwd(), os.environ.get("HOME", "/nonexistent"),
                                         os.environ.get("TMPDIR", "/nonexistent"))]
    own_report = []
    out = open("out.bin", "wb")
    out.write(b"LKBOUT01" + struct.pack("<I", trials))
    trial = 0
    try:
        for trial, (seed, init, inputs) in enumerate(cases):
            torch.manual_seed(seed)
            model = model_new(*init).to(device)
            args = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
            if require_own and device.type == "cuda":
                from torch.profiler import ProfilerActivity, profile
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    with torch.no_grad():
                        got = model(*args)
                    torch.cuda.synchronize()
                own, other = _leap_cuda_kernels(prof)
                own_report.append({"trial": trial, "own": own[:20], "other": sorted(set(other))[:20]})
            elif require_own:
                calls = []

                def hook(frame, event, arg):
                    if event == "c_call" and _leap_own_module(arg, cwd):
                        calls.append(getattr(arg, "__qualname__", "?"))

                sys.setprofile(hook)
                try:
                    with torch.no_grad():
                        got = model(*args)
                finally:
                    sys.setprofile(None)
                own_report.append({"trial": trial, "own": sorted(set(calls))[:20], "other": []})
            else:
                with torch.no_grad():
                    got = model(*args)
                if device.type == "cuda":
                    torch.cuda.synchronize()
            out.write(struct.pack("<Q", seed))
            _leap_encode(out.write, _leap_flat(got))
            _leap_encode(out.write, list(args))
        out.write(b"LKBEND!!")
        out.close()
    except BaseException as e:
        _leap_finish({"status": "error", "type": type(e).__name__, "message": str(e)[:2000], "frames": _leap_frames(e),
                      "trial": trial})
        return
    _leap_finish({"status": "ok", "device": device.type, "own_kernel": "require" if require_own else "off",
                  "own": own_report})


_leap_main()
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
)PY";
  return source;
}

namespace {

constexpr int k_max_depth = 32;

std::size_t element_size(const std::string& dtype) {
  if (dtype == "float32" || dtype == "int32") {
    return 4;
  }
  if (dtype == "float64" || dtype == "int64") {
    return 8;
  }
  if (dtype == "float16" || dtype == "bfloat16" || dtype == "int16") {
    return 2;
  }
  if (dtype == "int8" || dtype == "uint8" || dtype == "bool") {
    return 1;
  }
  return 0;
}

double half_to_double(std::uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = std::ldexp(man, -24);
  } else if (exp == 31) {
    v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    v = std::ldexp(man + 1024, exp - 25);
  }
  return sign ? -v : v;
}

// Element i of a tensor value whose dtype element_size() knows, as a double.
double element(const kb_value& v, std::size_t i) {
  const char* p = v.data.data();
  const std::string& d = v.dtype;
  auto load = [&](auto zero) {
    decltype(zero) x;
    std::memcpy(&x, p + i * sizeof x, sizeof x);
    return x;
  };
  if (d == "float32") {
    return load(float{});
  }
  if (d == "float64") {
    return load(double{});
  }
  if (d == "float16") {
    return half_to_double(load(std::uint16_t{}));
  }
  if (d == "bfloat16") {
    const std::uint32_t bits = static_cast<std::uint32_t>(load(std::uint16_t{})) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  if (d == "int64") {
    return static_cast<double>(load(std::int64_t{}));
  }
  if (d == "int32") {
    return load(std::int32_t{});
  }
  if (d == "int16") {
    return load(std::int16_t{});
  }
  if (d == "int8") {
    return load(std::int8_t{});
  }
  if (d == "uint8") {
    return load(std::uint8_t{});
  }
  if (d == "bool") {
    return load(std::uint8_t{}) != 0 ? 1.0 : 0.0;
  }
  return 0;
}

struct reader {
  const std::string& bytes;
  std::size_t pos = 0;

  bool need(std::size_t n) const { return n <= bytes.size() - pos; }
  template <class T>
  bool take(T* out) {
    if (!need(sizeof(T))) {
      return false;
    }
    std::memcpy(out, bytes.data() + pos, sizeof(T));
    pos += sizeof(T);
    return true;
  }
  bool text(std::size_t n, std::string_view* out) {
    if (!need(n)) {
      return false;
    }
    *out = std::string_view(bytes).substr(pos, n);
    pos += n;
    return true;
  }

  status value(kb_value* v, int depth) {
    const error truncated{"truncated or malformed value at byte " + std::to_string(pos)};
    if (depth > k_max_depth) {
      return error{"values nested deeper than " + std::to_string(k_max_depth)};
    }
    char tag = 0;
    if (!take(&tag)) {
      return truncated;
    }
    v->tag = tag;
    switch (tag) {
      case 'T': {
        std::uint8_t n = 0;
        std::string_view name;
        std::uint32_t ndim = 0;
        if (!take(&n) || !text(n, &name) || !take(&ndim)) {
          return truncated;
        }
        v->dtype = std::string(name);
        if (ndim > 64 || !need(8ULL * ndim)) {
          return truncated;
        }
        std::uint64_t numel = 1;
        bool zero = false, huge = false;
        for (std::uint32_t d = 0; d < ndim; ++d) {
          std::int64_t dim = 0;
          take(&dim);
          if (dim < 0) {
            return truncated;
          }
          v->shape.push_back(dim);
          if (dim == 0) {
            zero = true;
          }
          if (dim != 0 && numel > bytes.size() / static_cast<std::uint64_t>(dim)) {
            huge = true;  // more elements than bytes
          }
          if (!huge) {
            numel *= static_cast<std::uint64_t>(dim == 0 ? 1 : dim);
          }
        }
        if (zero) {
          numel = 0;
        }
        std::uint64_t nbytes = 0;
        if (!take(&nbytes) || !need(nbytes)) {
          return truncated;
        }
        const std::size_t size = element_size(v->dtype);
        if (size != 0 && ((huge && !zero) || numel * size != nbytes)) {
          return error{"tensor of " + v->dtype + " holds " + std::to_string(nbytes) +
                       " bytes, not its shape's"};
        }
        text(nbytes, &v->data);
        return ok_status();
      }
      case 'B': {
        std::uint8_t b = 0;
        if (!take(&b)) {
          return truncated;
        }
        v->integer = b != 0;
        return ok_status();
      }
      case 'I':
        return take(&v->integer) ? ok_status() : status{truncated};
      case 'F':
        return take(&v->real) ? ok_status() : status{truncated};
      case 'N':
        return ok_status();
      case 'S':
      case 'O': {
        std::uint32_t n = 0;
        if (!take(&n) || !text(n, &v->data)) {
          return truncated;
        }
        return ok_status();
      }
      case 'L':
      case 'U': {
        std::uint32_t n = 0;
        if (!take(&n) || !need(n)) {
          return truncated;  // every item takes at least one byte
        }
        v->items.resize(n);
        for (auto& item : v->items) {
          if (auto s = value(&item, depth + 1); !s) {
            return s;
          }
        }
        return ok_status();
      }
      default:
        return error{"unknown value tag at byte " + std::to_string(pos - 1)};
    }
  }
};

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return out + "]";
}

std::string type_name(const kb_value& v) {
  switch (v.tag) {
    case 'T':
      return "tensor";
    case 'I':
      return "int";
    case 'F':
      return "float";
    case 'B':
      return "bool";
    case 'N':
      return "None";
    case 'S':
      return "str";
    case 'L':
      return "list";
    case 'U':
      return "tuple";
    default:
      return std::string(v.data.substr(0, 100));
  }
}

std::string repr(const kb_value& v) {
  char buf[64];
  switch (v.tag) {
    case 'I':
      return std::to_string(v.integer);
    case 'F':
      std::snprintf(buf, sizeof buf, "%.17g", v.real);
      return buf;
    case 'B':
      return v.integer ? "True" : "False";
    case 'N':
      return "None";
    case 'S':
      return "'" + std::string(v.data.substr(0, 100)) + "'";
    default:
      return type_name(v);
  }
}

bool numeric(const kb_value& v) { return v.tag == 'I' || v.tag == 'F' || v.tag == 'B'; }
double number_of(const kb_value& v) {
  return v.tag == 'F' ? v.real : static_cast<double>(v.integer);
}

// A JSON number, or a string for NaN and infinities (JSON has none).
nlohmann::json json_number(double x) {
  if (std::isfinite(x)) {
    return x;
  }
  return std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
}

std::optional<nlohmann::json> compare_outputs(const kb_value& expected, const kb_value& got,
                                              int trial, const kb_tolerances& tol) {
  auto mismatch = [&](std::string what) {
    return nlohmann::json{{"status", "mismatch"}, {"trial", trial}, {"what", std::move(what)}};
  };
  if (got.tag != 'L' || got.items.size() != expected.items.size()) {
    auto j = mismatch("number of outputs");
    j["expected_shape"] = std::to_string(expected.items.size());
    j["got_shape"] = got.tag == 'L' ? std::to_string(got.items.size()) : type_name(got);
    return j;
  }
  for (std::size_t i = 0; i < expected.items.size(); ++i) {
    const kb_value& e = expected.items[i];
    const kb_value& g = got.items[i];
    const std::string what = "output " + std::to_string(i);
    if (e.tag != 'T') {
      const bool same =
          numeric(e) ? numeric(g) && number_of(e) == number_of(g)
                     : e.tag == g.tag && e.data == g.data && e.items.empty() && g.items.empty();
      if (!same) {
        auto j = mismatch(what);
        j["expected"] = repr(e);
        j["got"] = repr(g);
        return j;
      }
      continue;
    }
    if (g.tag != 'T' || g.shape != e.shape) {
      auto j = mismatch(what);
      j["expected_shape"] = shape_text(e.shape);
      j["got_shape"] = g.tag == 'T' ? shape_text(g.shape) : type_name(g);
      return j;
    }
    if (g.dtype != e.dtype || element_size(e.dtype) == 0) {
      // Lower precision than the reference's (or another type) is a different result, whatever the
      // tolerance would say about its values.
      auto j = mismatch(what);
      j["expected_dtype"] = e.dtype;
      j["got_dtype"] = g.dtype;
      return j;
    }
    auto it = tol.per_dtype.find(e.dtype);
    const auto [atol, rtol] = it != tol.per_dtype.end() ? it->second : std::pair{1e-2, 1e-2};
    const std::size_t n = e.data.size() / element_size(e.dtype);
    std::size_t bad = 0, worst = 0, worst_any = 0;
    double worst_excess = -1, max_diff = -1, max_abs = 0, max_rel = 0, diff2 = 0, norm2 = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const double x = element(e, k), y = element(g, k);
      double diff;
      bool ok;
      if (std::isnan(x) || std::isnan(y)) {
        ok = std::isnan(x) && std::isnan(y);
        diff = ok ? 0 : std::numeric_limits<double>::infinity();
      } else if (std::isinf(x) || std::isinf(y)) {
        ok = x == y;
        diff = ok ? 0 : std::numeric_limits<double>::infinity();
      } else {
        diff = std::fabs(y - x);
        ok = diff <= atol + rtol * std::fabs(x);
        diff2 += diff * diff;
        norm2 += x * x;
      }
      if (diff > max_diff) {
        max_diff = diff;
        worst_any = k;
      }
      max_abs = std::max(max_abs, diff);
      if (diff > 0) {
        max_rel = std::max(max_rel, diff / std::max(std::fabs(x), 1e-12));
      }
      if (!ok) {
        ++bad;
        const double excess = diff - (atol + rtol * std::fabs(x));
        if (excess > worst_excess) {
          worst_excess = excess;
          worst = k;
        }
      }
    }
    const double rel_l2 = norm2 > 0 ? std::sqrt(diff2) / std::sqrt(norm2) : 0.0;
    if (bad > 0 || rel_l2 > tol.max_relative_l2) {
      const std::size_t index = bad > 0 ? worst : worst_any;
      auto j = mismatch(what);
      j["shape"] = shape_text(e.shape);
      j["bad"] = bad;
      j["total"] = n;
      j["max_abs"] = json_number(max_abs);
      j["max_rel"] = json_number(max_rel);
      j["rel_l2"] = rel_l2;
      j["index"] = index;
      j["expected"] = json_number(element(e, index));
      j["got"] = json_number(element(g, index));
      j["atol"] = atol;
      j["rtol"] = rtol;
      return j;
    }
  }
  return std::nullopt;
}

// Inputs must come back bit for bit (NaN payloads included): a held copy against what the call
// left.
bool same_value(const kb_value& a, const kb_value& b) {
  if (a.tag != b.tag || a.dtype != b.dtype || a.shape != b.shape || a.data != b.data ||
      a.integer != b.integer ||
      std::bit_cast<std::uint64_t>(a.real) != std::bit_cast<std::uint64_t>(b.real) ||
      a.items.size() != b.items.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.items.size(); ++i) {
    if (!same_value(a.items[i], b.items[i])) {
      return false;
    }
  }
  return true;
}

}  // namespace

result<kb_data> parse_kb_file(std::shared_ptr<const std::string> bytes, kb_file kind) {
  const char* magic = kind == kb_file::inputs     ? "LKBIN001"
                      : kind == kb_file::expected ? "LKBEXP01"
                                                  : "LKBOUT01";
  kb_data out;
  out.bytes = std::move(bytes);
  reader r{*out.bytes};
  const error truncated{"the file is incomplete (its writer stopped before finishing)"};
  std::uint32_t trials = 0;
  if (out.bytes->compare(0, 8, magic) != 0) {
    return truncated;
  }
  r.pos = 8;
  if (!r.take(&trials) || trials > 1'000'000) {
    return truncated;
  }
  for (std::uint32_t t = 0; t < trials; ++t) {
    kb_trial trial;
    if (kind != kb_file::expected && !r.take(&trial.seed)) {
      return truncated;
    }
    status s = r.value(kind == kb_file::inputs ? &trial.init : &trial.outputs, 0);
    if (s && kind != kb_file::expected) {
      s = r.value(&trial.inputs, 0);
    }
    if (!s) {
      return s.err().wrap("trial " + std::to_string(t));
    }
    out.trials.push_back(std::move(trial));
  }
  if (out.bytes->compare(r.pos, std::string::npos, "LKBEND!!") != 0) {
    return truncated;
  }
  return out;
}

kb_tolerances kb_tolerances_for(const task& t) {
  kb_tolerances tol;
  tol.per_dtype = {{"float32", {1e-2, 1e-2}},
                   {"float16", {1e-2, 1e-2}},
                   {"bfloat16", {2e-2, 2e-2}},
                   {"float64", {1e-5, 1e-5}}};
  if (t.tol) {
    tol.per_dtype["float32"] = {t.tol->atol, t.tol->rtol};
    tol.per_dtype["float64"] = {t.tol->atol, t.tol->rtol};
    tol.max_relative_l2 = t.tol->max_relative_l2;
  }
  return tol;
}

std::optional<nlohmann::json> judge_kernelbench(const kb_data& inputs, const kb_data& expected,
                                                const kb_data& got, const kb_tolerances& tol) {
  const int trials = static_cast<int>(expected.trials.size());
  if (got.trials.size() != expected.trials.size() ||
      inputs.trials.size() != expected.trials.size()) {
    return nlohmann::json{{"status", "incomplete"}};
  }
  for (int t = 0; t < trials; ++t) {
    const kb_trial& held = inputs.trials[t];
    const kb_trial& mine = got.trials[t];
    if (mine.seed != held.seed) {
      return nlohmann::json{{"status", "incomplete"}};
    }
    auto m = compare_outputs(expected.trials[t].outputs, mine.outputs, t, tol);
    if (m) {
      (*m)["trials"] = trials;
      return m;
    }
    const auto& before = held.inputs.items;
    const auto& after = mine.inputs.items;
    for (std::size_t i = 0; i < before.size(); ++i) {
      if (i >= after.size() || !same_value(before[i], after[i])) {
        return nlohmann::json{
            {"status", "modified_input"}, {"trial", t}, {"trials", trials}, {"input", i}};
      }
    }
  }
  return std::nullopt;
}

}  // namespace leap::sandbox
