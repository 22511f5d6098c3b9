// The keys of the verifier section: compilation, candidate runs, timing, profiling, the cache and
// remote verifier nodes.

#include "orchestrator/detail/schema_fields.hpp"
#include "orchestrator/detail/schema_sections.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace leap::config_detail {
namespace {

std::optional<std::string> check_python(const std::string& python) {
  if (python.empty()) {
    return "must name an interpreter (default: python3)";
  }
  if (python.find('/') != std::string::npos && python.front() != '/') {
    return "must be a name (python3) or an absolute path, not the relative path '" + python + "'";
  }
  return std::nullopt;
}

// An absolute path or nothing: the sandboxed run sees no PATH of the caller's to look a name up in.
std::optional<std::string> check_ncu(const std::string& ncu) {
  if (!ncu.empty() && ncu.front() != '/') {
    return "must be an absolute path or empty (the ncu beside nvcc), got '" + ncu + "'";
  }
  return std::nullopt;
}

std::optional<std::string> check_cuda_arch(const std::string& arch) {
  std::string_view digits;
  std::string_view view = arch;
  if (view.starts_with("sm_")) {
    digits = view.substr(3);
    if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) {
      digits.remove_suffix(1);
    }
  } else if (view.starts_with("compute_")) {
    digits = view.substr(8);
  }
  if (digits.size() < 2 || digits.size() > 3 || !is_digits(digits)) {
    return "expected an nvcc architecture such as sm_90a, sm_80 or compute_90, got '" + arch + "'";
  }
  return std::nullopt;
}

}  // namespace

void add_verifier_fields(std::vector<field_spec>& f) {
  f.push_back(
      operational(integer_field("verifier.compile_workers", LEAP_FIELD(verifier.compile_workers),
                                at_least(0), "Parallel compilations; 0: one per CPU core.")));
  f.push_back(operational(integer_field(
      "verifier.gpu_slots", LEAP_FIELD(verifier.gpu_slots), at_least(0),
      "GPUs candidates run on at this host (GPUs 0 .. gpu_slots-1); 0: none locally.")));
  f.push_back(operational(integer_field(
      "verifier.runs_per_gpu", LEAP_FIELD(verifier.runs_per_gpu), at_least(1),
      "Candidate runs sharing one GPU at once (correctness runs of small kernels); timed runs "
      "(verifier.timing_reps > 0) always take their GPU alone. A shared KernelBench run's torch "
      "allocations are capped at its share of the GPU's memory, and a shared run that fails for "
      "device memory is run again alone before its verdict stands (sandbox/README.md says what a "
      "hostile candidate can still do).")));
  f.push_back(real_field("verifier.compile_timeout_s", LEAP_FIELD(verifier.compile_timeout_s),
                         above(0), "Wall-clock limit of one compilation, seconds; > 0."));
  f.push_back(real_field("verifier.run_timeout_s", LEAP_FIELD(verifier.run_timeout_s), above(0),
                         "Wall-clock limit of one candidate run, seconds; > 0."));
  f.push_back(integer_field(
      "verifier.output_limit_bytes", LEAP_FIELD(verifier.output_limit_bytes), at_least(1),
      "Most bytes of a candidate's output kept; more is an output-flood verdict."));
  f.push_back(operational(
      text_field("verifier.cache_dir", LEAP_FIELD(verifier.cache_dir), nullptr,
                 "Folder of the content-addressed compile cache; empty: <run_dir>/cache.")));
  f.push_back(operational(integer_field(
      "verifier.cache_max_bytes", LEAP_FIELD(verifier.cache_max_bytes), at_least(0),
      "Size at which the compile cache evicts its oldest entries (10 GiB); 0 disables the "
      "cache.")));
  f.push_back(
      text_field("verifier.cuda_arch", LEAP_FIELD(verifier.cuda_arch), check_cuda_arch,
                 "nvcc -arch of CUDA candidates: sm_NN[a|f] or compute_NN; sm_90a is H100/H200."));
  f.push_back(operational(
      text_field("verifier.python", LEAP_FIELD(verifier.python), check_python,
                 "Interpreter of python and kernelbench tasks: a name found in /usr/local/bin,"
                 " /usr/bin or /bin (never the caller's PATH), or an absolute path (a virtualenv's "
                 "python whose torch sees the GPU).")));
  f.push_back(integer_field(
      "verifier.timing_reps", LEAP_FIELD(verifier.timing_reps), closed(0, 1000),
      "Timed repetitions of every passing candidate and its reference (the median of each gives "
      "the verdict's speedup, reference / candidate), in [0, 1000]; 0: no timing, no speedup."));
  f.push_back(integer_field(
      "verifier.feedback_max_chars", LEAP_FIELD(verifier.feedback_max_chars), at_least(1),
      "Characters of compiler/runtime feedback kept for a debug turn's prompt."));
  f.push_back(choice_field(
      "verifier.profile", LEAP_FIELD(verifier.profile),
      "Profile cuda candidates under Nsight Compute in the sandbox after their verdict, on the "
      "same GPU: off, passing (passing verdicts) or all_compiled (every candidate that compiled "
      "and ran). The longest kernels' bottleneck and guidance follow the verdict's feedback; a "
      "failure to profile is a note, never a different verdict. In a run the verdict goes on at "
      "once and the profile is made beside the run slots; only the rollout's next turn waits "
      "for it (leap verify waits for both)."));
  f.push_back(choice_field(
      "verifier.profile_tool", LEAP_FIELD(verifier.profile_tool),
      "With verifier.profile: what profiles. auto: Nsight Compute, and where it says GPU "
      "counters are not permitted (the note says what would permit them) the same candidate "
      "again and every later one from kernel events; ncu: Nsight Compute only; events: kernel "
      "activity records only (CUPTI, no counter permission needed): duration, launch "
      "configuration and theoretical occupancy, written from inside the candidate's process, so "
      "never paid as a structural reward."));
  f.push_back(integer_field(
      "verifier.profile_max_kernels", LEAP_FIELD(verifier.profile_max_kernels), at_least(1),
      "With verifier.profile: kernels (longest first) whose diagnosis a feedback carries."));
  f.push_back(real_field("verifier.profile_timeout_s", LEAP_FIELD(verifier.profile_timeout_s),
                         above(0),
                         "With verifier.profile: wall-clock limit of one profiling run under ncu, "
                         "seconds; > 0."));
  f.push_back(operational(real_field(
      "verifier.profile_wait_s", LEAP_FIELD(verifier.profile_wait_s), above(0),
      "With verifier.profile: longest a rollout's next turn waits for the last verdict's profile "
      "(queued behind others, or still under ncu) before it goes on with the verdict's own "
      "feedback, seconds; > 0.")));
  f.push_back(operational(integer_field(
      "verifier.kernelbench_standby_depth", LEAP_FIELD(verifier.kernelbench_standby_depth),
      at_least(1),
      "KernelBench task sets: how many runs ahead each run slot keeps a judge started (torch "
      "imported, CUDA started, each in a sandbox of its own and fed one candidate). 1: the next "
      "run's judge gets the current run's time to get ready; 2 covers a saturated slot whose "
      "runs are shorter than a judge's start, at twice the idle judges (host memory; on a GPU "
      "two CUDA contexts each).")));
  f.push_back(operational(integer_field(
      "verifier.kernelbench_scratch_bytes", LEAP_FIELD(verifier.kernelbench_scratch_bytes),
      at_least(static_cast<double>(std::int64_t{256} << 20)),
      "KernelBench task sets: bytes of each run's scratch (a tmpfs: host memory), which holds "
      "every trial's and timing set's inputs and outputs as files; a problem with large tensors "
      "needs more than the 4 GiB default (a 2 x 512 MiB add with 3 trials and timing: about 17 "
      "GiB). The run's memory limit grows with it; >= 256 MiB.")));
  f.push_back(operational(
      text_field("verifier.ncu", LEAP_FIELD(verifier.ncu), check_ncu,
                 "Nsight Compute's ncu for verifier.profile: an absolute path; empty: the ncu "
                 "beside nvcc (the CUDA toolkit's bin/ncu).")));
  f.push_back(operational(
      text_list_field("verifier.nodes", LEAP_FIELD(verifier.nodes), check_node_address, true,
                      "Remote verifier nodes (`leap verifier-node`) as host:port.")));
  f.push_back(operational(integer_field(
      "verifier.local_jobs", LEAP_FIELD(verifier.local_jobs), at_least(0),
      "With verifier.nodes: jobs this host's verifier takes beside the nodes; 0: all to nodes. "
      "Ignored without nodes.")));
  f.push_back(operational(
      text_field("verifier.node_secret_file", LEAP_FIELD(verifier.node_secret_file), nullptr,
                 "File with the nodes' shared secret (--secret-file); empty: none.")));
  f.push_back(operational(
      real_field("verifier.node_timeout_s", LEAP_FIELD(verifier.node_timeout_s), above(0),
                 "Seconds without traffic after which a node counts as cut off.")));
  f.push_back(operational(
      real_field("verifier.node_retry_max_s", LEAP_FIELD(verifier.node_retry_max_s), above(0),
                 "Longest delay between attempts to reach a lost node, seconds.")));
  f.push_back(operational(
      text_field("verifier.tls.certificate", LEAP_FIELD(verifier.tls_certificate), nullptr,
                 "PEM certificate of this side for TLS to the nodes; empty: plain TCP.")));
  f.push_back(operational(text_field("verifier.tls.key", LEAP_FIELD(verifier.tls_key), nullptr,
                                     "PEM private key of verifier.tls.certificate.")));
  f.push_back(operational(
      text_field("verifier.tls.ca", LEAP_FIELD(verifier.tls_ca), nullptr,
                 "PEM CA file; set: the nodes' certificates are required and checked.")));
}

}  // namespace leap::config_detail
