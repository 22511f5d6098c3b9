#include "tools/daemon/daemon.hpp"

#include "common/durable_file.hpp"
#include "common/log.hpp"
#include "common/signals.hpp"
#include "policy/http/http.hpp"
#include "tools/daemon/api.hpp"
#include "tools/daemon/experiment.hpp"
#include "tools/daemon/home.hpp"
#include "tools/daemon/prometheus.hpp"
#include "tools/daemon/settings.hpp"
#include "tools/launch/launch.hpp"

#include <httplib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace leap::daemon {
namespace {
namespace fs = std::filesystem;

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One line per event on stderr (the journal under systemd): common/log's UTC-stamped lines.
void log_line(const std::string& text) { log::info(text); }

std::string exp_prefix(const experiment_record& r) { return r.id + " '" + r.name + "' | "; }

// What a route answers; wrap() copies it into the response.
struct reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
};

reply fail(int code, const std::string& message) { return {code, error_body(code, message)}; }
// Records hold what clients sent (names, folders): bytes that are not UTF-8 become U+FFFD rather
// than making the answer fail.
reply json_reply(int code, const nlohmann::json& j) {
  return {code, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"};
}

// The control API's connections (policy/http/http.hpp, the policy server's too): a request
// reaches one of the few workers only once its request line, headers and body are in (within
// max_request_head_seconds and max_request_body_seconds; max_request_head_bytes and
// max_request_body_bytes at most), so clients that trickle bytes or hold connections idle
// cannot starve the API; at daemon.yaml's max_connections, the connection waiting longest for
// its request gives its place to a new one, else the new one is answered 503 with Retry-After.
// The gate checks the token from the headers before it reads any of the body: a request
// without it is answered 401 by the gate.
policy::gate_limits control_api_limits() {
  policy::gate_limits limits;
  limits.threads = api_threads;
  limits.header_timeout = std::chrono::seconds(max_request_head_seconds);
  limits.body_timeout = std::chrono::seconds(max_request_body_seconds);
  limits.read_timeout = std::chrono::seconds(5);
  limits.write_timeout = std::chrono::seconds(5);
  limits.max_header_bytes = max_request_head_bytes;
  limits.prebuffer_body_bytes = max_request_body_bytes;
  limits.max_requests_per_connection = 1;
  // A request that passed the token check may have max_body_bytes of body read, no more: a
  // chunked body past it is cut off with 413 before the worker holds it.
  limits.body_needs_grant = true;
  limits.max_body_bytes = max_request_body_bytes;
  limits.too_large_message =
      "the request is too large: a body may hold " + std::to_string(max_request_body_bytes) +
      " bytes, the request line and headers " + std::to_string(max_request_head_bytes);
  limits.error_body = [](int code, const std::string& message) {
    return error_body(code, message);
  };
  return limits;
}

// Whether the process `pid` (not our child: a daemon before us started it) is still the
// `leap run` of `config`: a zombie or a reused pid has another command line.
bool still_runs(int pid, const std::string& config) {
  if (pid <= 0) {
    return false;
  }
  auto cmdline = read_text(fs::path("/proc") / std::to_string(pid) / "cmdline");
  return cmdline && cmdline->find(config) != std::string::npos;
}

class supervisor {
 public:
  explicit supervisor(const daemon_options& options)
      : home_(options.home), check_submission_(options.check_submission) {}

  int run() {
    if (auto s = prepare(); !s) {
      std::fprintf(stderr, "leap daemon: error: %s\n", s.err().message.c_str());
      return 1;
    }
    routes();
    server_.limit_connections(static_cast<std::size_t>(settings_.max_connections));
    const auto started = server_.start("127.0.0.1", settings_.port);
    if (!started) {
      std::fprintf(stderr, "leap daemon: error: %s\n", started.err().message.c_str());
      return 1;
    }
    const int port = *started;
    bound_port_ = port;
    if (auto s = write_file_durably((home_ / "port").string(), std::to_string(port) + "\n"); !s) {
      std::fprintf(stderr, "leap daemon: error: %s\n", s.err().message.c_str());
      return 1;
    }
    {
      std::lock_guard lock(mutex_);
      int resume = 0;
      int queued = 0;
      for (const auto& [id, r] : records_) {
        resume += r.state == experiment_state::running ? 1 : 0;
        queued += r.state == experiment_state::queued ? 1 : 0;
      }
      log_line("listening on 127.0.0.1:" + std::to_string(port) + " | home " + home_.string() +
               " | " + describe(settings_) + " | " + std::to_string(records_.size()) +
               " experiments known, " + std::to_string(resume) + " to resume, " +
               std::to_string(queued) + " queued");
    }
    supervise();
    shut_down();
    server_.stop();
    // The port file names a listening daemon; leave none behind.
    auto text = read_text(home_ / "port");
    if (text && std::atoi(text->c_str()) == bound_port_) {
      fs::remove(home_ / "port");
    }
    log_line("stopped");
    return 0;
  }

 private:
  status prepare() {
    std::error_code ec;
    fs::create_directories(experiments_dir(home_), ec);
    if (ec) {
      return error{home_.string() + ": cannot create: " + ec.message()};
    }
    ::chmod(home_.c_str(), 0700);
    // One daemon per home: two would start the same children on the same run folders.
    lock_fd_ = ::open((home_ / "daemon.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd_ < 0 || ::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      return error{home_.string() + ": another leap daemon uses this home (daemon.lock is held)"};
    }
    auto settings = load_settings((home_ / "daemon.yaml").string());
    if (!settings) {
      return settings.err();
    }
    settings_ = *settings;
    auto token = ensure_token(home_);
    if (!token) {
      return token.err();
    }
    token_ = *token;
    auto loaded = load_records(home_);
    for (const auto& p : loaded.problems) {
      log_line("skipping a state file: " + p);
    }
    for (auto& r : loaded.records) {
      next_seq_ = std::max(next_seq_, r.seq + 1);
      records_[r.id] = r;
    }
    // Children of a daemon that died without stopping them: their PR_SET_PDEATHSIG already sent
    // SIGTERM; wait for them to let go of their run folder, and make sure, before starting anew.
    for (auto& [id, r] : records_) {
      if (r.state != experiment_state::running || r.pid == 0) {
        continue;
      }
      const std::string config = (experiment_dir(home_, id) / "config.yaml").string();
      if (still_runs(r.pid, config)) {
        log_line(exp_prefix(r) + "child " + std::to_string(r.pid) +
                 " of a previous daemon still runs; stopping it");
        ::kill(-r.pid, SIGTERM);
        const auto deadline = now_ms() + grace_ms();
        while (still_runs(r.pid, config) && now_ms() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        if (still_runs(r.pid, config)) {
          ::kill(-r.pid, SIGKILL);
        }
      }
      r.pid = 0;
      if (r.cancel_requested) {
        r.state = experiment_state::cancelled;
        r.finished_unix_ms = now_ms();
        r.message = "cancelled (its child ended with the previous daemon)";
        cancel_open_seeds(r);
      }
      persist(r);
    }
    return ok_status();
  }

  std::int64_t grace_ms() const {
    return static_cast<std::int64_t>(settings_.grace_period_s * 1000.0);
  }

  // Under the mutex. A failed write is logged: the daemon keeps serving from memory.
  void persist(const experiment_record& r) {
    if (auto s = save_record(home_, r); !s) {
      log_line(exp_prefix(r) + "cannot save: " + s.err().message);
    }
  }

  void set(const experiment_record& r) {
    const auto old = records_.find(r.id);
    const bool changed_state = old == records_.end() || old->second.state != r.state;
    records_[r.id] = r;
    persist(r);
    if (changed_state) {
      log_line(exp_prefix(r) + to_string(r.state) +
               (r.pid ? " (pid " + std::to_string(r.pid) + ")" : "") +
               (r.message.empty() ? "" : " | " + r.message));
    }
  }

  std::vector<experiment_record> snapshot() const {
    std::vector<experiment_record> out;
    for (const auto& [id, r] : records_) {
      out.push_back(r);
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
    return out;
  }

  // --- the supervisor thread ---

  void supervise() {
    while (true) {
      const int sig = signals::wait(std::chrono::milliseconds(50));
      if (sig == SIGTERM || sig == SIGINT) {
        log_line(std::string(sig == SIGTERM ? "SIGTERM" : "SIGINT") +
                 ": stopping (no new experiments; running ones stop and resume at the next "
                 "start)");
        return;
      }
      if (sig == SIGHUP) {
        reload();
      }
      std::lock_guard lock(mutex_);
      reap();
      enforce_deadlines();
      for (const auto& id : to_start(snapshot(), settings_.max_concurrent, stopping_)) {
        start_child(records_.at(id));
      }
    }
  }

  void reload() {
    const auto path = (home_ / "daemon.yaml").string();
    auto loaded = load_settings(path);
    std::lock_guard lock(mutex_);
    if (!loaded) {
      log_line("SIGHUP: reload failed, keeping " + describe(settings_) + ":\n" +
               loaded.err().message);
      return;
    }
    auto next = *loaded;
    if (next.port != settings_.port) {
      log_line("SIGHUP: port " + std::to_string(next.port) +
               " takes effect at the next start; still listening on " +
               std::to_string(bound_port_));
      next.port = settings_.port;
    }
    log_line("SIGHUP: reloaded " + path + ": " + describe(next) + " (was " + describe(settings_) +
             ")");
    settings_ = next;
  }

  // Under the mutex. Only this thread reaps; every child is an experiment's.
  void reap() {
    while (true) {
      int wstatus = 0;
      const pid_t pid = ::waitpid(-1, &wstatus, WNOHANG);
      if (pid <= 0) {
        return;
      }
      killed_.erase(pid);
      for (auto& [id, r] : records_) {
        if (r.pid != pid) {
          continue;
        }
        child_exit how;
        how.signaled = WIFSIGNALED(wstatus);
        how.code = how.signaled ? WTERMSIG(wstatus) : WEXITSTATUS(wstatus);
        const auto tail = read_tail(experiment_dir(home_, id) / "log", 4096);
        auto next = on_exited(r, how, stopping_, tail, now_ms());
        if (next.state == experiment_state::running) {
          log_line(exp_prefix(r) + "child " + std::to_string(pid) + " stopped | " + next.message);
        }
        set(next);
        break;
      }
    }
  }

  void enforce_deadlines() {
    const auto now = now_ms();
    for (auto& [id, r] : records_) {
      if (r.pid != 0 && r.cancel_requested && now > r.cancel_deadline_unix_ms &&
          killed_.insert(r.pid).second) {
        log_line(exp_prefix(r) + "grace period over: SIGKILL to process group " +
                 std::to_string(r.pid));
        ::kill(-r.pid, SIGKILL);
      }
    }
  }

  // Under the mutex: fork and exec `leap run CONFIG` for `r` (`leap run CONFIG --seeds N` for its
  // current seed: the command's seeds launch puts the seed in its folder and skips a seed that
  // folder holds finished, so a seed whose end the daemon did not record is not run again).
  void start_child(const experiment_record& r) {
    const fs::path dir = experiment_dir(home_, r.id);
    const auto seed = current_seed(r);
    const std::string config = (dir / "config.yaml").string();
    const std::string log = (dir / "log").string();
    const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (log_fd < 0 || null_fd < 0) {
      if (log_fd >= 0) {
        ::close(log_fd);
      }
      if (null_fd >= 0) {
        ::close(null_fd);
      }
      auto failed = r;
      failed.state = experiment_state::failed;
      failed.finished_unix_ms = now_ms();
      failed.message = log + ": cannot open the log: " + std::strerror(errno);
      set(failed);
      return;
    }
    const std::string seed_args = seed ? " --seeds " + std::to_string(*seed) : "";
    const std::string banner = "=== leap daemon: start " + std::to_string(r.starts + 1) + " of " +
                               r.id + ": leap run " + config + seed_args + " (in " + r.cwd +
                               ") ===\n";
    if (::write(log_fd, banner.data(), banner.size()) < 0) {
      // The log is best effort; the child's own output decides.
    }
    // Everything the child needs is prepared before fork: between fork and exec only
    // async-signal-safe calls are allowed in a threaded process.
    std::string exe = "/proc/self/exe";
    std::string arg0 = "leap";
    std::string arg1 = "run";
    std::string arg2 = config;
    std::string arg3 = "--seeds";
    std::string arg4 = seed ? std::to_string(*seed) : "";
    char* argv[] = {arg0.data(), arg1.data(), arg2.data(), seed ? arg3.data() : nullptr,
                    arg4.data(), nullptr};
    const std::string cwd = r.cwd;
    const char chdir_failed[] = "leap daemon: cannot enter the experiment's working folder\n";
    const char exec_failed[] = "leap daemon: cannot execute leap run\n";
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) {
        ::_exit(1);  // the daemon died before the line above
      }
      // The daemon's signal handlers would feed its own event pipe from here: defaults first.
      for (int s : {SIGTERM, SIGINT, SIGHUP, SIGCHLD}) {
        ::signal(s, SIG_DFL);
      }
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::signal(SIGPIPE, SIG_DFL);  // httplib ignores it; an ignored signal survives exec
      ::dup2(null_fd, 0);
      ::dup2(log_fd, 1);
      ::dup2(log_fd, 2);
      // The listening socket, the lock and the other children's logs stay with the daemon.
      ::syscall(SYS_close_range, 3U, ~0U, 0U);
      if (::chdir(cwd.c_str()) != 0) {
        [[maybe_unused]] auto n = ::write(2, chdir_failed, sizeof chdir_failed - 1);
        ::_exit(127);
      }
      ::execv(exe.c_str(), argv);
      [[maybe_unused]] auto n = ::write(2, exec_failed, sizeof exec_failed - 1);
      ::_exit(127);
    }
    ::close(log_fd);
    ::close(null_fd);
    if (pid < 0) {
      log_line(exp_prefix(r) + "fork failed: " + std::strerror(errno) + "; retrying");
      return;
    }
    // Also set in the parent, so that a cancel right after this cannot miss the group.
    ::setpgid(pid, pid);
    auto started = on_started(r, pid, now_ms());
    if (!started) {
      log_line(exp_prefix(r) + started.err().message);
      return;
    }
    set(*started);
  }

  // After SIGTERM: stop every child (they persist and exit), SIGKILL after the grace period.
  void shut_down() {
    std::int64_t deadline = 0;
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      deadline = now_ms() + grace_ms();
      for (const auto& [id, r] : records_) {
        if (r.pid != 0) {
          ::kill(-r.pid, SIGTERM);
        }
      }
    }
    bool killed = false;
    while (true) {
      // A child's exit (SIGCHLD) or 50 ms, whichever first; further stop signals change nothing.
      [[maybe_unused]] const int sig = signals::wait(std::chrono::milliseconds(50));
      std::lock_guard lock(mutex_);
      reap();
      enforce_deadlines();
      bool live = false;
      for (const auto& [id, r] : records_) {
        live = live || r.pid != 0;
      }
      if (!live) {
        return;
      }
      if (!killed && now_ms() > deadline) {
        killed = true;
        for (const auto& [id, r] : records_) {
          if (r.pid == 0) {
            continue;
          }
          log_line(exp_prefix(r) + "grace period over: SIGKILL to process group " +
                   std::to_string(r.pid));
          ::kill(-r.pid, SIGKILL);
        }
      }
    }
  }

  // --- the HTTP side ---

  void routes() {
    // One check for every route, made in the gate (cheap and pure: token_ is set before start):
    // the bearer token, from the headers before any of the body is read (curl and others ask
    // before a large body: they get the refusal instead of the invitation); a request without it
    // never reaches a worker, one with it has its body held in the gate like any other.
    server_.check_heads([this](const policy::http_request& req, httplib::Response& res) {
      if (!authorized(req.header("Authorization"), token_)) {
        res.status = 401;
        res.set_header("WWW-Authenticate", "Bearer");
        res.set_content(error_body(401,
                                   "missing or wrong bearer token (Authorization: Bearer "
                                   "TOKEN, the token is in the daemon's home)"),
                        "application/json");
        return false;
      }
      // A compressed body could unpack to any size past the limit; our clients never send one.
      const auto encoding = req.header("Content-Encoding");
      if (!encoding.empty() && encoding != "identity") {
        res.status = 400;
        res.set_content(error_body(400, "Content-Encoding " + encoding +
                                            ": the control API takes uncompressed bodies"),
                        "application/json");
        return false;
      }
      // A declared length over the limit is refused before a byte of the body is read.
      const auto length = req.header("Content-Length");
      if (!length.empty() &&
          (length.size() > 18 || length.find_first_not_of("0123456789") != std::string::npos ||
           std::stoull(length) > max_request_body_bytes)) {
        res.status = 413;
        res.set_content(error_body(413, "the request body is too large: Content-Length " +
                                            length.substr(0, 40) + ", at most " +
                                            std::to_string(max_request_body_bytes) + " bytes"),
                        "application/json");
        return false;
      }
      return true;
    });
    using policy::http_method;
    using policy::http_request;
    server_.route(http_method::post, "/v1/experiments",
                  wrap([this](const http_request& req) { return submit(req); }));
    server_.route(http_method::get, "/v1/experiments", wrap([this](const http_request&) {
                    std::lock_guard lock(mutex_);
                    nlohmann::json list = nlohmann::json::array();
                    for (const auto& r : snapshot()) {
                      list.push_back(to_json(r));
                    }
                    return json_reply(200, {{"experiments", list}});
                  }));
    server_.route(http_method::get, R"(/v1/experiments/([^/]+))",
                  wrap([this](const http_request& req) {
                    std::lock_guard lock(mutex_);
                    auto it = find(req.match(1));
                    if (it == records_.end()) {
                      return not_found(req.match(1));
                    }
                    return json_reply(200, to_json(it->second));
                  }));
    server_.route(http_method::post, R"(/v1/experiments/([^/]+)/cancel)",
                  wrap([this](const http_request& req) { return cancel(req.match(1)); }));
    server_.route(http_method::get, R"(/v1/experiments/([^/]+)/logs)",
                  wrap([this](const http_request& req) { return logs(req); }));
    server_.route(http_method::get, "/v1/status", wrap([this](const http_request&) {
                    std::lock_guard lock(mutex_);
                    auto j = status_json(snapshot(), settings_, stopping_, now_ms(), started_ms_);
                    j["settings"]["port"] = bound_port_;
                    return json_reply(200, j);
                  }));
    server_.route(http_method::get, "/metrics",
                  wrap([this](const http_request&) { return metrics(); }));
  }

  // A route's reply into the response (what a route throws, the transport answers 500).
  static policy::http_handler wrap(std::function<reply(const policy::http_request&)> route) {
    return [route = std::move(route)](const policy::http_request& req, httplib::Response& res) {
      const reply r = route(req);
      res.status = r.status;
      res.set_content(r.body, r.content_type.c_str());
    };
  }

  std::map<std::string, experiment_record>::iterator find(const std::string& id) {
    if (!is_valid_id(id)) {
      return records_.end();
    }
    return records_.find(id);
  }

  static reply not_found(const std::string& id) {
    return fail(404, "no experiment '" + id + "' (ids look like e1; `leap status` lists them)");
  }

  reply submit(const policy::http_request& req) {
    auto request =
        parse_submit(req.body(), req.header(config_name_header), req.header(cwd_header),
                     req.has_param("seeds") ? std::optional(req.param("seeds")) : std::nullopt);
    if (!request) {
      return fail(400, request.err().message);
    }
    std::error_code ec;
    if (!request->cwd.empty() && !fs::is_directory(request->cwd, ec)) {
      return fail(400, std::string(cwd_header) + ": " + request->cwd + ": no such folder");
    }
    std::lock_guard lock(mutex_);
    if (stopping_) {
      return fail(503, "the daemon is stopping; submit again once it has restarted");
    }
    const auto seq = next_seq_;
    const auto dir = experiment_dir(home_, id_of(seq));
    auto record = make_submission(*request, seq, dir.string(), now_ms());
    if (!record) {
      return fail(400, record.err().message);
    }
    if (check_submission_) {
      if (auto checked = check_submission_(request->yaml, request->source, record->cwd); !checked) {
        return fail(400, checked.err().message);
      }
    }
    if (auto user = run_dir_user(snapshot(), record->run_dir)) {
      return fail(409, "run folder " + record->run_dir + " is in use by experiment " + *user +
                           " (" + to_string(records_.at(*user).state) +
                           "); set experiment.run_dir to another folder");
    }
    fs::create_directories(dir, ec);
    if (ec) {
      return fail(500, dir.string() + ": cannot create: " + ec.message());
    }
    if (auto s = write_file_durably((dir / "config.yaml").string(), request->yaml); !s) {
      return fail(500, s.err().message);
    }
    if (auto s = save_record(home_, *record); !s) {
      return fail(500, s.err().message);
    }
    next_seq_ = seq + 1;
    log_line(exp_prefix(*record) + "queued | " + record->config_source + " | run folder " +
             record->run_dir +
             (record->seeds.empty() ? "" : " | seeds " + record->seeds_spec + " (seed-N folders)"));
    records_[record->id] = *record;
    return json_reply(201, to_json(*record));
  }

  reply cancel(const std::string& id) {
    std::lock_guard lock(mutex_);
    auto it = find(id);
    if (it == records_.end()) {
      return not_found(id);
    }
    auto next = on_cancel(it->second, now_ms(), grace_ms());
    if (!next) {
      return fail(409, next.err().message);
    }
    if (next->cancel_requested && next->pid != 0) {
      ::kill(-next->pid, SIGTERM);
    }
    set(*next);
    return json_reply(200, to_json(*next));
  }

  reply logs(const policy::http_request& req) {
    auto tail = parse_tail(req.param("tail"), req.has_param("tail"));
    if (!tail) {
      return fail(400, tail.err().message);
    }
    fs::path path;
    {
      std::lock_guard lock(mutex_);
      auto it = find(req.match(1));
      if (it == records_.end()) {
        return not_found(req.match(1));
      }
      path = experiment_dir(home_, it->first) / "log";
    }
    // The last 8 MiB at most: a log can grow without bound; a client that wants more reads the
    // file.
    std::string text = read_tail(path, 8u << 20);
    if (*tail) {
      text = tail_lines(text, **tail);
    }
    return {200, text, "text/plain; charset=utf-8"};
  }

  reply metrics() {
    std::vector<experiment_record> records;
    daemon_settings settings;
    {
      std::lock_guard lock(mutex_);
      records = snapshot();
      settings = settings_;
    }
    std::string text = daemon_metrics(records, settings, now_ms(), started_ms_);
    std::vector<std::pair<std::string, std::string>> files;
    for (const auto& r : records) {
      if (r.state != experiment_state::running || r.pid == 0) {
        continue;
      }
      // A seeds experiment's child writes into the folder of the seed it runs.
      const auto seed = current_seed(r);
      const fs::path prom =
          fs::path(seed ? launch::seed_run_dir(r.run_dir, *seed) : r.run_dir) / "metrics.prom";
      std::error_code ec;
      if (!fs::exists(prom, ec)) {
        continue;
      }
      auto content = read_text(prom);
      if (content) {
        files.emplace_back(r.id, *content);
      }
    }
    text += merge_experiment_metrics(files);
    return {200, text, "text/plain; version=0.0.4; charset=utf-8"};
  }

  fs::path home_;
  std::function<status(const std::string&, const std::string&, const fs::path&)> check_submission_;
  std::mutex mutex_;
  std::map<std::string, experiment_record> records_;
  daemon_settings settings_;
  std::uint64_t next_seq_ = 1;
  bool stopping_ = false;
  std::int64_t started_ms_ = now_ms();
  std::string token_;
  int bound_port_ = 0;
  int lock_fd_ = -1;
  std::set<int> killed_;  // process groups already sent SIGKILL
  policy::gated_server server_{control_api_limits()};
};

}  // namespace

int run_daemon(const daemon_options& options) {
  log::setup("leap daemon");
  // Before any thread of ours exists, so that they inherit the mask; only the supervisor takes
  // these signals.
  if (auto routed = signals::route({SIGTERM, SIGINT, SIGHUP, SIGCHLD}); !routed) {
    std::fprintf(stderr, "leap daemon: error: %s\n", routed.err().message.c_str());
    return 1;
  }
  supervisor s(options);
  return s.run();
}

}  // namespace leap::daemon
