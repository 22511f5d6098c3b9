#include "sandbox/profile.hpp"

#include "common/lines.hpp"
#include "sandbox/engine_parts.hpp"
#include "sandbox/feedback.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>

namespace leap::sandbox {
namespace {

constexpr std::array<std::string_view, 48> k_metrics = {
    "gpu__time_duration.sum",
    "device__attribute_display_name",
    "device__attribute_multiprocessor_count",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_sector_hit_rate.pct",
    "l1tex__t_sector_hit_rate.pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks",
    "launch__registers_per_thread",
    "launch__grid_size",
    "launch__block_size",
    "launch__shared_mem_per_block_static",
    "launch__shared_mem_per_block_dynamic",
    "launch__waves_per_multiprocessor",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum",
    "sm__inst_executed_pipe_tensor.sum",
};

bool is_identifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0])) != 0) {
    return false;
  }
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  });
}

// One CSV record of RFC 4180 (quoted fields, "" inside quotes); nullopt for an unterminated quote.
std::optional<std::vector<std::string>> split_csv(std::string_view line) {
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.push_back(std::move(field));
      field.clear();
    } else {
      field += c;
    }
  }
  if (quoted) {
    return std::nullopt;
  }
  fields.push_back(std::move(field));
  return fields;
}

// ncu prints numbers with thousands separators ("1,980,000"), even with --print-units base.
std::optional<double> parse_number(std::string_view s) {
  std::string digits;
  for (char c : s) {
    if (c != ',') {
      digits += c;
    }
  }
  if (digits.empty()) {
    return std::nullopt;
  }
  char* end = nullptr;
  const double v = std::strtod(digits.c_str(), &end);
  if (end != digits.c_str() + digits.size()) {
    return std::nullopt;
  }
  return v;
}

// The factor to base units (ns, bytes) for a unit ncu may print without --print-units base.
double unit_scale(std::string_view unit) {
  static const std::array<std::pair<std::string_view, double>, 14> k_scales = {{
      {"nsecond", 1},
      {"ns", 1},
      {"usecond", 1e3},
      {"us", 1e3},
      {"msecond", 1e6},
      {"ms", 1e6},
      {"second", 1e9},
      {"s", 1e9},
      {"Kbyte", 1e3},
      {"Mbyte", 1e6},
      {"Gbyte", 1e9},
      {"KB", 1e3},
      {"MB", 1e6},
      {"GB", 1e9},
  }};
  for (const auto& [name, scale] : k_scales) {
    if (unit == name) {
      return scale;
    }
  }
  return 1;
}

std::string function_name(std::string_view signature) {
  auto paren = signature.find('(');
  std::string_view head = signature.substr(0, paren);
  while (!head.empty() && head.back() == ' ') {
    head.remove_suffix(1);
  }
  // "void ns::k<int>" -> "k": the last scope, template arguments and return type dropped.
  if (auto lt = head.find('<'); lt != std::string_view::npos) {
    head = head.substr(0, lt);
  }
  if (auto scope = head.rfind("::"); scope != std::string_view::npos) {
    head = head.substr(scope + 2);
  }
  if (auto space = head.rfind(' '); space != std::string_view::npos) {
    head = head.substr(space + 1);
  }
  return std::string(head);
}

bool contains_ci(std::string_view text, std::string_view needle) {
  auto it = std::search(text.begin(), text.end(), needle.begin(), needle.end(), [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) ==
           std::tolower(static_cast<unsigned char>(b));
  });
  return it != text.end();
}

}  // namespace

std::span<const std::string_view> ncu_metric_names() { return k_metrics; }

result<std::vector<std::string>> ncu_command(const ncu_options& options,
                                             const std::vector<std::string>& argv) {
  if (argv.empty()) {
    return error{"ncu_command: no program to profile"};
  }
  std::string filter;
  if (!options.kernel_names.empty()) {
    filter = "regex:^(";
    for (std::size_t i = 0; i < options.kernel_names.size(); ++i) {
      const auto& name = options.kernel_names[i];
      if (!is_identifier(name)) {
        return error{"ncu_command: kernel name '" + name + "' is not a C++ identifier"};
      }
      filter += (i == 0 ? "" : "|") + name;
    }
    filter += ")$";
  } else if (!options.kernel_regex.empty()) {
    filter = "regex:" + options.kernel_regex;
  } else {
    return error{
        "ncu_command: no kernel filter: name the candidate's kernels, or ncu would profile "
        "PyTorch's and the harness's too"};
  }
  std::string metrics;
  for (auto m : k_metrics) {
    metrics += (metrics.empty() ? "" : ",") + std::string(m);
  }
  std::vector<std::string> cmd = {options.ncu,
                                  "--csv",
                                  "--page",
                                  "raw",
                                  "--print-units",
                                  "base",
                                  "--target-processes",
                                  "all",
                                  "--kernel-name-base",
                                  "function",
                                  "--kernel-name",
                                  filter,
                                  "--launch-count",
                                  std::to_string(std::max(1, options.launch_count)),
                                  "--metrics",
                                  metrics,
                                  "--log-file",
                                  options.log_file,
                                  "--"};
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  return cmd;
}

std::optional<double> kernel_profile::metric(std::string_view metric_name) const {
  if (auto it = metrics.find(metric_name); it != metrics.end()) {
    return it->second;
  }
  return std::nullopt;
}

double kernel_profile::metric_or(std::string_view metric_name, double fallback) const {
  return metric(metric_name).value_or(fallback);
}

result<std::vector<kernel_profile>> parse_ncu_csv(std::string_view text) {
  const auto lines = split_lines(text);
  std::vector<std::string> header;
  std::vector<std::string> units;
  std::size_t id_col = 0;
  std::size_t name_col = 0;
  std::optional<std::size_t> block_col;
  std::optional<std::size_t> grid_col;
  std::size_t first_metric = 0;
  std::vector<kernel_profile> kernels;
  for (std::size_t n = 0; n < lines.size(); ++n) {
    const std::string& line = lines[n];
    const std::string where = "ncu CSV line " + std::to_string(n + 1);
    if (line.empty() || line.rfind("==", 0) == 0) {
      continue;  // ==PROF==, ==WARNING== and blank lines
    }
    auto fields = split_csv(line);
    if (!fields) {
      return error{where + ": unterminated quote"};
    }
    if (header.empty()) {
      if (fields->empty() || (*fields)[0] != "ID") {
        continue;  // the program's own output, when ncu wrote to stdout
      }
      header = std::move(*fields);
      auto col = [&](std::string_view name) -> std::optional<std::size_t> {
        auto it = std::find(header.begin(), header.end(), name);
        if (it == header.end()) {
          return std::nullopt;
        }
        return static_cast<std::size_t>(it - header.begin());
      };
      if (col("Metric Name")) {
        return error{
            where + ": this is ncu's details page (a \"Metric Name\" column); run with --page raw"};
      }
      auto name = col("Kernel Name");
      if (!name) {
        return error{where + ": the header has no \"Kernel Name\" column"};
      }
      name_col = *name;
      block_col = col("Block Size");
      grid_col = col("Grid Size");
      // Identification columns come first; metric names always hold "__" (unit__counter.rollup).
      first_metric = header.size();
      for (std::size_t i = 0; i < header.size(); ++i) {
        if (header[i].find("__") != std::string::npos) {
          first_metric = i;
          break;
        }
      }
      id_col = 0;
      continue;
    }
    if (fields->size() != header.size()) {
      return error{where + ": " + std::to_string(fields->size()) + " fields, the header has " +
                   std::to_string(header.size())};
    }
    if ((*fields)[id_col].empty()) {
      units = std::move(*fields);
      continue;
    }
    auto id = parse_number((*fields)[id_col]);
    if (!id) {
      return error{where + ": ID '" + (*fields)[id_col] + "' is not a number"};
    }
    kernel_profile k;
    k.id = static_cast<int>(*id);
    k.signature = (*fields)[name_col];
    k.name = function_name(k.signature);
    if (block_col) {
      k.block_size = (*fields)[*block_col];
    }
    if (grid_col) {
      k.grid_size = (*fields)[*grid_col];
    }
    for (std::size_t i = first_metric; i < header.size(); ++i) {
      const std::string& value = (*fields)[i];
      if (value.empty() || value == "n/a" || value == "N/A") {
        continue;
      }
      if (auto v = parse_number(value)) {
        k.metrics[header[i]] = *v * (units.empty() ? 1.0 : unit_scale(units[i]));
      } else {
        k.text[header[i]] = value;
      }
    }
    kernels.push_back(std::move(k));
  }
  if (header.empty()) {
    return error{"ncu CSV: no header row (a line starting with \"ID\") in " +
                 std::to_string(lines.size()) + " lines"};
  }
  return kernels;
}

std::vector<std::filesystem::path> ncu_readonly_folders(const std::string& ncu,
                                                        const std::filesystem::path& opt_nvidia) {
  namespace fs = std::filesystem;
  std::vector<fs::path> out;
  auto add = [&](const fs::path& p) {
    if (!p.empty() && p.is_absolute() && std::find(out.begin(), out.end(), p) == out.end()) {
      out.push_back(p);
    }
  };
  std::error_code ec;
  std::vector<fs::path> toolkits;
  for (auto& prefix : detail::tool_prefixes_of(ncu)) {
    add(prefix.folder);
    if (prefix.bin) {
      toolkits.push_back(std::move(prefix.folder));
    }
  }
  for (const auto& toolkit : toolkits) {
    for (fs::directory_iterator it(toolkit, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().filename().string().starts_with("nsight-compute")) {
        std::error_code link_ec;
        const auto target = fs::canonical(it->path(), link_ec);
        if (!link_ec) {
          add(target);
        }
      }
    }
  }
  if (fs::is_directory(opt_nvidia / "nsight-compute", ec)) {
    add(fs::canonical(opt_nvidia / "nsight-compute", ec));
  }
  return out;
}

std::string text_tail(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) {
    return std::string(text);
  }
  std::size_t from = text.size() - max_bytes;
  // Start at a whole line when one begins in the kept part, else at a character's first byte.
  if (const auto newline = text.find('\n', from);
      newline != std::string_view::npos && newline + 1 < text.size()) {
    from = newline + 1;
  } else {
    while (from < text.size() && (static_cast<unsigned char>(text[from]) & 0xC0U) == 0x80U) {
      ++from;
    }
  }
  return "[... " + std::to_string(from) + " bytes before ...]\n" + std::string(text.substr(from));
}

std::string_view to_string(ncu_problem_kind kind) {
  switch (kind) {
    case ncu_problem_kind::counters_not_permitted:
      return "counters_not_permitted";
    case ncu_problem_kind::no_kernels_profiled:
      return "no_kernels_profiled";
    case ncu_problem_kind::unknown_metric:
      return "unknown_metric";
    case ncu_problem_kind::unreadable_output:
      return "unreadable_output";
    case ncu_problem_kind::failed:
      return "failed";
  }
  return "failed";
}

std::string counters_not_permitted_message() {
  return "GPU performance counters are not permitted for this user (ERR_NVGPUCTRPERM): load the "
         "driver with NVreg_RestrictProfilingToAdminUsers=0 (e.g. 'options nvidia "
         "NVreg_RestrictProfilingToAdminUsers=0' in /etc/modprobe.d, then reload the module or "
         "reboot), or run the profiler with CAP_SYS_ADMIN (CAP_PERFMON from driver R565)";
}

ncu_outcome read_ncu_log(std::string_view log, std::string_view messages) {
  ncu_outcome out;
  const auto anywhere = [&](std::string_view needle) {
    return log.find(needle) != std::string_view::npos ||
           messages.find(needle) != std::string_view::npos;
  };
  if (anywhere("ERR_NVGPUCTRPERM")) {
    out.problem =
        ncu_problem{ncu_problem_kind::counters_not_permitted, counters_not_permitted_message()};
    return out;
  }
  // An unknown metric voids the whole run; any other ==ERROR== (the program exiting non-zero, a
  // launch that could not be replayed) leaves the launches ncu did profile worth reading.
  std::optional<std::string> other_error;
  for (const std::string_view text : {log, messages}) {
    for (const auto& line : split_lines(text)) {
      if (line.rfind("==ERROR==", 0) != 0) {
        continue;
      }
      const std::string what = "ncu: " + line.substr(std::string_view("==ERROR== ").size());
      if (contains_ci(line, "metric")) {
        out.problem = ncu_problem{ncu_problem_kind::unknown_metric, what};
        return out;
      }
      if (!other_error) {
        other_error = what;
      }
    }
  }
  auto kernels = parse_ncu_csv(log);
  if (kernels.ok() && !kernels->empty()) {
    out.kernels = std::move(kernels.value());
    return out;
  }
  if (other_error) {
    out.problem = ncu_problem{ncu_problem_kind::failed, *other_error};
    return out;
  }
  const bool none = anywhere("No kernels were profiled");
  if (none || kernels.ok()) {
    out.problem = ncu_problem{ncu_problem_kind::no_kernels_profiled,
                              "ncu profiled no kernel: the kernel filter matched no launch"};
    return out;
  }
  out.problem = ncu_problem{ncu_problem_kind::unreadable_output, kernels.err().message};
  return out;
}

std::optional<gpu_peaks> peaks_for(std::string_view name) {
  // Dense figures (no structured sparsity) from NVIDIA's datasheets; tensor figures are FP16/BF16
  // inputs with FP32 accumulation.
  // H200 SXM (H200 Tensor Core GPU datasheet, 2024): FP32 67 TFLOPS, BF16/FP16 tensor 1,979
  //   TFLOPS with sparsity (989.5 dense), HBM3e 4.8 TB/s. H200 NVL: FP32 60, FP16 tensor 1,671
  //   sparse (835.5 dense), 4.8 TB/s.
  // H100 SXM5 (H100 datasheet): FP32 67 TFLOPS, FP16 tensor 1,979 sparse (989.5 dense), 3.35 TB/s.
  //   H100 PCIe: FP32 51, FP16 tensor 1,513 sparse (756.5 dense), 2.0 TB/s.
  // A100 (A100 datasheet): FP32 19.5 TFLOPS, FP16 tensor 312 dense; 80GB SXM4 2,039 GB/s, 80GB
  //   PCIe 1,935 GB/s, 40GB 1,555 GB/s.
  // L40S (L40S datasheet): FP32 91.6 TFLOPS, FP16 tensor 733 sparse (366 dense), 864 GB/s.
  // GeForce RTX 4090 (Ada Lovelace architecture whitepaper, appendix): FP32 82.6 TFLOPS, FP16
  //   tensor with FP32 accumulate 165.2 dense, GDDR6X 1,008 GB/s.
  struct row {
    std::string_view match;
    std::string_view also;  // a second substring that must be present, or empty
    gpu_peaks peaks;
  };
  static const std::array<row, 10> k_table = {{
      {"H200 NVL", "", {"H200 NVL", 60e12, 835.5e12, 4.8e12}},
      {"H200", "", {"H200", 67e12, 989.5e12, 4.8e12}},
      {"H100", "PCIe", {"H100 PCIe", 51e12, 756.5e12, 2.0e12}},
      {"H100", "", {"H100 SXM", 67e12, 989.5e12, 3.35e12}},
      {"A100", "PCIe", {"A100 80GB PCIe", 19.5e12, 312e12, 1.935e12}},
      {"A100", "40GB", {"A100 40GB", 19.5e12, 312e12, 1.555e12}},
      {"A100", "", {"A100 80GB SXM", 19.5e12, 312e12, 2.039e12}},
      {"L40S", "", {"L40S", 91.6e12, 366e12, 864e9}},
      {"RTX 4090", "", {"RTX 4090", 82.6e12, 165.2e12, 1008e9}},
      {"", "", {}},
  }};
  for (const auto& r : k_table) {
    if (r.match.empty()) {
      break;
    }
    if (contains_ci(name, r.match) && (r.also.empty() || contains_ci(name, r.also))) {
      if (r.match == "A100" && r.also == "PCIe" && contains_ci(name, "40GB")) {
        return k_table[5].peaks;  // a 40GB PCIe board has the 40GB bandwidth
      }
      return r.peaks;
    }
  }
  return std::nullopt;
}

std::string_view to_string(bottleneck b) {
  switch (b) {
    case bottleneck::memory_bound:
      return "memory-bound";
    case bottleneck::compute_bound:
      return "compute-bound";
    case bottleneck::latency_bound:
      return "latency-bound";
    case bottleneck::launch_bound:
      return "launch-bound";
    case bottleneck::unknown:
      return "unknown";
  }
  return "unknown";
}

roofline classify(const kernel_profile& k, const gpu_peaks* peaks,
                  const roofline_options& options) {
  roofline r;
  auto m = [&](std::string_view name) { return k.metric_or(name, 0); };
  const std::string p = "smsp__sass_thread_inst_executed_op_";
  r.flops = 2 * m(p + "ffma_pred_on.sum") + m(p + "fadd_pred_on.sum") + m(p + "fmul_pred_on.sum") +
            2 * m(p + "hfma_pred_on.sum") + m(p + "hadd_pred_on.sum") + m(p + "hmul_pred_on.sum") +
            2 * m(p + "dfma_pred_on.sum") + m(p + "dadd_pred_on.sum") + m(p + "dmul_pred_on.sum");
  r.dram_bytes = m("dram__bytes_read.sum") + m("dram__bytes_write.sum");
  if (r.dram_bytes > 0) {
    r.intensity = r.flops / r.dram_bytes;
  }
  // A tensor-pipe warp instruction does at least 512 FLOPs (an FP16 m16n8k8 MMA does 2048), so
  // the tensor peak applies only when those outweigh the CUDA cores' FLOPs: an FP32 kernel shows a
  // few stray tensor-pipe instructions (8448 against 4.4e9 FLOPs in the H200 capture).
  r.tensor = 512 * m("sm__inst_executed_pipe_tensor.sum") > r.flops;
  if (peaks != nullptr && peaks->dram_bytes_per_s > 0) {
    r.ridge = (r.tensor ? peaks->fp16_tensor_flops : peaks->fp32_flops) / peaks->dram_bytes_per_s;
  }
  auto compute = k.metric("sm__throughput.avg.pct_of_peak_sustained_elapsed");
  auto memory = k.metric("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed");
  auto dram = k.metric("dram__throughput.avg.pct_of_peak_sustained_elapsed");
  r.compute_pct = compute.value_or(0);
  r.memory_pct = std::max(memory.value_or(0), dram.value_or(0));
  r.counters = compute || memory || dram;
  auto duration = k.metric("gpu__time_duration.sum");
  if (duration && *duration < options.launch_bound_ns) {
    r.kind = bottleneck::launch_bound;
    return r;
  }
  if (!compute && !memory && !dram) {
    return r;  // unknown
  }
  const bool compute_busy = r.compute_pct >= options.busy_pct;
  const bool memory_busy = r.memory_pct >= options.busy_pct;
  if (!compute_busy && !memory_busy) {
    r.kind = bottleneck::latency_bound;
  } else if (compute_busy != memory_busy) {
    r.kind = compute_busy ? bottleneck::compute_bound : bottleneck::memory_bound;
  } else if (r.intensity && r.ridge) {
    // Both units busy: the roofline says which one bounds the kernel.
    r.kind = *r.intensity < *r.ridge ? bottleneck::memory_bound : bottleneck::compute_bound;
  } else {
    r.kind = r.memory_pct >= r.compute_pct ? bottleneck::memory_bound : bottleneck::compute_bound;
  }
  return r;
}

kernel_diagnosis diagnose(const kernel_profile& k, const gpu_peaks* peaks,
                          const roofline_options& options) {
  kernel_diagnosis d;
  d.kernel = k.name;
  d.duration_ns = k.metric_or("gpu__time_duration.sum", 0);
  d.grid_size = k.grid_size;
  d.block_size = k.block_size;
  d.roof = classify(k, peaks, options);
  d.theoretical_occupancy_pct = k.metric("sm__maximum_warps_per_active_cycle_pct");
  for (const auto& a : analysers()) {
    if (std::find(a.serves.begin(), a.serves.end(), d.roof.kind) == a.serves.end()) {
      continue;
    }
    if (auto text = a.run(k, d.roof)) {
      d.guidance.push_back(std::move(*text));
      d.fired.emplace_back(a.name);
    }
  }
  return d;
}

std::string profile_feedback(const std::vector<kernel_diagnosis>& kernels,
                             std::size_t max_kernels) {
  std::vector<const kernel_diagnosis*> order;
  order.reserve(kernels.size());
  for (const auto& d : kernels) {
    order.push_back(&d);
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto* a, const auto* b) { return a->duration_ns > b->duration_ns; });
  std::string out;
  for (std::size_t i = 0; i < order.size() && i < max_kernels; ++i) {
    const auto& d = *order[i];
    out += "Profile of `" + d.kernel + "`";
    if (d.duration_ns > 0 || !d.grid_size.empty()) {
      char when[64];
      std::snprintf(when, sizeof when, "%.1f us", d.duration_ns / 1000.0);
      out += " (" + std::string(when);
      if (!d.grid_size.empty()) {
        out += ", grid " + d.grid_size + " x " + d.block_size;
      }
      out += ")";
    }
    char head[160];
    if (!d.roof.counters) {
      out += ": " + std::string(to_string(d.roof.kind)) + " (no hardware counters";
      if (d.theoretical_occupancy_pct) {
        std::snprintf(head, sizeof head, "; theoretical occupancy %.0f%%",
                      *d.theoretical_occupancy_pct);
        out += head;
      }
      out += ").";
      for (const auto& g : d.guidance) {
        out += ' ';
        out += g;
      }
      out += '\n';
      continue;
    }
    std::snprintf(head, sizeof head, ": %s (compute %.0f%%, memory %.0f%% of peak",
                  std::string(to_string(d.roof.kind)).c_str(), d.roof.compute_pct,
                  d.roof.memory_pct);
    out += head;
    if (d.roof.intensity) {
      char ai[96];
      std::snprintf(ai, sizeof ai, ", %.2f FLOP/byte", *d.roof.intensity);
      out += ai;
      if (d.roof.ridge) {
        std::snprintf(ai, sizeof ai, ", ridge %.1f", *d.roof.ridge);
        out += ai;
      }
    }
    out += ").";
    for (const auto& g : d.guidance) {
      out += ' ';
      out += g;
    }
    out += '\n';
  }
  return out;
}

std::vector<std::string> global_kernel_names(std::string_view source) {
  const auto ident_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  };
  // Skips a balanced (...) or <...> starting at `i` (which holds the opening character).
  const auto skip_balanced = [&](std::size_t i) {
    const char open = source[i];
    const char close = open == '(' ? ')' : '>';
    int depth = 0;
    for (; i < source.size(); ++i) {
      if (source[i] == open) {
        ++depth;
      } else if (source[i] == close && --depth == 0) {
        return i + 1;
      }
    }
    return source.size();
  };
  constexpr std::string_view keyword = "__global__";
  std::vector<std::string> names;
  for (std::size_t at = source.find(keyword); at != std::string_view::npos;
       at = source.find(keyword, at + keyword.size())) {
    if ((at > 0 && ident_char(source[at - 1])) ||
        (at + keyword.size() < source.size() && ident_char(source[at + keyword.size()]))) {
      continue;
    }
    std::string last;
    std::size_t i = at + keyword.size();
    while (i < source.size()) {
      const char c = source[i];
      if (ident_char(c)) {
        const std::size_t start = i;
        while (i < source.size() && ident_char(source[i])) {
          ++i;
        }
        last = std::string(source.substr(start, i - start));
      } else if (c == '\\' && i + 1 < source.size()) {
        i += 2;  // "\n" inside a string literal holding the source is a line break
      } else if (c == '<') {
        i = skip_balanced(i);
      } else if (c == '(') {
        if (last.rfind("__", 0) == 0 || last.empty()) {
          // __launch_bounds__(256), __attribute__((...)): not the parameter list
          i = skip_balanced(i);
          last.clear();
          continue;
        }
        if (std::isdigit(static_cast<unsigned char>(last[0])) == 0 &&
            std::find(names.begin(), names.end(), last) == names.end()) {
          names.push_back(last);
        }
        break;
      } else if (c == ';' || c == '{' || c == '}' || c == '"' || c == ')') {
        break;
      } else {
        ++i;
      }
    }
  }
  return names;
}

std::vector<std::string> triton_kernel_names(std::string_view source) {
  const auto ident_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  };
  // How many brackets a line leaves open (a decorator's arguments may span lines).
  const auto balance = [](std::string_view line) {
    int depth = 0;
    for (const char c : line) {
      depth += (c == '(' || c == '[' || c == '{') ? 1 : (c == ')' || c == ']' || c == '}') ? -1 : 0;
    }
    return depth;
  };
  std::vector<std::string> names;
  bool jit = false;  // a decorator of the definition being read is triton's jit
  int open = 0;      // brackets a decorator left open on earlier lines
  std::size_t at = 0;
  while (at < source.size()) {
    const std::size_t end = std::min(source.find('\n', at), source.size());
    std::string_view line = source.substr(at, end - at);
    at = end + 1;
    if (open > 0) {
      open = std::max(0, open + balance(line));
      continue;
    }
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) {
      line.remove_prefix(1);
    }
    if (line.empty() || line.front() == '#') {
      continue;
    }
    if (line.front() == '@') {
      // The decorator's dotted name, spaces around the dots allowed: "triton.jit", "jit".
      std::string name;
      for (const char c : line.substr(1)) {
        if (c == '(' || c == '#') {
          break;
        }
        if (c != ' ' && c != '\t' && c != '\r') {
          name += c;
        }
      }
      jit = jit || name == "triton.jit" || name == "jit";
      open = std::max(0, balance(line));
      continue;
    }
    if (jit) {
      if (line.starts_with("async ")) {
        line.remove_prefix(6);
        while (!line.empty() && line.front() == ' ') {
          line.remove_prefix(1);
        }
      }
      if (line.starts_with("def ")) {
        line.remove_prefix(4);
        while (!line.empty() && line.front() == ' ') {
          line.remove_prefix(1);
        }
        std::size_t n = 0;
        while (n < line.size() && ident_char(line[n])) {
          ++n;
        }
        const std::string name(line.substr(0, n));
        // A byte past the name that is not ASCII: the name goes on in UTF-8, not ours to name.
        const bool ascii = n == line.size() || static_cast<unsigned char>(line[n]) < 0x80;
        if (ascii && is_identifier(name) &&
            std::find(names.begin(), names.end(), name) == names.end()) {
          names.push_back(name);
        }
      }
    }
    jit = false;
  }
  return names;
}

kernel_summary summarise(const kernel_diagnosis& d) {
  return {.name = d.kernel,
          .duration_ns = d.duration_ns,
          .bottleneck = std::string(to_string(d.roof.kind)),
          .findings = d.fired};
}

}  // namespace leap::sandbox
