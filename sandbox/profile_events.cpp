#include "sandbox/profile_events.hpp"

#include "sandbox/process.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <cxxabi.h>
#include <limits>
#include <memory>

namespace leap::sandbox {
namespace {

using json = nlohmann::json;

// A field of a record line: present and an unsigned integer no larger than `max`.
result<std::uint64_t> unsigned_field(const json& line, std::string_view key, std::uint64_t max) {
  const auto it = line.find(key);
  if (it == line.end()) {
    return error{"no \"" + std::string(key) + "\""};
  }
  if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<std::int64_t>() >= 0)) {
    return error{"\"" + std::string(key) + "\" is not an unsigned integer"};
  }
  const auto v = it->get<std::uint64_t>();
  if (v > max) {
    return error{"\"" + std::string(key) + "\" is too large (" + std::to_string(v) + ")"};
  }
  return v;
}

constexpr std::uint64_t k_u32 = std::numeric_limits<std::uint32_t>::max();

// An array of three unsigned 32-bit integers ("grid", "block").
status triple_field(const json& line, std::string_view key, std::uint32_t (&out)[3]) {
  const auto it = line.find(key);
  if (it == line.end() || !it->is_array() || it->size() != 3) {
    return error{"\"" + std::string(key) + "\" is not an array of 3 unsigned integers"};
  }
  for (std::size_t i = 0; i < 3; ++i) {
    const json& v = (*it)[i];
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() > k_u32) {
      return error{"\"" + std::string(key) + "\" is not an array of 3 unsigned integers"};
    }
    out[i] = static_cast<std::uint32_t>(v.get<std::uint64_t>());
  }
  return ok_status();
}

result<std::string> string_field(const json& line, std::string_view key) {
  const auto it = line.find(key);
  if (it == line.end() || !it->is_string()) {
    return error{"\"" + std::string(key) + "\" is not a string"};
  }
  return it->get<std::string>();
}

status parse_device(const json& line, gpu_device_limits& d) {
  auto name = string_field(line, "name");
  if (!name) {
    return name.err();
  }
  d.name = std::move(*name);
  const auto cc = line.find("cc");
  if (cc == line.end() || !cc->is_array() || cc->size() != 2 || !(*cc)[0].is_number_unsigned() ||
      !(*cc)[1].is_number_unsigned() || (*cc)[0].get<std::uint64_t>() > 100 ||
      (*cc)[1].get<std::uint64_t>() > 100) {
    return error{"\"cc\" is not [major, minor]"};
  }
  d.cc_major = static_cast<int>((*cc)[0].get<std::uint64_t>());
  d.cc_minor = static_cast<int>((*cc)[1].get<std::uint64_t>());
  struct u32_field {
    std::string_view key;
    std::uint32_t* into;
  };
  for (const auto& [key, into] : {u32_field{"id", &d.id}, u32_field{"sm_count", &d.sm_count},
                                  u32_field{"max_threads_per_block", &d.max_threads_per_block},
                                  u32_field{"max_warps_per_sm", &d.max_warps_per_sm},
                                  u32_field{"max_blocks_per_sm", &d.max_blocks_per_sm},
                                  u32_field{"registers_per_sm", &d.registers_per_sm},
                                  u32_field{"registers_per_block", &d.registers_per_block}}) {
    auto v = unsigned_field(line, key, k_u32);
    if (!v) {
      return v.err();
    }
    *into = static_cast<std::uint32_t>(*v);
  }
  for (const auto& [key, into] :
       {std::pair<std::string_view, std::uint64_t*>{"shared_per_sm", &d.shared_per_sm},
        {"shared_per_block", &d.shared_per_block}}) {
    auto v = unsigned_field(line, key, k_u32);
    if (!v) {
      return v.err();
    }
    *into = *v;
  }
  return ok_status();
}

status parse_kernel(const json& line, kernel_launch_event& k) {
  auto name = string_field(line, "name");
  if (!name) {
    return name.err();
  }
  if (name->empty()) {
    return error{"\"name\" is empty"};
  }
  k.name = std::move(*name);
  auto device = unsigned_field(line, "device", k_u32);
  auto start = unsigned_field(line, "start", std::numeric_limits<std::uint64_t>::max());
  auto end = unsigned_field(line, "end", std::numeric_limits<std::uint64_t>::max());
  auto registers = unsigned_field(line, "registers", k_u32);
  auto static_shared = unsigned_field(line, "static_shared", k_u32);
  auto dynamic_shared = unsigned_field(line, "dynamic_shared", k_u32);
  for (const auto* r : {&device, &start, &end, &registers, &static_shared, &dynamic_shared}) {
    if (!*r) {
      return r->err();
    }
  }
  if (*start > *end) {
    return error{"\"start\" is after \"end\""};
  }
  k.device = static_cast<std::uint32_t>(*device);
  k.start_ns = *start;
  k.end_ns = *end;
  k.registers_per_thread = static_cast<std::uint32_t>(*registers);
  k.static_shared = *static_shared;
  k.dynamic_shared = *dynamic_shared;
  if (line.contains("shared_executed")) {
    auto executed = unsigned_field(line, "shared_executed", k_u32);
    if (!executed) {
      return executed.err();
    }
    k.shared_executed = *executed;
  }
  if (auto s = triple_field(line, "grid", k.grid); !s) {
    return s;
  }
  return triple_field(line, "block", k.block);
}

std::string dims(const std::uint32_t (&d)[3]) {
  return "(" + std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " + std::to_string(d[2]) +
         ")";
}

std::uint64_t round_up(std::uint64_t v, std::uint64_t unit) { return (v + unit - 1) / unit * unit; }

}  // namespace

status parse_kernel_events(std::string_view text, kernel_events& into) {
  std::size_t number = 0;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    ++number;
    if (line.empty()) {
      continue;
    }
    const auto where = [&](const std::string& what) {
      return error{"line " + std::to_string(number) + ": " + what};
    };
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return where("not a JSON object");
    }
    auto kind = string_field(j, "kind");
    if (!kind) {
      return where(kind.err().message);
    }
    if (*kind == "device") {
      gpu_device_limits d;
      if (auto s = parse_device(j, d); !s) {
        return where("device: " + s.err().message);
      }
      into.devices.push_back(std::move(d));
    } else if (*kind == "kernel") {
      kernel_launch_event k;
      if (auto s = parse_kernel(j, k); !s) {
        return where("kernel: " + s.err().message);
      }
      into.launches.push_back(std::move(k));
    } else {
      return where("unknown \"kind\" \"" + *kind + "\"");
    }
  }
  return ok_status();
}

result<kernel_events> read_kernel_event_files(const std::filesystem::path& dir,
                                              std::string_view prefix, std::size_t max_bytes) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with(prefix)) {
      files.push_back(it->path());
    }
  }
  if (ec) {
    return error{"cannot list " + dir.string() + ": " + ec.message()};
  }
  std::sort(files.begin(), files.end());
  kernel_events events;
  for (const auto& file : files) {
    auto text = read_untrusted_file(file, max_bytes);
    if (!text) {
      return text.err();
    }
    if (auto s = parse_kernel_events(*text, events); !s) {
      return error{file.filename().string() + ": " + s.err().message};
    }
  }
  return events;
}

std::string kernel_function_name(std::string_view record_name) {
  std::string s(record_name);
  if (s.starts_with("_Z")) {
    int status = 0;
    const std::unique_ptr<char, decltype(&std::free)> demangled(
        abi::__cxa_demangle(s.c_str(), nullptr, nullptr, &status), &std::free);
    if (status != 0 || demangled == nullptr) {
      return s;
    }
    s = demangled.get();
  }
  // Strips a trailing balanced (...) or <...>: the parameter list, then template arguments.
  const auto strip = [&](char open, char close) {
    if (s.empty() || s.back() != close) {
      return;
    }
    int depth = 0;
    for (std::size_t i = s.size(); i-- > 0;) {
      depth += s[i] == close ? 1 : s[i] == open ? -1 : 0;
      if (depth == 0) {
        s.resize(i);
        return;
      }
    }
  };
  strip('(', ')');
  strip('<', '>');
  // The return type (a template's "void scale<float>(...)") and the qualifying scopes.
  std::size_t from = 0;
  int depth = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    depth += (c == '<' || c == '(') ? 1 : (c == '>' || c == ')') ? -1 : 0;
    if (depth == 0 && (c == ' ' || (c == ':' && i + 1 < s.size() && s[i + 1] == ':'))) {
      from = c == ' ' ? i + 1 : i + 2;
    }
  }
  return s.substr(std::min(from, s.size()));
}

std::optional<occupancy> theoretical_occupancy(const gpu_device_limits& device,
                                               const kernel_launch_event& launch) {
  constexpr std::uint64_t warp = 32;
  const std::uint64_t threads = std::uint64_t{launch.block[0]} * launch.block[1] * launch.block[2];
  if (threads == 0 || device.max_warps_per_sm == 0 || device.max_blocks_per_sm == 0 ||
      device.registers_per_sm == 0) {
    return std::nullopt;
  }
  const std::uint64_t warps_per_block = (threads + warp - 1) / warp;
  const bool fits = threads <= device.max_threads_per_block || device.max_threads_per_block == 0;
  occupancy o;
  o.by_blocks = device.max_blocks_per_sm;
  o.by_warps = fits ? static_cast<std::uint32_t>(device.max_warps_per_sm / warps_per_block) : 0;
  // Registers: allocated per warp in units of 256, each of the SM's sub-partitions (4; 2 on
  // sm_60) holding whole warps (cuda_occupancy.h's cudaOccMaxBlocksPerSMRegsLimit).
  if (launch.registers_per_thread == 0) {
    o.by_registers = o.by_blocks;
  } else if (launch.registers_per_thread > 255 ||
             (device.registers_per_block > 0 &&
              std::uint64_t{launch.registers_per_thread} * warps_per_block * warp >
                  device.registers_per_block)) {
    o.by_registers = 0;
  } else {
    const std::uint64_t per_warp = round_up(std::uint64_t{launch.registers_per_thread} * warp, 256);
    const std::uint64_t sub_partitions = device.cc_major == 6 && device.cc_minor == 0 ? 2 : 4;
    const std::uint64_t warps =
        (device.registers_per_sm / sub_partitions) / per_warp * sub_partitions;
    o.by_registers = static_cast<std::uint32_t>(warps / warps_per_block);
  }
  // Shared memory: the block's static and dynamic bytes plus what the system reserves per block
  // (1 KiB from sm_80), in units of 128 bytes from sm_80 (256 before), out of the carveout the
  // driver configured for the launch (the device's largest when the record does not say).
  const std::uint64_t user_shared = launch.static_shared + launch.dynamic_shared;
  const bool ampere_on = device.cc_major >= 8;
  const std::uint64_t per_block =
      round_up(user_shared + (ampere_on ? 1024 : 0), ampere_on ? 128 : 256);
  const std::uint64_t carveout =
      launch.shared_executed > 0 ? launch.shared_executed : device.shared_per_sm;
  if (per_block == 0) {
    o.by_shared_memory = o.by_blocks;
  } else {
    o.by_shared_memory =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(carveout / per_block, k_u32));
  }
  o.blocks = o.by_warps;
  o.limiter = "warps";
  for (const auto& [name, blocks] :
       {std::pair<std::string_view, std::uint32_t>{"registers", o.by_registers},
        {"shared memory", o.by_shared_memory},
        {"blocks per SM", o.by_blocks}}) {
    if (blocks < o.blocks) {
      o.blocks = blocks;
      o.limiter = name;
    }
  }
  o.pct = 100.0 * static_cast<double>(o.blocks * warps_per_block) /
          static_cast<double>(device.max_warps_per_sm);
  return o;
}

std::vector<kernel_profile> event_profiles(const kernel_events& events,
                                           const std::vector<std::string>& kernel_names) {
  std::vector<kernel_profile> out;
  for (const auto& launch : events.launches) {
    std::string name = kernel_function_name(launch.name);
    if (std::find(kernel_names.begin(), kernel_names.end(), name) == kernel_names.end()) {
      continue;
    }
    kernel_profile k;
    k.id = static_cast<int>(out.size());
    k.name = std::move(name);
    k.signature = launch.name;
    k.grid_size = dims(launch.grid);
    k.block_size = dims(launch.block);
    const auto product = [](const std::uint32_t(&d)[3]) {
      return static_cast<double>(d[0]) * static_cast<double>(d[1]) * static_cast<double>(d[2]);
    };
    k.metrics["gpu__time_duration.sum"] = static_cast<double>(launch.end_ns - launch.start_ns);
    k.metrics["launch__grid_size"] = product(launch.grid);
    k.metrics["launch__block_size"] = product(launch.block);
    k.metrics["launch__registers_per_thread"] = launch.registers_per_thread;
    k.metrics["launch__shared_mem_per_block_static"] = static_cast<double>(launch.static_shared);
    k.metrics["launch__shared_mem_per_block_dynamic"] = static_cast<double>(launch.dynamic_shared);
    const auto device =
        std::find_if(events.devices.begin(), events.devices.end(),
                     [&](const gpu_device_limits& d) { return d.id == launch.device; });
    if (device != events.devices.end()) {
      k.text["device__attribute_display_name"] = device->name;
      if (device->sm_count > 0) {
        k.metrics["device__attribute_multiprocessor_count"] = device->sm_count;
      }
      if (auto o = theoretical_occupancy(*device, launch)) {
        k.metrics["launch__occupancy_limit_warps"] = o->by_warps;
        k.metrics["launch__occupancy_limit_registers"] = o->by_registers;
        k.metrics["launch__occupancy_limit_shared_mem"] = o->by_shared_memory;
        k.metrics["launch__occupancy_limit_blocks"] = o->by_blocks;
        k.metrics["sm__maximum_warps_per_active_cycle_pct"] = o->pct;
        if (o->blocks > 0 && device->sm_count > 0) {
          k.metrics["launch__waves_per_multiprocessor"] =
              product(launch.grid) / (static_cast<double>(o->blocks) * device->sm_count);
        }
      }
    }
    out.push_back(std::move(k));
  }
  return out;
}

}  // namespace leap::sandbox
