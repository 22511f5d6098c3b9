// The verifier node's pieces without a network: the shared-secret proof (HMAC-SHA256 against
// RFC 4231's vectors, constant-time compare, secret files), the node protocol's messages through
// CAF's binary serializer, and the node actor's handshake in front of a stand-in pool: a wrong
// proof is refused and no job runs before a right one.
#include "actors/verifier_node.hpp"

#include "actors/node_auth.hpp"
#include "actors/node_protocol.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

namespace leap::actors {
namespace {

struct hmac_case {
  std::string key;
  std::string message;
  const char* expected;
};

TEST(NodeAuth, HmacSha256MatchesRfc4231) {
  const hmac_case cases[] = {
      {std::string(20, '\x0b'), "Hi There",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"Jefe", "what do ya want for nothing?",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      // A key longer than SHA-256's block is hashed first.
      {std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
  };
  for (const auto& c : cases) EXPECT_EQ(hmac_sha256_hex(c.key, c.message), c.expected);
}

TEST(NodeAuth, ProofsDependOnSecretAndNonce) {
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
  const auto n1 = make_nonce();
  const auto n2 = make_nonce();
  EXPECT_EQ(n1.size(), 64u);
  EXPECT_NE(n1, n2);
  EXPECT_EQ(node_proof("s", n1), node_proof("s", n1));
  EXPECT_NE(node_proof("s", n1), node_proof("t", n1));
  EXPECT_NE(node_proof("s", n1), node_proof("s", n2));
}

TEST(NodeAuth, SecretFilesAreTrimmedAndErrorsNameTheFile) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("leap-node-auth-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "secret") << "s3cret\n";
  std::ofstream(dir / "empty") << "\n";
  auto ok = read_secret_file((dir / "secret").string());
  ASSERT_TRUE(ok) << ok.err().message;
  EXPECT_EQ(*ok, "s3cret");
  auto empty = read_secret_file((dir / "empty").string());
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.err().message.find("empty"), std::string::npos);
  auto missing = read_secret_file((dir / "nope").string());
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.err().message.find((dir / "nope").string()), std::string::npos);
  std::filesystem::remove_all(dir);
}

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
  node_challenge c{make_nonce(), "127.0.0.1:4100", 6, true};
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
  std::vector<std::string> logs;
  verifier_node_config nc;
  nc.name = "test-node";
  nc.secret = "s3cret";
  nc.slots = 3;
  nc.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    logs.push_back(line);
  };
  auto node = spawn_verifier_node(sys, pool, nc);
  const auto timeout = std::chrono::seconds(10);
  {
    caf::scoped_actor self{sys};
    auto fail = [](caf::error& e) { FAIL() << caf::to_string(e); };
    verification_request request{"r/0", "t", "answer"};
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
    self->request(node, timeout, node_auth_atom_v, node_proof("wrong", challenge.nonce))
        .receive(
            [](node_welcome& w) { EXPECT_NE(w.error.find("wrong secret"), std::string::npos); },
            fail);
    self->request(node, timeout, node_job_atom_v, std::uint64_t{2}, request)
        .receive([](node_verdict& v) { EXPECT_FALSE(v.error.empty()); }, fail);
    // A proof for an old nonce does not count: each hello's nonce answers one proof.
    self->request(node, timeout, node_auth_atom_v, node_proof("s3cret", challenge.nonce))
        .receive([](node_welcome& w) { EXPECT_FALSE(w.error.empty()); }, fail);
    self->request(node, timeout, node_hello_atom_v)
        .receive([&](node_challenge& c) { challenge = c; }, fail);
    self->request(node, timeout, node_auth_atom_v, node_proof("s3cret", challenge.nonce))
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
  for (const auto& l : logs)
    rejected_logged |= l.find("rejected orchestrator") != std::string::npos;
  EXPECT_TRUE(rejected_logged);
}

}  // namespace
}  // namespace leap::actors
