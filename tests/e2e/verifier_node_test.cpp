// Distributed verification end to end on loopback: two real `leap verifier-node` processes, a
// real `leap run` (embedded policy, cpp and python tasks, local verifier capacity 0 so every job
// goes to the nodes), one node killed with SIGKILL in the middle of the run. The run completes,
// the store holds exactly one verdict per verified turn and the dispatcher's counts agree with
// it; the node restarted on the same port is used again. A node cut off (stopped with SIGSTOP,
// its connection open) is declared lost by the heartbeat timeout, with the same guarantees. A
// wrong secret stops the run with a clear message on both sides. Every wait is bounded.
#include "e2e_support.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <optional>
#include <poll.h>
#include <regex>
#include <set>
#include <signal.h>
#include <sstream>
#include <string>
#include <sys/socket.h>
#include <sys/wait.h>
#include <tuple>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
using leap::e2e::clock_type;
using leap::e2e::leap_process;

// Polls every process's output (so none blocks on a full pipe) until `done()` holds or the
// deadline passes; returns whether it held.
template <class Predicate>
bool wait_until(const std::vector<leap_process*>& all, Predicate done,
                std::chrono::seconds timeout) {
  const auto deadline = clock_type::now() + timeout;
  for (;;) {
    for (auto* p : all) {
      p->drain(0);
    }
    if (done()) {
      return true;
    }
    if (clock_type::now() > deadline) {
      return false;
    }
    all.front()->drain(50);
  }
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

// A private folder with a small suite copied from the project's, removed at the end.
class node_dir : public leap::e2e::scratch_dir {
 public:
  node_dir()
      : scratch_dir("node",
                    {"cpp/axpby", "cpp/prefix_sum_int", "python/flatten", "python/two_sum"}) {
    std::ofstream(root_ / "secret") << "node-secret-1\n";
    std::ofstream(root_ / "wrong") << "not-the-secret\n";
  }

  // A node on `port` (0: any free one) with the shared secret.
  [[nodiscard]] std::vector<std::string> node_args(int port) const {
    return {"verifier-node",
            "--port",
            std::to_string(port),
            "--suite",
            (root_ / "suite").string(),
            "--secret-file",
            (root_ / "secret").string(),
            "--compile-workers",
            "1",
            "--slots",
            "2",
            "--cache-dir",
            (root_ / ("cache-" + std::to_string(port))).string()};
  }

  std::string write_config(int steps, const std::vector<int>& ports, const std::string& secret_file,
                           const std::string& extra_verifier_lines = "",
                           int node_timeout_s = 5) const {
    std::ostringstream yaml;
    yaml << "experiment:\n  name: e2e\n  seed: 5\n  run_dir: " << (root_ / "run").string()
         << "\n  steps: " << steps << "\n"
         << "data:\n  train: " << (root_ / "suite").string()
         << "\n  validation_fraction: 0.25\n  batch_size: 2\n"
         << "rollout:\n  group_size: 4\n  max_turns: 2\n"
         << "gate:\n  policy: dcp\n  unit: fraction\n  tau_min: 0.25\n  tau_max: 1.0\n"
         << "learner:\n  kind: record\n"
         << "policy:\n  flavour: embedded\n  max_in_flight: 8\n"
         << "verifier:\n  compile_workers: 1\n  gpu_slots: 0\n  local_jobs: 0\n"
         << "  node_secret_file: " << secret_file << "\n"
         << "  node_retry_max_s: 1\n  node_timeout_s: " << node_timeout_s << "\n"
         << extra_verifier_lines << "  nodes:\n";
    for (int p : ports) {
      yaml << "    - 127.0.0.1:" << p << "\n";
    }
    const fs::path path = root_ / "config.yaml";
    std::ofstream(path) << yaml.str();
    return path.string();
  }
};

// Waits for a node's "listening on 127.0.0.1:PORT" line; returns the port, or -1.
int wait_listening(leap_process& node) {
  const std::regex listening(R"(listening on 127\.0\.0\.1:(\d+))");
  std::smatch m;
  const bool up =
      node.read_until([&](const std::string& out) { return std::regex_search(out, m, listening); },
                      std::chrono::seconds(60));
  if (!up) {
    return -1;
  }
  std::regex_search(node.output(), m, listening);
  return std::stoi(m[1]);
}

struct store_turns {
  std::size_t groups = 0;
  std::size_t verified_turns = 0;  // turns with an answer, so with a verdict from a node
  std::size_t unverified_turns = 0;
  bool unique_groups = true;
  bool every_turn_has_a_verdict = true;
};

store_turns read_store(const fs::path& run_dir, const fs::path& out) {
  store_turns s;
  leap_process exporter({"export", run_dir.string(), "--format", "jsonl", "--out", out.string()});
  const auto code = exporter.wait(std::chrono::seconds(60));
  EXPECT_EQ(code.value_or(-1), 0) << exporter.output();
  std::ifstream in(out);
  std::set<std::tuple<std::uint64_t, std::string, std::uint64_t>> keys;
  const std::set<std::string> verdicts = {"pass",    "format",  "compile",     "forbidden",
                                          "runtime", "timeout", "wrong_answer"};
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) {
      continue;
    }
    const auto g = nlohmann::json::parse(line);
    ++s.groups;
    s.unique_groups &= keys.emplace(g["step"].get<std::uint64_t>(), g["split"].get<std::string>(),
                                    g["group_index"].get<std::uint64_t>())
                           .second;
    for (const auto& r : g["rollouts"]) {
      for (const auto& t : r["turns"]) {
        s.every_turn_has_a_verdict &=
            t.contains("verdict") && verdicts.count(t["verdict"].get<std::string>()) == 1;
        const bool answered = t["finish_reason"].get<std::string>() != "error" &&
                              !t["text"].get<std::string>().empty();
        ++(answered ? s.verified_turns : s.unverified_turns);
      }
    }
  }
  return s;
}

struct dispatcher_totals {
  unsigned long jobs = 0, verdicts = 0, resent = 0, duplicates = 0;
};

// Waits for `run` to exit 0 after finishing and reads the dispatcher's summary line.
void finished_run_totals(leap_process& run, std::chrono::seconds wait, dispatcher_totals* out) {
  const auto code = run.wait(wait);
  ASSERT_TRUE(code.has_value()) << run.output();
  ASSERT_EQ(*code, 0) << run.output();
  EXPECT_NE(run.output().find("run 'e2e' finished"), std::string::npos) << run.output();
  const std::regex totals(
      R"(verifier nodes: (\d+) jobs, (\d+) verdicts, (\d+) re-sent, (\d+) duplicates dropped)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run.output(), m, totals)) << run.output();
  *out = {std::stoul(m[1]), std::stoul(m[2]), std::stoul(m[3]), std::stoul(m[4])};
}

TEST(VerifierNodeE2E, KilledNodeLosesNoVerdictAndARestartedNodeIsUsedAgain) {
  node_dir dir;
  auto node_a = std::make_unique<leap_process>(dir.node_args(0));
  leap_process node_b(dir.node_args(0));
  const int port_a = wait_listening(*node_a);
  const int port_b = wait_listening(node_b);
  ASSERT_GT(port_a, 0) << node_a->output();
  ASSERT_GT(port_b, 0) << node_b.output();
  EXPECT_NE(node_a->output().find("secret required"), std::string::npos) << node_a->output();

  const std::string a = "127.0.0.1:" + std::to_string(port_a);
  const auto config = dir.write_config(3, {port_a, port_b}, (dir.root() / "secret").string());
  leap_process run({"run", config});
  // Kill node A once it has served some jobs and holds more: the run is in the middle.
  ASSERT_TRUE(wait_until(
      {node_a.get(), &node_b, &run}, [&] { return count_of(node_a->output(), "| served ") >= 2; },
      std::chrono::seconds(300)))
      << "node A served nothing:\n"
      << node_a->output() << "\nrun:\n"
      << run.output();
  node_a->kill9();
  ASSERT_TRUE(wait_until(
      {&run, &node_b},
      [&] {
        return run.output().find("verifier node " + a + ": lost") != std::string::npos ||
               run.output().find("run 'e2e' finished") != std::string::npos;
      },
      std::chrono::seconds(120)))
      << run.output();
  const bool lost_mid_run = run.output().find("verifier node " + a + ": lost") != std::string::npos;
  EXPECT_TRUE(lost_mid_run) << run.output();

  // Node A comes back on the same port; the run (or the continued run below) uses it again.
  node_a = std::make_unique<leap_process>(dir.node_args(port_a));
  ASSERT_EQ(wait_listening(*node_a), port_a) << node_a->output();

  ASSERT_TRUE(wait_until(
      {&run, node_a.get(), &node_b},
      [&] {
        return run.output().find("run 'e2e' ") != std::string::npos &&
               run.output().find("verifier nodes: ") != std::string::npos;
      },
      std::chrono::seconds(400)))
      << run.output();
  // The dispatcher's counts: every job judged once, the lost ones re-sent.
  dispatcher_totals totals;
  finished_run_totals(run, std::chrono::seconds(60), &totals);
  if (HasFatalFailure()) {
    return;
  }
  const auto jobs = totals.jobs;
  const auto judged = totals.verdicts;
  EXPECT_GT(jobs, 0u);
  EXPECT_EQ(jobs, judged) << run.output();

  // The store: every turn once, with one verdict; the verified turns are exactly the jobs.
  const auto stored = read_store(dir.root() / "run", dir.root() / "export.jsonl");
  EXPECT_GT(stored.groups, 0u);
  EXPECT_TRUE(stored.unique_groups);
  EXPECT_TRUE(stored.every_turn_has_a_verdict);
  EXPECT_EQ(stored.verified_turns, judged) << run.output();

  // Used again: the restarted node serves jobs, in this run or when the run continues.
  if (count_of(node_a->output(), "| served ") == 0) {
    const auto more = dir.write_config(5, {port_a, port_b}, (dir.root() / "secret").string());
    leap_process continued({"run", more});
    const auto again = continued.wait(std::chrono::seconds(400));
    ASSERT_EQ(again.value_or(-1), 0) << continued.output();
  }
  node_a->drain(0);
  EXPECT_GE(count_of(node_a->output(), "| served "), 1u) << "the restarted node was not used:\n"
                                                         << node_a->output() << "\nrun:\n"
                                                         << run.output();
  EXPECT_NE(node_a->output().find("admitted (secret verified)"), std::string::npos)
      << node_a->output();
}

// A node cut off rather than dead: its process is stopped (SIGSTOP), so its TCP connection
// stays open (and the kernel still accepts connections on its port) but nothing answers. Only
// the missing heartbeats can reveal it: the run declares it lost after verifier.node_timeout_s,
// sends its jobs in flight elsewhere, and, once the node is resumed (SIGCONT), nothing it still
// answers is counted twice. Every turn ends with exactly one verdict.
TEST(VerifierNodeE2E, ACutOffNodeIsDeclaredLostAndItsLateVerdictsAreNotCountedTwice) {
  constexpr int node_timeout_s = 2;
  node_dir dir;
  leap_process node_a(dir.node_args(0));
  // Declared after node_a, so it runs first: a stopped node is always resumed (then killed by
  // its own destructor), whatever assertion ends the test.
  struct resume_at_exit {
    leap_process& node;
    ~resume_at_exit() { node.signal(SIGCONT); }
  } resume{node_a};
  leap_process node_b(dir.node_args(0));
  const int port_a = wait_listening(node_a);
  const int port_b = wait_listening(node_b);
  ASSERT_GT(port_a, 0) << node_a.output();
  ASSERT_GT(port_b, 0) << node_b.output();

  const std::string a = "127.0.0.1:" + std::to_string(port_a);
  const auto config =
      dir.write_config(2, {port_a, port_b}, (dir.root() / "secret").string(), "", node_timeout_s);
  leap_process run({"run", config});
  ASSERT_TRUE(wait_until(
      {&node_a, &node_b, &run}, [&] { return count_of(node_a.output(), "| served ") >= 2; },
      std::chrono::seconds(60)))
      << "node A served nothing:\n"
      << node_a.output() << "\nrun:\n"
      << run.output();
  node_a.signal(SIGSTOP);
  const auto stopped_at = clock_type::now();
  const std::string lost = "verifier node " + a + ": lost (";
  const bool lost_while_stopped = wait_until(
      {&run, &node_b},
      [&] {
        return run.output().find(lost) != std::string::npos ||
               run.output().find("run 'e2e' finished") != std::string::npos;
      },
      std::chrono::seconds(30));
  const double detected_after_s =
      std::chrono::duration<double>(clock_type::now() - stopped_at).count();
  node_a.signal(SIGCONT);
  ASSERT_TRUE(lost_while_stopped) << run.output();
  ASSERT_NE(run.output().find(lost), std::string::npos)
      << "the run ended before the stopped node was declared lost:\n"
      << run.output();
  // Detected by the missing heartbeats: no sooner than most of the timeout after the stop (the
  // last heartbeat may have come up to a quarter of it before), and not much later.
  EXPECT_GE(detected_after_s, 0.5 * node_timeout_s) << run.output();
  EXPECT_LE(detected_after_s, 6.0 * node_timeout_s) << run.output();
  const auto lost_line_at = run.output().find(lost);
  const std::string lost_line =
      run.output().substr(lost_line_at, run.output().find('\n', lost_line_at) - lost_line_at);
  std::printf("[ cut off  ] %s (%.1f s after SIGSTOP)\n", lost_line.c_str(), detected_after_s);

  ASSERT_TRUE(wait_until(
      {&run, &node_a, &node_b},
      [&] { return run.output().find("verifier nodes: ") != std::string::npos; },
      std::chrono::seconds(120)))
      << run.output();
  // Every job judged once: a late verdict of the resumed node, if one got through, was dropped.
  dispatcher_totals totals;
  finished_run_totals(run, std::chrono::seconds(30), &totals);
  if (HasFatalFailure()) {
    return;
  }
  const auto jobs = totals.jobs;
  const auto judged = totals.verdicts;
  const auto resent = totals.resent;
  const auto duplicates = totals.duplicates;
  std::smatch m;
  EXPECT_GT(jobs, 0u);
  EXPECT_EQ(jobs, judged) << run.output();
  EXPECT_EQ(count_of(run.output(), "dropped a second verdict"), duplicates) << run.output();
  const std::regex lost_jobs(R"(; (\d+) jobs in flight sent elsewhere)");
  ASSERT_TRUE(std::regex_search(lost_line, m, lost_jobs)) << lost_line;
  EXPECT_GE(resent, std::stoul(m[1])) << run.output();
  const auto summary_at = run.output().find("verifier nodes: ");
  std::printf(
      "[ cut off  ] %s\n",
      run.output().substr(summary_at, run.output().find('\n', summary_at) - summary_at).c_str());

  const auto stored = read_store(dir.root() / "run", dir.root() / "export.jsonl");
  EXPECT_GT(stored.groups, 0u);
  EXPECT_TRUE(stored.unique_groups);
  EXPECT_TRUE(stored.every_turn_has_a_verdict);
  EXPECT_EQ(stored.verified_turns, judged) << run.output();
}

// The peak resident set (VmHWM) of process `pid`, KiB; -1 when it cannot be read.
long node_peak_rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) {
      return std::stol(line.substr(6));
    }
  }
  return -1;
}

// A BASP 0.17 frame header as CAF writes it (network byte order): operation, padding, flags,
// payload length, operation data, source and destination actor.
std::string basp_header(std::uint8_t operation, std::uint32_t payload_len,
                        std::uint8_t dest_actor = 0) {
  std::string h(32, '\0');
  h[0] = static_cast<char>(operation);
  h[31] = static_cast<char>(dest_actor);  // CAF drops a direct message to actor 0 itself
  for (int i = 0; i < 4; ++i) {
    h[4 + i] = static_cast<char>((payload_len >> (24 - 8 * i)) & 0xffU);
  }
  return h;
}

// A peer without CAF: connects to 127.0.0.1:`port`, sends `bytes`, and reads (and drops) what
// the node sends until the node closes the connection. Whether it did within `timeout`.
bool node_closes_after(int port, const std::string& bytes, std::chrono::seconds timeout) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool closed = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size())) {
    const auto deadline = clock_type::now() + timeout;
    while (clock_type::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) {
        continue;
      }
      char buffer[4096];
      const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n <= 0) {
        closed = true;
        break;
      }
    }
  }
  ::close(fd);
  return closed;
}

// The report: a peer that has not proved the secret sent handshake headers claiming 4 GiB
// payloads, and the node allocated them (4.4 GiB resident and growing). Now every frame is
// bounded before the proof: the node closes such connections without allocating, and keeps
// serving an orchestrator that proves the secret.
TEST(VerifierNodeE2E, AnUnauthenticatedPeerCannotMakeTheNodeAllocate) {
  node_dir dir;
  leap_process node(dir.node_args(0));
  const int port = wait_listening(node);
  ASSERT_GT(port, 0) << node.output();
  const long before = node_peak_rss_kib(node.pid());
  ASSERT_GT(before, 0);
  constexpr std::uint8_t client_handshake = 1;
  constexpr std::uint8_t direct_message = 2;
  // Two 4 GiB handshake claims, as reported, and one of a direct message.
  EXPECT_TRUE(node_closes_after(port, basp_header(client_handshake, 0xfffffff0U),
                                std::chrono::seconds(60)));
  EXPECT_TRUE(node_closes_after(port, basp_header(client_handshake, 0xfffffff0U),
                                std::chrono::seconds(60)));
  EXPECT_TRUE(
      node_closes_after(port, basp_header(direct_message, 0xffffffffU), std::chrono::seconds(60)));
  // A small message whose content claims a 4 GiB byte buffer (CAF's "@charbuf", a
  // std::vector<char>, is resized to the claimed length before its bytes are read).
  const std::string types = "@<>+@charbuf";
  std::string payload;
  payload += '\0';                             // empty forwarding stack
  payload += std::string(2, '\0');             // type number 0: named types follow
  payload += static_cast<char>(types.size());  // varbyte length of the type list
  payload += types;
  payload += std::string("\xff\xff\xff\xff\x0f", 5);  // varbyte 2^32 - 1: the claimed length
  EXPECT_TRUE(node_closes_after(
      port, basp_header(direct_message, static_cast<std::uint32_t>(payload.size()), 1) + payload,
      std::chrono::seconds(60)));
  node.drain(0);
  const long after = node_peak_rss_kib(node.pid());
  // One claim honoured would add 4 GiB; 64 MiB leaves room for anything the node does itself.
  EXPECT_LT(after - before, 64L * 1024) << "peak RSS " << before << " KiB -> " << after << " KiB";
  EXPECT_GE(count_of(node.output(), "closed the connection of 127.0.0.1"), 4u) << node.output();
  // An orchestrator with the secret is still served.
  const auto config = dir.write_config(1, {port}, (dir.root() / "secret").string());
  leap_process run({"run", config});
  const auto code = run.wait(std::chrono::seconds(300));
  ASSERT_EQ(code.value_or(-1), 0) << run.output();
  node.drain(0);
  EXPECT_GT(count_of(node.output(), "| served "), 0u) << node.output();
  // Issue 29: the orchestrator's first connection is served; CAF's own query after its handshake
  // is not taken for a message before the proof (which closed it, and the run waited for its
  // handshake to time out and connected again). Counted by that closure's own reason: a frame the
  // exiting run sends on another connection may be logged as a closure too (seen once in CI).
  EXPECT_EQ(count_of(node.output(), "'@<>+@atom+@atom+@str' before proving"), 0u) << node.output();
  EXPECT_EQ(count_of(run.output(), "handshake failed"), 0u) << run.output();
}

TEST(VerifierNodeE2E, AWrongSecretStopsTheRunWithAClearErrorOnBothSides) {
  node_dir dir;
  leap_process node(dir.node_args(0));
  const int port = wait_listening(node);
  ASSERT_GT(port, 0) << node.output();
  const auto config = dir.write_config(1, {port}, (dir.root() / "wrong").string());
  leap_process run({"run", config});
  const auto code = run.wait(std::chrono::seconds(120));
  ASSERT_TRUE(code.has_value()) << run.output();
  EXPECT_EQ(*code, 1) << run.output();
  EXPECT_NE(run.output().find("refused this orchestrator: wrong secret"), std::string::npos)
      << run.output();
  EXPECT_TRUE(node.read_until(
      [](const std::string& out) { return out.find("rejected orchestrator") != std::string::npos; },
      std::chrono::seconds(10)))
      << node.output();
  EXPECT_EQ(count_of(node.output(), "| served "), 0u) << node.output();
  // Refused on the first connection, not after a handshake timeout and a second one (the node
  // closed the first for CAF's own query after its handshake, "a message of types ...").
  EXPECT_EQ(count_of(node.output(), "a message of types"), 0u) << node.output();
  EXPECT_EQ(count_of(run.output(), "handshake failed"), 0u) << run.output();
}

// TLS through caf::openssl: a node that requires certificates signed by its CA serves a run that
// presents one; a run without TLS cannot reach it. The certificate is made with the openssl
// command (skipped where it is missing).
TEST(VerifierNodeE2E, TlsNodeServesATlsRunAndRefusesPlainConnections) {
  node_dir dir;
  const auto cert = (dir.root() / "cert.pem").string();
  const auto key = (dir.root() / "key.pem").string();
  const std::string make_cert =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 -keyout '" + key +
      "' -out '" + cert + "' >/dev/null 2>&1";
  if (std::system(make_cert.c_str()) != 0) {
    GTEST_SKIP() << "no openssl command to make a certificate";
  }
  auto args = dir.node_args(0);
  for (const char* a :
       {"--tls-certificate", cert.c_str(), "--tls-key", key.c_str(), "--tls-ca", cert.c_str()}) {
    args.emplace_back(a);
  }
  leap_process node(args);
  const int port = wait_listening(node);
  ASSERT_GT(port, 0) << node.output();
  EXPECT_NE(node.output().find("TLS on, peers checked against the CA"), std::string::npos)
      << node.output();
  const std::string tls =
      "  tls:\n    certificate: " + cert + "\n    key: " + key + "\n    ca: " + cert + "\n";
  {
    const auto config = dir.write_config(1, {port}, (dir.root() / "secret").string(), tls);
    leap_process run({"run", config});
    const auto code = run.wait(std::chrono::seconds(300));
    ASSERT_EQ(code.value_or(-1), 0) << run.output();
    EXPECT_NE(run.output().find("connected, 2 slots, secret verified, TLS"), std::string::npos)
        << run.output();
  }
  // Plain TCP to the TLS node: the handshake fails, no job runs; the run is stopped by SIGINT.
  node.drain(0);
  const auto served = count_of(node.output(), "| served ");
  EXPECT_GT(served, 0u) << node.output();
  std::filesystem::remove_all(dir.root() / "run");
  const auto plain = dir.write_config(1, {port}, (dir.root() / "secret").string());
  leap_process run({"run", plain});
  EXPECT_TRUE(run.read_until(
      [](const std::string& out) { return out.find("cannot connect") != std::string::npos; },
      std::chrono::seconds(60)))
      << run.output();
  run.signal(SIGINT);
  EXPECT_TRUE(run.wait(std::chrono::seconds(60)).has_value()) << run.output();
  node.drain(0);
  EXPECT_EQ(count_of(node.output(), "| served "), served) << node.output();
}

}  // namespace
