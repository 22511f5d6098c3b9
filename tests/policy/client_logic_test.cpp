// The client's pure logic, without HTTP: conversations and templates, routing and failure
// accounting, config validation, and the weight-sync state machine as a table.
#include "policy/chat/chat.hpp"
#include "policy/client/client.hpp"
#include "policy/client/detail/endpoint.hpp"

#include <gtest/gtest.h>

namespace leap::policy {
namespace {

using ids = std::vector<token_id>;

// Byte-level text encoding for tests: every byte is its own id.
std::vector<token_id> bytes(std::string_view text) { return {text.begin(), text.end()}; }

constexpr token_id im_start = 256;
constexpr token_id im_end = 257;

TEST(ClientConversation, MasksPromptFeedbackAndModelTokens) {
  conversation c;
  c.append_prompt(ids{1, 2, 3});
  generated_turn t1{{10, 11}, {-0.5F, -0.25F}, finish_reason::stop, "ab", "v1"};
  ASSERT_TRUE(c.append_model_turn(t1, 0, 1));
  c.append_feedback(ids{4, 5});
  generated_turn t2{{12}, {-1.0F}, finish_reason::length, "c", std::nullopt};
  ASSERT_TRUE(c.append_model_turn(t2, 1, 3));

  EXPECT_EQ(c.tokens(), (ids{1, 2, 3, 10, 11, 4, 5, 12}));
  EXPECT_EQ(c.mask(), (std::vector<std::uint8_t>{0, 0, 0, 1, 1, 0, 0, 1}));
  EXPECT_EQ(c.aligned_logprobs(), (std::vector<float>{0, 0, 0, -0.5F, -0.25F, 0, 0, -1.0F}));
  ASSERT_EQ(c.turns().size(), 2U);
  EXPECT_EQ(c.turns()[0].offset, 3U);
  EXPECT_EQ(c.turns()[0].generation.weight_version, "v1");
  EXPECT_EQ(c.turns()[1].offset, 7U);
  EXPECT_EQ(c.turns()[1].attempts, 3);
  EXPECT_EQ(c.turns()[1].generation.finish, finish_reason::length);
  EXPECT_EQ(c.pinned_endpoint(), 1);
}

TEST(ClientConversation, RejectsATurnWhoseLogprobsDoNotMatchItsIds) {
  conversation c;
  c.append_prompt(ids{1});
  auto s = c.append_model_turn({{10, 11}, {-0.5F}, finish_reason::stop, "", std::nullopt});
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().message.find("2 ids but 1 log-probs"), std::string::npos);
  EXPECT_EQ(c.size(), 1U);
  EXPECT_TRUE(c.turns().empty());
}

TEST(ClientConversation, ChatmlRendersPromptAndFeedbackAsAppendOnlyDeltas) {
  chatml_renderer r(bytes, im_start, im_end);
  auto prompt = r.render_prompt({{"system", "S"}, {"user", "U"}});
  ASSERT_TRUE(prompt) << prompt.err().message;
  ids expected{im_start};
  for (auto x : bytes("system\nS")) {
    expected.push_back(x);
  }
  expected.push_back(im_end);
  expected.push_back('\n');
  expected.push_back(im_start);
  for (auto x : bytes("user\nU")) {
    expected.push_back(x);
  }
  expected.push_back(im_end);
  expected.push_back('\n');
  expected.push_back(im_start);
  for (auto x : bytes("assistant\n")) {
    expected.push_back(x);
  }
  EXPECT_EQ(*prompt, expected);

  ids feedback_tail{im_start};
  for (auto x : bytes("user\nF")) {
    feedback_tail.push_back(x);
  }
  feedback_tail.push_back(im_end);
  feedback_tail.push_back('\n');
  feedback_tail.push_back(im_start);
  for (auto x : bytes("assistant\n")) {
    feedback_tail.push_back(x);
  }

  struct row {
    std::string name;
    ids history;
    ids closing_expected;
  };
  const std::vector<row> rows = {
      {"model stopped on <|im_end|>", {1, 2, 'x', im_end}, {'\n'}},
      {"model stopped by length", {1, 2, 'x'}, {im_end, '\n'}},
      {"history already closed", {1, im_end, '\n'}, {}},
  };
  for (const auto& row : rows) {
    SCOPED_TRACE(row.name);
    auto delta = r.render_feedback({{"user", "F"}}, row.history);
    ASSERT_TRUE(delta) << delta.err().message;
    ids want = row.closing_expected;
    want.insert(want.end(), feedback_tail.begin(), feedback_tail.end());
    EXPECT_EQ(*delta, want);
  }
  EXPECT_FALSE(r.render_prompt({{"robot", "x"}}));
  EXPECT_FALSE(r.render_feedback({}, ids{}));
}

TEST(ClientConversation, ByteRendererMatchesTheGenericChatmlOverTheProjectTokenizer) {
  // The project's tokenizer (policy/chat/chat.hpp) through its own template, and the
  // generic ChatML renderer over the same tokenizer's plain-byte encoding, must agree id for id.
  byte_chat_renderer project;
  chatml_renderer generic([](std::string_view t) { return byte_tokenizer::encode(t, false); },
                          special::im_start, special::im_end);
  const std::vector<chat_message> opening{{"system", "You write CUDA."},
                                          {"user", "Add two vectors."}};
  auto a = project.render_prompt(opening);
  auto b = generic.render_prompt(opening);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, *b);
  std::vector<token_id> history = *a;
  for (auto id : byte_tokenizer::encode("__global__ void add() {}", false)) {
    history.push_back(id);
  }
  for (bool stopped : {true, false}) {
    auto h = history;
    if (stopped) {
      h.push_back(special::im_end);
    }
    auto fa = project.render_feedback({{"user", "error: no main"}}, h);
    auto fb = generic.render_feedback({{"user", "error: no main"}}, h);
    ASSERT_TRUE(fa && fb);
    EXPECT_EQ(*fa, *fb) << (stopped ? "stopped on <|im_end|>" : "cut by length");
    // Appending the delta gives exactly the full rendering: earlier ids never change.
    h.insert(h.end(), fa->begin(), fa->end());
    std::vector<chat_message> all = opening;
    all.push_back({"assistant", "__global__ void add() {}"});
    all.push_back({"user", "error: no main"});
    EXPECT_EQ(h, render_chat(all));
  }
}

TEST(ClientConversation, TemplateDeltaClosingAndCloseTurn) {
  struct delta_row {
    ids base, full;
    bool ok;
    ids delta;
  };
  const std::vector<delta_row> deltas = {
      {{1, 2, 3}, {1, 2, 3, 4, 5}, true, {4, 5}},
      {{}, {7}, true, {7}},
      {{1, 2, 3}, {1, 9, 3, 4}, false, {}},  // template rewrote an earlier id
      {{1, 2, 3}, {1, 2}, false, {}},
      {{1, 2}, {1, 2}, false, {}},  // nothing rendered
  };
  for (const auto& d : deltas) {
    auto r = template_delta(d.base, d.full);
    ASSERT_EQ(r.ok(), d.ok);
    if (d.ok) {
      EXPECT_EQ(*r, d.delta);
    }
  }

  auto closing = template_closing(ids{5, 'a', im_end, '\n'}, ids{5, 'b', im_end, '\n'});
  ASSERT_TRUE(closing);
  EXPECT_EQ(*closing, (ids{im_end, '\n'}));
  EXPECT_FALSE(template_closing(ids{1, 2}, ids{1, 3}));

  struct close_row {
    ids history, closing, missing;
  };
  const std::vector<close_row> closes = {
      {{1, 2, im_end}, {im_end, '\n'}, {'\n'}},
      {{1, 2}, {im_end, '\n'}, {im_end, '\n'}},
      {{1, im_end, '\n'}, {im_end, '\n'}, {}},
      {{}, {im_end}, {im_end}},
  };
  for (const auto& c : closes) {
    EXPECT_EQ(close_turn(c.history, c.closing), c.missing);
  }
}

std::vector<endpoint_state> make_endpoints(
    std::initializer_list<std::tuple<int, int, bool, bool>> rows) {
  std::vector<endpoint_state> out;
  for (auto [in_flight, limit, up, admitting] : rows) {
    endpoint_state e;
    e.in_flight = in_flight;
    e.max_in_flight = limit;
    e.up = up;
    e.admitting = admitting;
    out.push_back(e);
  }
  return out;
}

TEST(ClientEndpoint, RoutesToTheLeastOutstandingAndHonoursPins) {
  struct row {
    std::string name;
    std::vector<endpoint_state> endpoints;
    int pinned;
    route_kind kind;
    int endpoint;
  };
  const std::vector<row> rows = {
      {"least outstanding",
       make_endpoints({{3, 8, true, true}, {1, 8, true, true}, {2, 8, true, true}}), -1,
       route_kind::send, 1},
      {"ties go to the lowest index", make_endpoints({{1, 8, true, true}, {1, 8, true, true}}), -1,
       route_kind::send, 0},
      {"full endpoints are skipped", make_endpoints({{8, 8, true, true}, {5, 8, true, true}}), -1,
       route_kind::send, 1},
      {"down endpoints are skipped", make_endpoints({{0, 8, false, true}, {5, 8, true, true}}), -1,
       route_kind::send, 1},
      {"syncing endpoints are skipped", make_endpoints({{0, 8, true, false}, {5, 8, true, true}}),
       -1, route_kind::send, 1},
      {"all full", make_endpoints({{8, 8, true, true}, {8, 8, true, true}}), -1,
       route_kind::wait_any, -1},
      {"none up", make_endpoints({{0, 8, false, true}, {0, 8, false, true}}), -1,
       route_kind::wait_any, -1},
      {"pinned goes to its endpoint though busier",
       make_endpoints({{1, 8, true, true}, {5, 8, true, true}}), 1, route_kind::send, 1},
      {"pinned waits for a slot on its endpoint",
       make_endpoints({{1, 8, true, true}, {8, 8, true, true}}), 1, route_kind::wait_pinned, 1},
      {"pinned to a down endpoint goes elsewhere",
       make_endpoints({{1, 8, true, true}, {0, 8, false, true}}), 1, route_kind::send, 0},
      {"pinned to a syncing endpoint goes elsewhere",
       make_endpoints({{1, 8, true, true}, {0, 8, true, false}}), 1, route_kind::send, 0},
      {"out-of-range pin is ignored", make_endpoints({{1, 8, true, true}}), 7, route_kind::send, 0},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    auto got = choose_route(r.endpoints, r.pinned);
    EXPECT_EQ(got.kind, r.kind);
    EXPECT_EQ(got.endpoint, r.endpoint);
  }
}

TEST(ClientEndpoint, MarksDownAfterConsecutiveFailuresAndUpOnAPassingCheck) {
  endpoint_state e;
  EXPECT_FALSE(record_failure(e, 3));
  record_success(e);  // resets the streak
  EXPECT_FALSE(record_failure(e, 3));
  EXPECT_FALSE(record_failure(e, 3));
  EXPECT_TRUE(record_failure(e, 3));
  EXPECT_FALSE(e.up);
  EXPECT_FALSE(record_failure(e, 3));  // already down
  EXPECT_FALSE(record_health_check(e, false, 3));
  EXPECT_FALSE(e.up);
  EXPECT_TRUE(record_health_check(e, true, 3));
  EXPECT_TRUE(e.up);
  EXPECT_EQ(e.consecutive_failures, 0);
  EXPECT_FALSE(record_health_check(e, true, 3));
  // An up endpoint keeps its failure streak through passing checks.
  record_failure(e, 3);
  record_failure(e, 3);
  EXPECT_FALSE(record_health_check(e, true, 3));
  EXPECT_EQ(e.consecutive_failures, 2);
  EXPECT_TRUE(record_failure(e, 3));
}

TEST(ClientConfig, ValidationNamesTheField) {
  auto base = [] {
    client_config c;
    c.endpoints.push_back({"http://127.0.0.1:8000", 4});
    return c;
  };
  EXPECT_TRUE(validate_client_config(base()));
  struct row {
    std::function<void(client_config&)> edit;
    std::string substring;
  };
  const std::vector<row> rows = {
      {[](client_config& c) { c.endpoints.clear(); }, "endpoints: at least one"},
      {[](client_config& c) { c.endpoints[0].base_url = "127.0.0.1:8000"; },
       "endpoints[0].base_url"},
      {[](client_config& c) { c.endpoints[0].max_in_flight = 0; }, "endpoints[0].max_in_flight"},
      {[](client_config& c) { c.max_pending = -1; }, "max_pending"},
      {[](client_config& c) { c.request_timeout = std::chrono::milliseconds(0); },
       "request_timeout"},
      {[](client_config& c) { c.retry.max_attempts = 0; }, "retry.max_attempts"},
      {[](client_config& c) { c.retry.jitter = 1.5; }, "retry.jitter"},
      {[](client_config& c) { c.retry.retry_statuses = {400}; }, "400 is never retried"},
      {[](client_config& c) { c.retry.retry_statuses = {200}; }, "not an HTTP error status"},
      {[](client_config& c) { c.retry.max_backoff = std::chrono::milliseconds(1); },
       "base_backoff <= max_backoff"},
      {[](client_config& c) { c.health.path = "health"; }, "health.path"},
      {[](client_config& c) { c.health.down_after_failures = 0; }, "health.down_after_failures"},
      {[](client_config& c) { c.generate_path = "v1"; }, "generate_path"},
      {[](client_config& c) { c.max_context_tokens = -5; }, "max_context_tokens"},
  };
  for (const auto& r : rows) {
    auto c = base();
    r.edit(c);
    auto s = validate_client_config(c);
    ASSERT_FALSE(s) << r.substring;
    EXPECT_NE(s.err().message.find(r.substring), std::string::npos) << s.err().message;
  }
  EXPECT_EQ(*parse_wire_flavour("sglang"), wire_flavour::sglang);
  EXPECT_FALSE(parse_wire_flavour("tgi"));
  auto c = base();
  EXPECT_EQ(generate_route(c), "/v1/completions");
  c.flavour = wire_flavour::sglang;
  EXPECT_EQ(generate_route(c), "/generate");
  c.generate_path = "/custom";
  EXPECT_EQ(generate_route(c), "/custom");
}

TEST(ClientWeightSync, TransitionTable) {
  weight_sync_plan drain_two;  // drain, then two calls
  drain_two.calls = {control_call{"load", "POST", "/load", "", std::chrono::seconds(1)},
                     control_call{"flush", "POST", "/flush", "", std::chrono::seconds(1)}};
  drain_two.health_attempts = 2;
  weight_sync_plan pause_one = drain_two;  // no drain: the first call pauses
  pause_one.drain = false;
  weight_sync_plan no_calls;
  no_calls.drain = false;

  using P = sync_phase;
  using E = sync_event;
  using A = sync_action;
  struct row {
    const weight_sync_plan* plan;
    sync_state state;
    E event;
    sync_state next;
    A action;
  };
  const std::vector<row> rows = {
      {&drain_two, {P::idle, 0, 0}, E::start, {P::draining, 0, 0}, A::wait_drain},
      {&pause_one, {P::idle, 0, 0}, E::start, {P::calling, 0, 0}, A::send_call},
      {&no_calls, {P::idle, 0, 0}, E::start, {P::health_checking, 0, 0}, A::check_health},
      {&drain_two, {P::failed, 0, 0}, E::start, {P::draining, 0, 0}, A::wait_drain},
      {&drain_two, {P::draining, 0, 0}, E::drained, {P::calling, 0, 0}, A::send_call},
      {&drain_two, {P::draining, 0, 0}, E::drain_timeout, {P::idle, 0, 0}, A::abandon},
      {&drain_two, {P::draining, 0, 0}, E::start, {P::draining, 0, 0}, A::reject},
      {&drain_two, {P::draining, 0, 0}, E::call_ok, {P::draining, 0, 0}, A::reject},
      {&drain_two, {P::calling, 0, 0}, E::call_ok, {P::calling, 1, 0}, A::send_call},
      {&drain_two, {P::calling, 1, 0}, E::call_ok, {P::health_checking, 0, 0}, A::check_health},
      {&drain_two, {P::calling, 0, 0}, E::call_failed, {P::failed, 0, 0}, A::fail},
      {&drain_two, {P::calling, 1, 0}, E::start, {P::calling, 1, 0}, A::reject},
      {&drain_two, {P::calling, 1, 0}, E::drained, {P::calling, 1, 0}, A::reject},
      {&drain_two, {P::health_checking, 0, 0}, E::health_ok, {P::idle, 0, 0}, A::finish},
      {&drain_two,
       {P::health_checking, 0, 0},
       E::health_failed,
       {P::health_checking, 0, 1},
       A::retry_health},
      {&drain_two, {P::health_checking, 0, 1}, E::health_failed, {P::failed, 0, 0}, A::fail},
      // A server on other weights than asked for: no retry, out of rotation.
      {&drain_two, {P::health_checking, 0, 0}, E::version_mismatch, {P::failed, 0, 0}, A::fail},
      {&drain_two, {P::calling, 0, 0}, E::version_mismatch, {P::calling, 0, 0}, A::reject},
      {&drain_two, {P::idle, 0, 0}, E::call_ok, {P::idle, 0, 0}, A::reject},
      {&drain_two, {P::failed, 0, 0}, E::health_ok, {P::failed, 0, 0}, A::reject},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(std::string(to_string(r.state.phase)) + " + " + std::string(to_string(r.event)));
    auto t = next_sync_step(r.state, r.event, *r.plan);
    EXPECT_EQ(t.action, r.action) << to_string(t.action);
    EXPECT_EQ(t.next.phase, r.next.phase) << to_string(t.next.phase);
    EXPECT_EQ(t.next.call_index, r.next.call_index);
    EXPECT_EQ(t.next.health_checks, r.next.health_checks);
  }
}

TEST(ClientWeightSync, PresetsAndSubstitution) {
  weight_sync_request req{"step-3", "/ckpt/a\"b", "policy"};
  EXPECT_EQ(substitute_sync_fields(R"({"p":"{path}","v":"{version}","l":"{lora_name}","x":{}})",
                                   req, true),
            R"({"p":"/ckpt/a\"b","v":"step-3","l":"policy","x":{}})");
  EXPECT_EQ(substitute_sync_fields("/load?v={version}", req, false), "/load?v=step-3");

  struct row {
    weight_sync_plan plan;
    bool drain;
    std::vector<std::string> paths;
    bool check_version = false;
  };
  const std::vector<row> rows = {
      {sglang_disk_plan(), true, {"/update_weights_from_disk", "/flush_cache"}, true},
      {sglang_disk_plan(true),
       false,
       {"/pause_generation", "/update_weights_from_disk", "/flush_cache", "/continue_generation"},
       true},
      {vllm_lora_plan(), true, {"/v1/load_lora_adapter", "/reset_prefix_cache"}},
      {vllm_sleep_reload_plan(),
       true,
       {"/sleep?level=2", "/wake_up?tags=weights", "/collective_rpc", "/wake_up?tags=kv_cache",
        "/reset_prefix_cache"}},
      {vllm_disk_plan(), true, {"/collective_rpc", "/reset_prefix_cache"}},
      {vllm_transfer_disk_plan(),
       true,
       {"/init_weight_transfer_engine", "/start_weight_update", "/update_weights",
        "/finish_weight_update", "/reset_prefix_cache"},
       true},
      // ipc: init (empty) in every sync; the companion fills the learner's buffer at "start".
      {vllm_transfer_ipc_plan(R"({"names":[]})"),
       true,
       {"/init_weight_transfer_engine", "/start_weight_update", "/update_weights",
        "/finish_weight_update", "/reset_prefix_cache"},
       true},
  };
  for (const auto& r : rows) {
    EXPECT_EQ(r.plan.drain, r.drain);
    EXPECT_EQ(r.plan.check_version, r.check_version);
    std::vector<std::string> paths;
    for (const auto& c : r.plan.calls) {
      paths.push_back(c.path);
      EXPECT_GT(c.deadline.count(), 0) << c.path;
    }
    EXPECT_EQ(paths, r.paths);
  }
  const auto ipc = vllm_transfer_ipc_plan(R"({"names":[]})");
  EXPECT_EQ(ipc.calls[0].body, R"({"init_info":{}})");
  EXPECT_EQ(ipc.calls[1].name, "start");
  EXPECT_EQ(ipc.calls[2].body, R"({"update_info":{"names":[]}})");
}

}  // namespace
}  // namespace leap::policy
