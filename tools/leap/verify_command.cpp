// `leap verify --task ID|DIR|FILE --candidate FILE [--suite DIR] [--json]`: verifies one candidate
// against one task with the sandbox engine and prints the verdict and the feedback a model would
// read. `--prepare` builds what KernelBench extension builds share (torch's precompiled header)
// into the compile cache first, with progress, and alone exits after it. `--profile` profiles the
// verdict under Nsight Compute as a run with verifier.profile would, and prints the profile.
#include "common/enums/profile_mode.hpp"
#include "sandbox/engine.hpp"
#include "sandbox/kinds.hpp"
#include "sandbox/task.hpp"
#include "tools/leap/command.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

namespace leap::cli {
namespace {

struct verify_options {
  std::string task;
  std::string candidate;
  std::string suite = "sandbox/suite";
  bool json = false;
  std::string arch = "sm_90a";
  int trials = 3;
  int timing_reps = 0;
  int gpu = -1;
  std::size_t budget = 2000;
  std::string cache_dir;
  std::string python = "python3";
  bool prepare = false;
  int repeat = 1;
  int standby_depth = 1;
  std::uint64_t scratch_bytes = sandbox::engine_config{}.kernelbench_limits.scratch_bytes;
  std::string profile = "off";
  std::string ncu;
};

void print_verdict(const verify_options& o, const sandbox::task& task, const sandbox::verdict& vd,
                   double verify_ms, int k);

int run_verify(const verify_options& o) {
  auto fail = [](const std::string& message) {
    std::istringstream lines(message);
    std::string line;
    while (std::getline(lines, line)) {
      std::cerr << "leap verify: error: " << line << "\n";
    }
    return 1;
  };
  sandbox::engine_config config;
  config.cuda_arch = o.arch;
  config.trials = o.trials;
  config.timing_reps = o.timing_reps;
  config.feedback.char_budget = o.budget;
  if (!o.cache_dir.empty()) {
    config.cache_dir = o.cache_dir;
  }
  config.python = o.python;
  // Verified again in the same engine, a KernelBench run's judge is started ahead of its job, as
  // in a long-lived verifier: later verifications show what such a verifier pays.
  config.kernelbench_standby = o.repeat > 1;
  config.kernelbench_standby_depth = o.standby_depth;
  sandbox::set_kernelbench_scratch(config, o.scratch_bytes);
  auto profile = parse_profile_mode(o.profile);
  if (!profile) {
    return fail("--profile: " + profile.err().message);
  }
  config.profile = *profile;
  if (!o.ncu.empty()) {
    // The sandbox runs it from a folder of its own: a path relative to here would name nothing.
    config.ncu = std::filesystem::absolute(o.ncu).string();
  }
  if (o.task.empty() || o.candidate.empty()) {
    if (!o.prepare) {
      return fail("--task and --candidate are required (unless --prepare is given alone)");
    }
    auto e = sandbox::engine::create(config);
    if (!e) {
      return fail(e.err().message);
    }
    const bool ready = sandbox::prepare_kernelbench_saying(
        **e, [](const std::string& line) { std::cerr << "leap verify: " << line << "\n"; });
    return ready ? 0 : 1;
  }
  auto t = sandbox::resolve_task(o.task, o.suite);
  if (!t) {
    return fail(t.err().message);
  }
  std::ifstream in(o.candidate, std::ios::binary);
  if (!in) {
    return fail("cannot read the candidate file '" + o.candidate + "'");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string answer = ss.str();
  // A bare source file is what the model would have put inside its fenced block.
  if (answer.find("```") == std::string::npos) {
    answer = "```" + std::string(sandbox::traits_of(t->kind).fence) + "\n" + answer +
             (answer.ends_with("\n") ? "" : "\n") + "```\n";
  }

  auto e = sandbox::engine::create(config);
  if (!e) {
    return fail(e.err().message);
  }
  if (o.prepare) {
    sandbox::prepare_kernelbench_saying(
        **e, [](const std::string& line) { std::cerr << "leap verify: " << line << "\n"; });
  }
  int code = 0;
  for (int k = 1; k <= o.repeat; ++k) {
    const auto begun = std::chrono::steady_clock::now();
    auto v = (*e)->verify(*t, answer, o.gpu);
    if (!v) {
      return fail(v.err().message);
    }
    const double verify_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begun).count();
    print_verdict(o, *t, *v, verify_ms, k);
    code = v->passed ? 0 : 2;
  }
  return code;
}

// One line: what measured the kernels and how long the profiling run took, then each kernel's
// class and findings (the diagnosis itself is in the feedback), or why there is no profile.
void print_profile(const sandbox::profile_summary& p) {
  if (p.kernels.empty()) {
    std::cout << "profile:  none: " << p.note << "\n";
    return;
  }
  std::cout << "profile:  " << p.source << ", " << std::llround(p.seconds * 1000.0) << " ms";
  for (const auto& k : p.kernels) {
    std::cout << "; " << k.name << " " << std::llround(k.duration_ns / 1000.0) << " us "
              << k.bottleneck;
    for (const auto& f : k.findings) {
      std::cout << " " << f;
    }
  }
  if (!p.note.empty()) {
    std::cout << "; " << p.note;
  }
  std::cout << "\n";
}

void print_verdict(const verify_options& o, const sandbox::task& task, const sandbox::verdict& vd,
                   double verify_ms, int k) {
  const sandbox::verdict* v = &vd;
  const sandbox::task* t = &task;
  if (o.json) {
    nlohmann::json j{{"task", t->id},
                     {"passed", v->passed},
                     {"category", to_string(v->category)},
                     {"feedback", v->feedback},
                     {"compile_ms", v->compile_ms},
                     {"run_ms", v->run_ms},
                     {"cache_hit", v->cache_hit},
                     {"verify_ms", verify_ms}};
    if (o.repeat > 1) {
      j["verification"] = k;
    }
    auto stats = [](const sandbox::timing_stats& s) {
      return nlohmann::json{{"median_ms", s.median_ms}, {"min_ms", s.min_ms}, {"max_ms", s.max_ms},
                            {"q1_ms", s.q1_ms},         {"q3_ms", s.q3_ms},   {"reps", s.reps}};
    };
    if (v->candidate_time) {
      j["candidate_time"] = stats(*v->candidate_time);
    }
    if (v->reference_time) {
      j["reference_time"] = stats(*v->reference_time);
    }
    if (v->speedup) {
      j["speedup"] = *v->speedup;
    }
    if (v->speedup_noise) {
      j["speedup_noise"] = *v->speedup_noise;
    }
    if (v->compiled_reference_time) {
      j["compiled_reference_time"] = stats(*v->compiled_reference_time);
    }
    if (v->compiled_speedup) {
      j["compiled_speedup"] = *v->compiled_speedup;
    }
    if (v->compiled_speedup_noise) {
      j["compiled_speedup_noise"] = *v->compiled_speedup_noise;
    }
    if (!v->timing_note.empty()) {
      j["timing_note"] = v->timing_note;
    }
    if (!v->clock_note.empty()) {
      j["clocks"] = v->clock_note;
      j["throttled"] = v->timing_throttled;
    }
    if (!v->build_note.empty()) {
      j["build"] = v->build_note;
    }
    if (!v->reference_note.empty()) {
      j["reference"] = v->reference_note;
    }
    if (v->device_memory_share_bytes > 0) {
      j["device_memory_share_bytes"] = v->device_memory_share_bytes;
    }
    if (v->device_memory_failure) {
      j["device_memory_failure"] = true;
    }
    if (!v->run_phases_ms.empty()) {
      // An array of [step, ms] pairs: the steps' order is the run's.
      j["run_phases_ms"] = v->run_phases_ms;
    }
    if (v->profile) {
      auto kernels = nlohmann::json::array();
      for (const auto& k : v->profile->kernels) {
        kernels.push_back({{"name", k.name},
                           {"duration_ns", k.duration_ns},
                           {"bottleneck", k.bottleneck},
                           {"findings", k.findings}});
      }
      j["profile"] = {{"source", v->profile->source},
                      {"seconds", v->profile->seconds},
                      {"note", v->profile->note},
                      {"kernels", kernels}};
    }
    std::cout << j.dump() << "\n";
  } else {
    if (o.repeat > 1) {
      std::cout << "verification " << k << " of " << o.repeat << " (" << std::llround(verify_ms)
                << " ms in all)\n";
    }
    std::cout << "task:     " << t->id << "\n"
              << "verdict:  " << (v->passed ? "pass" : "fail") << " (" << to_string(v->category)
              << ")\n"
              << "compile:  " << v->compile_ms << " ms" << (v->cache_hit ? " (cache hit)" : "")
              << "\n"
              << "run:      " << v->run_ms << " ms\n";
    if (!v->run_phases_ms.empty()) {
      std::cout << "phases:  ";
      for (const auto& [step, ms] : v->run_phases_ms) {
        std::cout << " " << step << " " << std::llround(ms) << " ms;";
      }
      std::cout << "\n";
    }
    if (!v->build_note.empty()) {
      std::cout << "build:    " << v->build_note << "\n";
    }
    if (!v->reference_note.empty()) {
      std::cout << "reference: " << v->reference_note << "\n";
    }
    if (v->speedup) {
      std::cout << "speedup:  " << *v->speedup << "x (candidate median "
                << v->candidate_time->median_ms << " ms, " << v->candidate_time->min_ms << ".."
                << v->candidate_time->max_ms << " over " << v->candidate_time->reps << " reps";
      if (v->speedup_noise) {
        std::cout << "; noise +/-" << 100.0 * *v->speedup_noise << "%";
      }
      std::cout << ")\n";
    }
    if (v->compiled_speedup) {
      std::cout << "compiled: " << *v->compiled_speedup
                << "x over the reference under torch.compile (its median "
                << v->compiled_reference_time->median_ms << " ms";
      if (v->compiled_speedup_noise) {
        std::cout << "; noise +/-" << 100.0 * *v->compiled_speedup_noise << "%";
      }
      std::cout << ")\n";
    }
    if (!v->timing_note.empty()) {
      std::cout << "timing:   " << v->timing_note << "\n";
    }
    if (!v->clock_note.empty()) {
      std::cout << "clocks:   " << v->clock_note << "\n";
    }
    if (v->profile) {
      print_profile(*v->profile);
    }
    std::cout << "feedback:\n" << v->feedback << "\n";
  }
}

void add_verify_command(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<verify_options>();
  CLI::App* cmd =
      app.add_subcommand("verify",
                         "Verify one candidate against one task in the sandbox and print the "
                         "verdict (category, compile and run "
                         "times, cache hit, speedup when timing) and the feedback text the model "
                         "would read. Exit status: 0 pass, "
                         "2 fail, 1 error (unknown task, unreadable candidate, no compiler).");
  cmd->add_option("--task", o->task,
                  "A suite task id (cuda/vector_add, looked up in --suite), a task directory, a "
                  "task.json, a "
                  ".jsonl dataset (FILE#ID picks one task) or a KernelBench problem .py "
                  "(required unless --prepare is given alone)");
  cmd->add_option("--candidate", o->candidate,
                  "A model answer (code in a fenced block) or a bare source file (required "
                  "unless --prepare is given alone)");
  cmd->add_flag("--prepare", o->prepare,
                "Precompile torch's headers for KernelBench extension builds (load_inline) into "
                "the compile cache first, with progress on stderr (about 40 s of a CPU core, once "
                "per python, torch and compiler). Alone: exit 0 when they are ready, 1 when not");
  cmd->add_option("--repeat", o->repeat,
                  "Verify the candidate this many times in one engine, printing each verdict and "
                  "its time in all (KernelBench: from the second on, each run's judge was started "
                  "ahead of its job, as in leap run or a verifier node) (default: 1)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--standby-depth", o->standby_depth,
                  "With --repeat: how many verifications ahead KernelBench judges are started "
                  "(verifier.kernelbench_standby_depth; 2 shows a saturated slot's runs with two "
                  "judges ahead) (default: 1)")
      ->check(CLI::Range(1, 8));
  cmd->add_option("--scratch-bytes", o->scratch_bytes,
                  "KernelBench: each run's scratch (host memory), which holds every trial's and "
                  "timing set's inputs and outputs; bytes, or with a unit: 20GiB, 512MiB "
                  "(verifier.kernelbench_scratch_bytes) (default: 4GiB)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(std::uint64_t{256} << 20, std::uint64_t{1} << 50));
  cmd->add_option("--profile", o->profile,
                  "Profile the verdict under Nsight Compute as verifier.profile does (" +
                      enum_names::valid_names<profile_mode>() +
                      "; passing: a passing cuda or kernelbench verdict, all_compiled: every one "
                      "that compiled and ran); prints the profile, its time, and the diagnosis in "
                      "the feedback (default: off)");
  cmd->add_option("--ncu", o->ncu,
                  "The ncu executable for --profile (default: the ncu beside nvcc)");
  cmd->add_option("--suite", o->suite, "The task suite directory for ids (default: sandbox/suite)");
  cmd->add_flag("--json", o->json, "Print one JSON object instead of text");
  cmd->add_option("--arch", o->arch, "CUDA architecture for nvcc (default: sm_90a)");
  cmd->add_option("--trials", o->trials, "Seeded trials with fresh inputs (default: 3)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--timing", o->timing_reps,
                  "Time the candidate and the reference over N repetitions (default: 0, off)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--gpu", o->gpu,
                  "CUDA device for cuda and kernelbench runs (default: the driver's default)");
  cmd->add_option("--budget", o->budget, "Character budget of the feedback text (default: 2000)");
  cmd->add_option("--cache-dir", o->cache_dir,
                  "Compile cache directory (default: $XDG_CACHE_HOME/leap/compile)");
  cmd->add_option(
      "--python", o->python,
      "Python for python and kernelbench tasks, a path or a name on /usr/local/bin:/usr/bin:/bin "
      "(default: python3)");
  cmd->callback([o, exit_code] { *exit_code = run_verify(*o); });
}

}  // namespace

LEAP_COMMAND("verify", add_verify_command);

}  // namespace leap::cli
