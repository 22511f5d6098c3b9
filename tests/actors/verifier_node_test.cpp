// The verifier node's pieces (the shared-secret proof itself is tested in
// tests/common/node_auth_test.cpp): the node protocol's messages through CAF's binary
// serializer, the node actor's handshake in front of a stand-in pool (a wrong proof is refused
// and no job runs before a right one), and a real node on loopback behind the guarded middleman
// (an idle peer that never proves the secret is closed, a proven orchestrator is kept).
#include "actors/verifier_node.hpp"

#include "actors/node_guard.hpp"
#include "actors/node_protocol.hpp"
#include "actors/remote_verifier.hpp"
#include "common/node_auth.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/io/basp/header.hpp>
#include <caf/make_message.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <vector>

namespace leap::actors {
namespace {

// One system per test: a static one would be destroyed after CAF's own statics at exit.
struct test_system {
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  test_system() {
    register_message_types(config);
    register_node_message_types(config);
    system = std::make_unique<caf::actor_system>(config);
  }
};

template <class T>
T round_trip(caf::actor_system& sys, const T& value) {
  std::vector<char> bytes;
  caf::binary_serializer sink{sys, bytes};
  T copy = value;
  const auto written = sink(copy);
  EXPECT_FALSE(written) << sys.render(written);
  T out{};
  caf::binary_deserializer source{sys, bytes};
  const auto read = source(out);
  EXPECT_FALSE(read) << sys.render(read);
  return out;
}

TEST(NodeProtocol, MessagesRoundTrip) {
  test_system ts;
  node_challenge c{std::string(64, 'f'), "127.0.0.1:4100", 6, true};
  EXPECT_EQ(round_trip(*ts.system, c), c);
  node_welcome w{"wrong secret", 6};
  EXPECT_EQ(round_trip(*ts.system, w), w);
  node_verdict v;
  v.job = 42;
  v.result.passed = true;
  v.result.verdict = verdict_category::pass;
  v.result.code_hash = "ab";
  v.result.compile_ms = 12.5;
  v.slots = 6;
  v.free = 2;
  EXPECT_EQ(round_trip(*ts.system, v), v);
}

// BASP frames as CAF itself writes them: a header through CAF's serializer, a direct message's
// payload (forwarding stack, message) likewise.
std::string caf_header(caf::actor_system& sys, caf::io::basp::message_type op,
                       std::uint32_t payload_len) {
  std::vector<char> bytes;
  caf::binary_serializer sink{sys, bytes};
  caf::io::basp::header h{op, 0, payload_len, 0, 0, 0};
  EXPECT_FALSE(sink(h));
  return std::string(bytes.begin(), bytes.end());
}

std::string caf_payload(caf::actor_system& sys, const caf::message& msg,
                        const std::vector<caf::strong_actor_ptr>& stack = {}) {
  std::vector<char> bytes;
  caf::binary_serializer sink{sys, bytes};
  // CAF 0.17's serializer takes its arguments by non-const reference.
  auto message = msg;
  auto forwarding = stack;
  EXPECT_FALSE(sink(forwarding, message));
  return std::string(bytes.begin(), bytes.end());
}

TEST(NodeGuard, ReadsCafsOwnFrames) {
  test_system ts;
  auto& sys = *ts.system;
  basp_header h;
  ASSERT_TRUE(parse_basp_header(
      caf_header(sys, caf::io::basp::message_type::client_handshake, 0xfffffff0U), h));
  EXPECT_EQ(h.operation, 1);
  EXPECT_EQ(h.payload_len, 0xfffffff0U);
  EXPECT_EQ(caf_header(sys, caf::io::basp::message_type::heartbeat, 0).size(), basp_header_bytes);
  const auto allowed = handshake_message_types(sys);
  ASSERT_EQ(allowed.size(), 2u);
  EXPECT_EQ(direct_message_types(caf_payload(sys, caf::make_message(node_hello_atom_v))),
            allowed[0]);
  EXPECT_EQ(allowed[0].rfind("@<>+", 0), 0u) << allowed[0];
  EXPECT_EQ(direct_message_types(caf_payload(sys, caf::make_message(std::vector<char>(3)))),
            "@<>+@charbuf");
  EXPECT_EQ(direct_message_types(""), "");
  EXPECT_EQ(direct_message_types(std::string("\x01", 1)), "");  // a forwarding stack
}

TEST(NodeGuard, BoundsEveryFrameAndTakesOnlyTheHandshakeBeforeTheProof) {
  test_system ts;
  auto& sys = *ts.system;
  using mt = caf::io::basp::message_type;
  const frame_limits limits{1000, 100000};
  const auto hello = caf_payload(sys, caf::make_message(node_hello_atom_v));
  const auto auth = caf_payload(sys, caf::make_message(node_auth_atom_v, std::string(64, 'a')));
  const auto job = caf_payload(sys, caf::make_message(node_job_atom_v, std::uint64_t{1},
                                                      verification_request{"r", "t", "code"}));
  const auto charbuf = caf_payload(sys, caf::make_message(std::vector<char>(10)));
  struct row {
    const char* what;
    bool accepted;  // a node's side
    bool admitted;
    mt op;
    std::uint32_t claimed;  // the header's payload length
    std::string payload;    // "" with claimed > 0: only the header is checked
    const char* refusal;    // "" : taken
  };
  const std::vector<row> rows = {
      {"4 GiB handshake claim", true, false, mt::client_handshake, 0xfffffff0U, "",
       "a frame of 4294967280 bytes before proving the secret"},
      {"4 GiB claim admitted", true, true, mt::direct_message, 0xffffffffU, "",
       "a frame of 4294967295 bytes (at most 100000)"},
      {"4 GiB claim from a node", false, false, mt::direct_message, 0xffffffffU, "",
       "(at most 100000)"},
      {"just over before the proof", true, false, mt::direct_message, 1001, "", "before proving"},
      {"hello before the proof", true, false, mt::direct_message, 0, hello, ""},
      {"auth before the proof", true, false, mt::direct_message, 0, auth, ""},
      {"a job before the proof", true, false, mt::direct_message, 0, job,
       "before proving the secret (only hello and auth"},
      {"a job after it", true, true, mt::direct_message, 0, job, ""},
      {"a byte buffer before the proof", true, false, mt::direct_message, 0, charbuf,
       "'@<>+@charbuf'"},
      {"a routed message before the proof", true, false, mt::routed_message, 10, "",
       "frame type 3"},
      {"a down message before the proof", true, false, mt::down_message, 10, "", "frame type 5"},
      {"a heartbeat", true, false, mt::heartbeat, 0, "", ""},
      {"a server handshake from a node", false, false, mt::server_handshake, 500,
       std::string(500, 'x'), ""},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.what);
    frame_guard guard(limits, r.accepted, handshake_message_types(sys));
    const std::uint32_t len =
        r.payload.empty() ? r.claimed : static_cast<std::uint32_t>(r.payload.size());
    auto why = guard.check(caf_header(sys, r.op, len), r.admitted);
    if (why.empty() && !r.payload.empty()) {
      why = guard.check(r.payload, r.admitted);
    }
    if (std::string(r.refusal).empty()) {
      EXPECT_EQ(why, "");
    } else {
      EXPECT_NE(why.find(r.refusal), std::string::npos) << why;
    }
  }
  // A header that is not BASP's size, and a payload that is not the size its header said.
  frame_guard guard(limits, true, handshake_message_types(sys));
  EXPECT_NE(guard.check("short", false), "");
  frame_guard second(limits, true, handshake_message_types(sys));
  EXPECT_EQ(second.check(caf_header(sys, mt::direct_message, 10), false), "");
  EXPECT_NE(second.check("12345", false).find("payload of 5 bytes"), std::string::npos);
}

TEST(NodeGuard, AdmittedNodesCountAdmissions) {
  test_system ts;
  admitted_nodes nodes;
  const auto me = ts.system->node();
  EXPECT_FALSE(nodes.contains(me));
  nodes.add(me);
  nodes.add(me);
  nodes.remove(me);
  EXPECT_TRUE(nodes.contains(me));
  nodes.remove(me);
  EXPECT_FALSE(nodes.contains(me));
}

// A pool that passes every job at once and counts them.
verifier_actor::behavior_type counting_pool(verifier_actor::pointer, int* served) {
  return {
      [served](verify_atom, const verification_request&) {
        ++*served;
        verification_result r;
        r.passed = true;
        r.verdict = verdict_category::pass;
        return r;
      },
  };
}

TEST(VerifierNode, RefusesWrongProofsAndUnadmittedJobs) {
  test_system ts;
  auto& sys = *ts.system;
  int served = 0;
  auto pool = sys.spawn(counting_pool, &served);
  std::mutex mu;
  std::vector<log_line> logs;
  verifier_node_config nc;
  nc.name = "test-node";
  nc.secret = "s3cret";
  nc.slots = 3;
  nc.log = [&](const log_line& line) {
    std::lock_guard<std::mutex> lock(mu);
    logs.push_back(line);
  };
  auto node = spawn_verifier_node(sys, pool, nc);
  const auto timeout = std::chrono::seconds(10);
  {
    caf::scoped_actor self{sys};
    auto fail = [](caf::error& e) { FAIL() << caf::to_string(e); };
    // The turn of rollout 3 of train group 5 in step 3 (0-based 2), turn 1.
    verification_request request{turn_request_id("r", {2, split_kind::train, 5}, 3, 1), "t",
                                 "answer"};
    // A job before the handshake is refused in-band and never reaches the pool.
    self->request(node, timeout, node_job_atom_v, std::uint64_t{1}, request)
        .receive(
            [](node_verdict& v) { EXPECT_NE(v.error.find("not admitted"), std::string::npos); },
            fail);
    node_challenge challenge;
    self->request(node, timeout, node_hello_atom_v)
        .receive([&](node_challenge& c) { challenge = c; }, fail);
    EXPECT_TRUE(challenge.secret_required);
    EXPECT_EQ(challenge.slots, 3u);
    self->request(node, timeout, node_auth_atom_v, node_auth::node_proof("wrong", challenge.nonce))
        .receive(
            [](node_welcome& w) { EXPECT_NE(w.error.find("wrong secret"), std::string::npos); },
            fail);
    self->request(node, timeout, node_job_atom_v, std::uint64_t{2}, request)
        .receive([](node_verdict& v) { EXPECT_FALSE(v.error.empty()); }, fail);
    // A proof for an old nonce does not count: each hello's nonce answers one proof.
    self->request(node, timeout, node_auth_atom_v, node_auth::node_proof("s3cret", challenge.nonce))
        .receive([](node_welcome& w) { EXPECT_FALSE(w.error.empty()); }, fail);
    self->request(node, timeout, node_hello_atom_v)
        .receive([&](node_challenge& c) { challenge = c; }, fail);
    self->request(node, timeout, node_auth_atom_v, node_auth::node_proof("s3cret", challenge.nonce))
        .receive([](node_welcome& w) { EXPECT_EQ(w.error, ""); }, fail);
    self->request(node, timeout, node_job_atom_v, std::uint64_t{3}, request)
        .receive(
            [](node_verdict& v) {
              EXPECT_EQ(v.error, "");
              EXPECT_EQ(v.job, 3u);
              EXPECT_TRUE(v.result.passed);
              EXPECT_EQ(v.slots, 3u);
              EXPECT_EQ(v.free, 3u);
            },
            fail);
    self->send_exit(node, caf::exit_reason::user_shutdown);
    self->send_exit(pool, caf::exit_reason::user_shutdown);
    self->wait_for(node, pool);
  }
  EXPECT_EQ(served, 1);
  std::lock_guard<std::mutex> lock(mu);
  bool rejected_logged = false;
  int job_lines = 0;
  for (const auto& l : logs) {
    if (l.text.find("rejected orchestrator") != std::string::npos) {
      rejected_logged = true;
      EXPECT_EQ(l.severity, log::level::warn);
    }
    // The refused job and the served one: each line carries its turn's ids as fields.
    if (l.text.rfind("refused job", 0) == 0 || l.text.rfind("job 3 |", 0) == 0) {
      ++job_lines;
      EXPECT_EQ(l.ids.run, "r") << l.text;
      EXPECT_EQ(l.ids.step, 3) << l.text;
      EXPECT_EQ(l.ids.group, 5) << l.text;
      EXPECT_EQ(l.ids.rollout, 3) << l.text;
    }
  }
  EXPECT_TRUE(rejected_logged);
  EXPECT_EQ(job_lines, 3);  // jobs 1 and 2 refused, job 3 served
}

// A verifier node on 127.0.0.1 (port 0), as `leap verifier-node` builds it, with a short
// auth_timeout; its log lines are kept.
struct loopback_node {
  std::mutex mu;
  std::vector<log_line> logs;
  int served = 0;  // read after the pool has stopped
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  caf::io::middleman_actor middleman;
  verifier_actor pool;
  verifier_node_actor node;
  std::uint16_t port = 0;

  loopback_node(const std::string& secret, std::chrono::milliseconds auth_timeout) {
    register_message_types(config);
    configure_node_transport(config, {});
    system = std::make_unique<caf::actor_system>(config);
    pool = system->spawn(counting_pool, &served);
    auto sink = [this](const log_line& line) {
      std::lock_guard<std::mutex> lock(mu);
      logs.push_back(line);
    };
    verifier_node_config nc;
    nc.name = "loopback-node";
    nc.secret = secret;
    nc.slots = 2;
    nc.log = sink;
    nc.admitted = std::make_shared<admitted_nodes>();
    guard_settings gs;
    gs.admitted = nc.admitted;
    gs.auth_timeout = auth_timeout;
    gs.log = sink;
    middleman = spawn_guarded_middleman(*system, gs);
    node = spawn_verifier_node(*system, pool, nc);
    caf::scoped_actor self{*system};
    self->request(middleman, std::chrono::seconds(30), caf::publish_atom_v, std::uint16_t{0},
                  caf::actor_cast<caf::strong_actor_ptr>(node), system->message_types(node),
                  std::string("127.0.0.1"), true)
        .receive([&](std::uint16_t p) { port = p; },
                 [&](caf::error& e) { ADD_FAILURE() << system->render(e); });
  }

  ~loopback_node() {
    caf::scoped_actor self{*system};
    self->send_exit(node, caf::exit_reason::user_shutdown);
    self->send_exit(pool, caf::exit_reason::user_shutdown);
    // As `leap verifier-node` stops it: the middleman's interface takes no other exit.
    self->send_exit(middleman, caf::exit_reason::kill);
    self->wait_for(node, pool, middleman);
  }

  loopback_node(const loopback_node&) = delete;
  loopback_node& operator=(const loopback_node&) = delete;

  std::vector<std::string> lines_with(const std::string& needle) {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::string> out;
    for (const auto& l : logs) {
      if (l.text.find(needle) != std::string::npos) {
        out.push_back(l.text);
      }
    }
    return out;
  }
};

// A raw TCP connection to 127.0.0.1:port; -1 on failure.
int connect_raw(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    return -1;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::uint16_t local_port(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

// A peer that connects and sends nothing (a port scan, a slow-loris) is closed by the node once
// auth_timeout has passed, while an orchestrator that proved the secret keeps its connection.
TEST(VerifierNodeOverTcp, ClosesAnIdleUnprovenPeerAndKeepsAProvenOne) {
  using namespace std::chrono_literals;
  // Long enough for the orchestrator's whole handshake on a loaded machine.
  const auto auth_timeout = 2s;
  loopback_node node("s3cret", auth_timeout);
  ASSERT_NE(node.port, 0);

  caf::actor_system_config orchestrator_config;
  register_message_types(orchestrator_config);
  configure_node_transport(orchestrator_config, {});
  caf::actor_system orchestrator{orchestrator_config};
  dispatcher_settings ds;
  ds.nodes = {"127.0.0.1:" + std::to_string(node.port)};
  ds.secret = "s3cret";
  auto dispatcher = spawn_verifier_dispatcher(orchestrator, std::nullopt, ds);
  const verification_request request{"r.1", "t", "answer"};
  auto verify = [&] {
    bool passed = false;
    caf::scoped_actor self{orchestrator};
    self->request(dispatcher, 60s, verify_atom_v, request)
        .receive([&](verification_result& r) { passed = r.passed; },
                 [&](caf::error& e) { ADD_FAILURE() << orchestrator.render(e); });
    return passed;
  };
  // The orchestrator proves the secret (a job is served only after that).
  EXPECT_TRUE(verify());

  const int idle = connect_raw(node.port);
  ASSERT_GE(idle, 0) << std::strerror(errno);
  const auto idle_port = local_port(idle);
  const auto connected = std::chrono::steady_clock::now();
  // The only upper bound: far beyond the deadline, so that the old code fails instead of hanging.
  timeval limit{60, 0};
  ASSERT_EQ(::setsockopt(idle, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit)), 0);
  // The node sends CAF's server handshake at once; then, past the deadline, the end of stream.
  char buf[4096];
  ssize_t got = 0;
  do {
    got = ::recv(idle, buf, sizeof(buf), 0);
  } while (got > 0);
  const int read_errno = errno;
  const auto closed_after = std::chrono::steady_clock::now() - connected;
  ::close(idle);
  EXPECT_TRUE(got == 0 || read_errno == ECONNRESET)
      << "the node did not close the idle connection: " << std::strerror(read_errno);
  EXPECT_GE(closed_after, auth_timeout);

  // The proven orchestrator still works, on its first connection: only the idle one was closed.
  EXPECT_TRUE(verify());
  const auto closed = node.lines_with("no proof of the secret");
  ASSERT_EQ(closed.size(), 1U);
  EXPECT_NE(closed[0].find(":" + std::to_string(idle_port) + ":"), std::string::npos) << closed[0];
  EXPECT_EQ(node.lines_with("(secret verified)").size(), 1U);  // never re-admitted

  caf::scoped_actor self{orchestrator};
  self->send_exit(dispatcher, caf::exit_reason::user_shutdown);
  self->wait_for(dispatcher);
}

}  // namespace
}  // namespace leap::actors
