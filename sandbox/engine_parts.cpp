// The steps the engine's pipelines share (engine_parts.hpp): a run's or a build's folder, a build
// in the sandbox, the tools' installation folders, the words of a verdict.
#include "sandbox/engine_parts.hpp"

#include "common/enums/task_kind.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <future>
#include <signal.h>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>
#include <utility>
#include <vector>

namespace leap::sandbox {
namespace fs = std::filesystem;

namespace detail {

std::string compile_log(const run_result& r) {
  std::string log = r.stderr_text;
  if (!r.stdout_text.empty()) {
    log += (log.empty() ? "" : "\n") + r.stdout_text;
  }
  return log;
}

std::string base_path(const std::string& extra_dir) {
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  return extra_dir.empty() ? path : extra_dir + ":" + path;
}

std::string dir_of(const std::string& program) {
  const auto slash = program.rfind('/');
  return slash == std::string::npos ? std::string{} : program.substr(0, slash);
}

std::string memory_feedback(const resource_limits& l) {
  return "Runtime error: memory limit exceeded: the program and the processes it started used more "
         "than " +
         std::to_string(l.memory_bytes >> 20) + " MiB together and were stopped.";
}

std::string how_it_ended(const run_result& r) {
  return r.timed_out ? std::string("timed out")
         : r.exited  ? "exit code " + std::to_string(r.exit_code)
                     : "killed by " + signal_name(r.signal);
}

verdict make_verdict(verdict_category c, std::string feedback) {
  verdict v;
  v.category = c;
  v.passed = c == verdict_category::pass;
  v.feedback = std::move(feedback);
  return v;
}

run_request compiler_probe(const engine_config& c, const std::vector<fs::path>& readonly,
                           const fs::path& dir, std::vector<std::string> argv) {
  run_request request;
  request.argv = std::move(argv);
  request.working_dir = dir;
  request.env = {{"PATH", base_path(dir_of(c.nvcc))}, {"LC_ALL", "C"}};
  request.limits = c.compile_limits;
  request.readonly_paths = readonly;
  return request;
}

std::vector<tool_prefix> tool_prefixes_of(const fs::path& program) {
  std::vector<tool_prefix> out;
  if (!program.is_absolute()) {
    return out;
  }
  std::error_code ec;
  for (const fs::path& p : {program, fs::canonical(program, ec)}) {
    if (p.empty() || !p.has_parent_path()) {
      continue;
    }
    const fs::path bin = p.parent_path();
    const bool in_bin = bin.filename() == "bin";
    out.push_back({in_bin ? bin.parent_path() : bin, in_bin});
  }
  return out;
}

std::vector<fs::path> tool_prefixes(const std::vector<std::string>& programs) {
  std::vector<fs::path> out;
  for (const auto& program : programs) {
    fs::path path = program;
    if (program.find('/') == std::string::npos) {
      for (const char* dir : {"/usr/local/bin", "/usr/bin", "/bin"}) {
        if (fs::exists(fs::path(dir) / program)) {
          path = fs::path(dir) / program;
          break;
        }
      }
    }
    for (auto& prefix : tool_prefixes_of(path)) {
      out.push_back(std::move(prefix.folder));
    }
  }
  return out;
}

std::vector<fs::path> toolchain_prefixes(const engine_config& c) {
  // Each toolchain once (kinds share them), in the kinds' order.
  std::vector<toolchain> seen;
  std::vector<std::string> programs;
  for (task_kind kind : enum_names::values<task_kind>()) {
    const toolchain compiler = traits_of(kind).compiler;
    if (std::ranges::find(seen, compiler) != seen.end()) {
      continue;
    }
    seen.push_back(compiler);
    for (auto& p : toolchain_programs(c, compiler)) {
      if (p.bound) {
        programs.push_back(std::move(p.program));
      }
    }
  }
  return tool_prefixes(programs);
}

status write_run_files(const fs::path& dir, const std::vector<run_file>& files) {
  for (const auto& f : files) {
    if (auto s = write_file(dir / f.name, *f.content); !s) {
      return s.err();
    }
    if (f.executable) {
      ::chmod((dir / f.name).c_str(), 0755);
    }
  }
  return ok_status();
}

result<build_output> run_build(const fs::path& scratch_root, const build_request& b) {
  auto dir = make_run_folder(scratch_root, "build-", b.files);
  if (!dir) {
    return dir.err();
  }
  run_request request;
  request.argv = b.argv;
  request.working_dir = dir->path();
  request.env = b.env;
  request.limits = b.limits;
  request.readonly_paths = b.readonly_paths;
  auto r = run_isolated(request);
  if (!r) {
    return r.err().wrap(b.what);
  }
  build_output out;
  out.log = compile_log(*r);
  if (r->timed_out || r->signal == SIGXCPU) {
    out.timed_out = true;
    return out;
  }
  if (r->memory_exceeded) {
    out.log += "\nthe compiler used more than " + std::to_string(b.limits.memory_bytes >> 20) +
               " MiB of memory and was stopped";
    return out;
  }
  if (r->exited && r->exit_code == 0) {
    auto bytes = read_untrusted_file(dir->path() / b.artifact, k_max_artifact_bytes);
    if (!bytes) {
      out.log += "\n" + bytes.err().message;
      return out;
    }
    out.ok = true;
    out.artifact = std::move(bytes.value());
  } else if (!r->exited) {
    out.log += "\nthe compiler was killed by " + signal_name(r->signal);
  }
  return out;
}

result<scratch_dir> make_run_folder(const fs::path& root, const std::string& prefix,
                                    const std::vector<run_file>& files) {
  auto dir = scratch_dir::create(root, prefix);
  if (!dir) {
    return dir.err();
  }
  if (auto s = write_run_files(dir->path(), files); !s) {
    return s.err();
  }
  return dir;
}

}  // namespace detail

}  // namespace leap::sandbox

namespace leap::sandbox::detail {

result<std::unique_ptr<started_judge>> started_judge::start(run_request request, scratch_dir dir,
                                                            std::string fits) {
  int job[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, job) < 0) {
    return error{std::string("a standby judge's job socket: ") + std::strerror(errno)};
  }
  int gate[2];
  if (::pipe2(gate, O_CLOEXEC) < 0) {
    const int err = errno;
    ::close(job[0]);
    ::close(job[1]);
    return error{std::string("a standby judge's start gate: ") + std::strerror(err)};
  }
  std::unique_ptr<started_judge> judge(new started_judge(std::move(dir), std::move(fits)));
  judge->job_fd_ = job[0];
  judge->gate_fd_ = gate[1];
  request.pass_fd = job[1];         // run_isolated owns it from here on
  request.start_gate_fd = gate[0];  // likewise
  judge->run_ =
      std::async(std::launch::async, [r = std::move(request)] { return run_isolated(r); });
  return judge;
}

started_judge::~started_judge() {
  if (job_fd_ >= 0) {
    ::close(job_fd_);  // end-of-file before a job: the judge exits
  }
  if (gate_fd_ >= 0) {
    ::close(gate_fd_);  // the run's limits start, should it not exit
  }
  if (run_.valid()) {
    run_.wait();
  }
}

bool started_judge::ended() const {
  return !run_.valid() || run_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

started_judge::fed_run started_judge::feed(const nlohmann::json& config,
                                           const std::vector<run_file>& files,
                                           const std::string& inputs) {
  fed_run out;
  if (!run_.valid()) {
    out.run = error{"a standby judge fed twice"};
    return out;
  }
  ::close(gate_fd_);  // the job arrives: its time starts
  gate_fd_ = -1;
  nlohmann::json listed = nlohmann::json::array();
  for (const auto& f : files) {
    listed.push_back({f.name, f.content->size()});
  }
  const std::string header =
      nlohmann::json{{"config", config}, {"files", listed}, {"inputs_bytes", inputs.size()}}.dump();
  const auto length = static_cast<std::uint32_t>(header.size());
  std::string head = "LKBJOB01";
  for (int i = 0; i < 4; ++i) {
    head.push_back(static_cast<char>((length >> (8 * i)) & 0xFF));  // little-endian, as judged
  }
  // A judge that is gone refuses the rest (EPIPE, no signal): what it wrote before says why.
  auto send_all = [this](const std::string& bytes) {
    std::size_t at = 0;
    while (at < bytes.size()) {
      const ssize_t n = ::send(job_fd_, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        return false;
      }
      at += static_cast<std::size_t>(n);
    }
    return true;
  };
  bool delivered = send_all(head) && send_all(header);
  for (const auto& f : files) {
    delivered = delivered && send_all(*f.content);
  }
  delivered = delivered && send_all(inputs);
  // Bytes in the socket's buffer are not a job received: the judge says it has the whole job (a
  // judge killed meanwhile leaves end-of-file instead).
  char ack = 0;
  ssize_t n = -1;
  while (delivered && (n = ::recv(job_fd_, &ack, 1, 0)) < 0 && errno == EINTR) {
  }
  delivered = delivered && n == 1;
  ::close(job_fd_);
  job_fd_ = -1;
  out.run = run_.get();
  out.delivered = delivered;
  return out;
}

}  // namespace leap::sandbox::detail
