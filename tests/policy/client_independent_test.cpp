// The policy client against an OpenAI-compatible server that nobody here wrote: mock-llm from npm
// (@dwmkerr/mock-llm, pinned in tests/policy/independent/package-lock.json), configured by
// tests/policy/independent/mock-llm.yaml to answer /v1/completions in vLLM's shape. Skips, saying
// what to run, when node or the npm packages are missing.
#include "policy/client/client.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace leap::policy {
namespace {

using namespace std::chrono_literals;

const std::filesystem::path independent_dir =
    std::filesystem::path(LEAP_SOURCE_DIR) / "tests" / "policy" / "independent";

bool node_available() { return std::system("node --version > /dev/null 2>&1") == 0; }

// `node run_mock_llm.js` as a child; it exits when its stdin closes.
class mock_llm_process {
 public:
  ~mock_llm_process() {
    if (stdin_fd_ >= 0) {
      ::close(stdin_fd_);
    }
    if (stdout_fd_ >= 0) {
      ::close(stdout_fd_);
    }
    if (pid_ <= 0) {
      return;
    }
    for (int i = 0; i < 200; ++i) {  // up to 2 s for a clean exit
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        return;
      }
      std::this_thread::sleep_for(10ms);
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }

  // Starts the server and waits (bounded) for the port it prints. Returns "" or an error.
  std::string start() {
    int in[2];
    int out[2];
    if (::pipe(in) != 0 || ::pipe(out) != 0) {
      return "pipe failed";
    }
    pid_ = ::fork();
    if (pid_ < 0) {
      return "fork failed";
    }
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::close(in[1]);
      ::close(out[0]);
      if (::chdir(independent_dir.c_str()) != 0) {
        ::_exit(126);
      }
      ::execlp("node", "node", "run_mock_llm.js", "mock-llm.yaml", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_fd_ = in[1];
    stdout_fd_ = out[0];
    std::string seen;
    const auto until = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < until) {
      pollfd p{stdout_fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) {
        continue;
      }
      char buf[4096];
      const auto n = ::read(stdout_fd_, buf, sizeof buf);
      if (n <= 0) {
        return "mock-llm exited before printing its port; output: " + seen;
      }
      seen.append(buf, static_cast<std::size_t>(n));
      if (auto at = seen.find("PORT ");
          at != std::string::npos && seen.find('\n', at) != std::string::npos) {
        port_ = std::stoi(seen.substr(at + 5));
        return {};
      }
    }
    return "mock-llm printed no port within 60 s; output: " + seen;
  }

  [[nodiscard]] int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  int port_ = 0;
};

turn_result run_turn(policy_client& client, turn_request request) {
  std::mutex m;
  std::condition_variable cv;
  std::optional<turn_result> out;
  EXPECT_EQ(client.submit(std::move(request),
                          [&](turn_result r) {
                            std::lock_guard lock(m);
                            out = std::move(r);
                            cv.notify_all();
                          }),
            submit_status::accepted);
  std::unique_lock lock(m);
  if (!cv.wait_for(lock, 30s, [&] { return out.has_value(); })) {
    turn_result timeout;
    timeout.status = turn_status::cancelled;
    timeout.message = "no answer within 30 s";
    return timeout;
  }
  return *out;
}

TEST(ClientIndependent, TalksToMockLlmFromNpm) {
  if (!std::filesystem::exists(independent_dir / "node_modules" / "@dwmkerr" / "mock-llm")) {
    GTEST_SKIP() << "tests/policy/independent/node_modules is missing: run `npm ci --prefix "
                    "tests/policy/independent` (tools/dev.sh deps does it)";
  }
  if (!node_available()) {
    GTEST_SKIP() << "node is not on PATH: install nodejs (tools/dev.sh deps)";
  }
  mock_llm_process server;
  const auto started = server.start();
  ASSERT_TRUE(started.empty()) << started;

  client_config config;
  config.flavour = wire_flavour::vllm;
  config.model = "mock-model";
  config.endpoints.push_back({"http://127.0.0.1:" + std::to_string(server.port()), 4});
  config.retry.base_backoff = 1ms;
  config.retry.max_backoff = 10ms;
  config.request_timeout = 10s;
  auto client = policy_client::create(config);
  ASSERT_TRUE(client) << client.err().message;

  // The first request meets a 503 (the rule for sequence 0) and is retried; the answer echoes the
  // prompt ids, which the client checks against what it sent.
  turn_request request;
  request.request_id = "independent-1";
  request.prompt = {151644, 872, 198};
  request.sampling.max_tokens = 16;
  auto first = run_turn(**client, request);
  ASSERT_EQ(first.status, turn_status::ok) << first.message;
  EXPECT_EQ(first.attempts, 2);
  EXPECT_NE(first.message.find("warming up"), std::string::npos) << first.message;
  ASSERT_EQ(first.choices.size(), 1U);
  EXPECT_EQ(first.choices[0].ids, (std::vector<token_id>{501, 502}));
  EXPECT_EQ(first.choices[0].logprobs, (std::vector<float>{-0.5F, -0.25F}));
  EXPECT_EQ(first.choices[0].finish, finish_reason::stop);
  EXPECT_EQ(first.choices[0].text, " fixed");

  // A prompt over the mock's context window: a 400 that ends the turn `truncated`, not retried.
  request.request_id = "independent-2";
  request.prompt.assign(1100, 7);
  auto second = run_turn(**client, request);
  EXPECT_EQ(second.status, turn_status::truncated) << second.message;
  EXPECT_EQ(second.attempts, 1);
  EXPECT_NE(second.message.find("maximum context length"), std::string::npos) << second.message;

  EXPECT_TRUE((*client)->endpoints()[0].up);
  client->reset();
}

}  // namespace
}  // namespace leap::policy
