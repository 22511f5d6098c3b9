// The KernelBench pipeline of the engine: the reference's outputs and timing, extension builds in
// the compile pool, and the judge that runs a candidate's ModelNew beside the reference.
#include "common/crypto.hpp"
#include "common/durable_file.hpp"
#include "sandbox/engine.hpp"
#include "sandbox/engine_parts.hpp"
#include "sandbox/python_judge.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <future>
#include <iomanip>
#include <optional>
#include <random>
#include <regex>
#include <signal.h>
#include <sstream>
#include <string>
#include <vector>

namespace leap::sandbox {
namespace fs = std::filesystem;

using detail::base_path;
using detail::clock_watch;
using detail::dir_of;
using detail::how_it_ended;
using detail::k_max_result_json_bytes;
using detail::make_verdict;
using detail::memory_feedback;
using detail::run_file;

namespace {

std::string slot_name(int gpu) {
  return gpu >= 0 ? "GPU slot " + std::to_string(gpu) : "the CPU slot";
}

// A python given by path (a virtual environment's) puts its folder first on PATH: load_inline needs
// the ninja and the tools installed beside it. USER and LOGNAME: the run's private uid has no
// passwd entry, and torch's profiler and caches ask getpass.getuser(), which raises without them.
void kernelbench_env(std::vector<std::pair<std::string, std::string>>& env,
                     const std::string& python) {
  for (auto& [name, value] : env) {
    if (name == "PATH" && !dir_of(python).empty()) {
      value.insert(0, dir_of(python) + ":");
    }
  }
  env.emplace_back("USER", "sandbox");
  env.emplace_back("LOGNAME", "sandbox");
}

}  // namespace

void set_kernelbench_scratch(engine_config& config, std::uint64_t bytes) {
  constexpr std::uint64_t torch_itself = 12ULL << 30;
  auto& l = config.kernelbench_limits;
  l.scratch_bytes = bytes;
  l.file_size_bytes = std::max(l.file_size_bytes, bytes);
  l.memory_bytes = std::max(l.memory_bytes, bytes + torch_itself);
}

namespace detail {

std::vector<run_file> kernelbench_candidate_files(const prepared_candidate& p,
                                                  std::string* prebuilt_json) {
  std::vector<run_file> files{{"solution.py", &p.code}};
  nlohmann::json prebuilt = nlohmann::json::object();
  for (const auto& ext : p.extensions) {
    const std::string folder = "ext/" + ext.id;
    files.push_back({folder + "/" + ext.name + ".so", ext.library.get()});
    prebuilt[ext.id] = {{"name", ext.name}, {"dir", folder}};
  }
  if (!prebuilt.empty()) {
    *prebuilt_json = prebuilt.dump();
    files.push_back({"prebuilt.json", prebuilt_json});
  }
  return files;
}

status write_kernelbench_folder(const fs::path& dir, const prepared_candidate& p,
                                const std::string& inputs) {
  std::string prebuilt_json;
  std::vector<run_file> files = kernelbench_candidate_files(p, &prebuilt_json);
  files.push_back({"runner.py", &kernelbench_candidate_source()});
  files.push_back({"judge.py", &kernelbench_judge_source()});
  files.push_back({"inputs.bin", &inputs});
  for (const auto& ext : p.extensions) {
    std::error_code ec;
    fs::create_directories(dir / "ext" / ext.id, ec);
    if (ec) {
      return error{"creating " + (dir / "ext" / ext.id).string() + ": " + ec.message()};
    }
  }
  return write_run_files(dir, files);
}

}  // namespace detail

namespace {

// `python -I -B args...` in dir: every python the KernelBench pipeline starts.
run_request python_request(const std::string& python, const fs::path& dir,
                           std::vector<std::string> args,
                           std::vector<std::pair<std::string, std::string>> env,
                           const resource_limits& limits, std::vector<fs::path> readonly) {
  run_request request;
  request.argv = {python, "-I", "-B"};
  request.argv.insert(request.argv.end(), std::make_move_iterator(args.begin()),
                      std::make_move_iterator(args.end()));
  request.working_dir = dir;
  request.env = std::move(env);
  request.limits = limits;
  request.readonly_paths = std::move(readonly);
  return request;
}

// A reference's two files as one compile-cache artifact: a digest line, the inputs' size, then
// both files.
std::string pack_reference_files(const std::string& inputs, const std::string& expected) {
  const std::string payload = std::to_string(inputs.size()) + "\n" + inputs + expected;
  return crypto::sha256_hex(payload) + "\n" + payload;
}

// The two files back, or nullopt when the artifact is not one pack_reference_files wrote whole.
std::optional<std::pair<std::string, std::string>> unpack_reference_files(const std::string& a) {
  const auto digest_end = a.find('\n');
  if (digest_end == std::string::npos ||
      crypto::sha256_hex(std::string_view(a).substr(digest_end + 1)) != a.substr(0, digest_end)) {
    return std::nullopt;
  }
  const auto size_end = a.find('\n', digest_end + 1);
  if (size_end == std::string::npos) {
    return std::nullopt;
  }
  std::uint64_t inputs = 0;
  const std::string_view size(a.data() + digest_end + 1, size_end - digest_end - 1);
  const auto [ptr, ec] = std::from_chars(size.data(), size.data() + size.size(), inputs);
  if (ec != std::errc{} || ptr != size.data() + size.size() || inputs > a.size() - size_end - 1) {
    return std::nullopt;
  }
  return std::pair{a.substr(size_end + 1, inputs), a.substr(size_end + 1 + inputs)};
}

// A KernelBench baseline as kept in the compile cache: its time (or the note saying why there is
// none) and the clocks over its measurement.
struct stored_baseline {
  std::optional<timing_stats> time;
  std::string note;
  std::string clock_note;
};

// "LKBBASE1 <sha256 of the JSON>\n<JSON>". The JSON names the problem and which baseline it is,
// so that a user can find one problem's entries in the cache folder (`grep -rl LKBBASE1`) and
// delete them.
constexpr std::string_view k_baseline_magic = "LKBBASE1";

std::string pack_baseline(const std::string& task_id, bool compiled, const stored_baseline& b) {
  nlohmann::json j{{"task", task_id},
                   {"baseline", compiled ? "compiled" : "eager"},
                   {"note", b.note},
                   {"clock_note", b.clock_note}};
  if (b.time) {
    j["time"] = {{"median_ms", b.time->median_ms}, {"min_ms", b.time->min_ms},
                 {"max_ms", b.time->max_ms},       {"q1_ms", b.time->q1_ms},
                 {"q3_ms", b.time->q3_ms},         {"reps", b.time->reps}};
  }
  const std::string payload = j.dump();
  return std::string(k_baseline_magic) + " " + crypto::sha256_hex(payload) + "\n" + payload;
}

// The baseline back, or nullopt when the artifact is not one pack_baseline wrote whole.
std::optional<stored_baseline> unpack_baseline(const std::string& a) {
  const std::size_t head = k_baseline_magic.size() + 1 + 64 + 1;
  if (a.size() < head || !a.starts_with(k_baseline_magic) || a[head - 1] != '\n' ||
      crypto::sha256_hex(std::string_view(a).substr(head)) !=
          a.substr(k_baseline_magic.size() + 1, 64)) {
    return std::nullopt;
  }
  const auto j = nlohmann::json::parse(a.substr(head), nullptr, false);
  if (!j.is_object() || !j.contains("note") || !j["note"].is_string() ||
      !j.contains("clock_note") || !j["clock_note"].is_string()) {
    return std::nullopt;
  }
  stored_baseline b;
  b.note = j["note"].get<std::string>();
  b.clock_note = j["clock_note"].get<std::string>();
  if (j.contains("time")) {
    const auto& t = j["time"];
    timing_stats time;
    for (auto [name, target] :
         {std::pair{"median_ms", &time.median_ms}, std::pair{"min_ms", &time.min_ms},
          std::pair{"max_ms", &time.max_ms}, std::pair{"q1_ms", &time.q1_ms},
          std::pair{"q3_ms", &time.q3_ms}}) {
      if (!t.is_object() || !t.contains(name) || !t[name].is_number()) {
        return std::nullopt;
      }
      *target = t[name].get<double>();
    }
    if (!t.contains("reps") || !t["reps"].is_number_integer() || t["reps"].get<int>() <= 0) {
      return std::nullopt;
    }
    time.reps = t["reps"].get<int>();
    b.time = time;
  }
  return b;
}

}  // namespace

run_request engine::kernelbench_request(const fs::path& dir, int gpu,
                                        std::vector<std::string> args) const {
  auto env = run_env(gpu);
  kernelbench_env(env, config_.python);
  // glibc moves its mmap and trim thresholds with each process's history of allocations, so one
  // process reuses a freed tensor's pages for the next call's while another hands them back and
  // faults fresh ones in on every call. On a CPU slot that was a reference of `a * scale + b` over
  // 4M floats kept at 13 ms or at 5.3 ms by chance of process, and identical code read a speedup
  // of 2.4 or 1.0. Fixed thresholds (blocks up to 4 GiB from the heap, kept) give every judge,
  // runner and reference process the reuse: a call is timed without the allocator's page faults.
  // Not the compile pool's: nothing is timed there, and its compilers keep their own malloc.
  env.emplace_back("MALLOC_MMAP_THRESHOLD_", std::string(k_kernelbench_malloc_threshold));
  env.emplace_back("MALLOC_TRIM_THRESHOLD_", std::string(k_kernelbench_malloc_threshold));
  return python_request(config_.python, dir, std::move(args), std::move(env),
                        config_.kernelbench_limits, readonly_paths_);
}

result<engine::kernelbench_slot> engine::kernelbench_slot_for(const task& t, int gpu) {
  auto device = kernelbench_device(gpu);
  if (!device) {
    return device.err();
  }
  auto reference = kernelbench_reference_for(t, *device, gpu);
  if (!reference) {
    return reference.err();
  }
  return kernelbench_slot{std::move(device.value()), std::move(reference.value())};
}

result<std::string> engine::kernelbench_device(int gpu) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = kernelbench_devices_.find(gpu); it != kernelbench_devices_.end()) {
      return it->second;
    }
  }
  auto dir = scratch_dir::create(config_.scratch_root, "probe-");
  if (!dir) {
    return dir.err();
  }
  // The second line is the slot's identity for the reference's cache key: torch 1.x has no CPU
  // capability query, so it reads as unknown there.
  const std::string probe =
      "import sys, platform, torch\n"
      "n = torch.cuda.device_count() if torch.cuda.is_available() else 0\n"
      "print('LEAP_TORCH', n)\n"
      "cpu = getattr(getattr(torch.backends, 'cpu', None), 'get_cpu_capability', lambda: '?')()\n"
      "gpu = (torch.cuda.get_device_name(0) + ' sm_%d%d' % torch.cuda.get_device_capability(0)) "
      "if n else '-'\n"
      "print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', "
      "torch.version.cuda, 'gpu', gpu, 'cpu', platform.machine(), cpu)";
  auto r = run_isolated(kernelbench_request(dir->path(), gpu, {"-c", probe}));
  if (!r) {
    return infrastructure_error(gpu, r.err().wrap("probing torch on " + slot_name(gpu)).message);
  }
  std::istringstream out(r->stdout_text);
  std::string marker;
  int gpus = -1;
  out >> marker >> gpus;
  std::string identity;
  std::getline(out >> std::ws, identity);
  if (!r->exited || r->exit_code != 0 || marker != "LEAP_TORCH" || gpus < 0) {
    return infrastructure_error(gpu, slot_name(gpu) + ": '" + config_.python +
                                         " -c \"import torch\"' failed (" + how_it_ended(*r) +
                                         "): " + stderr_tail(r->stderr_text, 300));
  }
  const std::string& want = config_.kernelbench_device;
  if (want == "cuda" && gpus == 0) {
    return infrastructure_error(
        gpu, "no usable GPU on " + slot_name(gpu) + ": torch sees no CUDA device");
  }
  const std::string device = want == "cpu" || gpus == 0 ? "cpu" : "cuda";
  std::lock_guard lock(mutex_);
  kernelbench_devices_[gpu] = device;
  kernelbench_identities_[gpu] = identity;
  return device;
}

std::string engine::kernelbench_reference_key(const task& t, const std::string& device) const {
  return crypto::sha256_hex(t.reference) + "\n" + std::to_string(t.seed) + "\n" +
         std::to_string(config_.trials) + "\n" + device + "\n" +
         std::to_string(kernelbench_timing_sets());
}

std::string engine::kernelbench_ship_marker(const std::string& key, int gpu) {
  std::string identity;
  {
    std::lock_guard lock(mutex_);
    identity = kernelbench_identities_[gpu];
  }
  return crypto::sha256_hex("kernelbench ship inputs v1\n" + key + "\n" + identity);
}

bool engine::ship_kernelbench_inputs(const task& t, const std::string& device, int gpu) {
  const std::string key = kernelbench_reference_key(t, device);
  bool first = false;
  {
    std::lock_guard lock(mutex_);
    first = kernelbench_ship_inputs_.insert(key).second;
  }
  if (first) {
    // Kept in the compile cache too, so that other engines and later processes on it send the
    // values at once instead of finding the judge's draw different again. A marker that cannot be
    // written costs only that: another process falls back once more, as this one did.
    const auto marked =
        cache_->get_or_build(kernelbench_ship_marker(key, gpu), []() -> result<build_output> {
          build_output out;
          out.ok = true;
          out.artifact = "send every case's values";
          return out;
        });
    static_cast<void>(marked);
  }
  return first;
}

result<std::shared_ptr<const engine::kernelbench_reference>> engine::kernelbench_reference_for(
    const task& t, const std::string& device, int gpu) {
  using value_type = std::shared_ptr<const kernelbench_reference>;
  std::string key = kernelbench_reference_key(t, device);
  bool ship_inputs = false;
  bool held = false;  // this engine has (or is computing) the reference: no marker to look up
  {
    std::lock_guard lock(mutex_);
    ship_inputs = kernelbench_ship_inputs_.contains(key);
    held = kernelbench_references_.contains(key);
  }
  if (!ship_inputs && !held) {
    // Another engine on this compile cache found the judge's draw different (only looked up:
    // a lookup that would build says it is absent).
    const auto marked = cache_->get_or_build(
        kernelbench_ship_marker(key, gpu),
        []() -> result<build_output> { return error{"no marker"}; },
        /*cache_failures=*/false);
    if (marked && marked->output.ok) {
      ship_inputs = true;
      std::lock_guard lock(mutex_);
      kernelbench_ship_inputs_.insert(key);
    }
  }
  if (ship_inputs) {
    key += "\nship inputs";
  }
  std::promise<result<value_type>> promise;
  std::shared_future<result<value_type>> future;
  bool mine = false;
  {
    std::lock_guard lock(mutex_);
    auto& entry = kernelbench_references_[key];
    if (entry.future.valid()) {
      future = entry.future;
    } else {
      future = entry.future = promise.get_future().share();
      mine = true;
    }
    entry.last_use = ++kernelbench_uses_;
  }
  if (!mine) {
    return future.get();
  }
  // Runs the reference in the sandbox and returns its two files' bytes, inputs then expected.
  const auto began = std::chrono::steady_clock::now();
  double run_s = 0;
  auto run_reference = [&]() -> result<std::pair<std::string, std::string>> {
    const auto run_began = std::chrono::steady_clock::now();
    auto dir = detail::make_run_folder(
        config_.scratch_root, "kbref-",
        {{"problem.py", &t.reference}, {"reference.py", &kernelbench_reference_source()}});
    if (!dir) {
      return dir.err();
    }
    run_request request =
        kernelbench_request(dir->path(), device == "cuda" ? gpu : -1, {"reference.py"});
    ++kernelbench_reference_runs_;
    // The timing sets' seeds, drawn for this run and written nowhere a candidate's run can read:
    // one that knew them could draw the sets itself and tell which timed calls the judge checks
    // (those take the sets; every other timed call gets inputs the judge draws).
    std::random_device entropy;
    nlohmann::json timing_seeds = nlohmann::json::array();
    for (int i = 0; i < kernelbench_timing_sets(); ++i) {
      timing_seeds.push_back((static_cast<std::uint64_t>(entropy()) << 31) ^ entropy());
    }
    request.stdin_data = nlohmann::json{{"trials", config_.trials},
                                        {"timing_sets", kernelbench_timing_sets()},
                                        {"timing_seeds", std::move(timing_seeds)},
                                        {"seed", t.seed},
                                        {"device", device},
                                        {"ship_inputs", ship_inputs}}
                             .dump() +
                         "\n";
    auto r = run_isolated(request);
    if (!r) {
      return r.err().wrap(t.id + ": running the KernelBench reference");
    }
    if (!r->exited || r->exit_code != 0) {
      // The reference writes every trial's and timing set's outputs (and the inputs problem.py
      // does not draw alike from their seeds) to the run's scratch: a problem with large tensors
      // fills it, which is the engine's limit, not the problem's fault, and says which to raise.
      const bool scratch_full = r->stderr_text.find("No space left on device") != std::string::npos;
      return error{
          t.id + ": the KernelBench problem's reference failed on " + slot_name(gpu) + " (" +
          how_it_ended(*r) + ")" +
          (scratch_full
               ? ": its expected outputs for " + std::to_string(config_.trials) + " trial(s) and " +
                     std::to_string(kernelbench_timing_sets()) +
                     " timing set(s) do not fit the run's scratch of " +
                     std::to_string(config_.kernelbench_limits.scratch_bytes >> 20) +
                     " MiB (a larger scratch: verifier.kernelbench_scratch_bytes, leap verify "
                     "--scratch-bytes; or fewer trials)"
               : "") +
          ": " + stderr_tail(r->stderr_text, 1000)};
    }
    std::pair<std::string, std::string> files;
    for (auto [file, target] :
         {std::pair{"inputs.bin", &files.first}, std::pair{"expected.bin", &files.second}}) {
      // The files came back through the scratch's copy, so it bounds them.
      auto bytes =
          read_untrusted_file(dir->path() / file, config_.kernelbench_limits.scratch_bytes);
      if (!bytes) {
        return bytes.err().wrap(t.id + ": KernelBench reference");
      }
      *target = std::move(bytes.value());
    }
    run_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - run_began).count();
    return files;
  };
  // The reference's outputs are kept in the compile cache too, so that other engines and later
  // processes on this cache (verifier nodes, a resumed run) do not run the problem again. Its key
  // adds the slot's python, torch, CUDA and GPU model or CPU capability (outputs differ across
  // them within the tolerance) and the reference runner's own source. Only what the engine's own
  // run of the problem wrote goes in (no candidate's code runs there), with a digest the entry is
  // checked against when read back.
  auto cached_reference = [&]() -> result<std::pair<std::string, std::string>> {
    std::string identity;
    {
      std::lock_guard lock(mutex_);
      identity = kernelbench_identities_[gpu];
    }
    const std::string disk_key =
        crypto::sha256_hex("kernelbench reference v1\n" + key + "\n" + identity + "\n" +
                           crypto::sha256_hex(kernelbench_reference_source()));
    auto lookup = cache_->get_or_build(
        disk_key,
        [&]() -> result<build_output> {
          auto files = run_reference();
          if (!files) {
            return files.err();
          }
          build_output out;
          out.ok = true;
          out.artifact = pack_reference_files(files->first, files->second);
          return out;
        },
        /*cache_failures=*/false);
    if (!lookup) {
      return lookup.err();
    }
    if (auto files = unpack_reference_files(lookup->output.artifact)) {
      return std::move(*files);
    }
    // A damaged entry (the digest differs): computed again, not trusted.
    return run_reference();
  };
  auto compute = [&]() -> result<value_type> {
    auto files = cached_reference();
    if (!files) {
      return files.err();
    }
    auto ref = std::make_shared<kernelbench_reference>();
    ref->problem = t.reference;
    for (auto [file, kind, target, bytes] :
         {std::tuple{"inputs.bin", kb_file::inputs, &ref->inputs, &files->first},
          std::tuple{"expected.bin", kb_file::expected, &ref->expected, &files->second}}) {
      auto parsed = parse_kb_file(std::make_shared<const std::string>(std::move(*bytes)), kind);
      if (!parsed) {
        return parsed.err().wrap(t.id + ": KernelBench reference " + file);
      }
      *target = std::move(parsed.value());
    }
    for (const auto& trial : ref->expected.trials) {
      for (const auto& out : trial.outputs.items) {
        if (out.tag == 'T' && out.dtype != "float32" && out.dtype != "float64" &&
            out.dtype != "float16" && out.dtype != "bfloat16" && out.dtype.rfind("int", 0) != 0 &&
            out.dtype != "uint8" && out.dtype != "bool") {
          return error{t.id + ": the KernelBench reference returns a tensor of dtype " + out.dtype +
                       ", which the judge does not compare"};
        }
      }
    }
    ref->run_s = run_s;
    ref->obtained_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    return value_type(std::move(ref));
  };
  auto computed = compute();
  {
    std::lock_guard lock(mutex_);
    if (!computed) {
      // Not remembered: the next candidate retries (the failure may be the slot's, not the task's).
      kernelbench_references_.erase(key);
    } else {
      kernelbench_references_[key].bytes =
          (*computed)->inputs.bytes->size() + (*computed)->expected.bytes->size();
      std::size_t total = 0;
      for (const auto& [k, e] : kernelbench_references_) {
        total += e.bytes;
      }
      // Evicts finished entries only (bytes > 0); callers holding one keep its data alive.
      while (total > config_.kernelbench_cache_bytes) {
        auto oldest = kernelbench_references_.end();
        for (auto it = kernelbench_references_.begin(); it != kernelbench_references_.end(); ++it) {
          if (it->second.bytes > 0 && it->first != key &&
              (oldest == kernelbench_references_.end() ||
               it->second.last_use < oldest->second.last_use)) {
            oldest = it;
          }
        }
        if (oldest == kernelbench_references_.end()) {
          break;
        }
        total -= oldest->second.bytes;
        kernelbench_references_.erase(oldest);
      }
    }
  }
  promise.set_value(computed);
  return computed;
}

namespace {

// The KernelBench judge's record on its stdout: "LKBJUDG1", the status's length (u32) and JSON,
// then the trials' data. A missing or malformed record is an empty status object and no data.
std::pair<nlohmann::json, std::string> judge_record(std::string out) {
  constexpr std::string_view magic = "LKBJUDG1";
  if (out.size() < magic.size() + 4 || !out.starts_with(magic)) {
    return {nlohmann::json::object(), {}};
  }
  std::uint32_t length = 0;
  std::memcpy(&length, out.data() + magic.size(), 4);
  const std::size_t at = magic.size() + 4;
  if (length > k_max_result_json_bytes || length > out.size() - at) {
    return {nlohmann::json::object(), {}};
  }
  auto status = nlohmann::json::parse(out.substr(at, length), nullptr, false);
  if (!status.is_object()) {
    return {nlohmann::json::object(), {}};
  }
  out.erase(0, at + length);  // in place: the data may be hundreds of MiB
  return {std::move(status), std::move(out)};
}

// "sm_90a" -> "9.0a", as torch's TORCH_CUDA_ARCH_LIST spells it; empty for anything else.
std::string torch_arch(const std::string& sm) {
  static const std::regex form("sm_([0-9]+)([0-9])(a?)");
  std::smatch m;
  if (!std::regex_match(sm, m, form)) {
    return {};
  }
  return m[1].str() + "." + m[2].str() + m[3].str();
}

// torch's build log holds ninja's command lines and Python's traceback around the compilers'
// diagnostics: the candidate reads the diagnostics, with files named by their base names.
std::string extension_build_feedback(const std::string& name, const std::string& log,
                                     const feedback_options& options) {
  static const std::regex host_path(R"((/[^\s:'"]*)?/build/)");
  std::string kept;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("[") || line.starts_with("Traceback") || line.starts_with("  File ") ||
        line.starts_with("    ") ||
        line.find("subprocess.CalledProcessError") != std::string::npos ||
        line.find("ninja: build stopped") != std::string::npos) {
      continue;
    }
    kept += std::regex_replace(line, host_path, "") + "\n";
  }
  return trim_to_budget("Building your extension '" + name +
                            "' (torch.utils.cpp_extension.load_inline) failed:\n" + kept,
                        options.char_budget);
}

const char* k_probe_cpp = "torch::Tensor leap_probe_fill(torch::Tensor a);";
const char* k_probe_cuda =
    "#include <torch/extension.h>\n"
    "__global__ void leap_probe_kernel(float* x, long n) {\n"
    "  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;\n"
    "  if (i < n) x[i] = 1.0f;\n"
    "}\n"
    "torch::Tensor leap_probe_fill(torch::Tensor a) {\n"
    "  leap_probe_kernel<<<(a.numel() + 255) / 256, 256>>>(a.data_ptr<float>(), a.numel());\n"
    "  return a;\n"
    "}\n";
const char* k_probe_host =
    "torch::Tensor leap_probe_fill(torch::Tensor a) { return a.fill_(1.0); }";

}  // namespace

std::vector<std::pair<std::string, std::string>> engine::extension_env() const {
  std::vector<std::pair<std::string, std::string>> env{
      {"PATH", base_path(dir_of(config_.nvcc))},
      {"LC_ALL", "C"},
      {"LANG", "C"},
      {"PYTHONHASHSEED", "0"},
      // No GPU: what is built here must not depend on the device, and nothing here may use one.
      {"CUDA_VISIBLE_DEVICES", ""},
      {"MAX_JOBS", "2"}};
  if (const std::string arch = torch_arch(config_.cuda_arch); !arch.empty()) {
    env.emplace_back("TORCH_CUDA_ARCH_LIST", arch);
  }
  if (const std::string bin = dir_of(config_.nvcc); !bin.empty()) {
    env.emplace_back("CUDA_HOME", dir_of(bin));
  }
  kernelbench_env(env, config_.python);
  return env;
}

run_request engine::compile_pool_request(const fs::path& dir, std::vector<std::string> args) const {
  return python_request(config_.python, dir, std::move(args), extension_env(),
                        config_.kernelbench_build_limits, readonly_paths_);
}

result<std::string> engine::extension_toolchain() {
  std::lock_guard lock(probe_mutex_);
  if (extension_toolchain_) {
    return *extension_toolchain_;
  }
  auto dir = scratch_dir::create(config_.scratch_root, "probe-");
  if (!dir) {
    return dir.err();
  }
  const std::string probe =
      "import sys, torch\nprint('LEAP_TORCH', sys.version.split()[0], torch.__version__, "
      "torch.version.cuda)";
  auto r = run_isolated(compile_pool_request(dir->path(), {"-c", probe}));
  if (!r) {
    return infrastructure_error(-1, r.err().wrap("probing torch for extension builds").message);
  }
  if (!r->exited || r->exit_code != 0 || !r->stdout_text.starts_with("LEAP_TORCH")) {
    return infrastructure_error(
        -1, "'" + config_.python + " -c \"import torch\"' failed in the compile pool (" +
                how_it_ended(*r) + "): " + stderr_tail(r->stderr_text, 300));
  }
  std::string identity = r->stdout_text + config_.nvcc + " " + config_.cuda_arch + "\n";
  for (const task_kind kind : {task_kind::cpp, task_kind::cuda}) {
    auto id = compiler_identity(kind);
    identity += (id ? *id : std::string("unavailable")) + "\n";
  }
  extension_toolchain_ = identity;
  return identity;
}

namespace {

bool has_cuda_sources(const nlohmann::json& args) {
  const auto it = args.find("cuda_sources");
  return it != args.end() && !it->is_null() &&
         !(it->is_string() && it->get<std::string>().empty()) && !(it->is_array() && it->empty());
}

// What load_inline would build `args` with that a precompiled header depends on: the C++ flags and
// whether CUDA's include paths are added (with_cuda, else whether there are CUDA sources).
nlohmann::json pch_request_of(const nlohmann::json& args) {
  // An empty flag (KernelBench's examples pass extra_cflags=[""]) is no word in torch's build
  // file: such a build is the default flags' and shares their header.
  nlohmann::json flags = nlohmann::json::array();
  if (args.contains("extra_cflags") && args["extra_cflags"].is_array()) {
    for (const auto& f : args["extra_cflags"]) {
      if (!(f.is_string() && f.get<std::string>().empty())) {
        flags.push_back(f);
      }
    }
  }
  bool cuda = false;
  if (args.contains("with_cuda") && args["with_cuda"].is_boolean()) {
    cuda = args["with_cuda"].get<bool>();
  } else if (args.contains("cuda_sources")) {
    const auto& c = args["cuda_sources"];
    cuda = (c.is_string() && !c.get<std::string>().empty()) || (c.is_array() && !c.empty());
  }
  return {{"extra_cflags", std::move(flags)}, {"with_cuda", cuda}};
}

// The builder's "LEAP_<word> ..." line in a build log, less the word; empty when absent.
std::string builder_line(const std::string& log, const std::string& word) {
  const std::string marker = "LEAP_" + word + " ";
  const auto at = log.find(marker);
  if (at == std::string::npos) {
    return {};
  }
  const auto end = log.find('\n', at);
  return log.substr(at + marker.size(),
                    std::min<std::size_t>(
                        300, (end == std::string::npos ? log.size() : end) - at - marker.size()));
}

}  // namespace

result<folder_lookup> engine::extension_pch(const nlohmann::json& args,
                                            const std::string& toolchain, bool wait) {
  // The sandbox binds no folder under these (process.cpp): a header there could not be read.
  std::error_code ec;
  const std::string where = fs::weakly_canonical(cache_->dir(), ec).string() + "/";
  for (const char* hidden : {"/tmp/", "/var/tmp/", "/run/", "/dev/", "/proc/", "/sys/"}) {
    if (where.starts_with(hidden)) {
      folder_lookup none;
      none.log = std::string("the compile cache lies under ") + hidden +
                 ", which the sandbox does not show its builds";
      return none;
    }
  }
  const nlohmann::json request = pch_request_of(args);
  const std::string key = crypto::sha256_hex("kbpch-v1\n" + toolchain + "\n" +
                                             kernelbench_pch_source() + "\n" + request.dump());
  if (!wait) {
    if (auto ready = cache_->find_folder(key)) {
      return *ready;
    }
    folder_lookup none;
    none.log =
        "not ready, not waited for: nvcc's part of a build with CUDA sources, which the "
        "header cannot shorten, is the longer one";
    return none;
  }
  return cache_->get_or_build_folder(key, [&](const fs::path& aside) -> result<build_output> {
    const std::string request_json = request.dump();
    auto dir = detail::make_run_folder(
        config_.scratch_root, "kbpch-",
        {{"pch.py", &kernelbench_pch_source()}, {"request.json", &request_json}});
    if (!dir) {
      return dir.err();
    }
    auto r = run_isolated(compile_pool_request(dir->path(), {"pch.py"}));
    if (!r) {
      return infrastructure_error(-1, r.err().wrap("building torch's precompiled header").message);
    }
    build_output out;
    out.log = "precompiling torch's headers: " + how_it_ended(*r) + ": " +
              stderr_tail(r->stderr_text + r->stdout_text, 600);
    if (!r->exited || r->exit_code != 0) {
      return out;
    }
    // Moved into the engine's folder by the engine: read-only there for every build that uses it.
    for (const char* name : {"leap_torch.h", "leap_torch.h.gch"}) {
      std::error_code ec;
      fs::rename(dir->path() / name, aside / name, ec);
      if (ec) {
        ec.clear();
        fs::copy_file(dir->path() / name, aside / name, fs::copy_options::overwrite_existing, ec);
      }
      if (ec) {
        out.log = "precompiling torch's headers: " + std::string(name) + ": " + ec.message();
        return out;
      }
      fs::permissions(aside / name,
                      fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                          fs::perms::others_read,
                      ec);
    }
    out.ok = true;
    return out;
  });
}

result<cache_lookup> engine::build_extension(const nlohmann::json& args) {
  auto toolchain = extension_toolchain();
  if (!toolchain) {
    return toolchain.err();
  }
  const std::string key = crypto::sha256_hex("kbext-v1\n" + *toolchain + "\n" +
                                             kernelbench_builder_source() + "\n" + args.dump());
  // Failures are not kept: the toolchain's own fault (a missing header) must not stay a verdict
  // once it is fixed, and the same failing source rarely comes twice. The header is not part of
  // the key: with or without it, g++ compiles the same text with the same flags.
  return cache_->get_or_build(
      key,
      [&]() -> result<build_output> {
        const std::string request_json = args.dump();
        std::string pch_json;
        // The compile pool's run of the builder, in the folder run_build makes.
        const run_request pool = compile_pool_request({}, {"builder.py"});
        detail::build_request build;
        build.files = {{"builder.py", &kernelbench_builder_source()},
                       {"request.json", &request_json}};
        build.argv = pool.argv;
        build.env = pool.env;
        auto mark = crypto::random_hex(16);
        if (!mark) {
          return mark.err();
        }
        build.env.emplace_back("LEAP_BUILDER_MARK", *mark);
        build.limits = pool.limits;
        build.readonly_paths = pool.readonly_paths;
        std::string pch_absent;
        std::optional<folder_lookup> pch;
        if (config_.kernelbench_pch) {
          const auto asked = std::chrono::steady_clock::now();
          // With CUDA sources the header serves g++'s part, which runs beside nvcc's longer one:
          // waiting for it (or building it, 34 s on an H100) would only delay the build.
          auto found = extension_pch(args, *toolchain, !has_cuda_sources(args));
          if (!found) {
            return found.err();
          }
          if (found->ok) {
            pch_json = nlohmann::json{{"header", (found->path / "leap_torch.h").string()}}.dump();
            build.files.push_back({"pch.json", &pch_json});
            build.readonly_paths.push_back(found->path);
            if (!found->hit) {
              // What the header cost this build: the cold verify's largest part, said where it
              // was paid (waiting for a build ahead, or building it here).
              const auto waited =
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
              std::ostringstream line;
              line << "LEAP_PCH_READY after " << (found->shared ? "waiting " : "building them, ")
                   << std::fixed << std::setprecision(1) << waited << " s"
                   << (found->shared ? " for their build in progress" : "") << "\n";
              pch_absent = line.str();
            }
            pch = std::move(found.value());
          } else {
            pch_absent = "LEAP_PCH absent: " + found->log.substr(0, 300) + "\n";
          }
        }
        build.artifact = "ext.so";
        build.what = "running the extension builder";
        auto built = detail::run_build(config_.scratch_root, build);
        if (!built) {
          return built.err();
        }
        build_output out = std::move(built.value());
        out.log = pch_absent + own_builder_lines(out.log, *mark);
        if (pch && builder_line(out.log, "PCH").starts_with("refused")) {
          // Refused (damaged, or made for other flags): made again by the next build.
          cache_->drop_folder(pch->path.filename().string());
        }
        return out;
      },
      false);
}

result<folder_lookup> engine::default_extension_pch() {
  if (!config_.kernelbench_prebuild || !config_.kernelbench_pch) {
    folder_lookup none;
    none.log = "off (kernelbench_prebuild or kernelbench_pch is false)";
    return none;
  }
  auto toolchain = extension_toolchain();
  if (!toolchain) {
    return toolchain.err();
  }
  // The probe's first line is "LEAP_TORCH <python> <torch> <torch.version.cuda>": a CUDA torch's
  // candidates bring CUDA sources, whose builds include CUDA's headers beside torch's.
  std::istringstream probe(*toolchain);
  std::string marker;
  std::string python;
  std::string torch;
  std::string cuda;
  probe >> marker >> python >> torch >> cuda;
  return extension_pch(nlohmann::json{{"with_cuda", !cuda.empty() && cuda != "None"}}, *toolchain);
}

void engine::prepare_kernelbench() {
  std::lock_guard lock(prepare_mutex_);
  if (prepared_.valid()) {
    return;
  }
  std::packaged_task<result<folder_lookup>()> job([this] { return default_extension_pch(); });
  prepared_ = job.get_future().share();
  prepare_thread_ = std::thread(std::move(job));
}

result<folder_lookup> engine::kernelbench_prepared(
    const std::function<void(int seconds)>& progress) {
  prepare_kernelbench();
  std::shared_future<result<folder_lookup>> prepared;
  {
    std::lock_guard lock(prepare_mutex_);
    prepared = prepared_;
  }
  int waited = 0;
  while (prepared.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    waited += 10;
    if (progress) {
      progress(waited);
    }
  }
  return prepared.get();
}

engine::~engine() {
  {
    // Told to end (their job's socket closed) before anything they use goes.
    std::lock_guard lock(standby_mutex_);
    standby_judges_.clear();
  }
  std::lock_guard lock(prepare_mutex_);
  if (prepare_thread_.joinable()) {
    prepare_thread_.join();
  }
}

bool prepare_kernelbench_saying(engine& e, const std::function<void(const std::string&)>& say) {
  say("precompiling torch's headers for KernelBench extension builds (once per python, torch, "
      "compiler and flags; about 40 s of a CPU core when the compile cache does not hold them)");
  const auto start = std::chrono::steady_clock::now();
  auto ready = e.kernelbench_prepared([&](int seconds) {
    say("still precompiling torch's headers (" + std::to_string(seconds) + " s)");
  });
  if (!ready) {
    say("torch's headers not precompiled (" + ready.err().message.substr(0, 300) +
        "): extension builds go on without them");
    return false;
  }
  if (!ready->ok) {
    say("torch's headers not precompiled (" + ready->log.substr(0, 300) +
        "): extension builds go on without them");
    return false;
  }
  std::ostringstream took;
  took << std::fixed << std::setprecision(1)
       << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  say(std::string("torch's headers precompiled: ") +
      (ready->hit ? "found in the compile cache" : "built in " + took.str() + " s") + " (" +
      ready->path.string() + ")");
  return true;
}

status engine::prebuild_kernelbench(const task& t, prepared_candidate& p) {
  // Only code that names load_inline is recorded (a torch import in the compile pool costs
  // seconds); a build the text hides is made in the candidate's run, as every build was before.
  if (p.code.find("load_inline") == std::string::npos) {
    return ok_status();
  }
  auto toolchain = extension_toolchain();
  if (!toolchain) {
    return toolchain.err();
  }
  // What the recorder writes depends on the source, the recorder, python and torch (all in this
  // key) and on nothing else the engine gives it: so the same source's recording is reused. A
  // candidate that records differently from run to run (time, randomness) only moves a build from
  // the compile pool to its run: the run's load_inline builds whatever it finds no library for.
  const std::string record_key = crypto::sha256_hex("kbrec-v1\n" + *toolchain + "\n" +
                                                    kernelbench_recorder_source() + "\n" + p.code);
  auto recorded = cache_->get_or_build(
      record_key,
      [&]() -> result<build_output> {
        auto dir = detail::make_run_folder(
            config_.scratch_root, "kbrec-",
            {{"solution.py", &p.code}, {"recorder.py", &kernelbench_recorder_source()}});
        if (!dir) {
          return dir.err();
        }
        auto r = run_isolated(compile_pool_request(dir->path(), {"recorder.py"}));
        if (!r) {
          return infrastructure_error(
              -1, r.err().wrap(t.id + ": recording the extension builds").message);
        }
        build_output out;
        out.artifact = r->stdout_text;
        out.timed_out = r->timed_out;
        // Only a record that parses is kept (failures are not cached).
        out.ok = !r->timed_out && parse_kb_recording(r->stdout_text).ok();
        return out;
      },
      false);
  if (!recorded) {
    return recorded.err();
  }
  p.compile_ms += recorded->build_ms;
  auto recording = parse_kb_recording(recorded->output.artifact);
  if (!recording) {
    p.build_note = "the compile pool could not record its builds (" + recording.err().message +
                   "): its run built them";
    return ok_status();
  }
  std::vector<std::string> notes;
  if (recorded->hit || recorded->shared) {
    notes.emplace_back("the same source's recorded builds reused (no recorder run)");
  }
  if (!recording->import_ok) {
    notes.push_back("its import stopped without a GPU (" + recording->message.substr(0, 200) +
                    "): calls after that point were built in its run");
  }
  for (const auto& other : recording->other) {
    notes.push_back(other + ": built in its run");
  }
  int from_cache = 0;
  for (const auto& request_of : recording->extensions) {
    const std::string name = request_of.args.is_object() && request_of.args.contains("name") &&
                                     request_of.args["name"].is_string()
                                 ? request_of.args["name"].get<std::string>().substr(0, 100)
                                 : std::string("?");
    if (auto why = kb_extension_refusal(request_of.args)) {
      notes.push_back("'" + name + "' was built in its run: " + *why);
      continue;
    }
    auto lookup = build_extension(request_of.args);
    if (!lookup) {
      return lookup.err();
    }
    p.compile_ms += lookup->build_ms;
    if (!lookup->hit && !lookup->shared) {
      // Built now: whether torch's precompiled headers served it, and what each part cost.
      const std::string pch = builder_line(lookup->output.log, "PCH");
      const std::string ready = builder_line(lookup->output.log, "PCH_READY");
      const std::string parts = builder_line(lookup->output.log, "BUILD_MS");
      const std::string slim = builder_line(lookup->output.log, "SLIM");
      if (!pch.empty() || !parts.empty() || !slim.empty()) {
        notes.push_back("'" + name + "': precompiled torch headers " +
                        (pch.empty() ? std::string("not asked for") : pch) +
                        (ready.empty() ? std::string{} : " (ready " + ready + ")") +
                        (slim.empty()
                             ? std::string{}
                             : "; stand-ins for torch's headers in CUDA sources: " + slim) +
                        (parts.empty() ? std::string{} : "; build parts (ms): " + parts));
      }
    }
    if (lookup->output.ok) {
      // An extension this toolchain built (now or for the cache's key, which names the toolchain)
      // is as good a proof that it works as the known-good probe would be: a later failing build
      // is the answer's without building the probe.
      {
        std::lock_guard lock(probe_mutex_);
        extension_probe_ok_[0] = true;
        if (has_cuda_sources(request_of.args)) {
          extension_probe_ok_[1] = true;
        }
      }
      from_cache += lookup->hit || lookup->shared ? 1 : 0;
      p.extensions.push_back(
          {request_of.id, name,
           std::make_shared<const std::string>(std::move(lookup->output.artifact))});
      continue;
    }
    if (!lookup->output.timed_out) {
      // The candidate's failure only if the toolchain builds a known-good extension of its kind.
      if (auto s = probe_extension_toolchain(request_of.args.contains("cuda_sources") &&
                                             !request_of.args["cuda_sources"].is_null());
          !s) {
        return s.err();
      }
    }
    const double limit =
        std::chrono::duration<double>(config_.kernelbench_build_limits.wall).count();
    verdict v =
        make_verdict(verdict_category::compile,
                     lookup->output.timed_out
                         ? "Building your extension '" + name + "' did not finish within " +
                               std::to_string(static_cast<int>(limit)) + " s and was stopped."
                         : extension_build_feedback(name, lookup->output.log, config_.feedback));
    v.compile_ms = p.compile_ms;
    v.diagnostics = lookup->output.log.substr(0, 4000);
    v.build_note = "compile pool";
    p.final_verdict = std::move(v);
    return ok_status();
  }
  if (!p.extensions.empty()) {
    p.cache_hit = from_cache == static_cast<int>(p.extensions.size());
    notes.insert(notes.begin(),
                 std::to_string(p.extensions.size()) + " extension(s) built in the compile pool" +
                     (from_cache > 0 ? " (" + std::to_string(from_cache) + " from the cache)"
                                     : std::string{}));
  }
  std::string joined;
  for (const auto& n : notes) {
    joined += (joined.empty() ? "" : "; ") + n;
  }
  p.build_note = joined;
  return ok_status();
}

status engine::probe_extension_toolchain(bool cuda) {
  {
    std::lock_guard lock(probe_mutex_);
    if (extension_probe_ok_[cuda ? 1 : 0]) {
      return ok_status();
    }
  }
  nlohmann::json args{{"name", cuda ? "leap_probe_cuda" : "leap_probe_host"},
                      {"cpp_sources", cuda ? k_probe_cpp : k_probe_host},
                      {"functions", {"leap_probe_fill"}}};
  if (cuda) {
    args["cuda_sources"] = k_probe_cuda;
  }
  auto lookup = build_extension(args);
  if (!lookup) {
    return lookup.err();
  }
  if (!lookup->output.ok) {
    return infrastructure_error(
        -1, std::string("the compile pool cannot build a known-good ") + (cuda ? "CUDA" : "C++") +
                " extension with " + config_.python +
                " (torch.utils.cpp_extension): " + stderr_tail(lookup->output.log, 600));
  }
  std::lock_guard lock(probe_mutex_);
  extension_probe_ok_[cuda ? 1 : 0] = true;
  return ok_status();
}

namespace {

// The most a judge's record may hold for `ref`: every trial's outputs and inputs and up to 8
// checked timed calls' (4x: a candidate's outputs may be wider).
std::size_t judge_record_bound(const kb_data& expected, const kb_data& inputs) {
  return 4 * (expected.bytes->size() + inputs.bytes->size()) + (1 << 20);
}

std::string seconds_text(double s) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << s << " s";
  return out.str();
}

// The tensors' bytes of a reference's cases: what the problem's data holds on the slot, whether its
// values travel (inputs.bin, expected.bin) or the judge draws them from their seeds.
std::uint64_t kernelbench_case_bytes(const kb_data& inputs, const kb_data& expected) {
  constexpr std::uint64_t most = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t sent = inputs.bytes->size() + expected.bytes->size();
  return inputs.drawn_bytes > most - sent ? most : sent + inputs.drawn_bytes;
}

// The verdict's reference_note: the reference's cases (inputs and expected outputs, and how much
// of them the judge draws from their seeds instead of receiving them), how they were obtained (the
// problem run in the sandbox for `run_s`, or read from the compile cache; `obtained_s` in all) and
// how long this run waited for them, since a problem with large tensors can spend more time there
// than in the candidate's run.
std::string kernelbench_reference_note(const kb_data& inputs, const kb_data& expected, double run_s,
                                       double obtained_s, double waited_s) {
  const std::string how = run_s > 0
                              ? "the problem run in the sandbox in " + seconds_text(run_s) + " (" +
                                    seconds_text(obtained_s) + " with the compile cache's write)"
                              : "read from the compile cache in " + seconds_text(obtained_s);
  const std::string drawn = inputs.drawn_bytes > 0
                                ? "; the judge draws " + format_bytes(inputs.drawn_bytes) +
                                      " of them, inputs, from their seeds"
                                : "";
  return format_bytes(kernelbench_case_bytes(inputs, expected)) + " of cases, " + how +
         "; this run waited " + seconds_text(waited_s) + " for them" + drawn;
}

}  // namespace

nlohmann::json engine::kernelbench_judge_config(const kernelbench_reference& ref,
                                                const std::string& device, own_kernel_policy policy,
                                                int sharing) const {
  // The judge allocates the outputs' buffers as the reference's outputs are.
  nlohmann::json slots = nlohmann::json::array();
  for (const kb_trial& trial : ref.expected.trials) {
    nlohmann::json outputs = nlohmann::json::array();
    for (const kb_value& out : trial.outputs.items) {
      outputs.push_back(
          out.tag == 'T' ? nlohmann::json{{"tag", "T"}, {"dtype", out.dtype}, {"shape", out.shape}}
                         : nlohmann::json{{"tag", std::string(1, out.tag)}});
    }
    slots.push_back(std::move(outputs));
  }
  nlohmann::json config{{"device", device},
                        {"own_kernel", to_string(policy)},
                        {"slots", std::move(slots)},
                        {"trials", config_.trials},
                        {"timing_reps", config_.timing_reps}};
  // For the cases the judge draws from their seeds and the timed calls' fresh inputs: sent, never
  // written where the candidate's run could change it before the judge reads it.
  config["problem"] = ref.problem;
  if (sharing > 1) {
    // The judges waiting on this slot for later jobs hold their CUDA contexts all along.
    const auto waiting = static_cast<std::uint64_t>(
        config_.kernelbench_standby
            ? std::max(sharing, 1) * std::max(config_.kernelbench_standby_depth, 1)
            : 0);
    config["memory_share"] = {
        {"runs", sharing},
        {"reserve_bytes", shared_gpu_reserve(config_.gpu_memory_reserve_bytes, sharing,
                                             kernelbench_case_bytes(ref.inputs, ref.expected),
                                             waiting, config_.gpu_context_bytes)}};
  }
  return config;
}

run_request engine::kernelbench_judge_request(const std::filesystem::path& dir,
                                              const kernelbench_reference& ref,
                                              const std::string& device, int gpu,
                                              own_kernel_policy policy, int sharing) const {
  run_request request = kernelbench_request(dir, device == "cuda" ? gpu : -1, {"judge.py"});
  // On a CPU slot the judge copies each output out of the runner's memory (on CUDA it opens the
  // runner's device memory instead).
  request.read_child_memory = device != "cuda";
  request.limits.output_cap_bytes =
      std::max(request.limits.output_cap_bytes, judge_record_bound(ref.expected, ref.inputs));
  request.stdin_data = kernelbench_judge_config(ref, device, policy, sharing).dump() + "\n";
  return request;
}

result<std::unique_ptr<detail::started_judge>> engine::start_kernelbench_judge(
    int gpu, const std::string& device, bool warm_profiler, std::size_t output_cap,
    const std::string& fits) {
  auto dir = detail::make_run_folder(
      config_.scratch_root, "kb-",
      {{"runner.py", &kernelbench_candidate_source()}, {"judge.py", &kernelbench_judge_source()}});
  if (!dir) {
    return dir.err();
  }
  std::vector<std::string> args{"judge.py", "--standby", device};
  if (warm_profiler) {
    args.emplace_back("--warm-profiler");
  }
  run_request request = kernelbench_request(dir->path(), device == "cuda" ? gpu : -1, args);
  request.read_child_memory = device != "cuda";  // as kernelbench_judge_request's
  request.limits.output_cap_bytes = std::max(request.limits.output_cap_bytes, output_cap);
  return detail::started_judge::start(std::move(request), std::move(dir.value()), fits);
}

std::unique_ptr<detail::started_judge> engine::take_standby_judge(int slot,
                                                                  const std::string& fits) {
  std::lock_guard lock(standby_mutex_);
  auto& ready = standby_judges_[slot];
  // One that ended while it waited (killed, or its torch failed) is dropped: a fresh start says
  // why, if the slot is broken.
  std::erase_if(ready, [](const auto& j) { return j->ended(); });
  for (auto it = ready.begin(); it != ready.end(); ++it) {
    if ((*it)->fits() == fits) {
      auto judge = std::move(*it);
      ready.erase(it);
      return judge;
    }
  }
  return nullptr;
}

std::size_t engine::standby_judges_fitting(int slot, const std::string& fits) {
  std::lock_guard lock(standby_mutex_);
  auto& ready = standby_judges_[slot];
  return static_cast<std::size_t>(std::count_if(
      ready.begin(), ready.end(), [&](const auto& j) { return !j->ended() && j->fits() == fits; }));
}

void engine::keep_standby_judge(int slot, std::size_t most,
                                std::unique_ptr<detail::started_judge> judge) {
  std::unique_ptr<detail::started_judge> oldest;  // abandoned outside the lock: that waits
  {
    std::lock_guard lock(standby_mutex_);
    auto& ready = standby_judges_[slot];
    ready.push_back(std::move(judge));
    if (ready.size() > std::max<std::size_t>(most, 1)) {
      oldest = std::move(ready.front());
      ready.erase(ready.begin());
    }
  }
}

result<engine::baseline_time> engine::kernelbench_baseline_time(const task& t,
                                                                const kernelbench_reference& ref,
                                                                const std::string& device, int gpu,
                                                                kernelbench_baseline which) {
  const bool compiled = which == kernelbench_baseline::compiled;
  std::string identity;
  {
    std::lock_guard lock(mutex_);
    identity = kernelbench_identities_[gpu];
  }
  // The slot identity is in the key: two GPUs of different models in one engine time apart.
  const std::string key = crypto::sha256_hex(t.reference) + "\n" + std::to_string(t.seed) + "\n" +
                          std::to_string(config_.trials) + "\n" + device + "\n" +
                          std::to_string(config_.timing_reps) + "\n" + identity +
                          (compiled ? "\ncompiled" : "");
  std::promise<result<baseline_time>> promise;
  std::shared_future<result<baseline_time>> future;
  {
    std::lock_guard lock(mutex_);
    auto& entry = kernelbench_times_[key];
    if (entry.valid()) {
      future = entry;
    } else {
      entry = promise.get_future().share();
    }
  }
  if (future.valid()) {
    return future.get();
  }
  // The reference timed by the same judge and protocol as a candidate: a runner whose ModelNew
  // is problem.py's Model (no candidate's code in this run, so problem.py may be in the folder).
  // Inductor compiles at the first calls (the untimed trials and the warm-up), with its caches
  // in this run's folder and no worker processes of its own.
  const std::string shim =
      compiled ? "import torch\nfrom problem import Model as _LeapReference\n"
                 "if not hasattr(torch, 'compile'):\n"
                 "    raise ImportError('torch ' + torch.__version__ + ' has no torch.compile')\n"
                 "def ModelNew(*args, **kwargs):\n"
                 "    return torch.compile(_LeapReference(*args, **kwargs))\n"
               : "from problem import Model as ModelNew\n";
  // Whether a compiled baseline's failure may be kept on disk: only this torch lacking
  // torch.compile, which the torch version in the key decides. Inductor failing may be the run's
  // limits on a loaded host or the GPU's state: measured again by the next process.
  bool deterministic_note = false;
  auto measure = [&]() -> result<baseline_time> {
    auto dir = detail::make_run_folder(config_.scratch_root, "kbtime-",
                                       {{"solution.py", &shim},
                                        {"problem.py", &t.reference},
                                        {"runner.py", &kernelbench_candidate_source()},
                                        {"judge.py", &kernelbench_judge_source()},
                                        {"inputs.bin", ref.inputs.bytes.get()}});
    if (!dir) {
      return dir.err();
    }
    run_request request =
        kernelbench_judge_request(dir->path(), ref, device, gpu, own_kernel_policy::off);
    if (compiled) {
      for (const auto& [name, sub] : {std::pair{"TORCHINDUCTOR_CACHE_DIR", "inductor"},
                                      std::pair{"TRITON_CACHE_DIR", "triton"}}) {
        request.env.emplace_back(name, (dir->path() / sub).string());
      }
      request.env.emplace_back("TORCHINDUCTOR_COMPILE_THREADS", "1");
    }
    ++kernelbench_baseline_runs_;
    const clock_watch clocks(gpu, device == "cuda");
    auto r = run_isolated(request);
    if (!r) {
      return r.err().wrap(t.id + ": timing the KernelBench reference");
    }
    const clock_window window = clocks.finish();
    const auto [status, data] = judge_record(std::move(r->stdout_text));
    if (status.value("status", std::string{}) != "ok" || !status.contains("times_ms") ||
        !status["times_ms"].is_array()) {
      const std::string why = status.contains("message") && status["message"].is_string()
                                  ? status.value("type", std::string{}) + ": " +
                                        status["message"].get<std::string>().substr(0, 300)
                                  : how_it_ended(*r) + ": " + stderr_tail(r->stderr_text, 300);
      if (compiled) {
        baseline_time none;
        none.note = "no torch.compile baseline (" + why + ")";
        deterministic_note = why.find("has no torch.compile") != std::string::npos;
        return none;
      }
      // Its outputs were computed on this kind of slot already: a failure to time it is the
      // slot's (retried elsewhere), never the candidate's verdict.
      return infrastructure_error(device == "cuda" ? gpu : -1,
                                  t.id + ": timing the KernelBench reference on " + slot_name(gpu) +
                                      " failed (" + how_it_ended(*r) +
                                      "): " + stderr_tail(r->stderr_text, 600));
    }
    std::vector<double> ms;
    for (const auto& x : status["times_ms"]) {
      if (x.is_number()) {
        ms.push_back(x.get<double>());
      }
    }
    baseline_time time;
    if (!ms.empty()) {
      time.time = timing_stats_of(std::move(ms));
    }
    time.clock_note = window.note;
    time.throttled = window.throttled;
    return time;
  };
  // Kept in the compile cache so that other engines and later processes on it (verifier nodes,
  // `leap verify`, a resumed run) compare against one measurement instead of each timing the
  // reference again: the speedup's spread across them is then the candidate's noise alone. The
  // key adds the runner's, judge's and reference program's sources (a change of protocol is a new
  // measurement) and the shim. Only what the engine's own run measured goes in (no candidate's
  // code runs there), with a digest checked when read back.
  const std::string disk_key =
      crypto::sha256_hex("kernelbench baseline v1\n" + key + "\n" + crypto::sha256_hex(shim) +
                         "\n" + crypto::sha256_hex(kernelbench_candidate_source()) + "\n" +
                         crypto::sha256_hex(kernelbench_judge_source()) + "\n" +
                         crypto::sha256_hex(kernelbench_reference_source()));
  auto compute = [&]() -> result<baseline_time> {
    std::optional<baseline_time> measured;
    auto lookup = cache_->get_or_build(
        disk_key,
        [&]() -> result<build_output> {
          auto time = measure();
          if (!time) {
            return time.err();
          }
          measured = time.value();
          build_output out;
          // Not ok (so not stored: cache_failures is off): a throttled measurement, or a note
          // the next process may not get.
          out.ok = !time->throttled && (time->time.has_value() || deterministic_note);
          out.artifact = pack_baseline(t.id, compiled, {time->time, time->note, time->clock_note});
          return out;
        },
        /*cache_failures=*/false);
    if (!lookup) {
      return lookup.err();
    }
    if (measured) {
      return std::move(*measured);
    }
    if (auto stored = unpack_baseline(lookup->output.artifact); stored && lookup->output.ok) {
      baseline_time time;
      time.time = stored->time;
      time.note = std::move(stored->note);
      time.clock_note = std::move(stored->clock_note);
      return time;
    }
    // A damaged entry (the digest differs): measured again, not trusted.
    return measure();
  };
  auto computed = compute();
  if (!computed || computed->throttled) {
    // Not remembered: the next candidate measures again (a failure may be the slot's; a
    // throttled GPU may have cooled down).
    std::lock_guard lock(mutex_);
    kernelbench_times_.erase(key);
  }
  promise.set_value(computed);
  return computed;
}

result<engine::kernelbench_judge_fit> engine::kernelbench_fit(const task& t,
                                                              const kernelbench_slot& slot,
                                                              int gpu) const {
  const auto own_kernel = own_kernel_for(t, slot.device);
  if (!own_kernel) {
    return own_kernel.err();
  }
  kernelbench_judge_fit fit;
  fit.slot_key = slot.device == "cuda" ? gpu : -1;
  fit.policy = *own_kernel;
  fit.warm_profiler = slot.device == "cuda" && fit.policy == own_kernel_policy::require;
  // The record's cap rounded up to a power of two, so that problems of like size share standbys.
  const kernelbench_reference& ref = *slot.reference;
  fit.output_cap = std::bit_ceil(std::max(judge_record_bound(ref.expected, ref.inputs),
                                          config_.kernelbench_limits.output_cap_bytes));
  fit.fits = slot.device + (fit.warm_profiler ? " profiler" : "") + " record " +
             std::to_string(fit.output_cap >> 20) + " MiB";
  return fit;
}

status engine::ready_kernelbench_slot(const task& t, int gpu) {
  auto slot = kernelbench_slot_for(t, gpu);
  if (!slot) {
    return slot.err();
  }
  auto fit = kernelbench_fit(t, *slot, gpu);
  if (!fit) {
    return fit.err();
  }
  if (standby_judges_fitting(fit->slot_key, fit->fits) > 0) {
    return ok_status();
  }
  auto judge =
      start_kernelbench_judge(gpu, slot->device, fit->warm_profiler, fit->output_cap, fit->fits);
  if (!judge) {
    return judge.err();
  }
  const std::size_t most = static_cast<std::size_t>(std::max(config_.kernelbench_standby_depth, 1));
  keep_standby_judge(fit->slot_key, most, std::move(judge.value()));
  return ok_status();
}

result<verdict> engine::run_kernelbench(const task& t, const prepared_candidate& p, int gpu,
                                        int sharing) {
  const auto waited_from = std::chrono::steady_clock::now();
  auto slot = kernelbench_slot_for(t, gpu);
  if (!slot) {
    return slot.err();
  }
  const double waited_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - waited_from).count();
  const std::string& device = slot->device;
  const kernelbench_reference& ref = *slot->reference;
  auto fit = kernelbench_fit(t, *slot, gpu);
  if (!fit) {
    return fit.err();  // the task's fault on this slot, not the candidate's
  }
  const own_kernel_policy policy = fit->policy;

  // The judge: one started ahead of this job by the slot's previous run (kernelbench_standby) or
  // by verify() beside the build, or one started now; either way the job goes down its socket and
  // the run's limits start with it.
  const int slot_key = fit->slot_key;
  const bool warm_profiler = fit->warm_profiler;
  const std::size_t output_cap = fit->output_cap;
  const std::string& fits = fit->fits;
  std::string prebuilt_json;
  const std::vector<detail::run_file> files =
      detail::kernelbench_candidate_files(p, &prebuilt_json);
  const nlohmann::json job = kernelbench_judge_config(ref, device, policy, sharing);
  resource_limits limits = config_.kernelbench_limits;
  limits.output_cap_bytes = output_cap;
  auto wall_clock_s = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  // A judge that ended before its whole job reached it ran nothing of the candidate's: one started
  // ahead (killed while it waited, say) is replaced by one started now; one started now, the
  // slot's failure, as a judge_error is.
  std::unique_ptr<detail::started_judge> judge = take_standby_judge(slot_key, fits);
  bool from_standby = judge != nullptr;
  if (config_.kernelbench_standby) {
    // The slot's next judges start now, so that each has this whole run (and, depth runs ahead,
    // the runs before its own) to import torch and start CUDA (the profiler too): on a busy slot
    // the next job comes as soon as this one ends.
    const std::size_t most =
        static_cast<std::size_t>(std::max(sharing, 1)) *
        static_cast<std::size_t>(std::max(config_.kernelbench_standby_depth, 1));
    for (std::size_t ready = standby_judges_fitting(slot_key, fits); ready < most; ++ready) {
      auto next = start_kernelbench_judge(gpu, device, warm_profiler, output_cap, fits);
      if (!next) {
        break;  // the job's own start says why, if the slot is broken
      }
      keep_standby_judge(slot_key, most, std::move(next.value()));
    }
  }
  detail::started_judge::fed_run fed;
  std::string replaced;  // why a judge started ahead was not the one that ran, for the diagnostics
  double launched_s = 0;
  double ended_s = 0;
  clock_window window;
  for (;;) {
    if (!judge) {
      auto started = start_kernelbench_judge(gpu, device, warm_profiler, output_cap, fits);
      if (!started) {
        return infrastructure_error(slot_key, started.err().message);
      }
      judge = std::move(started.value());
    }
    const clock_watch clocks(gpu, config_.timing_reps > 0 && device == "cuda");
    launched_s = wall_clock_s();
    fed = judge->feed(job, files, *ref.inputs.bytes);
    ended_s = wall_clock_s();
    window = clocks.finish();
    judge.reset();  // its folder and what the run left there
    if (!fed.run || fed.delivered || !from_standby) {
      break;
    }
    replaced = "a judge started ahead of this job ended before it took the job (" +
               how_it_ended(*fed.run) + ": " + stderr_tail(fed.run->stderr_text, 300) +
               "); the job's judge was started for it\n";
    from_standby = false;
  }
  if (!fed.run) {
    return fed.run.err();
  }
  auto& r = fed.run;
  if (!fed.delivered) {
    // Its own word on why, where it wrote one (its torch, its CUDA), else how it ended.
    auto said_status = judge_record(std::string(r->stdout_text)).first;
    const std::string why = said_status.contains("message") && said_status["message"].is_string()
                                ? said_status["message"].get<std::string>().substr(0, 1000)
                                : how_it_ended(*r) + ": " + r->stderr_text.substr(0, 1000);
    return infrastructure_error(slot_key, t.id + ": the KernelBench judge on " +
                                              slot_name(slot_key) +
                                              " ended before its job reached it: " + why);
  }

  verdict v;
  v.run_ms = static_cast<double>(r->wall.count()) / 1000.0;
  v.diagnostics = replaced + (from_standby ? "judge started ahead of its job; " : "") +
                  r->isolation + "\n" + r->stderr_text.substr(0, 2000);
  v.build_note = p.build_note;
  v.reference_note =
      kernelbench_reference_note(ref.inputs, ref.expected, ref.run_s, ref.obtained_s, waited_s);
  auto finish = [&](verdict_category c, std::string text) {
    v.category = c;
    v.passed = c == verdict_category::pass;
    v.feedback = trim_to_budget(std::move(text), config_.feedback.char_budget);
    return v;
  };
  // The judge's record: its status (which relays the runner's word: it may only ever turn into a
  // failing verdict), then the trials' data.
  auto [status, data] = judge_record(std::move(r->stdout_text));
  if (status.contains("stamps")) {
    v.run_phases_ms = kernelbench_run_phases(status["stamps"], launched_s, ended_s);
  }
  const kernelbench_status said =
      parse_kernelbench_status(status.contains("status") && status["status"].is_string()
                                   ? status["status"].get<std::string>()
                                   : std::string{});
  // What the runner says it built itself (the candidate's word: a note, nothing more).
  if (status.contains("built_here") && status["built_here"].is_array() &&
      !status["built_here"].empty()) {
    std::string names;
    for (const auto& n : status["built_here"]) {
      if (n.is_string() && names.size() < 400) {
        names += (names.empty() ? "'" : ", '") + n.get<std::string>().substr(0, 100) + "'";
      }
    }
    v.build_note += std::string(v.build_note.empty() ? "" : "; ") + "built in its run: " + names;
  }
  if (said == kernelbench_status::judge_error && status.contains("inputs_differ") &&
      status["inputs_differ"].is_boolean() && status["inputs_differ"].get<bool>() &&
      ref.inputs.drawn_bytes > 0) {
    // problem.py drew other values in the judge's process than twice in the reference's from the
    // same seeds (something beside torch's generator, read once per process): the reference is
    // run again to send every case's values, and the run made again on it (which has no case to
    // draw, so this happens once).
    const bool first = ship_kernelbench_inputs(t, device, gpu);
    auto again = run_kernelbench(t, p, gpu, sharing);
    if (again && first) {
      std::string message = status.contains("message") && status["message"].is_string()
                                ? status["message"].get<std::string>().substr(0, 300)
                                : std::string("(no message)");
      again->reference_note += "; the judge's own draw differed from the reference's (" + message +
                               "), so every case's values are sent";
    }
    return again;
  }
  if (said == kernelbench_status::judge_error) {
    // Written by the judge alone, before the runner imported the candidate's code.
    const std::string message = status.contains("message") && status["message"].is_string()
                                    ? status["message"].get<std::string>()
                                    : std::string("(no message)");
    return infrastructure_error(device == "cuda" ? gpu : -1,
                                t.id + ": the KernelBench judge failed on " +
                                    slot_name(device == "cuda" ? gpu : -1) +
                                    " before the candidate ran: " + message.substr(0, 1000));
  }
  if (r->memory_exceeded) {
    return finish(verdict_category::runtime, memory_feedback(limits));
  }
  if (r->scratch_exceeded) {
    return finish(verdict_category::runtime, scratch_feedback(*r, limits));
  }
  auto judged = [&](const nlohmann::json& j) {
    auto fb = kernelbench_result_feedback(j.dump());
    return finish(fb.category, std::move(fb.text));
  };
  if (r->timed_out) {
    return finish(verdict_category::timeout,
                  timeout_feedback(std::chrono::duration<double>(limits.wall).count(), false));
  }
  if (!r->exited && r->signal == SIGXCPU) {
    return finish(verdict_category::timeout, timeout_feedback(limits.cpu_seconds, true));
  }
  // The cap the judge gave the runner on a shared GPU (the judge's own fields, never the runner's).
  const nlohmann::json& record = status;  // a lambda may not capture a structured binding
  auto judge_bytes = [&record](const char* key) -> std::uint64_t {
    return record.contains(key) && record[key].is_number_unsigned()
               ? record[key].get<std::uint64_t>()
               : 0;
  };
  v.device_memory_share_bytes = judge_bytes("memory_cap_bytes");
  auto text_of = [&record](const char* key) {
    return record.contains(key) && record[key].is_string() ? record[key].get<std::string>()
                                                           : std::string{};
  };
  switch (said) {
    case kernelbench_status::syntax_error:
      return judged(status);
    case kernelbench_status::import_error:
    case kernelbench_status::error: {
      if (!says_device_memory_exhausted(text_of("type") + ": " + text_of("message"))) {
        return judged(status);
      }
      v.device_memory_failure = true;
      auto fb = kernelbench_result_feedback(status.dump());
      if (v.device_memory_share_bytes > 0) {
        fb.text += "\nIts run shared the GPU with other runs: its share of device memory was " +
                   std::to_string(v.device_memory_share_bytes >> 20) + " MiB of the GPU's " +
                   std::to_string(judge_bytes("memory_total_bytes") >> 20) +
                   " MiB, and torch's allocations beyond it fail with out of memory.";
      }
      return finish(fb.category, std::move(fb.text));
    }
    case kernelbench_status::ok:
    case kernelbench_status::mismatch:
    case kernelbench_status::modified_input:
    case kernelbench_status::no_own_kernel:
    case kernelbench_status::incomplete:
    case kernelbench_status::passed:
    case kernelbench_status::judge_error:  // answered above
    case kernelbench_status::unknown:
      break;  // a finished run (or the candidate claiming a verdict): its outputs are judged below
  }
  if (!r->exited) {
    return finish(verdict_category::runtime, signal_feedback(r->signal, r->stderr_text));
  }
  if (r->exit_code != 0) {
    return finish(verdict_category::runtime, exit_feedback(r->exit_code, r->stderr_text));
  }

  if (said != kernelbench_status::ok || data.empty()) {
    return judged({{"status", "incomplete"}});
  }
  const auto compare_start = std::chrono::steady_clock::now();
  auto got =
      parse_kb_file(std::make_shared<const std::string>(std::move(data)), kb_file::candidate);
  if (!got) {
    return judged({{"status", "incomplete"}});
  }
  // The record holds the trials, then the timed calls the judge chose to check (its
  // "checked_cases": which timing set each used), judged like trials.
  const int trials = config_.trials;
  const int cases = static_cast<int>(ref.expected.trials.size());
  kb_data held_inputs{ref.inputs.bytes, {}};
  kb_data expected{ref.expected.bytes, {}};
  std::vector<int> order;
  for (int i = 0; i < trials && i < cases; ++i) {
    order.push_back(i);
  }
  if (status.contains("checked_cases") && status["checked_cases"].is_array()) {
    for (const auto& c : status["checked_cases"]) {
      if (!c.is_number_integer() || c.get<int>() < trials || c.get<int>() >= cases) {
        return judged({{"status", "incomplete"}});
      }
      order.push_back(c.get<int>());
    }
  }
  for (const int i : order) {
    held_inputs.trials.push_back(ref.inputs.trials[static_cast<std::size_t>(i)]);
    expected.trials.push_back(ref.expected.trials[static_cast<std::size_t>(i)]);
  }
  auto problem = judge_kernelbench(held_inputs, expected, *got, kb_tolerances_for(t));
  if (!v.run_phases_ms.empty()) {
    v.run_phases_ms.emplace_back(
        "engine_compared",
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - compare_start)
            .count());
  }
  if (problem) {
    if (problem->contains("trial") && (*problem)["trial"].is_number_integer() &&
        (*problem)["trial"].get<int>() >= trials) {
      (*problem)["timed_call"] = true;  // a timed call's outputs: the candidate changes with timing
    }
    (*problem)["trials"] = trials;
    return judged(*problem);
  }
  if (policy == own_kernel_policy::require) {
    // What ran is reported from inside the candidate's process, relayed by the judge (see the
    // threat model: a candidate can patch its own profiler; profiling from outside the process
    // would not be).
    const nlohmann::json report =
        said == kernelbench_status::ok && status.contains("own") && status["own"].is_array()
            ? status["own"]
            : nlohmann::json::array();
    for (int trial = 0; trial < trials; ++trial) {
      const bool found = trial < static_cast<int>(report.size()) && report[trial].is_object() &&
                         report[trial].contains("own") && report[trial]["own"].is_array() &&
                         !report[trial]["own"].empty();
      if (!found) {
        nlohmann::json j{
            {"status", "no_own_kernel"}, {"trial", trial}, {"trials", trials}, {"device", device}};
        if (trial < static_cast<int>(report.size()) && report[trial].is_object() &&
            report[trial].contains("other")) {
          j["other"] = report[trial]["other"];
        }
        return judged(j);
      }
    }
  }
  if (config_.timing_reps > 0 && status.contains("times_ms") && status["times_ms"].is_array()) {
    std::vector<double> ms;
    for (const auto& x : status["times_ms"]) {
      if (x.is_number()) {
        ms.push_back(x.get<double>());
      }
    }
    if (!ms.empty()) {
      auto eager = kernelbench_baseline_time(t, ref, device, gpu, kernelbench_baseline::eager);
      if (!eager) {
        return eager.err();
      }
      v.candidate_time = timing_stats_of(std::move(ms));
      v.clock_note = window.note;
      v.reference_time = eager->time;
      if (v.reference_time && v.candidate_time->median_ms > 0) {
        v.speedup = v.reference_time->median_ms / v.candidate_time->median_ms;
        v.speedup_noise = speedup_noise(*v.candidate_time, *v.reference_time);
      }
      if (config_.kernelbench_compiled_baseline) {
        auto compiled =
            kernelbench_baseline_time(t, ref, device, gpu, kernelbench_baseline::compiled);
        if (!compiled) {
          return compiled.err();
        }
        v.compiled_reference_time = compiled->time;
        v.timing_note = compiled->note;
        if (compiled->throttled) {
          // The eager speedup stands; the compiled one describes the GPU's clocks.
          v.timing_note =
              "compiled speedup withheld: the GPU was throttled during the "
              "torch.compile baseline's timed run (" +
              compiled->clock_note + ")";
        } else if (v.compiled_reference_time && v.candidate_time->median_ms > 0) {
          v.compiled_speedup = v.compiled_reference_time->median_ms / v.candidate_time->median_ms;
          v.compiled_speedup_noise = speedup_noise(*v.candidate_time, *v.compiled_reference_time);
        }
      }
      // Timed calls that reused a timing set, where a cache keyed by the inputs' content could
      // hit: said, with the judge's reason.
      if (status.contains("fresh_inputs") && status["fresh_inputs"].is_object()) {
        const nlohmann::json& fresh = status["fresh_inputs"];
        const auto count = [&fresh](const char* key) {
          return fresh.contains(key) && fresh[key].is_number_integer() ? fresh[key].get<long long>()
                                                                       : 0LL;
        };
        if (count("calls") < count("of")) {
          const nlohmann::json why = fresh.value("why", nlohmann::json());
          const std::string note =
              std::to_string(count("of") - count("calls")) + " of " + std::to_string(count("of")) +
              " unchecked timed calls reused a timing set's inputs (" +
              (why.is_string() ? why.get<std::string>().substr(0, 300) : "no reason given") + ")";
          v.timing_note = v.timing_note.empty() ? note : v.timing_note + "; " + note;
        }
      }
      // The judge copies the outputs inside its clock unless its probe could not read them where
      // the runner returned them: then the runner's copy is one an answer could skip.
      if (status.contains("output_copy") && status["output_copy"] == "runner") {
        const std::string note =
            "the outputs were copied by the candidate's own process (the judge could not read "
            "them where that process returned them), so a candidate that computes into the "
            "judge's buffers skips that copy";
        v.timing_note = v.timing_note.empty() ? note : v.timing_note + "; " + note;
      }
      // A measurement the GPU slowed down describes the GPU, not the kernels: the pass counts as
      // an untimed one (never paid more than a plain pass), and the note says why.
      if (window.throttled || eager->throttled) {
        v.timing_throttled = true;
        v.speedup.reset();
        v.speedup_noise.reset();
        v.compiled_speedup.reset();
        v.compiled_speedup_noise.reset();
        v.timing_note = "speedup withheld: the GPU was throttled during " +
                        std::string(window.throttled ? "the candidate's" : "the reference's") +
                        " timed run (" + (window.throttled ? window.note : eager->clock_note) + ")";
      }
    }
  }
  return judged({{"status", "passed"}, {"trials", trials}, {"device", device}});
}

}  // namespace leap::sandbox
