#include "sandbox/kernelbench.hpp"

#include "sandbox/harness.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
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
            # A view of the tensor's memory (t stays alive through the call): the one copy is
            # the writer's.
            write(memoryview((ctypes.c_char * n).from_address(t.data_ptr())).cast("B"))
    elif isinstance(v, _LeapDescribed):
        name = v.dtype.encode("utf-8", "replace")[:64]
        write(b"D" + struct.pack("<B", len(name)) + name + struct.pack("<I", len(v.shape)))
        write(struct.pack("<%dq" % len(v.shape), *v.shape) + struct.pack("<Q", 0))
    elif isinstance(v, _LeapOther):
        b = v.name.encode("utf-8", "replace")[:200]
        write(b"O" + struct.pack("<I", len(b)) + b)
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
        elif isinstance(buf, bytearray):
            # A writable buffer (a job received whole) is viewed in place: one copy, not three.
            t = torch.frombuffer(buf, dtype=torch.uint8, count=nb, offset=pos).view(dtype).reshape(shape).clone()
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


class _LeapDescribed:
    """An output tensor whose dtype or shape is not the reference's, as the candidate described it:
    the judge writes its dtype and shape without data (tag D)."""

    def __init__(self, dtype, shape):
        ok = isinstance(shape, list) and len(shape) <= 64 and all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d < (1 << 62) for d in shape)
        self.dtype = dtype if isinstance(dtype, str) else "?"
        self.shape = shape if ok else []


class _LeapOther:
    """A value of another type, by the name the candidate gave (tag O)."""

    def __init__(self, name):
        self.name = name


def _leap_flat(x):
    if isinstance(x, (list, tuple)):
        out = []
        for y in x:
            out.extend(_leap_flat(y))
        return out
    return [x]


# A value from the skeleton the judge lays out (tensors by their index into `views`, lists, tuples
# and plain values), in the runner and in the judge alike: the tensors are the views themselves, or
# copies on the CPU for a model's init arguments, which the model may keep.
def _leap_build(skeleton, views, init):
    if "t" in skeleton:
        v = views[skeleton["t"]]
        return v.cpu().clone() if init else v
    if "l" in skeleton:
        return [_leap_build(x, views, init) for x in skeleton["l"]]
    if "u" in skeleton:
        return tuple(_leap_build(x, views, init) for x in skeleton["u"])
    return skeleton.get("v")
)PY";

// A timing set's inputs: problem.py's get_inputs() under `seed`, made on the device where this
// torch can (its factories default there: a set of hundreds of MiB is drawn in microseconds, not
// on the CPU in tenths of a second). The reference's timing sets and the judge's fresh inputs for
// the timed calls are drawn by this one function, so that nothing in their values tells the
// candidate which of them a timed call holds.
const char* k_draw_inputs = R"PY(

def _leap_draw_inputs(problem, seed, device):
    torch.manual_seed(seed)
    if device.type != "cpu" and hasattr(torch.device, "__enter__"):
        with device:
            return list(problem.get_inputs())
    return list(problem.get_inputs())
)PY";

// One case's (init, inputs) as the reference drew them: the init under the case's seed, the inputs
// under `draw_seed`, on the CPU for a trial (as KernelBench draws them) or on the device for a
// timing set. The judge draws the cases the reference marked as drawn alike by this same function,
// and checks each against the reference's digest of its encoding.
const char* k_draw_case = R"PY(

def _leap_draw_case(problem, seed, draw_seed, on_device, device):
    torch.manual_seed(seed)
    init = list(problem.get_init_inputs())
    if on_device:
        return init, _leap_draw_inputs(problem, draw_seed, device)
    torch.manual_seed(draw_seed)
    return init, list(problem.get_inputs())


def _leap_case_digest(init, inputs):
    h = hashlib.sha256()
    _leap_encode(h.update, init)
    _leap_encode(h.update, inputs)
    return h.digest()


def _leap_to_host(v):
    if isinstance(v, torch.Tensor):
        return v.cpu()
    if isinstance(v, list):
        return [_leap_to_host(x) for x in v]
    if isinstance(v, tuple):
        return tuple(_leap_to_host(x) for x in v)
    return v


def _leap_tensor_bytes(v):
    if isinstance(v, torch.Tensor):
        return v.numel() * v.element_size()
    if isinstance(v, (list, tuple)):
        return sum(_leap_tensor_bytes(x) for x in v)
    return 0
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
import hashlib
import importlib.util
import json
import os
import sys

import torch
)PY") +
      k_codec + k_draw_inputs + k_draw_case + R"PY(

def _leap_main():
    config = json.loads(sys.stdin.readline() or "{}")
    device = torch.device(config.get("device", "cpu"))
    trials = int(config.get("trials", 3))
    timing_sets = int(config.get("timing_sets", 0))
    base = int(config.get("seed", 42))
    # Every case's values are written out when asked (a judge elsewhere drew other values from the
    # same seeds), else only the cases problem.py does not draw alike from their seeds.
    ship = bool(config.get("ship_inputs", False))
    # The timing sets' seeds are the engine's, drawn for this run: a candidate that knew them could
    # draw the sets itself and tell a checked timed call from a fresh one.
    timing_seeds = [int(x) for x in config.get("timing_seeds", [])]
    timing_seeds += [base + 7919 * (k + 1) for k in range(len(timing_seeds), timing_sets)]
    spec = importlib.util.spec_from_file_location("leap_problem", os.path.join(os.getcwd(), "problem.py"))
    problem = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(problem)
    with open("inputs.bin", "wb") as fin, open("expected.bin", "wb") as fexp:
        fin.write(b"LKBIN002" + struct.pack("<I", trials + timing_sets))
        fexp.write(b"LKBEXP01" + struct.pack("<I", trials + timing_sets))
        # After the trials, the timing sets: inputs for the first trial's model (its seed and
        # init) that the judge's checked timed calls take, drawn as its fresh ones are.
        for trial in range(trials + timing_sets):
            seed = base + trial if trial < trials else base
            draw_seed = seed if trial < trials else timing_seeds[trial - trials]
            on_device = trial >= trials
            init, inputs = _leap_draw_case(problem, seed, draw_seed, on_device, device)
            fin.write(struct.pack("<Q", seed))
            digest = None if ship else _leap_case_digest(init, inputs)
            # Drawn again to see that the seeds give the same values: only then is the judge left
            # to draw them itself, so that the case's values need not travel (GiBs, for a problem
            # with large tensors).
            if digest is not None and _leap_case_digest(*_leap_draw_case(
                    problem, seed, draw_seed, on_device, device)) == digest:
                fin.write(b"D" + struct.pack("<BQQ", 1 if on_device else 0, draw_seed,
                                              _leap_tensor_bytes([init, inputs])) + digest)
            else:
                fin.write(b"V")
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
# Started by the judge (judge.py) with its channel on descriptor 4 and, on the CPU, the shared
# buffers on descriptor 3. It gets each trial's inputs and output buffers from the judge, calls
# ModelNew and says what it returned and where (an output the judge cannot open where it lies is
# copied into the judge's buffers first). It holds nothing the verdict or the time depends on: the
# judge copies the outputs and reads the inputs itself.
import importlib.util
import json
import mmap
import os
import re
import select
import socket
import sys
import time
import traceback

_leap_channel = socket.socket(fileno=4)


def _leap_send(message):
    _leap_channel.send(json.dumps(message).encode())


def _leap_recv_raw():
    data = _leap_channel.recv(1 << 24)
    if not data:
        os._exit(0)
    return data


def _leap_recv():
    return json.loads(_leap_recv_raw())


def _leap_spin(poller):
    """Polls the channel for up to 5 ms (100000 polls at most) before the blocking read: a process
    that blocks lets its core sleep, and the wake-up lands in the judge's clock."""
    end = time.perf_counter_ns() + 5000000
    for _ in range(100000):
        if poller.poll(0) or time.perf_counter_ns() > end:
            return


def _leap_frames(exc):
    keep = []
    for f in traceback.extract_tb(exc.__traceback__):
        name = os.path.basename(f.filename)
        if name == "solution.py":
            keep.append({"file": name, "line": f.lineno, "function": f.name, "code": (f.line or "").strip()})
    return keep


# Started ahead of its job (--standby DEVICE), this process imports torch and starts CUDA (and
# torch's profiler, --warm-profiler) before the candidate exists; otherwise a syntax error is
# reported before the slow torch import.
_leap_standby = sys.argv[1:2] == ["--standby"]
if not _leap_standby:
    try:
        with open(os.path.join(os.getcwd(), "solution.py")) as _f:
            compile(_f.read(), "solution.py", "exec")
    except SyntaxError as e:
        _leap_send({"status": "syntax_error", "line": e.lineno or 0, "message": str(e.msg), "code": (e.text or "").rstrip()})
        os._exit(0)

import torch

if _leap_standby and sys.argv[2:3] == ["cuda"]:
    try:
        torch.empty(1, device="cuda")  # the CUDA context
        if "--warm-profiler" in sys.argv:
            # The profiler's first start (CUPTI's) costs seconds; the own-kernel check's calls
            # then find it started. What it records here is discarded with this session.
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
                torch.ones(1, device="cuda").add_(1)
                torch.cuda.synchronize()
    except Exception:
        pass  # the same failure is met again opening the judge's buffers, and reported there
)PY") +
      k_codec + kernelbench_extension_id_source() + R"PY(

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


def _leap_region(hello, device):
    size = max(int(hello["bytes"]), 1)
    if device.type == "cuda":
        torch.cuda._lazy_init()
        d, handle, nbytes, offset, counter, counter_offset, event, sync = hello["cuda"]
        storage = torch.UntypedStorage._new_shared_cuda(
            d, bytes.fromhex(handle), nbytes, offset, bytes.fromhex(counter), counter_offset,
            bytes.fromhex(event), sync)
        typed = torch.storage.TypedStorage(wrap_storage=storage, dtype=torch.uint8, _internal=True)
        region = torch._utils._rebuild_tensor(typed, 0, (size,), (1,))
        _leap_judges.append((region.data_ptr(), size, handle, offset))
        return region
    return torch.frombuffer(mmap.mmap(3, size), dtype=torch.uint8)


def _leap_describe(x):
    if isinstance(x, torch.Tensor):
        return {"tag": "T", "dtype": str(x.dtype).replace("torch.", ""), "shape": list(x.shape)}
    if isinstance(x, bool):
        return {"tag": "B", "value": x}
    if isinstance(x, int) and -(1 << 63) <= x < (1 << 63):
        return {"tag": "I", "value": x}
    if isinstance(x, float):
        return {"tag": "F", "value": x}
    if x is None:
        return {"tag": "N"}
    if isinstance(x, str):
        return {"tag": "S", "value": x[:1000]}
    return {"tag": "O", "value": type(x).__name__[:200]}


_leap_driver = []
_leap_judges = []  # the judge's buffers here: where they start, their size, its handle, their offset in it
_leap_judge_reads = []  # [True]: the judge reads the outputs where they lie (its probe did)
_leap_judges_probe = []  # the device memory the judge's probe reads, kept while it may


def _leap_storage(x):
    """Where x's storage starts and where in it x's elements are."""
    return (x.data_ptr() - x.storage_offset() * x.element_size(),
            {"storage_offset": x.storage_offset(), "stride": list(x.stride())})


def _leap_export(x):
    """The device allocation x's storage lies in, exported for the judge to open (CUDA IPC), and
    where in it x's elements are."""
    ptr, where = _leap_storage(x)
    for start, size, handle, offset in _leap_judges:
        if start <= ptr < start + size:  # the judge's own memory (an input, or its output buffer)
            return dict(where, ipc=handle, offset=offset + ptr - start)
    if not _leap_driver:
        _leap_driver.append(ctypes.CDLL("libcuda.so.1"))
    cu = _leap_driver[0]
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    handle = ctypes.create_string_buffer(64)
    if (cu.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr)) != 0 or
            cu.cuIpcGetMemHandle(handle, base) != 0):
        return None
    return dict(where, ipc=handle.raw.hex(), offset=ptr - base.value)


def _leap_where(x, o, device):
    """Where the judge copies a returned tensor from, inside its clock, so that no output's copy
    is this process's to skip: the device memory it lies in (CUDA, exported), or this process's
    memory (a CPU slot, read by the judge with process_vm_readv); else (an empty tensor, one on
    another device, memory that cannot be exported, a judge whose probe could not read this
    process's memory) the judge's buffer o it is copied into here."""
    if x.numel() > 0:
        if device.type == "cuda" and x.is_cuda and _leap_judge_reads:
            exported = _leap_export(x)
            if exported is not None:
                return exported
        elif device.type == "cpu" and x.device.type == "cpu" and _leap_judge_reads:
            ptr, where = _leap_storage(x)
            return dict(where, address=ptr)
    o.copy_(x)
    return {"buffer": True}


_leap_built_here = []


def _leap_use_prebuilt():
    """load_inline imports the library the engine built in the compile pool for the same request;
    a request it has none for is built here, as torch does it, and said so."""
    try:
        with open("solution.py") as f:
            if "load_inline" not in f.read():
                return  # as the engine decides what to record: cpp_extension costs an import
        with open("prebuilt.json") as f:
            prebuilt = json.load(f)
    except (OSError, ValueError):
        prebuilt = {}
    import torch.utils.cpp_extension as ext
    original = ext.load_inline

    def load_inline(*args, **kwargs):
        try:
            entry = prebuilt.get(_leap_extension_id(_leap_extension_args(original, args, kwargs)))
        except Exception:
            entry = None
        if entry is not None:
            return ext._import_module_from_library(entry["name"], os.path.abspath(entry["dir"]), True)
        _leap_built_here.append(str(kwargs.get("name", args[0] if args else "?"))[:100])
        return original(*args, **kwargs)

    ext.load_inline = load_inline


def _leap_main():
    # First, bytes of this process's memory for the judge to read, before any of the candidate's
    # code has run: whether it can (a host's ptrace rules may keep it out) says who copies the
    # outputs on a CPU slot.
    probe = ctypes.create_string_buffer(os.urandom(16), 16)
    _leap_send({"probe": [ctypes.addressof(probe), probe.raw.hex()]})
    hello = _leap_recv()
    device = torch.device(hello["device"])
    # Nothing of the candidate has run in this process yet, so a failure here is the slot's (a
    # device the driver refuses, memory the judge shared that cannot be opened): the judge reports
    # it as its own. From "importing" on, whatever this process says is the candidate's word.
    try:
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device in the runner")
        region = _leap_region(hello, device)
        # The run shares its GPU: torch's allocations here are capped at its share, so that an
        # honest candidate that needs more fails alone (torch's out-of-memory error) instead of
        # taking its neighbours' memory. Before the candidate's code: it could lift the cap again.
        cap = hello.get("memory_cap")
        if device.type == "cuda" and isinstance(cap, int) and cap > 0:
            total = torch.cuda.get_device_properties(device).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total))
    except BaseException as e:
        _leap_send({"setup_error": (type(e).__name__ + ": " + str(e))[:2000]})
        return
    # On CUDA, device memory of this process exported as an output would be, for the judge to read
    # back before the candidate's code runs: whether it can says who copies the outputs.
    importing = {"importing": True}
    if device.type == "cuda":
        try:
            probe_t = torch.randint(0, 256, (64,), dtype=torch.uint8, device=device)
            torch.cuda.synchronize()
            _leap_judges_probe.append(probe_t)
            importing["cuda_probe"] = [_leap_export(probe_t), bytes(probe_t.tolist()).hex()]
        except Exception:
            pass  # no probe: the judge leaves the copies to this process
    _leap_send(importing)
    require_own = hello.get("own_kernel") == "require"
    _leap_use_prebuilt()
    sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.spec_from_file_location("solution", os.path.join(os.getcwd(), "solution.py"))
        candidate = importlib.util.module_from_spec(spec)
        sys.modules["solution"] = candidate
        spec.loader.exec_module(candidate)
        model_new = getattr(candidate, "ModelNew")
    except SyntaxError as e:
        _leap_send({"status": "syntax_error", "line": e.lineno or 0, "message": str(e.msg),
                    "code": (e.text or "").rstrip()})
        return
    except BaseException as e:
        _leap_send({"status": "import_error", "type": type(e).__name__, "message": str(e)[:2000],
                    "frames": _leap_frames(e)})
        return
    _leap_send({"ready": True, "built_here": _leap_built_here[:16]})
    if _leap_recv().get("read_outputs") is True:  # the judge's word on its probe
        _leap_judge_reads.append(True)
    trial = 0
    models = {}
    # A timed call's request is b"T", the judge's nonce for the call (8 bytes, echoed in the reply)
    # and a body that names no timing set (every set's is the same where their shapes are): what
    # it asks for (the model, the argument views, the output views) is built once per body, so that
    # the judge's clock holds the call and the channel, not this process parsing its request.
    prepared = {}
    poller = None
    if hello.get("spin"):
        poller = select.poll()
        poller.register(_leap_channel, select.POLLIN)
    try:
        while True:
            if poller is not None:
                _leap_spin(poller)
            raw = _leap_recv_raw()
            timed = raw[:1] == b"T"
            if timed:
                trial, done = -1, int.from_bytes(raw[1:9], "little")
                raw = raw[9:]
            call = prepared.get(raw) if timed else None
            if call is not None:
                args, outs, model = call
            else:
                message = json.loads(raw)
                if message.get("end"):
                    return
                trial = message.get("trial", -1)
                if not timed:
                    done = trial
                views = [region[o:o + n].view(getattr(torch, d)).view(shape) for o, n, d, shape in message["tensors"]]
                args = _leap_build(message["inputs"], views, False)
                outs = [views[k] if k >= 0 else None for k in message["outputs"]]
                if timed and message.get("model") in models:
                    model = models[message["model"]]  # built by that trial's untimed call
                else:
                    init = _leap_build(message["init"], views, True)
                    torch.manual_seed(message["seed"])
                    model = models[trial] = model_new(*init).to(device)
                if timed and len(prepared) < 64:
                    prepared[raw] = (args, outs, model)
            own, other = [], []
            if require_own and device.type == "cuda" and not timed:
                from torch.profiler import ProfilerActivity, profile
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    with torch.no_grad():
                        got = model(*args)
                    torch.cuda.synchronize()
                own, other = _leap_cuda_kernels(prof)
            else:
                with torch.no_grad():
                    got = model(*args)
            flat = _leap_flat(got)
            described = [_leap_describe(x) for x in flat[:len(outs) + 16]]
            where = []
            with torch.no_grad():
                for i, x in enumerate(flat[:len(outs)]):
                    o = outs[i]
                    if o is not None and isinstance(x, torch.Tensor) and x.dtype == o.dtype and x.shape == o.shape:
                        where.append(_leap_where(x, o, device))
                    else:
                        where.append(None)
            if device.type == "cuda":
                torch.cuda.synchronize()
            _leap_send({"done": done, "outputs": described, "where": where, "count": len(flat),
                        "built_here": _leap_built_here[:16], "own": own[:20], "other": sorted(set(other))[:20]})
    except BaseException as e:
        _leap_send({"status": "error", "type": type(e).__name__, "message": str(e)[:2000], "frames": _leap_frames(e),
                    "trial": trial})


_leap_main()
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
)PY";
  return source;
}

const std::string& kernelbench_judge_source() {
  static const std::string source =
      std::string(R"PY(# LEAP KernelBench judge (generated): runs none of the candidate's code.
# It holds the inputs (inputs.bin, read and removed before the candidate starts), allocates every
# trial's tensors in memory it owns (CUDA: its own device memory, which the candidate's runner
# opens through CUDA IPC; CPU: a sealed memfd), starts the runner under a seccomp filter (it may
# signal only itself), and after each call reads the outputs and the inputs itself. The record
# (a status and the trials' data) goes to the engine's pipe on a descriptor only this process
# holds; the engine judges it.
import ctypes
import fcntl
import hashlib
import json
import os
import select
import signal
import socket
import struct
import sys
import time
)PY") +
      fence_python_source() +
      R"PY(

_LEAP_ALIGN = 256


def _leap_start(device_name, runner_args):
    """Starts the runner before torch is imported here, so that the fork has no threads to lose."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    memfd = -1
    if device_name != "cuda":
        memfd = os.memfd_create("leap-buffers", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    child = os.fork()
    if child == 0:
        try:
            buffers = os.open("/dev/null", os.O_RDONLY) if memfd < 0 else memfd
            # Above 4 first, so that neither dup2 below lands on the other's source.
            buffers = fcntl.fcntl(buffers, fcntl.F_DUPFD, 10)
            channel = fcntl.fcntl(theirs.fileno(), fcntl.F_DUPFD, 10)
            os.dup2(buffers, 3)
            os.dup2(channel, 4)
            os.dup2(os.open("/dev/null", os.O_RDONLY), 0)
            if _leap_fence():
                os.execv(sys.executable, [sys.executable, "-I", "-B", "runner.py"] + runner_args)
        finally:
            os._exit(126)
    theirs.close()
    return mine, memfd, child


class _LeapAbandoned(Exception):
    """The engine closed the job's descriptor without sending a job."""


def _leap_job():
    """A standby's job, from the engine on descriptor 3: b"LKBJOB01", the header's length (u32) and
    JSON (the run's config, its files' names and sizes, the inputs' size), each file's bytes in
    order, then the inputs. The files are written into this folder; returns (config, inputs)."""
    job = socket.socket(fileno=3)

    def exactly(n, first=False):
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = job.recv_into(view[got:], min(n - got, 1 << 22))
            if k == 0:
                if first and got == 0:
                    raise _LeapAbandoned()
                raise EOFError("the job ended after %d of %d bytes" % (got, n))
            got += k
        return buf

    head = exactly(12, True)
    if bytes(head[:8]) != b"LKBJOB01":
        raise ValueError("not a job")
    (n,) = struct.unpack_from("<I", head, 8)
    header = json.loads(bytes(exactly(n)))
    for name, size in header["files"]:
        parts = name.split("/")
        if name.startswith("/") or ".." in parts or not all(parts):
            raise ValueError("a file name outside the run's folder: %r" % name)
        if len(parts) > 1:
            os.makedirs(os.path.join(*parts[:-1]), exist_ok=True)
        with open(name, "wb") as f:
            f.write(exactly(size) if size else b"")
    raw = exactly(header["inputs_bytes"])
    job.sendall(b"1")  # the whole job is here: from now on the run is the candidate's
    job.close()
    return header["config"], raw


def _leap_place(v, tensors):
    """v's layout skeleton: its tensors appended to `tensors` and named by their index there."""
    if isinstance(v, torch.Tensor):
        tensors.append(v)
        return {"t": len(tensors) - 1}
    if isinstance(v, list):
        return {"l": [_leap_place(x, tensors) for x in v]}
    if isinstance(v, tuple):
        return {"u": [_leap_place(x, tensors) for x in v]}
    return {"v": v}


class _LeapExported:
    """Device allocations the runner exported (CUDA IPC handles), opened here through the driver and
    a few kept open: an honest runner's outputs come from the same few allocations of torch's
    allocator call after call, so only the warm-up calls pay for opening them."""

    _KEEP = 8

    def __init__(self, device, region, share):
        import ctypes
        self.ctypes = ctypes
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.device = device
        self.opened = {}  # handle -> (ptr or None, uint8 tensor over the allocation, its offset in it)
        # This process's own buffers, whose handle the runner holds: they are read here as they are.
        self.opened[bytes(share[1])] = (None, region, int(share[3]))

    def bytes_of(self, handle):
        """The allocation a handle names (a uint8 tensor over it) and where that tensor starts in it."""
        got = self.opened.pop(handle, None)
        if got is None:
            ct = self.ctypes

            class Handle(ct.Structure):
                _fields_ = [("reserved", ct.c_char * 64)]

            ptr, base, size = ct.c_uint64(), ct.c_uint64(), ct.c_size_t()
            # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS (1)
            if self.cu.cuIpcOpenMemHandle_v2(ct.byref(ptr), Handle.from_buffer_copy(handle), 1) != 0:
                return None
            if self.cu.cuMemGetAddressRange_v2(ct.byref(base), ct.byref(size), ptr) != 0:
                self.cu.cuIpcCloseMemHandle(ptr)
                return None

            class Interface:
                __cuda_array_interface__ = {"shape": (size.value,), "typestr": "|u1",
                                            "data": (ptr.value, False), "version": 2}

            got = (ptr.value, torch.as_tensor(Interface(), device=self.device), 0)
            while len(self.opened) > self._KEEP:
                oldest = next(k for k, v in self.opened.items() if v[0] is not None)
                self.cu.cuIpcCloseMemHandle(ct.c_uint64(self.opened.pop(oldest)[0]))
        self.opened[handle] = got  # the most recently used last
        return got

    def tensor(self, where, dtype, shape):
        """The tensor the runner says it returned: read-only use, bounds checked; None if the place
        it names is not one this process can read."""
        handle, offset, first, stride = (where.get(k) for k in ("ipc", "offset", "storage_offset", "stride"))
        if not (isinstance(handle, str) and len(handle) == 128 and isinstance(stride, list) and
                len(stride) == len(shape) and all(type(v) is int and v >= 0 for v in [offset, first] + stride)):
            return None
        try:
            got = self.bytes_of(bytes.fromhex(handle))
        except ValueError:
            return None
        if got is None:
            return None
        _, memory, start = got
        size = torch.empty((), dtype=dtype).element_size()
        offset -= start
        extent = first + 1 + sum((d - 1) * st for d, st in zip(shape, stride))
        if offset < 0 or offset % size or offset + extent * size > memory.numel():
            return None
        span = memory[offset:offset + extent * size].view(dtype)
        # as_strided's offset counts from the storage's start, not the view's.
        return span.as_strided(shape, stride, span.storage_offset() + first)

    def copy(self, out, where, buffer):
        """out <- the tensor the runner names (its own buffer `buffer` for {"buffer": true})."""
        source = buffer if where.get("buffer") is True else self.tensor(where, out.dtype, out.shape)
        if source is None:
            return False
        out.copy_(source)
        return True


def _leap_cuda_probe_reads(reader, probe):
    """Whether the device memory the runner exported as its probe reads back as the runner said."""
    try:
        where, want = probe
        got = reader.tensor(where, torch.uint8, [64])
        return got is not None and bytes(got.cpu().tolist()) == bytes.fromhex(want)
    except Exception:
        return False


class _LeapChildMemory:
    """The runner's memory on a CPU slot, read with process_vm_readv: the sandbox lets this process
    make the call, and the runner's fence refuses it to the runner and everything it starts."""

    _CHUNK = 1 << 30

    def __init__(self, pid):
        import ctypes

        class Iovec(ctypes.Structure):
            _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

        self.ctypes = ctypes
        self.pid = pid
        self.call = ctypes.CDLL(None, use_errno=True).process_vm_readv
        self.call.restype = ctypes.c_ssize_t
        self.call.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                              ctypes.c_ulong]
        self.local, self.remote = Iovec(), Iovec()

    def read(self, pid, into, address, n):
        """n bytes at `address` in process pid into this process's memory at `into`: all of them?"""
        ct = self.ctypes
        done = 0
        while done < n:
            k = min(n - done, self._CHUNK)
            self.local.base, self.local.len = into + done, k
            self.remote.base, self.remote.len = address + done, k
            if self.call(self.pid if pid is None else pid, ct.byref(self.local), 1, ct.byref(self.remote), 1, 0) != k:
                return False
            done += k
        return True

    def probe(self, said):
        """Whether the runner's probe (its address and the bytes there) reads back as it said."""
        if not (isinstance(said, list) and len(said) == 2 and type(said[0]) is int and said[0] > 0 and
                isinstance(said[1], str) and len(said[1]) == 32):
            return False
        buf = self.ctypes.create_string_buffer(16)
        return self.read(None, self.ctypes.addressof(buf), said[0], 16) and buf.raw.hex() == said[1]

    def copy(self, out, where, buffer):
        """out <- the tensor the runner names: its memory at `address` (its elements as storage_offset
        and stride say), or this process's buffer `buffer` for {"buffer": true}, read by the same call
        (the runner that computed into that buffer pays the same copy as one that did not)."""
        size, n = out.element_size(), out.numel() * out.element_size()
        if where.get("buffer") is True:
            return self.read(os.getpid(), out.data_ptr(), buffer.data_ptr(), n)
        address, first, stride = (where.get(k) for k in ("address", "storage_offset", "stride"))
        shape = list(out.shape)
        if not (type(address) is int and address > 0 and isinstance(stride, list) and len(stride) == len(shape) and
                all(type(v) is int and v >= 0 for v in [first] + stride)):
            return False
        start = address + first * size
        dense, step = [], 1
        for d in reversed(shape):
            dense.insert(0, step)
            step *= d
        if all(st == e or d == 1 for d, st, e in zip(shape, stride, dense)):
            return self.read(None, out.data_ptr(), start, n)
        # Strided: the span its elements lie in, then the elements. A span far beyond the output
        # is refused rather than read (the judge's memory is not the candidate's to size).
        span = (1 + sum((d - 1) * st for d, st in zip(shape, stride))) * size
        if span > 16 * n + (1 << 20):
            return False
        raw = torch.empty(span, dtype=torch.uint8)
        if not self.read(None, raw.data_ptr(), start, span):
            return False
        out.copy_(raw.view(out.dtype).as_strided(shape, stride, 0))
        return True


def _leap_tensor_ids(skeleton):
    """The tensor indices a layout skeleton ({"t"}, {"l"}, {"u"}, {"v"}) refers to, in order."""
    if "t" in skeleton:
        yield skeleton["t"]
    for key in ("l", "u"):
        for item in skeleton.get(key, []):
            yield from _leap_tensor_ids(item)


def _leap_main():
    # The record goes to the engine on a descriptor only this process holds (non-inheritable);
    # what either program prints goes to stderr.
    record = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    # Not dumpable: a process of the same uid can neither read this one's memory nor open its
    # descriptors (the record) through /proc.
    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    child = None
    # Where the run's time goes, for the verdict's diagnostics (wall-clock stamps: the engine lines
    # them up with its own launch of this process).
    stamps = [["judge_started", time.time()]]
    # Until the runner says it is importing the candidate's code, nothing of the candidate has run:
    # every failure until then is this slot's ("judge_error", an infrastructure error the engine
    # retries elsewhere), never a verdict on the candidate.
    candidate_started = False
    # What this process adds to every record it writes (the runner's own fields of that name are
    # dropped): the device-memory cap it gave the runner, and the GPU's memory.
    own_fields = {}

    def finish(status, body):
        """Writes the record and ends: "LKBJUDG1", the status's length (u32) and JSON, the data."""
        if child is not None:
            try:
                os.kill(child, signal.SIGKILL)
            except OSError:
                pass
        status = dict(status)
        status.pop("memory_cap_bytes", None)
        status.pop("memory_total_bytes", None)
        status.update(own_fields)
        status["stamps"] = stamps + [["runner_stopped", time.time()]]
        text = json.dumps(status).encode()
        record.write(b"LKBJUDG1" + struct.pack("<I", len(text)) + text)
        if body is not None:
            record.write(body.getbuffer())  # a view of the data: no copy of what may be GiBs
        record.flush()
        sys.stderr.flush()
        os._exit(0)

    def setup_failed(what):
        finish({"status": "judge_error", "message": str(what)[:2000]}, None)

    def relay(message):
        """The runner's own word: only ever a failing verdict, never one of the judge's statuses."""
        if message.get("status") not in ("syntax_error", "import_error", "error"):
            message = {"status": "incomplete"}
        finish(message, None)

    global torch
    try:
        if sys.argv[1:2] == ["--standby"]:
            # Started ahead of its job: the runner and this process import torch and start CUDA
            # now; the run's time (and the stamps) start when the job arrives.
            device_name = sys.argv[2] if len(sys.argv) > 2 else "cpu"
            channel, memfd, child = _leap_start(device_name, sys.argv[1:])
            import torch
            if device_name == "cuda":
                torch.empty(1, device="cuda")
            try:
                config, raw = _leap_job()
            except _LeapAbandoned:
                os.kill(child, signal.SIGKILL)
                os._exit(0)
            stamps = [["job_received", time.time()]]
            if config.get("device", "cpu") != device_name:
                raise ValueError("a job for " + str(config.get("device")) + " on a standby for " + device_name)
        else:
            config = json.loads(sys.stdin.readline() or "{}")
            device_name = config.get("device", "cpu")
            with open("inputs.bin", "rb") as f:
                raw = f.read()
            os.unlink("inputs.bin")
            channel, memfd, child = _leap_start(device_name, [])
            stamps.append(["inputs_read_runner_forked", time.time()])
        slots = config.get("slots", [])
    except Exception as e:
        setup_failed("starting the runner: " + type(e).__name__ + ": " + str(e))
    own_kernel = config.get("own_kernel", "off")
    reps = config.get("timing_reps", 0)
    reps = max(0, min(reps, 10000)) if isinstance(reps, int) else 0
    warmup = 3 if reps > 0 else 0

    def send(message):
        # A runner that has ended cannot take it; what it said before it ended is still to be read,
        # and receive() reads that, or its end.
        try:
            channel.send(json.dumps(message).encode())
        except OSError:
            pass

    def ended(wstatus=None):
        """The runner's end, passed on as this process's: its signal or exit code; an exit with
        code 0 before the last trial is "incomplete". Before the candidate's code ran, the slot's."""
        if wstatus is None:
            _, wstatus = os.waitpid(child, 0)
        sys.stderr.flush()
        if not candidate_started:
            how = ("signal " + str(os.WTERMSIG(wstatus)) if os.WIFSIGNALED(wstatus)
                   else "exit code " + str(os.WEXITSTATUS(wstatus)))
            setup_failed("the runner ended (" + how + ") before it ran the candidate's code")
        if os.WIFSIGNALED(wstatus):
            sig = os.WTERMSIG(wstatus)
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass  # SIGKILL and SIGSTOP keep their default
            os.kill(os.getpid(), sig)
        code = os.WEXITSTATUS(wstatus) if os.WIFEXITED(wstatus) else 1
        if code != 0:
            os._exit(code)
        finish({"status": "incomplete"}, None)

    poller = select.poll()
    poller.register(channel, select.POLLIN)

    def receive(spinning=False):
        """The runner's next message (a JSON object), or its end."""
        if spinning:
            end = time.perf_counter_ns() + 5000000
            for _ in range(100000):
                if poller.poll(0) or time.perf_counter_ns() > end:
                    break
        while True:
            ready, _, _ = select.select([channel], [], [], 0.2)
            if not ready:
                # Its end, even where a process it forked still holds the channel open.
                pid, wstatus = os.waitpid(child, os.WNOHANG)
                if pid:
                    ended(wstatus)
                continue
            try:
                data = channel.recv(1 << 20)
            except OSError:
                data = b""
            if not data:
                ended()
            try:
                message = json.loads(data)
            except ValueError:
                message = None
            if not isinstance(message, dict):
                finish({"status": "incomplete"}, None)
            return message

    import io
    try:
        import torch
        stamps.append(["torch_imported", time.time()])
        device = torch.device(device_name)
        # problem.py (from the engine, never in this folder, where the candidate could change it),
        # run here before any of the candidate's code has: for the cases the reference left to
        # this process to draw, and for the timed calls' fresh inputs (its get_inputs() only).
        problem, problem_why = None, "the engine sent no problem.py"
        if isinstance(config.get("problem"), str):
            import types
            problem = types.ModuleType("leap_problem")
            try:
                exec(compile(config["problem"], "problem.py", "exec"), problem.__dict__)
            except Exception as e:
                problem, problem_why = None, "problem.py failed here: " + type(e).__name__ + ": " + str(e)[:200]
        if bytes(raw[:8]) != b"LKBIN002":
            raise ValueError("the cases are not in the reference's format")
        (cases_count,) = struct.unpack_from("<I", raw, 8)
        pos = 12
        cases = []
        for case in range(cases_count):
            (seed,) = struct.unpack_from("<Q", raw, pos)
            how = bytes(raw[pos + 8:pos + 9])
            pos += 9
            if how == b"V":
                init, pos = _leap_decode(raw, pos)
                inputs, pos = _leap_decode(raw, pos)
            elif case >= int(config.get("trials", cases_count)) and reps == 0:
                # A timing set of a run that times nothing (a profile's): not drawn.
                pos += 49
                cases.append(None)
                continue
            else:
                on_device, draw_seed, _ = struct.unpack_from("<BQQ", raw, pos)
                digest = bytes(raw[pos + 17:pos + 49])
                pos += 49
                # Drawn here from the seeds the reference drew them from, and checked against
                # its digest: a problem whose draws differ in this process cannot be judged on
                # them, and the engine sends the cases' values instead (inputs_differ).
                try:
                    if problem is None:
                        raise ValueError(problem_why)
                    init, inputs = _leap_draw_case(problem, seed, draw_seed, on_device == 1, device)
                    # Held on the host, as a case received is, until its call stages it: this
                    # process's device memory then holds none of it before the buffers' region
                    # is allocated (below).
                    inputs = _leap_to_host(inputs)
                    same = _leap_case_digest(init, inputs) == digest
                    why = "" if same else "other values than the reference's"
                except Exception as e:
                    same, why = False, type(e).__name__ + ": " + str(e)[:200]
                if not same:
                    finish({"status": "judge_error", "inputs_differ": True,
                            "message": "case %d's inputs, drawn here from their seeds: %s" % (case, why)}, None)
            cases.append((seed, init, inputs))
        del raw
        if device.type == "cuda":
            # The draws' device memory back to the driver, so that the region below is a segment
            # of torch's allocator of its own, never carved from one that holds this process's
            # own tensors (the runner can open the whole segment the region lies in).
            torch.cuda.empty_cache()

        def size_of(dtype, shape):
            n = torch.empty((), dtype=dtype).element_size()
            for d in shape:
                n *= d
            return n

        def layout(trial):
            """Every tensor of a trial (its init's, its inputs', its outputs'): offset, bytes, dtype, shape."""
            tensors = []
            seed, init, inputs = cases[trial]
            init_skeleton = _leap_place(init, tensors)
            inputs_skeleton = _leap_place(inputs, tensors)
            # Per forward argument, the tensors it holds (what the check after each call reads).
            argument_tensors = [list(_leap_tensor_ids(item)) for item in inputs_skeleton.get("l", [])]
            entries, at = [], 0
            for t in tensors:
                n = t.numel() * t.element_size()
                entries.append([at, n, str(t.dtype).replace("torch.", ""), list(t.shape)])
                at += (n + _LEAP_ALIGN - 1) // _LEAP_ALIGN * _LEAP_ALIGN
            outputs = []
            for slot in slots[trial] if trial < len(slots) else []:
                if slot.get("tag") != "T":
                    outputs.append(-1)
                    continue
                dtype = getattr(torch, slot["dtype"])
                n = size_of(dtype, slot["shape"])
                entries.append([at, n, slot["dtype"], list(slot["shape"])])
                outputs.append(len(entries) - 1)
                at += (n + _LEAP_ALIGN - 1) // _LEAP_ALIGN * _LEAP_ALIGN
            return tensors, init_skeleton, inputs_skeleton, entries, outputs, at, argument_tensors

        # The first `trials` cases are the trials; the rest are the timing sets (the reference's).
        trials = min(int(config.get("trials", cases_count)), cases_count)
        timing_sets = cases_count - trials
        plans = [None if cases[case] is None else layout(case) for case in range(cases_count)]
        total = max([p[5] for p in plans if p is not None] + [1])
        # A case's tensors where the calls run, held by this process (a trial's while its call
        # runs, every timing set's through the timed calls): a call's inputs are staged from them,
        # and after the call compared with them bit for bit, here, so that only the outputs travel
        # to the engine (a third of the data for a two-input problem).
        pristine = {}
        # Each output's copy, made here from where the runner says it returned it, inside the clock;
        # in memory the runner cannot reach, so no copy of it is the candidate's to skip.
        judged_outputs = {}
        reader = None
        # Timed calls on a GPU wait spinning, on both sides of the channel, as the cuda kind's do:
        # only where the host has 4 CPUs or more (on fewer, a spinning process takes the core the
        # one it waits for needs).
        spin = reps > 0 and device.type == "cuda" and (os.cpu_count() or 1) >= 4
        hello = {"device": device_name, "own_kernel": own_kernel, "bytes": total, "spin": spin}
        if device.type == "cuda":
            # A whole segment of torch's allocator of its own (a multiple of 2 MiB from 10 MiB
            # up is allocated exactly): the runner can open all of the segment the region lies
            # in, and this process's own copies of the inputs must never lie there.
            segment = (max(total, 12 << 20) + (2 << 20) - 1) // (2 << 20) * (2 << 20)
            region = torch.empty(segment, dtype=torch.uint8, device=device)
            share = list(region.untyped_storage()._share_cuda_())
            hello["cuda"] = [x.hex() if isinstance(x, bytes) else x for x in share]
            try:
                reader = _LeapExported(device, region, share)
            except OSError:
                reader = None  # no driver library to open exports with: the runner copies
            # Runs that share this GPU: each runner's torch allocations get an equal part of the
            # memory left after a reserve (contexts, the judges' buffers).
            sharing = config.get("memory_share")
            runs = sharing.get("runs") if isinstance(sharing, dict) else None
            if isinstance(runs, int) and runs > 1:
                total_memory = torch.cuda.get_device_properties(device).total_memory
                reserve = sharing.get("reserve_bytes")
                reserve = reserve if isinstance(reserve, int) and reserve >= 0 else 0
                cap = (total_memory - reserve) // runs
                if cap > 0:
                    hello["memory_cap"] = cap
                    own_fields["memory_cap_bytes"] = cap
                    own_fields["memory_total_bytes"] = total_memory
        else:
            import mmap
            os.ftruncate(memfd, total)
            # Sealed: the runner can neither shrink nor grow the buffers under this process.
            fcntl.fcntl(memfd, 1033, 1 | 2 | 4)  # F_ADD_SEALS: F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW
            region = torch.frombuffer(mmap.mmap(memfd, total), dtype=torch.uint8)
        timed_calls = warmup + reps if trials > 0 and timing_sets > 0 else 0
        fresh_why = problem_why if problem is None else ""
        flush = None
        if timed_calls and device.type == "cuda":
            # L2 is the GPU's, shared by every context: written from here, it is cold for the call.
            # Taken before the runner imports the candidate, so a device without room for it is
            # the slot's failure, not the candidate's.
            flush = torch.empty(256 << 20, dtype=torch.uint8, device=device)
    except Exception as e:
        setup_failed("preparing the trials' buffers on " + device_name + ": " + type(e).__name__ + ": " + str(e))
    stamps.append(["buffers_ready", time.time()])
    first = receive()
    if "probe" in first:
        if device.type != "cuda":
            memory = _LeapChildMemory(child)
            reader = memory if memory.probe(first["probe"]) else None
        send(hello)
        first = receive()
    if "setup_error" in first:
        setup_failed("the runner could not open the trials' buffers: " + str(first["setup_error"]))
    if first.get("importing"):
        candidate_started = True
        stamps.append(["runner_started", time.time()])
        if device.type == "cuda" and reader is not None and not _leap_cuda_probe_reads(reader, first.get("cuda_probe")):
            reader = None
        # Who copies the outputs: this process, where it can read them where they lie, else the
        # runner (its copy into this process's buffers is one an answer could skip: the verdict says so).
        own_fields["output_copy"] = "judge" if reader is not None else "runner"
        send({"read_outputs": reader is not None})
        first = receive()
    if not first.get("ready"):
        relay(first)
    stamps.append(["candidate_imported", time.time()])
    built_here = first.get("built_here")
    built_here = [str(x)[:100] for x in built_here[:16]] if isinstance(built_here, list) else []

    body = io.BytesIO()
    # The timed calls whose outputs (and inputs) go to the engine to be judged: a sample drawn
    # here, which the candidate cannot know, so that a call that cheats when it thinks it is not
    # checked risks the verdict every time; bounded, so the record stays a few trials' size.
    import random
    rng = random.SystemRandom()
    # As many checked calls as the reference drew timing sets, each checked call taking a set of
    # its own: no timed call ever meets inputs an earlier one had. With fewer sets than checks, a
    # set met again would mark the calls after it: every set seen, so a new input is an unchecked
    # call, free to be answered wrong and fast (a memo that cheated after its first hit was paid).
    checked = set(rng.sample(range(timed_calls), min(timing_sets, timed_calls)))
    checked_sets = rng.sample(range(trials, cases_count), len(checked))
    checked_cases = []
    # Every other timed call gets inputs drawn here and never seen before, so a cache keyed by the
    # inputs' content misses and the call does the work it is timed for.
    fresh_calls = 0
    # How many of a timing set's tensors are its model's: a fresh call keeps them and takes drawn
    # inputs for the rest.
    n_inits = {}
    # The checked calls' outputs, copied where the next call cannot reach them and encoded after
    # the last call (so that the judge's steps after a call are the same whether it was checked).
    checked_records = []

    def write_case(seed, got, changed):
        """One judged call in the record: its seed, its outputs, the argument it changed."""
        body.write(struct.pack("<Q", seed))
        _leap_encode(body.write, got)
        body.write(struct.pack("<I", changed))

    def fresh_inputs(trial):
        """Fresh inputs in the timing set's layout (init tensors the set's), or None and why."""
        if problem is None:
            return None, fresh_why
        try:
            drawn = _leap_draw_inputs(problem, rng.getrandbits(63), device)
        except Exception as e:
            return None, "get_inputs failed here: " + type(e).__name__ + ": " + str(e)[:200]
        tensors, _, inputs_skeleton, _, _, _, _ = plans[trial]
        if trial not in n_inits:
            n_inits[trial] = len(tensors) - len(list(_leap_tensor_ids(inputs_skeleton)))
        n_init = n_inits[trial]
        placed = [None] * n_init
        if _leap_place(drawn, placed) != inputs_skeleton or any(
                t.dtype != u.dtype or t.shape != u.shape for t, u in zip(placed[n_init:], tensors[n_init:])):
            return None, "get_inputs gives other shapes, dtypes or values than the timing sets'"
        return pristine[trial][:n_init] + [t.to(device).contiguous() for t in placed[n_init:]], ""
    body.write(b"LKBOUT02" + struct.pack("<I", trials + len(checked)))
    own_report = []
    times = []
    requests = {}
    for call in range(trials + timed_calls):
        timed = call >= trials
        if call == trials:
            # Every timing set on the device before the first timed call, and a draw for every
            # timed call, checked or not (a checked call's is dropped): the judge's steps before a
            # call are the same whichever it is. A set copied to the device before its checked call
            # only made the time between two calls say which was checked (milliseconds against the
            # microseconds of a draw on the GPU; the other way round on a CPU), so a candidate could
            # answer the unchecked ones wrong and fast.
            for k in range(trials, cases_count):
                pristine[k] = [t.to(device).contiguous() for t in plans[k][0]]
            stamps.append(["timed_calls_started", time.time()])
        # Each timed call's timing set drawn here, where the candidate cannot see it, not in turn:
        # a model that counts its calls could otherwise tell which set comes and answer from a
        # memo of each set's first answer.
        is_checked = timed and (call - trials) in checked
        if is_checked:
            trial = checked_sets.pop()
        else:
            trial = trials + rng.randrange(timing_sets) if timed else call
        seed, init, inputs = cases[trial]
        tensors, init_skeleton, inputs_skeleton, entries, outputs, _, argument_tensors = plans[trial]
        views = [region[o:o + n].view(getattr(torch, d)).view(shape) for o, n, d, shape in entries]
        held = None
        if timed:
            drawn, why = fresh_inputs(trial)
            if not is_checked and drawn is None:
                fresh_why = fresh_why or why
            elif not is_checked:
                held = drawn
                fresh_calls += 1
        if held is None:
            if trial not in pristine:
                pristine[trial] = [t.to(device).contiguous() for t in tensors]
            held = pristine[trial]
        with torch.no_grad():
            region.fill_(0xFF)  # outputs start as garbage (NaN for floats)
            for t, view in zip(held, views):
                view.copy_(t)
            if flush is not None:
                flush.fill_(call & 0xFF)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if not timed:
            stamps.append(["trial_inputs_staged", time.time()])
        if timed:
            # The body names no timing set (the sets' layouts are alike where their shapes are), so
            # the request tells the candidate nothing its inputs' values do not; the nonce is
            # echoed in the reply. Encoded once per set, outside the clock.
            body_bytes = requests.get(trial)
            if body_bytes is None:
                body_bytes = requests[trial] = json.dumps(
                    {"model": 0, "tensors": entries, "inputs": inputs_skeleton, "outputs": outputs}).encode()
            expected_done = rng.getrandbits(63)
            request = b"T" + expected_done.to_bytes(8, "little") + body_bytes
        else:
            expected_done = trial
            request = json.dumps({"trial": trial, "seed": seed, "tensors": entries, "init": init_skeleton,
                                  "inputs": inputs_skeleton, "outputs": outputs}).encode()
        start = time.perf_counter_ns()
        try:
            channel.send(request)
        except OSError:
            pass  # the runner ended: receive() reads what it said before, or its end
        reply = receive(timed and spin)
        if "status" in reply:
            relay(reply)
        if reply.get("done") != expected_done or not isinstance(reply.get("outputs"), list):
            finish({"status": "incomplete"}, None)
        # The outputs are copied here, right at the reply, from where the runner returned them, so
        # work left running past the reply fails, and every output's copy is in the time: the
        # reference's and the candidate's alike, wherever either computed it.
        got = []
        where = reply.get("where")
        where = where if isinstance(where, list) else []
        with torch.no_grad():
            for i, d in enumerate(reply["outputs"][:len(outputs) + 16]):
                tag = d.get("tag") if isinstance(d, dict) else None
                if tag == "T":
                    k = outputs[i] if i < len(outputs) else -1
                    same = k >= 0 and d.get("dtype") == entries[k][2] and d.get("shape") == entries[k][3]
                    if not same:
                        got.append(_LeapDescribed(str(d.get("dtype"))[:64], d.get("shape")))
                        continue
                    w = where[i] if i < len(where) and isinstance(where[i], dict) else {}
                    if reader is None:
                        # This process's probe could not read the runner's outputs where they lie
                        # (see _leap_where): the runner copied it into this process's buffer, read
                        # as it is.
                        got.append(views[k])
                        continue
                    out = judged_outputs.get(i)
                    if out is None or out.dtype != views[k].dtype or out.shape != views[k].shape:
                        out = judged_outputs[i] = torch.empty_like(views[k])
                    if not reader.copy(out, w, views[k]):
                        finish({"status": "error", "type": "OutputUnreadable", "frames": [],
                                "message": "output %d: the runner named memory the judge cannot read "
                                           "(return a tensor of this process, contiguous)" % i}, None)
                    got.append(out)
                elif tag in ("B", "I", "F", "N", "S"):
                    got.append(d.get("value"))
                else:
                    got.append(_LeapOther(str(d.get("value"))[:200]))
        if device.type == "cuda":
            torch.cuda.synchronize()
        # The time is this process's, from the request to its copy of the outputs.
        elapsed_ms = (time.perf_counter_ns() - start) / 1e6
        if isinstance(reply.get("built_here"), list):
            built_here = [str(x)[:100] for x in reply["built_here"][:16]]
        if timed and call >= trials + warmup:
            times.append(elapsed_ms)
        if not timed:
            stamps.append(["trial_called", time.time()])
        # From here on a timed call's steps are the same whether it is checked; only the record
        # keeps the checked ones. A timed call's outputs are copied out now (the next call copies
        # over them), on the device, and encoded after the last call.
        if timed:
            got = [x.clone() if isinstance(x, torch.Tensor) else x for x in got]
        count = reply.get("count")
        if isinstance(count, int) and count > len(got):
            got.extend(_LeapOther("?") for _ in range(min(count - len(got), 1 << 16)))
        if device.type == "cuda":
            torch.cuda.synchronize()
        # The first forward argument the call changed (1-based; 0: none), compared bit for bit.
        changed = 0
        with torch.no_grad():
            for i, ids in enumerate(argument_tensors):
                if any(not torch.equal(views[k].reshape(-1).view(torch.uint8), held[k].reshape(-1).view(torch.uint8))
                       for k in ids):
                    changed = i + 1
                    break
        if is_checked:
            checked_cases.append(trial)
            checked_records.append((seed, got, changed))
        if timed:
            continue
        write_case(seed, got, changed)
        pristine.pop(trial, None)  # a trial is called once
        stamps.append(["trial_outputs_read", time.time()])
        own_report.append({"trial": trial, "own": [str(x)[:300] for x in reply.get("own", [])][:20],
                           "other": [str(x)[:300] for x in reply.get("other", [])][:20]})
    if timed_calls:
        stamps.append(["timed_calls", time.time()])
    for judged in checked_records:
        write_case(*judged)
    body.write(b"LKBEND!!")
    send({"end": True})
    fresh = {"calls": fresh_calls, "of": timed_calls - len(checked)}
    if fresh_calls < fresh["of"]:
        fresh["why"] = fresh_why
    finish({"status": "ok", "device": device.type, "own_kernel": own_kernel, "own": own_report,
            "built_here": built_here, "times_ms": times, "checked_cases": checked_cases,
            "fresh_inputs": fresh}, body)


)PY" + k_codec +
      k_draw_inputs + k_draw_case + R"PY(

_leap_main()
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
      case 'D':  // a tensor's dtype and shape without its data (see kb_value)
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
        if (tag == 'D') {
          if (nbytes != 0) {
            return error{"a tensor's description holds data"};
          }
          return ok_status();
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
    case 'D':
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
    const bool tensor = g.tag == 'T' || g.tag == 'D';
    if (!tensor || g.shape != e.shape) {
      auto j = mismatch(what);
      j["expected_shape"] = shape_text(e.shape);
      j["got_shape"] = tensor ? shape_text(g.shape) : type_name(g);
      return j;
    }
    if (g.dtype != e.dtype || element_size(e.dtype) == 0 || g.tag == 'D') {
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

}  // namespace

result<kb_data> parse_kb_file(std::shared_ptr<const std::string> bytes, kb_file kind) {
  constexpr std::uint64_t k_most = std::numeric_limits<std::uint64_t>::max();
  const char* magic = kind == kb_file::inputs     ? "LKBIN002"
                      : kind == kb_file::expected ? "LKBEXP01"
                                                  : "LKBOUT02";
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
    status s = ok_status();
    char how = 'V';
    if (kind == kb_file::inputs && !r.take(&how)) {
      return truncated;
    }
    if (how == 'D') {
      // Left to the judge to draw from the seeds: where to draw, the seed, the tensors' bytes and
      // the digest the judge checks its draw against.
      std::uint8_t on_device = 0;
      std::uint64_t draw_seed = 0;
      std::uint64_t tensor_bytes = 0;
      std::string_view digest;
      if (!r.take(&on_device) || !r.take(&draw_seed) || !r.take(&tensor_bytes) ||
          !r.text(32, &digest) || on_device > 1) {
        return truncated;
      }
      trial.drawn_bytes = tensor_bytes;
      out.drawn_bytes =
          tensor_bytes > k_most - out.drawn_bytes ? k_most : out.drawn_bytes + tensor_bytes;
    } else if (how != 'V') {
      return truncated;
    } else {
      s = r.value(kind == kb_file::inputs ? &trial.init : &trial.outputs, 0);
    }
    if (s && kind == kb_file::candidate) {
      if (!r.take(&trial.changed_argument)) {
        return truncated;
      }
    } else if (s && kind == kb_file::inputs && how == 'V') {
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
    // The judge compared the inputs with its own copies, bit for bit (it is outside the
    // candidate's process); an index beyond the arguments is no honest judge's and fails all the
    // same.
    if (mine.changed_argument != 0) {
      return nlohmann::json{{"status", "modified_input"},
                            {"trial", t},
                            {"trials", trials},
                            {"input", mine.changed_argument - 1}};
    }
  }
  return std::nullopt;
}

std::vector<std::pair<std::string, double>> kernelbench_run_phases(const nlohmann::json& stamps,
                                                                   double launched_s,
                                                                   double ended_s) {
  std::vector<std::pair<std::string, double>> phases;
  if (!stamps.is_array() || stamps.empty() || stamps.size() > 1024 || ended_s < launched_s) {
    return phases;
  }
  double previous = launched_s;
  for (const auto& s : stamps) {
    if (!s.is_array() || s.size() != 2 || !s[0].is_string() || !s[1].is_number()) {
      return {};
    }
    const double at = s[1].get<double>();
    if (at < previous || at > ended_s) {
      return {};
    }
    phases.emplace_back(s[0].get<std::string>().substr(0, 64), (at - previous) * 1000.0);
    previous = at;
  }
  phases.emplace_back("judge_exited", (ended_s - previous) * 1000.0);
  return phases;
}

std::uint64_t shared_gpu_reserve(std::uint64_t configured, int sharing, std::uint64_t data_bytes,
                                 std::uint64_t waiting_judges, std::uint64_t context_bytes) {
  constexpr std::uint64_t most = std::numeric_limits<std::uint64_t>::max();
  const auto add = [](std::uint64_t a, std::uint64_t b) { return a > most - b ? most : a + b; };
  const auto times = [](std::uint64_t a, std::uint64_t b) {
    return b != 0 && a > most / b ? most : a * b;
  };
  const auto runs = static_cast<std::uint64_t>(std::max(sharing, 1));
  std::uint64_t reserve = add(configured, times(runs, times(2, data_bytes)));
  return add(reserve, times(waiting_judges, times(2, context_bytes)));
}

}  // namespace leap::sandbox
