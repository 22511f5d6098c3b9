// leap-learner-rank: one rank (1..world_size-1) of a data-parallel learner. It needs no config and
// no model folder: rank 0's trainer sends both (learner::run_rank_worker). Exits 0 when rank 0's
// trainer is destroyed, 1 with the error on stderr otherwise, 2 on bad arguments.
// It dies with the thread that spawned it (PR_SET_PDEATHSIG, SIGKILL).
#include "learner/trainer.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <sys/prctl.h>
#include <unistd.h>

namespace {

constexpr const char* usage =
    "usage: leap-learner-rank --master HOST:PORT --rank R --world-size N [--device D] "
    "[--timeout SECONDS] [--parent PID]\n"
    "  One rank (1..N-1) of a data-parallel learner whose rank 0 is the trainer listening at\n"
    "  HOST:PORT. --device: cpu (default), cuda or cuda:N. --timeout: seconds before a collective\n"
    "  fails (default 300). --parent: the spawning process's id; exits at once when that is no\n"
    "  longer its parent. Exits when rank 0's trainer goes away.\n";

bool parse_int(const std::string& text, int& out) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < -1'000'000 || v > std::numeric_limits<int>::max()) {
    return false;
  }
  out = static_cast<int>(v);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  leap::learner::distributed_options options;
  options.rank = -1;
  options.world_size = 0;
  std::string device = "cpu";
  int parent = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage, stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "leap-learner-rank: %s needs a value\n%s", argv[i], usage);
      return 2;
    }
    const std::string value = argv[++i];
    bool ok = true;
    if (arg == "--master") {
      options.master = value;
    } else if (arg == "--rank") {
      ok = parse_int(value, options.rank);
    } else if (arg == "--world-size") {
      ok = parse_int(value, options.world_size);
    } else if (arg == "--parent") {
      ok = parse_int(value, parent);
    } else if (arg == "--device") {
      device = value;
    } else if (arg == "--timeout") {
      char* end = nullptr;
      options.timeout_seconds = std::strtod(value.c_str(), &end);
      ok = !value.empty() && *end == '\0';
    } else {
      std::fprintf(stderr, "leap-learner-rank: unknown argument %s\n%s", argv[i - 1], usage);
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "leap-learner-rank: %s: not a number: %s\n", argv[i - 1], value.c_str());
      return 2;
    }
  }
  // A rank dies with the process that spawned it (learner::rank_workers), even one that is
  // SIGKILLed or _Exits (leap's second SIGTERM) and so cannot kill its ranks itself. The signal
  // follows the spawning thread: rank_workers::spawn is called from one that outlives the ranks.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // A parent that died before the prctl sends nothing: this process was reparented (to init or to a
  // subreaper, which is why the pid given is compared, not 1).
  if (parent > 0 ? ::getppid() != parent : ::getppid() == 1) {
    std::fputs("leap-learner-rank: the process that spawned it is gone\n", stderr);
    return 1;
  }
  if (auto s = leap::learner::run_rank_worker(options, device); !s) {
    std::fprintf(stderr, "leap-learner-rank %d: %s\n", options.rank, s.err().message.c_str());
    return 1;
  }
  return 0;
}
