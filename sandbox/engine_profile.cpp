// The engine's profiling hook (issue 34): after a cuda or KernelBench candidate's verdict is known,
// its run is made once more under Nsight Compute, in the sandbox with the isolation of its own run
// (fresh root, private uid, cgroup, seccomp, a network namespace of its own), filtered to the
// kernels its source defines (cuda: its __global__ functions; KernelBench: those of its load_inline
// sources and its @triton.jit functions); only that namespace's loopback is up, for ncu and the
// targets it injects itself into (--target-processes all: both judges start the candidate's
// program as their child). What ncu says becomes verdict::profile and a diagnosis after the
// verdict's own feedback; whatever goes wrong becomes a note that carries the tail of ncu's raw
// output. Profiling never changes a verdict, and its own run is never judged or timed.
#include "common/crypto.hpp"
#include "sandbox/engine.hpp"
#include "sandbox/engine_parts.hpp"
#include "sandbox/kernelbench.hpp"
#include "sandbox/kinds.hpp"
#include "sandbox/profile.hpp"
#include "sandbox/profile_events.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace leap::sandbox {
namespace fs = std::filesystem;

namespace {

// ncu's CSV for a handful of launches of 48 metrics is tens of KiB; more is not a log of ours.
constexpr std::size_t k_max_ncu_log_bytes = 16 << 20;

// The ncu to run: the configured one, else the one beside nvcc (the CUDA toolkit's bin/ncu).
std::string ncu_path(const engine_config& c) {
  if (!c.ncu.empty()) {
    return c.ncu;
  }
  const std::string dir = detail::dir_of(c.nvcc);
  return dir.empty() ? std::string("ncu") : dir + "/ncu";
}

// What of ncu's raw output a note keeps: enough for its ==ERROR== lines and the target's last
// words, so that a failure on a GPU host says why without the host's files.
constexpr std::size_t k_note_log_bytes = 2048;

// The note's account of what ncu wrote: how it ended, then the tails of its log file and stderr.
std::string raw_output(const run_result& r, const std::string& log_file, const std::string& log) {
  std::string out = r.exited ? "ncu exited with " + std::to_string(r.exit_code)
                             : "ncu ended by " + signal_name(r.signal);
  out += "; its log (" + log_file + ", " + std::to_string(log.size()) + " bytes):\n" +
         text_tail(log, k_note_log_bytes);
  out += "\nits stderr (" + std::to_string(r.stderr_bytes) + " bytes):\n" +
         text_tail(r.stderr_text, k_note_log_bytes);
  return out;
}

// A KernelBench candidate's own kernels: the __global__ functions of its load_inline sources (the
// Python source holds them as strings) and its Triton kernels.
std::vector<std::string> kernelbench_kernel_names(const std::string& code) {
  std::vector<std::string> names = global_kernel_names(code);
  for (auto& name : triton_kernel_names(code)) {
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      names.push_back(std::move(name));
    }
  }
  return names;
}

// profile_limits' time limits with the room of the KernelBench run (`run`) where it is larger: its
// folder holds the reference's inputs and the extensions, and torch runs in two processes.
resource_limits kernelbench_profile_limits(const resource_limits& profile,
                                           const resource_limits& run) {
  // 0 is unlimited for these two.
  const auto larger = [](std::uint64_t a, std::uint64_t b) {
    return a == 0 || b == 0 ? 0 : std::max(a, b);
  };
  resource_limits l = profile;
  l.memory_bytes = larger(profile.memory_bytes, run.memory_bytes);
  l.address_space_bytes = larger(profile.address_space_bytes, run.address_space_bytes);
  l.file_size_bytes = std::max(profile.file_size_bytes, run.file_size_bytes);
  l.scratch_bytes = std::max(profile.scratch_bytes, run.scratch_bytes);
  l.tmpfs_bytes = std::max(profile.tmpfs_bytes, run.tmpfs_bytes);
  l.processes = std::max(profile.processes, run.processes);
  l.open_files = std::max(profile.open_files, run.open_files);
  return l;
}

// The events of a handful of processes' launches are KiBs; more is not a file of ours.
constexpr std::size_t k_max_events_bytes = 16 << 20;

// One diagnosis per kernel, from its longest launch, each summarised into `out`.
std::vector<kernel_diagnosis> diagnose_longest(const std::vector<kernel_profile>& kernels,
                                               profile_summary& out) {
  std::map<std::string, const kernel_profile*> longest;
  for (const auto& k : kernels) {
    auto& slot = longest[k.name];
    if (slot == nullptr ||
        k.metric_or("gpu__time_duration.sum", 0) > slot->metric_or("gpu__time_duration.sum", 0)) {
      slot = &k;
    }
  }
  std::vector<kernel_diagnosis> diagnoses;
  for (const auto& [name, k] : longest) {
    const auto model = k->text.find("device__attribute_display_name");
    const auto peaks = peaks_for(model == k->text.end() ? "" : model->second);
    diagnoses.push_back(diagnose(*k, peaks ? &*peaks : nullptr, roofline_options{}));
    out.kernels.push_back(summarise(diagnoses.back()));
  }
  return diagnoses;
}

// A profiling run (ncu's or the events fall-back's): its scratch folder, and the target prepared
// in it (the cuda kind's judge and program, or KernelBench's judge and runner), which sees the
// engine's read-only folders; the tool's own are added by the caller. The folder lives as long
// as this, so that what the run wrote there can be read after it.
struct profiling_run {
  scratch_dir dir;
  run_request request;
};

// Errors: the text of the profile's note, the folder's or the target's failure.
result<profiling_run> prepare_profiling_run(
    const fs::path& scratch_root, const std::string& prefix,
    const std::function<result<run_request>(const fs::path&)>& make_target,
    const std::vector<fs::path>& readonly) {
  auto dir = scratch_dir::create(scratch_root, prefix);
  if (!dir) {
    return error{"no scratch folder: " + dir.err().message};
  }
  auto target = make_target(dir->path());
  if (!target) {
    return target.err();
  }
  profiling_run run{std::move(dir.value()), std::move(target.value())};
  run.request.readonly_paths = readonly;
  return run;
}

std::string seconds_text(std::chrono::milliseconds ms) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(ms).count()) + " s";
}

}  // namespace

bool profile_selects(profile_mode mode, task_kind kind, const verdict& v) {
  // The profilers measure the run's GPU kernels: a kind off the GPU has none.
  if (mode == profile_mode::off || !traits_of(kind).gpu) {
    return false;
  }
  if (mode == profile_mode::passing) {
    return v.passed;
  }
  switch (v.category) {
    case verdict_category::format:
    case verdict_category::compile:
    case verdict_category::forbidden:
      return false;
    default:
      return true;
  }
}

void engine::profile_candidate(const task& t, const prepared_candidate& p, verdict& v, int gpu) {
  profile_summary& out = v.profile.emplace();
  const auto note = [&](std::string text) { out.note = "not profiled: " + std::move(text); };
  const bool kernelbench = t.kind == task_kind::kernelbench;
  if (!kernelbench && (t.kind != task_kind::cuda || !p.judge || p.binary.empty())) {
    return note("the candidate has no program of its own to profile");
  }
  const std::vector<std::string> kernel_names =
      kernelbench ? kernelbench_kernel_names(p.code) : global_kernel_names(p.code);
  if (kernel_names.empty()) {
    return note(kernelbench ? "the candidate has no kernel of its own: its source defines no "
                              "__global__ function (load_inline) and no @triton.jit function"
                            : "the candidate's source defines no __global__ kernel of its own");
  }
  // The cuda candidate's run: the CUDA judge starting the candidate's program, one trial, no timed
  // repetitions (the launches ncu replays are the same kernels; this run's output and time are
  // never read).
  const auto cuda_run = [&](const fs::path& folder) -> result<run_request> {
    auto judge = judge_program(t, true, true);
    if (!judge) {
      return judge.err();
    }
    if (auto s =
            detail::write_run_files(folder, {{"cand", &p.binary, true}, {"judge", &*judge, true}});
        !s) {
      return s.err();
    }
    auto nonce = crypto::random_hex(16);
    if (!nonce) {
      return nonce.err();
    }
    run_request request;
    // The judge's buffers are the slot's keeper's (harness.hpp); ncu passes the session on to it.
    // Without a keeper (the verdict's own run had one: it ended since) the judge stops at its
    // start, and ncu's report of no kernels is the note.
    if (auto session = keeper_session(gpu)) {
      request.pass_fd = *session;
    }
    request.argv = {"./judge", std::to_string(t.seed), "1", "0", "./cand"};
    request.working_dir = folder;
    request.env = run_env(gpu);
    request.stdin_data = *nonce + "\n";
    request.limits = config_.profile_limits;
    return request;
  };
  // The KernelBench candidate's run (engine_kernelbench.cpp): the same judge and runner, the same
  // folder (the reference's inputs, the extensions built in the compile pool, which the runner's
  // load_inline imports), with one trial, no timed calls and no own-kernel check (torch.profiler's
  // CUPTI subscriber in the runner would meet ncu's).
  const auto kernelbench_run = [&](const fs::path& folder) -> result<run_request> {
    auto slot = kernelbench_slot_for(t, gpu);
    if (!slot) {
      return slot.err();
    }
    const kernelbench_reference& ref = *slot->reference;
    if (auto s = detail::write_kernelbench_folder(folder, p, *ref.inputs.bytes); !s) {
      return s.err();
    }
    run_request request =
        kernelbench_judge_request(folder, ref, slot->device, gpu, own_kernel_policy::off);
    auto hello = nlohmann::json::parse(request.stdin_data, nullptr, false);
    if (!hello.is_object()) {
      return error{"the KernelBench judge's configuration is not a JSON object"};
    }
    hello["trials"] = 1;
    hello["timing_reps"] = 0;
    request.stdin_data = hello.dump() + "\n";
    request.limits = kernelbench_profile_limits(config_.profile_limits, request.limits);
    return request;
  };
  const auto make_target = [&](const fs::path& folder) {
    return kernelbench ? kernelbench_run(folder) : cuda_run(folder);
  };
  const bool events_only =
      config_.profiler == profile_tool::events ||
      (config_.profiler == profile_tool::automatic && counters_not_permitted_.load());
  if (events_only) {
    return profile_from_events(
        kernel_names, make_target,
        config_.profiler == profile_tool::automatic ? counters_not_permitted_message() : "", v);
  }
  const std::string ncu = ncu_path(config_);
  if (ncu.find('/') != std::string::npos && !fs::exists(ncu)) {
    return note("no ncu at '" + ncu +
                "' (Nsight Compute, part of the CUDA toolkit; set verifier.ncu to its path)");
  }
  ncu_options options;
  options.ncu = ncu;
  options.kernel_names = kernel_names;
  auto run = prepare_profiling_run(config_.scratch_root, "profile-", make_target, readonly_paths_);
  if (!run) {
    return note(run.err().message);
  }
  run_request& request = run->request;
  auto argv = ncu_command(options, request.argv);
  if (!argv) {
    if (request.pass_fd >= 0) {
      ::close(request.pass_fd);  // run_isolated takes it only when called
    }
    return note(argv.err().message);
  }
  request.argv = std::move(*argv);
  // ncu's front end and the injected target talk over a local TCP socket; the run's own network
  // namespace keeps that inside the run.
  request.loopback = true;
  for (auto& folder : ncu_readonly_folders(ncu)) {
    request.readonly_paths.push_back(std::move(folder));
  }
  auto r = run_isolated(request);
  if (!r) {
    return note("ncu did not start: " + r.err().message);
  }
  out.seconds = std::chrono::duration<double>(r->wall).count();
  // ncu writes its report to the log file; a failure to start the target is on its stderr.
  std::string log;
  if (auto file = read_untrusted_file(run->dir.path() / options.log_file, k_max_ncu_log_bytes)) {
    log = std::move(*file);
  }
  if (r->timed_out) {
    return note("ncu did not finish within the profiling time limit (" +
                seconds_text(request.limits.wall) + "); " + raw_output(*r, options.log_file, log));
  }
  if (r->memory_exceeded) {
    return note("ncu and the candidate passed the profiling run's memory limit; " +
                raw_output(*r, options.log_file, log));
  }
  const ncu_outcome outcome = read_ncu_log(log, r->stderr_text);
  if (outcome.problem && outcome.problem->kind == ncu_problem_kind::counters_not_permitted &&
      config_.profiler == profile_tool::automatic) {
    // The same candidate again from kernel events, and every later one straight away.
    counters_not_permitted_.store(true);
    const std::string why = outcome.problem->message;
    const double ncu_seconds = out.seconds;  // `out` is replaced: the profile's time is both runs'
    profile_from_events(kernel_names, make_target, why, v);
    v.profile->seconds += ncu_seconds;
    return;
  }
  if (outcome.problem) {
    return note(std::string(to_string(outcome.problem->kind)) + ": " + outcome.problem->message +
                "\n" + raw_output(*r, options.log_file, log));
  }
  // One diagnosis per kernel, from its longest profiled launch.
  const auto diagnoses = diagnose_longest(outcome.kernels, out);
  v.feedback = append_profile_feedback(std::move(v.feedback),
                                       profile_feedback(diagnoses, config_.profile_max_kernels),
                                       config_.feedback.char_budget);
}

void engine::profile_from_events(
    const std::vector<std::string>& kernel_names,
    const std::function<result<run_request>(const fs::path&)>& make_target,
    const std::string& counters_note, verdict& v) {
  profile_summary& out = v.profile.emplace();
  out.source = "events";
  const std::string why =
      counters_note.empty() ? "" : "counters_not_permitted: " + counters_note + "; ";
  const auto note = [&](const std::string& text) {
    out.note = "not profiled: " + why + "kernel events: " + text;
  };
  const std::string library = config_.kernel_events_library.empty()
                                  ? std::string(LEAP_KERNEL_EVENTS_LIBRARY)
                                  : config_.kernel_events_library;
  if (library.empty()) {
    return note(
        "this build has no events library (the CUDA toolkit it was built with has no CUPTI, or "
        "one without the activity record layouts the library reads)");
  }
  if (!fs::exists(library)) {
    return note("no events library at '" + library + "'");
  }
  auto run = prepare_profiling_run(config_.scratch_root, "events-", make_target, readonly_paths_);
  if (!run) {
    return note(run.err().message);
  }
  run_request& request = run->request;
  // The driver loads the library into every process that initialises CUDA (the judge and the
  // candidate, or KernelBench's judge and runner); each writes events.<pid>.jsonl here.
  request.env.emplace_back("CUDA_INJECTION64_PATH", library);
  request.env.emplace_back(std::string(k_kernel_events_env), "events");
  request.readonly_paths.push_back(fs::path(library).parent_path());
  if (const std::string cupti = LEAP_CUPTI_DIR; !cupti.empty()) {
    request.readonly_paths.emplace_back(cupti);
  }
  auto r = run_isolated(request);
  if (!r) {
    return note("the run did not start: " + r.err().message);
  }
  out.seconds = std::chrono::duration<double>(r->wall).count();
  if (r->timed_out) {
    return note("the run did not finish within the profiling time limit (" +
                seconds_text(request.limits.wall) + ")");
  }
  auto events = read_kernel_event_files(run->dir.path(), "events.", k_max_events_bytes);
  if (!events) {
    return note("unreadable: " + events.err().message);
  }
  const auto kernels = event_profiles(*events, kernel_names);
  if (kernels.empty()) {
    return note(events->launches.empty()
                    ? "no process wrote a kernel record (the library was not loaded, or no "
                      "kernel ran)"
                    : "no launch of the candidate's own kernels was recorded");
  }
  const auto diagnoses = diagnose_longest(kernels, out);
  out.note = why + std::string(k_events_profile_note);
  v.feedback = append_profile_feedback(std::move(v.feedback),
                                       profile_feedback(diagnoses, config_.profile_max_kernels),
                                       config_.feedback.char_budget);
}

}  // namespace leap::sandbox
