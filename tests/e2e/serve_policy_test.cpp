// `leap serve-policy` as a user runs it: the real binary on 127.0.0.1 with port 0, a tiny suite
// written by the test, plain HTTP over a socket (every read with a timeout), and a clean stop on
// SIGTERM and SIGINT.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <chrono>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <optional>
#include <poll.h>
#include <regex>
#include <signal.h>
#include <spawn.h>
#include <string>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace {

using nlohmann::json;
using steady = std::chrono::steady_clock;
namespace fs = std::filesystem;

const char* const prompt =
    "Implement `void solve(const int* x, int* out, int n)` in C++: out[0] = sum of x.";
const char* const solution =
    "void solve(const int* x, int* out, int n) {\n  int s = 0;\n"
    "  for (int i = 0; i < n; ++i) s += x[i];\n  out[0] = s;\n}\n";

class temp_suite {
 public:
  temp_suite() {
    root_ = fs::temp_directory_path() / ("leap-serve-policy-e2e-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    const fs::path task = root_ / "cpp" / "sum";
    fs::create_directories(task / "wrong");
    std::ofstream(task / "task.json") << json{
        {"id", "cpp/sum"},
        {"kind", "cpp"},
        {"difficulty", 1},
        {"category", "math"},
        {"prompt", prompt}}.dump(2);
    std::ofstream(task / "solution.cpp") << solution;
    std::ofstream(task / "wrong" / "wrong_formula.cpp")
        << "void solve(const int* x, int* out, int n) {\n  out[0] = n;\n}\n";
  }
  ~temp_suite() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  temp_suite(const temp_suite&) = delete;
  temp_suite& operator=(const temp_suite&) = delete;
  [[nodiscard]] std::string path() const { return root_.string(); }

 private:
  fs::path root_;
};

// A child process with its stdout and stderr read through one pipe.
class child {
 public:
  explicit child(const std::vector<std::string>& argv) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      return;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
    std::vector<char*> args;
    args.reserve(argv.size());
    for (const auto& a : argv) {
      args.push_back(const_cast<char*>(a.c_str()));
    }
    args.push_back(nullptr);
    if (::posix_spawn(&pid_, argv[0].c_str(), &actions, nullptr, args.data(), environ) != 0) {
      pid_ = -1;
    }
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    out_ = fds[0];
  }
  ~child() {
    if (pid_ > 0 && !exit_code_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) {
      ::close(out_);
    }
  }
  child(const child&) = delete;
  child& operator=(const child&) = delete;

  [[nodiscard]] bool started() const { return pid_ > 0; }
  void signal(int sig) const { ::kill(pid_, sig); }
  [[nodiscard]] const std::string& output() const { return output_; }

  // Reads output until `pattern` matches or the deadline passes; returns the match.
  std::optional<std::smatch> wait_for_output(const std::regex& pattern,
                                             std::chrono::milliseconds limit) {
    const auto deadline = steady::now() + limit;
    while (true) {
      std::smatch match;
      if (std::regex_search(output_, match, pattern)) {
        return match;
      }
      if (!read_some(deadline)) {
        return std::nullopt;
      }
    }
  }

  // Waits for the exit (reading the rest of the output); nothing after the deadline.
  std::optional<int> wait_exit(std::chrono::milliseconds limit) {
    const auto deadline = steady::now() + limit;
    while (read_some(deadline)) {
    }
    while (steady::now() < deadline) {
      int status = 0;
      const pid_t done = ::waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return exit_code_;
      }
      ::poll(nullptr, 0, 10);
    }
    return std::nullopt;
  }

 private:
  bool read_some(steady::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
    if (left.count() <= 0 || out_ < 0) {
      return false;
    }
    pollfd p{out_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
      return false;
    }
    char buffer[4096];
    const ssize_t n = ::read(out_, buffer, sizeof(buffer));
    if (n <= 0) {
      ::close(out_);
      out_ = -1;
      return false;
    }
    output_.append(buffer, static_cast<std::size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int out_ = -1;
  std::string output_;
  std::optional<int> exit_code_;
};

struct http_response {
  int status = 0;
  std::string body;
};

// One request on its own connection (Connection: close), with a 10 s limit on every socket call.
std::optional<http_response> http(int port, const std::string& method, const std::string& path,
                                  const std::string& body = "") {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return std::nullopt;
  }
  timeval timeout{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return std::nullopt;
  }
  std::string request = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
                        "Connection: close\r\nContent-Type: application/json\r\n" +
                        "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return std::nullopt;
  }
  std::string raw;
  char buffer[4096];
  ssize_t n = 0;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) {
    raw.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const auto header_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || header_end == std::string::npos) {
    return std::nullopt;
  }
  return http_response{std::stoi(raw.substr(9, 3)), raw.substr(header_end + 4)};
}

const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");

TEST(ServePolicy, ServesTheSuiteAndStopsOnSigterm) {
  temp_suite suite;
  child server({LEAP_BINARY, "serve-policy", "--backend", "scripted", "--suite", suite.path(),
                "--host", "127.0.0.1", "--port", "0", "--seed", "7", "--model-name", "e2e"});
  ASSERT_TRUE(server.started());
  const auto match = server.wait_for_output(listening, std::chrono::seconds(20));
  ASSERT_TRUE(match) << server.output();
  const int port = std::stoi((*match)[1]);
  ASSERT_GT(port, 0);

  const auto health = http(port, "GET", "/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);

  const json messages = json::array({{{"role", "user"}, {"content", prompt}}});
  const auto tokens = http(port, "POST", "/tokenize", json{{"messages", messages}}.dump());
  ASSERT_TRUE(tokens);
  ASSERT_EQ(tokens->status, 200) << tokens->body;
  const json ids = json::parse(tokens->body)["tokens"];

  const auto completion = http(port, "POST", "/v1/completions",
                               json{{"model", "e2e"},
                                    {"prompt", ids},
                                    {"max_tokens", 1000},
                                    {"seed", 1},
                                    {"return_token_ids", true},
                                    {"logprobs", 0}}
                                   .dump());
  ASSERT_TRUE(completion);
  ASSERT_EQ(completion->status, 200) << completion->body;
  const json choice = json::parse(completion->body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_NE(choice["text"].get<std::string>().find("```cpp\n"), std::string::npos);
  EXPECT_EQ(choice["token_ids"].size(), choice["logprobs"]["token_logprobs"].size());

  const auto bad = http(port, "POST", "/v1/completions", "{}");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(json::parse(bad->body)["error"]["message"], "'prompt' is required");

  server.signal(SIGTERM);
  const auto code = server.wait_exit(std::chrono::seconds(10));
  ASSERT_TRUE(code) << server.output();
  EXPECT_EQ(*code, 0) << server.output();
  EXPECT_NE(server.output().find("stopped"), std::string::npos) << server.output();
}

TEST(ServePolicy, StopsOnSigintWithFaultsOn) {
  temp_suite suite;
  child server({LEAP_BINARY, "serve-policy", "--suite", suite.path(), "--port", "0", "--faults",
                "5xx=1", "--latency-ttft-ms", "5"});
  ASSERT_TRUE(server.started());
  const auto match = server.wait_for_output(listening, std::chrono::seconds(20));
  ASSERT_TRUE(match) << server.output();
  const int port = std::stoi((*match)[1]);
  const auto failed = http(port, "POST", "/v1/completions", json{{"prompt", prompt}}.dump());
  ASSERT_TRUE(failed);
  EXPECT_GE(failed->status, 502);
  EXPECT_LE(failed->status, 504);
  server.signal(SIGINT);
  const auto code = server.wait_exit(std::chrono::seconds(10));
  ASSERT_TRUE(code) << server.output();
  EXPECT_EQ(*code, 0) << server.output();
}

TEST(ServePolicy, ErrorsNameWhatToFix) {
  struct row {
    std::vector<std::string> args;
    std::string message;
  };
  temp_suite suite;
  const std::vector<row> rows = {
      {{"--suite", "/nonexistent-leap-suite", "--port", "0"},
       "leap serve-policy: error: --suite: /nonexistent-leap-suite: not a directory"},
      {{"--port", "0"}, "leap serve-policy: error: --suite is required"},
      {{"--suite", ".", "--port", "0", "--faults", "boom=1"},
       "leap serve-policy: error: --faults: unknown fault 'boom'"},
      // vLLM's --weight-transfer-config: the backends accepted are transfer_backend's names.
      {{"--suite", suite.path(), "--port", "0", "--weight-transfer-config", "nccl"},
       "leap serve-policy: error: --weight-transfer-config must be a JSON object with a "
       "\"backend\" string, e.g. '{\"backend\": \"nccl\"}' (got 'nccl')"},
      {{"--suite", suite.path(), "--port", "0", "--weight-transfer-config",
        R"({"backend": "rdma"})"},
       "leap serve-policy: error: --weight-transfer-config: backend 'rdma' is not served here "
       "(valid: disk, nccl, ipc; nccl and ipc need --model, ipc --device cuda)"},
      {{"--suite", suite.path(), "--port", "0", "--weight-transfer-config",
        R"({"backend": "ipc"})"},
       "leap serve-policy: error: --weight-transfer-config: backend 'ipc' needs --device cuda "
       "(or cuda:N), got --device cpu"},
      {{"--suite", suite.path(), "--port", "0", "--weight-transfer-config",
        R"({"backend": "nccl"})"},
       "has no 'nccl' weight-transfer engine (disk works with every backend; nccl and ipc need "
       "the LibTorch backend, --model)"},
  };
  for (const auto& r : rows) {
    std::vector<std::string> argv{LEAP_BINARY, "serve-policy"};
    argv.insert(argv.end(), r.args.begin(), r.args.end());
    child run(argv);
    ASSERT_TRUE(run.started());
    const auto code = run.wait_exit(std::chrono::seconds(10));
    ASSERT_TRUE(code) << run.output();
    EXPECT_NE(*code, 0);
    EXPECT_NE(run.output().find(r.message), std::string::npos) << run.output();
  }
  child help({LEAP_BINARY, "serve-policy", "--help"});
  const auto code = help.wait_exit(std::chrono::seconds(10));
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 0);
  EXPECT_NE(help.output().find("--latency-ttft-ms"), std::string::npos) << help.output();
  EXPECT_NE(help.output().find("--faults"), std::string::npos);
  EXPECT_NE(help.output().find("B one of disk, nccl, ipc"), std::string::npos) << help.output();
}

}  // namespace
