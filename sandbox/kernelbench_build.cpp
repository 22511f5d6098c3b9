// KernelBench candidates' extension builds in the compile pool: the recorder and builder programs,
// and the checks that decide which recorded builds the engine may run and cache (kernelbench.hpp).
#include "sandbox/kernelbench.hpp"

#include <cstring>
#include <regex>

namespace leap::sandbox {
namespace {

// The identity of one load_inline call, shared by the recorder and the runner so that both name a
// build the same way: its arguments by name with the defaults filled in, less those that only say
// where or how loudly to build.
const char* k_extension_id = R"PY(
def _leap_extension_args(original, args, kwargs):
    import inspect
    bound = inspect.signature(original).bind(*args, **kwargs)
    bound.apply_defaults()
    return {k: v for k, v in bound.arguments.items()
            if k not in ("build_directory", "verbose", "keep_intermediates")}


def _leap_extension_id(request):
    import hashlib
    text = json.dumps(request, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
)PY";

}  // namespace

const std::string& kernelbench_extension_id_source() {
  static const std::string source = k_extension_id;
  return source;
}

const std::string& kernelbench_recorder_source() {
  static const std::string source =
      std::string(
          R"PY(# LEAP KernelBench build recorder (generated). Runs in the compile pool with no GPU: imports
# solution.py with torch's load_inline replaced by a recorder, so that the engine can build each
# extension in a process that runs none of the candidate's code. Records what was asked; builds
# nothing and never runs the candidate's model.
import importlib.util
import json
import os
import struct
import sys

_leap_record = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)


def _leap_write(status):
    text = json.dumps(status).encode()
    _leap_record.write(b"LKBREC01" + struct.pack("<I", len(text)) + text)
    _leap_record.flush()
    sys.stderr.flush()
    os._exit(0)

)PY") +
      k_extension_id +
      R"PY(

_leap_requests = []
_leap_other = []


class _LeapPending:
    """Stands for a module that is built after the import."""

    def __getattr__(self, name):
        return _LeapPending()

    def __call__(self, *args, **kwargs):
        raise RuntimeError("the extension is built after the import: it cannot run during it")


try:
    import torch.utils.cpp_extension as _leap_ext
except BaseException as e:
    _leap_write({"status": "import_failed", "message": "torch: " + str(e)[:500], "extensions": [], "other": []})
_leap_original = _leap_ext.load_inline


def _leap_record_inline(*args, **kwargs):
    try:
        request = _leap_extension_args(_leap_original, args, kwargs)
        _leap_requests.append({"id": _leap_extension_id(request), "args": request})
    except Exception as e:
        _leap_other.append("load_inline with arguments the recorder cannot name (" + type(e).__name__ + ")")
    return _LeapPending()


def _leap_record_load(*args, **kwargs):
    _leap_other.append("torch.utils.cpp_extension.load (from files)")
    return _LeapPending()


_leap_ext.load_inline = _leap_record_inline
_leap_ext.load = _leap_record_load
sys.path.insert(0, os.getcwd())
try:
    spec = importlib.util.spec_from_file_location("solution", os.path.join(os.getcwd(), "solution.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["solution"] = module
    spec.loader.exec_module(module)
except BaseException as e:
    _leap_write({"status": "import_failed", "message": (type(e).__name__ + ": " + str(e))[:1000],
                 "extensions": _leap_requests, "other": _leap_other})
_leap_write({"status": "ok", "extensions": _leap_requests, "other": _leap_other})
)PY";
  return source;
}

const std::string& kernelbench_builder_source() {
  static const std::string source =
      R"PY(# LEAP KernelBench extension builder (generated). Builds one load_inline request (request.json)
# into ext.so with torch's own build (ninja, the host compiler, nvcc), in the compile pool with no
# GPU. Loads nothing it built: a module's static initialisers are the candidate's code, and none of
# it runs here, so what the engine caches is what the compilers made of the request.
# pch.json, when present, names the engine's precompiled torch header ({"header": path}, the .gch
# beside it): g++ is told to include it first, and a build that g++ refuses it for (asked of a file
# of the builder's own, never read from the answer's compile output) is made again without it.
# CUDA sources are first compiled against a narrow stand-in for torch/types.h (what load_inline
# puts first in every CUDA source, and what the stand-in for torch/extension.h gives nvcc): torch's
# Tensor with its methods and operators, the dispatch macros, torch's factory functions and
# torch/types.h's own names, each operator's header alone (AT_PER_OPERATOR_HEADERS) instead of all
# of them: nvcc's three passes over torch's headers are most of a cold build's time. A build that
# fails with it, for any reason, is made again with torch's types (when a CUDA source includes
# torch/extension.h: the stand-in that gives nvcc torch/types.h only; the C++ frontend and the
# Python bindings of the real header are about half of nvcc's time over a .cu) and, when that
# fails with an error of a missing name, with the real header. g++ always reads the real headers
# (the stand-ins are on nvcc's include path only). Only a failure of the last build tried is the
# answer's. Its stderr says which ("LEAP_PCH used|refused: why|absent: why", "LEAP_SLIM <stand-in>
# used|<stand-in> failed after S s: why; ...", each with its mark after LEAP_)
# and what each part of the build cost ("LEAP_BUILD_MS" from ninja's log).
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import torch.utils.cpp_extension as ext

ext._import_module_from_library = lambda *args, **kwargs: None
# This builder's own lines carry a mark that only the engine and it know (the compilers never see
# it): the build's log before them is the answer's to write (#pragma message, #warning).
MARK = "LEAP_" + os.environ.pop("LEAP_BUILDER_MARK", "") + "_"


def note(text):
    print(MARK + text, file=sys.stderr)


with open("request.json") as f:
    args = json.load(f)
header = None
if os.path.exists("pch.json"):
    with open("pch.json") as f:
        header = json.load(f)["header"]


SLIM_HEADER = """#pragma once
#ifdef __CUDACC__
#include <torch/types.h>
#else
#include_next <torch/extension.h>
#endif
"""
# torch/types.h's own names (torch::Tensor, kFloat32, ...) after the narrow set of its includes;
# its body is copied from the installed torch, so the names are that torch's.
NARROW_INCLUDES = """#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/TensorOperators.h>
#include <torch/csrc/autograd/generated/variable_factories.h>
"""
STAND_INS = {"narrow": "torch's tensor and factories", "types": "torch's types"}


# The functions the narrow set declares besides torch's factories and their operators: the
# TensorOptions helpers (torch::dtype(...), ...).
NARROW_HELPERS = {"dtype", "layout", "device", "device_index", "requires_grad", "memory_format",
                  "pinned_memory"}
# Namespaces under torch:: or at:: that a CUDA source may name with the narrow set: at::cuda is
# the source's own include (ATen/cuda/CUDAContext.h and the like), whichever set torch's is.
NARROW_NAMESPACES = {"cuda"}


def torch_header(relative):
    """The path of one of the installed torch's headers; None when there is none."""
    for folder in ext.include_paths():
        path = os.path.join(folder, relative)
        if os.path.exists(path):
            return path
    return None


def narrow_lacks(sources):
    """A function or namespace the CUDA sources name (torch::relu, at::nn::...) that the narrow
    set does not declare, so that a build with it would fail; None when it may do. Read from the
    text only: a name it misses (after `using namespace torch;`) costs a failed build, a name in a
    comment a build with torch's types; neither changes what the answer means."""
    factories = torch_header(os.path.join("torch", "csrc", "autograd", "generated", "variable_factories.h"))
    if factories is None:
        return None
    with open(factories, errors="replace") as f:
        text = f.read()
    known = NARROW_HELPERS | set(re.findall(r"#include <ATen/ops/(\w+)\.h>", text)) | \
        set(re.findall(r"inline at::Tensor (\w+)\(", text))
    if isinstance(sources, str):
        sources = [sources]
    for source in sources or []:
        for match in re.finditer(r"\b(?:torch|at)::([a-z_][a-z0-9_]*)\s*(\(|::)", source):
            name, after = match.group(1), match.group(2)
            if (after == "(" and name not in known) or (after == "::" and name not in NARROW_NAMESPACES):
                return match.group(0).rstrip("(:").strip()
    return None


def narrow_types_header():
    """The narrow torch/types.h for nvcc (g++ passes on to the real one); None without one."""
    path = torch_header(os.path.join("torch", "types.h"))
    if path is None:
        return None
    with open(path, errors="replace") as f:
        body = [line for line in f.read().splitlines()
                if not line.lstrip().startswith(("#include", "#pragma once"))]
    return ("#pragma once\n#ifndef __CUDACC__\n#include_next <torch/types.h>\n#else\n" +
            NARROW_INCLUDES + "\n".join(body) + "\n#endif\n")
# What a compiler says when a name the real header would have declared is missing (g++ and nvcc's
# front end); any other failure is the source's own, and the same with the real header.
MISSING_NAME = re.compile(r"is undefined|has no member|was not declared|is not a member of|"
                          r"incomplete type|must be a class or namespace|does not name a|"
                          r"not a template|no instance of|no matching function|is not a type name|"
                          r"expected a type specifier")


def includes_extension_header(sources):
    if isinstance(sources, str):
        sources = [sources]
    return any("torch/extension.h" in s for s in sources or [])


def build(pch, stand_in):
    """Builds with torch's precompiled header (pch) and a stand-in ("narrow", "types" or None)."""
    global build_seconds
    started = time.monotonic()
    # The build folder stays from one attempt to the next: ninja builds again only what the changed
    # flags touch, so a C++ source's object (the stand-ins are nvcc's alone) is built once.
    os.makedirs("build", exist_ok=True)
    request = dict(args)
    extra = ["-include", header, "-Winvalid-pch"] if pch else []
    request["extra_cflags"] = list(request.get("extra_cflags") or []) + extra
    if stand_in is not None:
        folder = os.path.abspath(stand_in)
        os.makedirs(os.path.join(folder, "torch"), exist_ok=True)
        with open(os.path.join(folder, "torch", "extension.h"), "w") as f:
            f.write(SLIM_HEADER)
        flags = ["-I" + folder]
        if stand_in == "narrow":
            with open(os.path.join(folder, "torch", "types.h"), "w") as f:
                f.write(narrow)
            flags.append("-DAT_PER_OPERATOR_HEADERS")
        # After the source on nvcc's line, and searched before torch's folders (-isystem there).
        request["extra_cuda_cflags"] = list(request.get("extra_cuda_cflags") or []) + flags
    request["build_directory"] = os.path.abspath("build")
    request["verbose"] = True
    # A second build of the same name in this process would otherwise be named NAME_v1 by torch's
    # versioning (another module name than the run imports).
    versioner = getattr(ext, "JIT_EXTENSION_VERSIONER", None)
    if versioner is not None and isinstance(getattr(versioner, "entries", None), dict):
        versioner.entries.pop(args["name"], None)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    failure = None
    with open("build.log", "wb") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            ext.load_inline(**request)
        except BaseException as e:
            failure = e
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
    with open("build.log", errors="replace") as f:
        text = f.read()
    sys.stderr.write(text)
    build_seconds = time.monotonic() - started
    return failure, text


def about_pch(text):
    return [line for line in text.splitlines() if ".gch" in line or "PCH" in line]


def pch_refusal():
    """Why g++ refuses the header for this build's flags, None when it takes it. Asked of a file of
    the builder's own: the answer's compile output may quote anything, ".gch" and "PCH" included."""
    values = {}
    try:
        with open(os.path.join("build", "build.ninja")) as f:
            for line in f:
                key, sep, value = line.partition(" = ")
                if sep and key in ("cxx", "cflags", "post_cflags"):
                    values[key] = value.strip()
    except OSError as e:
        return "the build file is gone: " + str(e)
    with open("pch_probe.cpp", "w") as f:
        f.write("int leap_pch_probe;\n")
    command = shlex.split(values.get("cxx", "c++")) + shlex.split(values.get("cflags", "")) + \
        ["-Werror=invalid-pch", "-fsyntax-only", "pch_probe.cpp"] + shlex.split(values.get("post_cflags", ""))
    r = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    if r.returncode == 0:
        return None
    lines = about_pch(r.stdout) or r.stdout.strip().splitlines() or ["exit %d" % r.returncode]
    return lines[0].replace(os.path.dirname(header) + "/", "")[-300:]


narrow = narrow_types_header() if args.get("cuda_sources") else None
lacks = narrow_lacks(args.get("cuda_sources")) if narrow is not None else None
# The stand-ins to try, narrowest first; the real headers after the last.
stand_ins = ([] if narrow is None or lacks is not None else ["narrow"]) + \
    (["types"] if includes_extension_header(args.get("cuda_sources")) else [])
pch = header is not None and os.path.exists(header + ".gch")
if header is not None and not pch:
    note("PCH absent: the precompiled header is not visible to the builder")
said = [] if lacks is None else ["%s not tried: the CUDA sources name %s, which it lacks" %
                                  (STAND_INS["narrow"], lacks)]
for i, stand_in in enumerate(stand_ins + [None]):
    failure, text = build(pch, stand_in)
    if pch:
        why = pch_refusal() if about_pch(text) else None
        if why is not None:
            note("PCH refused: " + why)
            if failure is not None:
                pch = False
                failure, text = build(pch, stand_in)
        elif i == 0:
            note("PCH used")
    if stand_in is None:
        said.append("the real header used")
        break
    errors = [line.strip() for line in text.splitlines() if "error" in line]
    if stand_in == "types" and failure is not None:
        # Only a name the real header would add sends the build on: any other error is the
        # answer's own, as the real header gives it.
        missing = next((line for line in errors if MISSING_NAME.search(line)), None)
        if missing is not None:
            said.append("%s failed after %.1f s: %s" % (STAND_INS[stand_in], build_seconds, missing[-120:]))
            continue
    if failure is None or stand_in == "types":
        said.append(STAND_INS[stand_in] + " used")
        break
    said.append("%s failed after %.1f s: %s" % (STAND_INS[stand_in], build_seconds,
                                                 (errors or ["exit status not 0"])[0][-120:]))
if lacks is not None or stand_ins:
    note("SLIM " + "; ".join(said))
try:
    with open(os.path.join("build", ".ninja_log")) as f:
        parts = {}
        for line in f.read().splitlines()[1:]:
            start, end, _, output = line.split("\t")[:4]
            parts[output] = int(end) - int(start)
    note("BUILD_MS " + " ".join(k + "=" + str(v) for k, v in sorted(parts.items())))
except (OSError, ValueError):
    pass
if failure is not None:
    raise failure
shutil.copyfile(os.path.join("build", args["name"] + ".so"), "ext.so")
)PY";
  return source;
}

const std::string& kernelbench_pch_source() {
  static const std::string source =
      R"PY(# LEAP KernelBench precompiled header builder (generated). request.json: {"extra_cflags",
# "with_cuda"}, the flags of the load_inline builds it serves. Asks torch's load_inline for the
# build file it would write for them (running nothing), then compiles torch/extension.h with its
# C++ compiler and flags, less the extension's name (a macro the header does not use, different in
# every build), into leap_torch.h.gch beside leap_torch.h.
import json
import os
import shlex
import subprocess
import sys

import torch.utils.cpp_extension as ext

with open("request.json") as f:
    request = json.load(f)
ext._run_ninja_build = lambda *args, **kwargs: None
ext._import_module_from_library = lambda *args, **kwargs: None
os.makedirs("build", exist_ok=True)
ext.load_inline(name="leap_pch", cpp_sources="", cuda_sources="" if request["with_cuda"] else None,
                functions=None, extra_cflags=request["extra_cflags"] or None,
                with_cuda=request["with_cuda"], build_directory=os.path.abspath("build"), verbose=True)
values = {}
with open(os.path.join("build", "build.ninja")) as f:
    for line in f:
        key, sep, value = line.partition(" = ")
        if sep and key in ("cxx", "cflags", "post_cflags"):
            values[key] = value.strip()
flags = [f for f in shlex.split(values.get("cflags", "")) if not f.startswith("-DTORCH_EXTENSION_NAME=")]
with open("leap_torch.h", "w") as f:
    f.write("#include <torch/extension.h>\n")
command = shlex.split(values.get("cxx", "c++")) + ["-x", "c++-header"] + flags + \
    ["leap_torch.h", "-o", "leap_torch.h.gch"] + shlex.split(values.get("post_cflags", ""))
print(" ".join(command), file=sys.stderr)
sys.exit(subprocess.run(command).returncode)
)PY";
  return source;
}

namespace {

bool all_strings(const nlohmann::json& v, bool allow_single) {
  if (v.is_null()) {
    return true;
  }
  if (v.is_string()) {
    return allow_single;
  }
  if (!v.is_array()) {
    return false;
  }
  for (const auto& x : v) {
    if (!x.is_string()) {
      return false;
    }
  }
  return true;
}

// The flags a build in the compile pool may carry: optimisation, language and warning switches,
// macros, nvcc's code-generation switches and system libraries. Anything else (paths, plugins,
// wrappers, linker scripts) would let a request reach files or programs of the engine's choice
// being made by the candidate, so such a build stays in the candidate's own run.
bool allowed_flag(const std::string& flag) {
  static const std::regex allowed(
      R"(|-O[0-3s]?|-g|-w|-v|-lineinfo|-std=[a-z0-9+]+|-D[A-Za-z_][A-Za-z0-9_]*(=[A-Za-z0-9_.+-]*)?)"
      R"(|-U[A-Za-z_][A-Za-z0-9_]*|-W[A-Za-z0-9_-]+|-f[a-z0-9-]+|-march=native|-m[a-z0-9-]+)"
      R"(|--?use_fast_math|--expt-relaxed-constexpr|--expt-extended-lambda|-Xptxas|-Xcompiler)"
      R"(|-Xptxas=[-A-Za-z0-9_,.=]+|--ptxas-options=[-A-Za-z0-9_,.=]+|--?maxrregcount=?[0-9]+)"
      R"(|-arch=sm_[0-9]+a?|-gencode=arch=compute_[0-9]+a?,code=(sm|compute)_[0-9]+a?)"
      R"(|--restrict|-res-usage|--resource-usage|-l[A-Za-z0-9_]+)");
  return flag.size() <= 200 && std::regex_match(flag, allowed);
}

bool identifier(const std::string& s) {
  static const std::regex id("[A-Za-z_][A-Za-z0-9_]{0,99}");
  return std::regex_match(s, id);
}

}  // namespace

std::optional<std::string> kb_extension_refusal(const nlohmann::json& args) {
  if (!args.is_object()) {
    return "the request is not a set of arguments";
  }
  const auto name = args.find("name");
  if (name == args.end() || !name->is_string() || !identifier(name->get<std::string>())) {
    return "its name is not a Python identifier of at most 100 characters";
  }
  for (const char* key : {"cpp_sources", "cuda_sources"}) {
    if (args.contains(key) && !all_strings(args[key], true)) {
      return std::string(key) + " is not a string or a list of strings";
    }
  }
  if (args.contains("functions")) {
    const auto& f = args["functions"];
    bool ok = f.is_null() || f.is_string() || f.is_array() || f.is_object();
    if (f.is_string() && !identifier(f.get<std::string>())) {
      ok = false;
    }
    if (f.is_array()) {
      for (const auto& x : f) {
        ok = ok && x.is_string() && identifier(x.get<std::string>());
      }
    }
    if (f.is_object()) {
      for (const auto& [k, doc] : f.items()) {
        ok = ok && identifier(k) && doc.is_string();
      }
    }
    if (!ok) {
      return "functions is not a list of identifiers (or a map of them to docstrings)";
    }
  }
  for (const char* key : {"extra_cflags", "extra_cuda_cflags", "extra_ldflags"}) {
    if (!args.contains(key)) {
      continue;
    }
    if (!all_strings(args[key], false)) {
      return std::string(key) + " is not a list of strings";
    }
    if (args[key].is_array()) {
      for (const auto& flag : args[key]) {
        if (!allowed_flag(flag.get<std::string>())) {
          return std::string(key) + " holds '" + flag.get<std::string>().substr(0, 80) +
                 "', which a build outside your run does not take";
        }
      }
    }
  }
  // Anything else must be what load_inline takes by default (no include paths, a Python module,
  // no SYCL); a key this list does not know (a newer torch's) only with its default-like value.
  for (const auto& [key, value] : args.items()) {
    static const std::vector<std::string> known{"name",         "cpp_sources",  "cuda_sources",
                                                "functions",    "extra_cflags", "extra_cuda_cflags",
                                                "extra_ldflags"};
    if (std::find(known.begin(), known.end(), key) != known.end()) {
      continue;
    }
    if (key == "extra_include_paths" && (value.is_null() || value.empty())) {
      continue;
    }
    if (key == "is_python_module") {
      if (value == true) {
        continue;
      }
      return "its argument is_python_module is not True";
    }
    if (key == "with_pytorch_error_handling" && value.is_boolean()) {
      continue;
    }
    if (key == "with_cuda" && (value.is_null() || value.is_boolean())) {
      continue;
    }
    if (value.is_null() || value == false || (value.is_array() && value.empty())) {
      continue;  // sycl_sources, extra_sycl_cflags, with_sycl, use_pch, no_implicit_headers...
    }
    return "its argument " + key + " is not one the compile pool builds with";
  }
  return std::nullopt;
}

std::string own_builder_lines(std::string_view log, std::string_view mark) {
  const std::string own = "LEAP_" + std::string(mark) + "_";
  std::string out;
  out.reserve(log.size());
  std::size_t at = 0;
  while (at < log.size()) {
    const std::size_t end = std::min(log.find('\n', at), log.size());
    std::string_view line = log.substr(at, end - at);
    if (!mark.empty() && line.starts_with(own)) {
      out += "LEAP_";
      out += line.substr(own.size());
    } else {
      // Anyone else's "LEAP_" (the compilers quoting the answer) says nothing to the engine.
      std::size_t from = 0;
      for (std::size_t hit = line.find("LEAP_"); hit != std::string_view::npos;
           hit = line.find("LEAP_", from)) {
        out += line.substr(from, hit - from);
        out += "LEAP-";
        from = hit + 5;
      }
      out += line.substr(from);
    }
    if (end < log.size()) {
      out += '\n';
    }
    at = end + 1;
  }
  return out;
}

result<kb_recording> parse_kb_recording(std::string_view out) {
  constexpr std::string_view magic = "LKBREC01";
  if (out.size() < magic.size() + 4 || !out.starts_with(magic)) {
    return error{"the build recorder wrote no record"};
  }
  std::uint32_t length = 0;
  std::memcpy(&length, out.data() + magic.size(), 4);
  if (length > out.size() - magic.size() - 4) {
    return error{"the build recorder's record is truncated"};
  }
  const auto j = nlohmann::json::parse(out.substr(magic.size() + 4, length), nullptr, false);
  if (!j.is_object() || !j.contains("extensions") || !j["extensions"].is_array()) {
    return error{"the build recorder's record is malformed"};
  }
  kb_recording rec;
  rec.import_ok = j.value("status", std::string{}) == "ok";
  if (j.contains("message") && j["message"].is_string()) {
    rec.message = j["message"].get<std::string>().substr(0, 1000);
  }
  if (j.contains("other") && j["other"].is_array()) {
    for (const auto& o : j["other"]) {
      if (o.is_string() && rec.other.size() < 16) {
        rec.other.push_back(o.get<std::string>().substr(0, 200));
      }
    }
  }
  for (const auto& e : j["extensions"]) {
    static const std::regex hex("[0-9a-f]{64}");
    if (!e.is_object() || !e.contains("id") || !e["id"].is_string() ||
        !std::regex_match(e["id"].get<std::string>(), hex) || !e.contains("args")) {
      return error{"the build recorder's record names an extension without an id"};
    }
    if (rec.extensions.size() >= 16) {
      rec.other.emplace_back("more than 16 load_inline calls");
      break;
    }
    rec.extensions.push_back({e["id"].get<std::string>(), e["args"]});
  }
  return rec;
}

}  // namespace leap::sandbox
