// The engine's side of a GPU slot's keeper (harness.hpp, keeper_source): a plain child process of
// the engine, outside every run's sandbox, that owns the device buffers of the slot's cuda runs.
// It runs only the engine's own code; a candidate never holds a descriptor of it, and the judges
// reach it through one session socket per run.
#include "sandbox/engine_parts.hpp"
#include "sandbox/process.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace leap::sandbox::detail {
namespace {

std::string errno_text() { return std::strerror(errno); }

// One message with one descriptor, or none.
bool send_with_fd(int sock, char byte, int fd) {
  iovec io{&byte, 1};
  msghdr m{};
  m.msg_iov = &io;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  for (;;) {
    const ssize_t w = ::sendmsg(sock, &m, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) {
      continue;
    }
    return w == 1;
  }
}

}  // namespace

result<std::unique_ptr<gpu_keeper>> gpu_keeper::start(
    const std::filesystem::path& scratch_root, const std::string& binary,
    const std::vector<std::pair<std::string, std::string>>& env,
    std::chrono::milliseconds ready_within) {
  auto dir = scratch_dir::create(scratch_root, "keeper-");
  if (!dir) {
    return dir.err().wrap("starting the GPU keeper");
  }
  const std::string path = (dir->path() / "keeper").string();
  if (auto s = write_file(path, binary); !s) {
    return s.err().wrap("starting the GPU keeper");
  }
  ::chmod(path.c_str(), 0700);

  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return error{"starting the GPU keeper: socketpair: " + errno_text()};
  }
  // Above 3, so that the child's dup2 onto 3 always makes a fresh, inheritable descriptor.
  const int child_end = ::fcntl(pair[1], F_DUPFD_CLOEXEC, 10);
  ::close(pair[1]);
  if (child_end < 0) {
    ::close(pair[0]);
    return error{"starting the GPU keeper: " + errno_text()};
  }
  // Everything the child needs is made before fork: it may only make async-signal-safe calls.
  std::vector<std::string> env_text;
  env_text.reserve(env.size());
  for (const auto& [k, v] : env) {
    env_text.push_back(k + "=" + v);
  }
  std::vector<char*> envp;
  envp.reserve(env_text.size() + 1);
  for (auto& e : env_text) {
    envp.push_back(e.data());
  }
  envp.push_back(nullptr);
  std::string arg0 = path;
  char* argv[] = {arg0.data(), nullptr};
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0) {
    ::close(pair[0]);
    ::close(child_end);
    return error{"starting the GPU keeper: /dev/null: " + errno_text()};
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    const std::string why = errno_text();
    ::close(pair[0]);
    ::close(child_end);
    ::close(null);
    return error{"starting the GPU keeper: fork: " + why};
  }
  if (pid == 0) {
    // stdin and stdout from /dev/null, stderr the engine's; nothing else of the engine's
    // descriptors (a pipe of a concurrent run kept open here would never see its end).
    if (::dup2(null, 0) < 0 || ::dup2(null, 1) < 0 || ::dup2(child_end, 3) != 3) {
      _exit(126);
    }
    if (::syscall(SYS_close_range, 4U, ~0U, 0U) != 0) {
      for (int fd = 4; fd < 65536; ++fd) {
        ::close(fd);  // a kernel before 5.9
      }
    }
    ::execve(argv[0], argv, envp.data());
    _exit(127);
  }
  ::close(child_end);
  ::close(null);
  auto keeper = std::unique_ptr<gpu_keeper>(new gpu_keeper(pid, pair[0]));

  pollfd p{keeper->control_, POLLIN, 0};
  int ready = 0;
  do {
    ready = ::poll(&p, 1, static_cast<int>(ready_within.count()));
  } while (ready < 0 && errno == EINTR);
  if (ready == 0) {
    return error{"the GPU keeper did not start CUDA within " +
                 std::to_string(ready_within.count() / 1000) + " s"};
  }
  char answer[512];
  ssize_t r = 0;
  do {
    r = ::recv(keeper->control_, answer, sizeof answer, 0);
  } while (r < 0 && errno == EINTR);
  if (r == 1 && answer[0] == 'K') {
    return keeper;
  }
  if (r > 1 && answer[0] == 'E') {
    return error{"the GPU keeper could not start: " +
                 std::string(answer + 1, static_cast<std::size_t>(r - 1))};
  }
  return error{"the GPU keeper ended before it started CUDA"};
}

gpu_keeper::~gpu_keeper() {
  // Its end of the control socket closes: it exits. A keeper stuck in the driver is killed.
  if (control_ >= 0) {
    ::close(control_);
  }
  if (pid_ <= 0) {
    return;  // reaped by alive()
  }
  for (int waited = 0; waited < 200; ++waited) {
    const pid_t r = ::waitpid(pid_, nullptr, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) {
      return;
    }
    const timespec pause{0, 10'000'000};
    ::nanosleep(&pause, nullptr);
  }
  ::kill(pid_, SIGKILL);
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
}

result<int> gpu_keeper::session() {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return error{"a GPU keeper session: socketpair: " + errno_text()};
  }
  const bool sent = send_with_fd(control_, 's', pair[0]);
  ::close(pair[0]);
  if (!sent) {
    ::close(pair[1]);
    return error{"the GPU keeper is gone (" + errno_text() + ")"};
  }
  return pair[1];
}

bool gpu_keeper::alive() {
  if (exited_) {
    return false;
  }
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exited_ = true;
    ::close(control_);
    control_ = -1;
    // Reaped: the destructor must not wait for a pid that may be reused.
    pid_ = -1;
    return false;
  }
  return true;
}

}  // namespace leap::sandbox::detail
