// The generator pool against the real thing: the project's scripted policy server on loopback and
// the real policy client, on a real (threaded) actor system. Prompts rendered by the server's
// /tokenize equal the local byte-level template's, feedback is appended as a delta, the answer
// comes back with its tokens, and a pool of one in-flight turn still serves many requests. Every
// wait is bounded by a request timeout.
#include "actors/generator.hpp"

#include "actors/debug_turn.hpp"
#include "actors/renderer.hpp"
#include "policy/chat/chat.hpp"
#include "policy/client/client.hpp"
#include "policy/server/server.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>

namespace leap::actors {
namespace {

constexpr auto reply_timeout = std::chrono::seconds(30);

// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class GeneratorPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    policy::scripted_config sc;
    sc.seed = 1;
    policy::scripted_task task;
    task.id = "cpp/one";
    task.prompt = "Write a function that returns 1.";
    task.language = "cpp";
    task.solution = "int one() { return 1; }\n";
    task.wrong = {{"off_by_one", "int one() { return 2; }\n"}};
    sc.tasks = {task};
    auto backend = policy::scripted_backend::create(sc);
    ASSERT_TRUE(backend.ok()) << backend.err().message;
    policy::server_config server_config;
    server_config.threads = 8;
    auto server = policy::policy_server::start(server_config, *backend);
    ASSERT_TRUE(server.ok()) << server.err().message;
    server_ = std::move(*server);
    policy::client_config cc;
    cc.endpoints = {{server_->base_url(), 4}};
    cc.request_timeout = std::chrono::milliseconds(20'000);
    auto client = policy::policy_client::create(cc);
    ASSERT_TRUE(client.ok()) << client.err().message;
    client_ = std::move(*client);
    // The system keeps a reference to its config: both live as long as the fixture.
    config_.set("logger.verbosity", caf::atom("quiet"));
    system_.emplace(config_);
  }

  void TearDown() override {
    {
      caf::scoped_actor self{*system_};
      for (auto& pool : pools_) {
        self->send_exit(pool, caf::exit_reason::user_shutdown);
        self->wait_for(pool);
      }
    }
    pools_.clear();
    client_.reset();
    system_.reset();
    if (server_) {
      server_->stop();
    }
  }

  generator_actor pool(std::shared_ptr<const prompt_renderer> renderer, int in_flight = 4) {
    generator_pool_config config;
    config.max_in_flight = in_flight;
    pools_.push_back(spawn_generator_pool(*system_, *client_, std::move(renderer), config));
    return pools_.back();
  }

  generation_result generate(const generator_actor& g, generation_request request) {
    generation_result out;
    out.error = "no answer";
    caf::scoped_actor self{*system_};
    self->request(g, reply_timeout, generate_atom_v, std::move(request))
        .receive([&](generation_result& r) { out = std::move(r); },
                 [&](caf::error& e) { out.error = system_->render(e); });
    return out;
  }

  static generation_request first_turn(std::int64_t seed) {
    generation_request r;
    r.request_id = "t/0/train/0/0/0";
    r.append = {{"user", "Write a function that returns 1."}};
    r.sampling.max_tokens = 256;
    r.seed = seed;
    return r;
  }

  std::unique_ptr<policy::policy_server> server_;
  std::unique_ptr<policy::policy_client> client_;
  caf::actor_system_config config_;
  std::optional<caf::actor_system> system_;
  std::vector<generator_actor> pools_;
};

TEST_F(GeneratorPoolTest, ServerAndLocalRenderingAgreeOnPromptAndFeedback) {
  auto local = pool(make_byte_chatml_renderer());
  auto server = pool(nullptr);
  const auto a = generate(local, first_turn(7));
  const auto b = generate(server, first_turn(7));
  ASSERT_NE(a.finish, finish_reason::error) << a.error;
  ASSERT_NE(b.finish, finish_reason::error) << b.error;
  const std::vector<policy::chat_message> prompt = {{"user", "Write a function that returns 1."}};
  EXPECT_EQ(a.input_tokens, policy::render_chat(prompt));
  EXPECT_EQ(b.input_tokens, a.input_tokens);
  // The same seed gives the same answer, whichever renderer built the identical prompt.
  EXPECT_EQ(b.output_tokens, a.output_tokens);
  EXPECT_EQ(a.output_tokens.size(), a.output_logprobs.size());
  EXPECT_NE(a.text.find("```cpp"), std::string::npos) << a.text;
  EXPECT_EQ(a.endpoint, server_->base_url());
  EXPECT_GE(a.generation_ms, 0.0);

  // A debug turn: the feedback is a delta after everything so far.
  std::vector<token_id> history = a.input_tokens;
  history.insert(history.end(), a.output_tokens.begin(), a.output_tokens.end());
  generation_request next = first_turn(8);
  next.request_id = "t/0/train/0/0/1";
  next.history = history;
  next.append = {{"user", "wrong answer: expected 1, got 2"}};
  const auto c = generate(local, next);
  ASSERT_NE(c.finish, finish_reason::error) << c.error;
  for (int i = 0; i < 2; ++i) {  // the second time from the pool's learned template
    const auto d = generate(server, next);
    ASSERT_NE(d.finish, finish_reason::error) << d.error;
    EXPECT_EQ(d.input_tokens, c.input_tokens);
  }
  const std::vector<policy::chat_message> feedback = {{"user", "wrong answer: expected 1, got 2"}};
  EXPECT_EQ(c.input_tokens, policy::render_chat_delta(history, feedback));
}

TEST_F(GeneratorPoolTest, OneTurnInFlightStillServesEveryRequest) {
  auto g = pool(make_byte_chatml_renderer(), /*in_flight=*/1);
  constexpr int n = 12;
  auto answered = std::make_shared<std::atomic<int>>(0);
  auto failures = std::make_shared<std::atomic<int>>(0);
  // All requests at once, from an event-based actor; each is bounded by reply_timeout.
  auto asker = system_->spawn([g, answered, failures](caf::event_based_actor* self) {
    for (int i = 0; i < n; ++i) {
      auto r = first_turn(i);
      r.request_id = "t/0/train/0/" + std::to_string(i) + "/0";
      self->request(g, reply_timeout, generate_atom_v, std::move(r))
          .then(
              [=](const generation_result& result) {
                if (result.finish == finish_reason::error) {
                  ++*failures;
                }
                if (++*answered == n) {
                  self->quit();
                }
              },
              [=](caf::error&) {
                ++*failures;
                if (++*answered == n) {
                  self->quit();
                }
              });
    }
  });
  caf::scoped_actor self{*system_};
  self->wait_for(asker);
  EXPECT_EQ(answered->load(), n);
  EXPECT_EQ(failures->load(), 0);
  EXPECT_EQ(client_->stats().completed, static_cast<std::uint64_t>(n));
}

TEST_F(GeneratorPoolTest, AnUnreachableServerAnswersWithAnError) {
  server_->stop();
  auto g = pool(nullptr);
  const auto r = generate(g, first_turn(1));
  EXPECT_EQ(r.finish, finish_reason::error);
  EXPECT_NE(r.error.find("cannot render the prompt"), std::string::npos) << r.error;
}

// The turn record's segments from the client's: the first takes the version the turn started
// with, a later one the number its server reported or else the pool's current version; equal
// neighbours merge; a piece that sampled nothing is dropped.
TEST(GeneratorRecordSegments, ClientVersionsBecomeTheRecordsNumbers) {
  using client_segments = std::vector<policy::weight_segment>;
  struct segments_case {
    std::string name;
    client_segments client;
    std::size_t tokens;
    std::vector<turn_weight_segment> expected;
  };
  const std::vector<segments_case> cases = {
      {"none (n > 1, an error)", {}, 4, {}},
      {"one piece", {{0, "6"}}, 4, {{0, 6}}},
      {"the first takes the starting version", {{0, "server-name"}}, 4, {{0, 6}}},
      {"resumed under a new version", {{0, "6"}, {3, "7"}}, 5, {{0, 6}, {3, 7}}},
      {"an unnamed later version is the current one",
       {{0, "6"}, {3, std::nullopt}},
       5,
       {{0, 6}, {3, 9}}},
      {"a named but not numeric one too", {{0, "6"}, {3, "7b"}}, 5, {{0, 6}, {3, 9}}},
      {"equal neighbours merge", {{0, "6"}, {2, "6"}, {3, "8"}}, 5, {{0, 6}, {3, 8}}},
      {"the first is the starting version even when unnamed",
       {{0, std::nullopt}, {2, "6"}},
       5,
       {{0, 6}}},
      {"a piece that sampled nothing is dropped", {{0, "6"}, {5, "7"}}, 5, {{0, 6}}},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(record_segments(c.client, c.tokens, 6, 9), c.expected) << c.name;
  }
}

// The pool's answer becomes the turn record with its segments (what the store then keeps).
TEST(GeneratorRecordSegments, TheTurnRecordKeepsTheAnswersSegments) {
  generation_result answer;
  answer.output_tokens = {1, 2, 3, 4, 5};
  answer.output_logprobs.assign(5, -0.5F);
  answer.text = "x";
  answer.weight_version = 6;
  answer.weight_segments = record_segments({{0, "6"}, {3, "7"}}, 5, 6, 7);
  verification_result verified;
  const auto t = make_turn_record(answer, &verified);
  EXPECT_EQ(t.weight_version, 6U);
  EXPECT_EQ(t.weight_segments, (std::vector<turn_weight_segment>{{0, 6}, {3, 7}}));
  EXPECT_EQ(output_token_versions(t), (std::vector<std::uint64_t>{6, 6, 6, 7, 7}));
}

}  // namespace
}  // namespace leap::actors
