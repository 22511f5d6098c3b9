// The client's wire logic as tables: response fixtures shaped like vLLM's and SGLang's documented
// responses, request bodies, error classification and the backoff schedule.
#include "policy/client/detail/client_protocol.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <optional>
#include <sstream>

namespace leap::policy {
namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(LEAP_SOURCE_DIR) + "/tests/policy/fixtures/" + name);
  EXPECT_TRUE(in.good()) << "missing fixture " << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct expected_choice {
  std::vector<token_id> ids;
  std::vector<float> logprobs;
  finish_reason finish;
  std::string text;
};

struct parse_case {
  std::string fixture;
  wire_flavour flavour;
  std::vector<token_id> prompt;  // sent prompt (checked against prompt_token_ids)
  std::string header_version;
  parse_problem problem;
  std::string message_substring;         // when problem != none
  std::vector<expected_choice> choices;  // when problem == none
  std::optional<std::string> version;
};

const std::vector<token_id> sent_prompt{151644, 872, 198};

TEST(ClientProtocol, ParsesFixturesShapedLikeTheServersResponses) {
  const std::vector<parse_case> cases = {
      {"vllm_completion.json",
       wire_flavour::vllm,
       sent_prompt,
       "",
       parse_problem::none,
       "",
       {{{59730, 563, 737}, {-0.0123F, -0.5F, -1.25F}, finish_reason::stop, "__global__ void"}},
       std::nullopt},
      {"vllm_completion.json",
       wire_flavour::vllm,
       sent_prompt,
       "7",
       parse_problem::none,
       "",
       {{{59730, 563, 737}, {-0.0123F, -0.5F, -1.25F}, finish_reason::stop, "__global__ void"}},
       "7"},
      // Choices come back in any order; `index` places them.
      {"vllm_completion_n2.json",
       wire_flavour::vllm,
       sent_prompt,
       "",
       parse_problem::none,
       "",
       {{{3649}, {-0.25F}, finish_reason::stop, "float"},
        {{526, 856}, {-2.5F, -0.75F}, finish_reason::length, " int"}},
       std::nullopt},
      {"vllm_completion_abort.json",
       wire_flavour::vllm,
       sent_prompt,
       "",
       parse_problem::none,
       "",
       {{{59730}, {-0.0123F}, finish_reason::abort, "__global"}},
       std::nullopt},
      {"vllm_completion_no_token_ids.json",
       wire_flavour::vllm,
       sent_prompt,
       "",
       parse_problem::schema,
       "ignored return_token_ids",
       {},
       std::nullopt},
      {"vllm_completion_retokenised.json",
       wire_flavour::vllm,
       {151644, 872},
       "",
       parse_problem::schema,
       "re-tokenised",
       {},
       std::nullopt},
      {"truncated_body.json",
       wire_flavour::vllm,
       sent_prompt,
       "",
       parse_problem::malformed,
       "not JSON",
       {},
       std::nullopt},
      {"sglang_generate.json",
       wire_flavour::sglang,
       sent_prompt,
       "",
       parse_problem::none,
       "",
       {{{59730, 563, 737}, {-0.0123F, -0.5F, -1.25F}, finish_reason::stop, "__global__ void"}},
       "step-12"},
      // A version in the body wins over the header.
      {"sglang_generate.json",
       wire_flavour::sglang,
       sent_prompt,
       "3",
       parse_problem::none,
       "",
       {{{59730, 563, 737}, {-0.0123F, -0.5F, -1.25F}, finish_reason::stop, "__global__ void"}},
       "step-12"},
      {"sglang_generate_n2.json",
       wire_flavour::sglang,
       sent_prompt,
       "",
       parse_problem::none,
       "",
       {{{3649}, {-0.25F}, finish_reason::stop, "float"},
        {{526, 856}, {-2.5F, -0.75F}, finish_reason::length, " int x"}},
       "default"},
      {"sglang_generate_abort.json",
       wire_flavour::sglang,
       sent_prompt,
       "",
       parse_problem::none,
       "",
       {{{59730}, {-0.0123F}, finish_reason::abort, "__global"}},
       "default"},
      {"sglang_generate_no_logprobs.json",
       wire_flavour::sglang,
       sent_prompt,
       "",
       parse_problem::schema,
       "ignored return_logprob",
       {},
       std::nullopt},
      {"vllm_completion.json",
       wire_flavour::sglang,
       sent_prompt,
       "",
       parse_problem::schema,
       "no 'meta_info'",
       {},
       std::nullopt},
      {"sglang_generate.json",
       wire_flavour::vllm,
       sent_prompt,
       "",
       parse_problem::schema,
       "'choices' missing",
       {},
       std::nullopt},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.fixture + " as " + std::string(to_string(c.flavour)));
    auto parsed =
        parse_generate_response(c.flavour, fixture(c.fixture), c.header_version, c.prompt);
    ASSERT_EQ(parsed.problem, c.problem) << parsed.message;
    if (c.problem != parse_problem::none) {
      EXPECT_NE(parsed.message.find(c.message_substring), std::string::npos) << parsed.message;
      continue;
    }
    ASSERT_EQ(parsed.choices.size(), c.choices.size());
    for (std::size_t i = 0; i < c.choices.size(); ++i) {
      SCOPED_TRACE("choice " + std::to_string(i));
      EXPECT_EQ(parsed.choices[i].ids, c.choices[i].ids);
      EXPECT_EQ(parsed.choices[i].logprobs, c.choices[i].logprobs);
      EXPECT_EQ(parsed.choices[i].finish, c.choices[i].finish);
      EXPECT_EQ(parsed.choices[i].text, c.choices[i].text);
      EXPECT_EQ(parsed.choices[i].weight_version, c.version);
    }
  }
}

void expect_same(const parsed_choices& a, const parsed_choices& b) {
  ASSERT_EQ(a.problem, b.problem) << a.message << " | " << b.message;
  EXPECT_EQ(a.message, b.message);
  ASSERT_EQ(a.choices.size(), b.choices.size());
  for (std::size_t i = 0; i < a.choices.size(); ++i) {
    EXPECT_EQ(a.choices[i].ids, b.choices[i].ids);
    EXPECT_EQ(a.choices[i].logprobs, b.choices[i].logprobs);
    EXPECT_EQ(a.choices[i].finish, b.choices[i].finish);
    EXPECT_EQ(a.choices[i].text, b.choices[i].text);
    EXPECT_EQ(a.choices[i].weight_version, b.choices[i].weight_version);
  }
}

TEST(ClientProtocol, SinglePassReaderAgreesWithTheDomParser) {
  struct row {
    wire_flavour flavour;
    std::string body;
  };
  std::vector<row> rows;
  for (const char* f :
       {"vllm_completion.json", "vllm_completion_n2.json", "vllm_completion_abort.json",
        "vllm_completion_no_token_ids.json", "vllm_completion_retokenised.json",
        "truncated_body.json", "sglang_generate.json"}) {
    rows.push_back({wire_flavour::vllm, fixture(f)});
  }
  for (const char* f :
       {"sglang_generate.json", "sglang_generate_n2.json", "sglang_generate_abort.json",
        "sglang_generate_no_logprobs.json", "vllm_completion.json", "truncated_body.json"}) {
    rows.push_back({wire_flavour::sglang, fixture(f)});
  }
  // Shapes the single-pass reader must get right or hand over: escapes, exponents, odd spacing,
  // repeated keys, nulls, numbers where strings are expected, trailing garbage.
  const std::vector<std::string> vllm_bodies = {
      R"({"choices":[{"index":0,"text":"a\"b\n\u00e9\ud83d\ude00","token_ids":[1,2],"logprobs":{"token_logprobs":[-1e-3,-2.5E+0]},"finish_reason":"length"}],"weight_version":12})",
      R"(  { "choices" : [ { "token_ids" : [ ] , "logprobs" : null , "finish_reason" : null } ] }  )",
      R"({"choices":[{"token_ids":[1],"logprobs":{"token_logprobs":[-1]},"finish_reason":"stop","finish_reason":"length"}]})",
      R"({"choices":[{"token_ids":[1],"logprobs":{"token_logprobs":[null]}}]})",
      R"({"choices":[{"token_ids":[1],"logprobs":{"token_logprobs":[-1]}, "index": -1}]})",
      R"({"choices":[{"token_ids":[1],"logprobs":{"token_logprobs":[-1]}, "index": 1.5}]})",
      R"({"choices":[{"token_ids":[1],"logprobs":{"token_logprobs":[-1]},"finish_reason":7,"text":3}],"weight_version":1.5})",
      R"({"choices":[{"token_ids":[01],"logprobs":{"token_logprobs":[-1]}}]})",
      R"({"choices":[{"token_ids":[1],"logprobs":{"token_logprobs":[-1]}}]} x)",
      R"({"choices":[{"token_ids":[4294967296],"logprobs":{"token_logprobs":[-1]}}]})",
      R"({"choices":[{"index":1,"token_ids":[1],"logprobs":{"token_logprobs":[-1]}},{"token_ids":[2],"logprobs":{"token_logprobs":[-2]}}]})",
      R"({"choices":[{"token_ids":[1],"logprobs":{"token_logprobs":[-1]},"prompt_token_ids":[5,6]}]})",
      R"({"choices":[{"token_ids":[1],"logprobs":{"token_logprobs":[-1]},"prompt_token_ids":[5,6,7]}]})",
      R"({"choices":[]})",
  };
  for (const auto& b : vllm_bodies) {
    rows.push_back({wire_flavour::vllm, b});
  }
  const std::vector<std::string> sglang_bodies = {
      R"({"text":"x\ty","meta_info":{"finish_reason":{"matched":5,"type":"length"},"output_token_logprobs":[[-0.5,7,"x"],[-1,8]],"weight_version":"w"},"weight_version":3})",
      R"({"meta_info":{"finish_reason":"stop","output_token_logprobs":[]}})",
      R"({"meta_info":{"finish_reason":null,"output_token_logprobs":[[null,7,null]]}})",
      R"({"meta_info":{"finish_reason":{"type":1},"output_token_logprobs":[[-1,7]],"weight_version":null}})",
      R"([{"meta_info":{"output_token_logprobs":[[-1,7]]}},{"meta_info":{"output_token_logprobs":[[-2,8]],"finish_reason":{"type":"abort"}}}])",
      R"([])",
      R"({"meta_info":{"output_token_logprobs":[[-1]]}})",
  };
  for (const auto& b : sglang_bodies) {
    rows.push_back({wire_flavour::sglang, b});
  }
  const std::vector<token_id> prompt{5, 6};
  for (const auto& r : rows) {
    SCOPED_TRACE(std::string(to_string(r.flavour)) + ": " + r.body.substr(0, 160));
    expect_same(parse_generate_response(r.flavour, r.body, "hdr", prompt),
                parse_generate_response_reference(r.flavour, r.body, "hdr", prompt));
  }
}

// A server names stop, length or abort; any other name ("content_filter", and the client's own
// words "error" and "other") reads as other, in both dialects and both readers.
TEST(ClientProtocol, ServerFinishNamesMapToTheClientsReasons) {
  const std::vector<std::pair<std::string, finish_reason>> cases = {
      {"stop", finish_reason::stop},   {"length", finish_reason::length},
      {"abort", finish_reason::abort}, {"error", finish_reason::other},
      {"other", finish_reason::other}, {"content_filter", finish_reason::other},
      {"STOP", finish_reason::other},  {"", finish_reason::other},
  };
  const std::vector<token_id> prompt{5, 6};
  for (const auto& [name, expected] : cases) {
    const std::string vllm =
        R"({"choices":[{"token_ids":[1],"logprobs":{"token_logprobs":[-1]},"finish_reason":")" +
        name + R"("}]})";
    const std::string sglang = R"({"meta_info":{"finish_reason":{"type":")" + name +
                               R"("},"output_token_logprobs":[[-1,1]]}})";
    for (const auto& [flavour, body] :
         {std::pair{wire_flavour::vllm, vllm}, std::pair{wire_flavour::sglang, sglang}}) {
      SCOPED_TRACE(to_string(flavour) + ": " + name);
      for (const auto& got : {parse_generate_response(flavour, body, "", prompt),
                              parse_generate_response_reference(flavour, body, "", prompt)}) {
        ASSERT_EQ(got.choices.size(), 1U) << got.message;
        EXPECT_EQ(got.choices[0].finish, expected);
      }
    }
  }
}

TEST(ClientProtocol, VllmRequestBodyCarriesTokenIdsAndSamplingFields) {
  sampling_config s;
  s.n = 2;
  s.temperature = 0.7;
  s.top_p = 0.95;
  s.top_k = 20;
  s.seed = 42;
  s.stop = {"```\n", "</answer>"};
  s.stop_token_ids = {151645, 151643};
  const std::vector<token_id> prompt{1, 2, 3};
  const std::vector<token_id> continuation{4, 5};
  auto body = nlohmann::json::parse(
      build_generate_body(wire_flavour::vllm, "qwen", prompt, continuation, s, 100, "turn-1.2"));
  const nlohmann::json expected = {{"model", "qwen"},
                                   {"prompt", {1, 2, 3, 4, 5}},
                                   {"max_tokens", 100},
                                   {"n", 2},
                                   {"temperature", 0.7},
                                   {"top_p", 0.95},
                                   {"top_k", 20},
                                   {"seed", 42},
                                   {"stop", {"```\n", "</answer>"}},
                                   {"stop_token_ids", {151645, 151643}},
                                   {"skip_special_tokens", false},
                                   {"logprobs", 0},
                                   {"return_token_ids", true},
                                   {"stream", false},
                                   {"request_id", "turn-1.2"}};
  EXPECT_EQ(body, expected) << body.dump();
}

TEST(ClientProtocol, SglangRequestBodyNestsSamplingParams) {
  sampling_config s;
  s.temperature = 1.0;
  s.seed = 7;
  const std::vector<token_id> prompt{9, 8};
  auto body = nlohmann::json::parse(
      build_generate_body(wire_flavour::sglang, "ignored", prompt, {}, s, 64, "r.1"));
  const nlohmann::json expected = {{"input_ids", {9, 8}},
                                   {"sampling_params",
                                    {{"max_new_tokens", 64},
                                     {"n", 1},
                                     {"temperature", 1.0},
                                     {"top_p", 1.0},
                                     {"sampling_seed", 7},
                                     {"skip_special_tokens", false}}},
                                   {"return_logprob", true},
                                   {"stream", false},
                                   {"rid", "r.1"}};
  EXPECT_EQ(body, expected) << body.dump();
}

TEST(ClientProtocol, OptionalFieldsAreLeftOutWhenUnset) {
  sampling_config s;  // top_k -1, no seed, no stops
  auto body = nlohmann::json::parse(
      build_generate_body(wire_flavour::vllm, "", std::vector<token_id>{1}, {}, s, 5, "a"));
  for (const char* key : {"model", "top_k", "seed", "stop", "stop_token_ids"}) {
    EXPECT_FALSE(body.contains(key)) << key;
  }
}

// The bytes on the wire, not only the JSON they parse to: field order, number spelling and
// escaping are what the servers (and their request logs and caches) see, so a refactoring of the
// writers must leave them identical.
TEST(ClientProtocol, RequestBodiesAreByteForByteStable) {
  sampling_config full;
  full.n = 2;
  full.temperature = 0.7;
  full.top_p = 0.95;
  full.top_k = 20;
  full.seed = 42;
  full.stop = {"```\n", "</answer>"};
  full.stop_token_ids = {151645, 151643};
  const sampling_config plain;  // top_k -1, no seed, no stops
  const std::vector<token_id> prompt{1, 2, 3};
  const std::vector<token_id> continuation{4, 5};
  struct row {
    wire_flavour flavour;
    const sampling_config* sampling;
    std::string model;
    bool stream;
    std::string expected;
  };
  const std::vector<row> rows = {
      {wire_flavour::vllm, &full, "qwen", false,
       R"({"model":"qwen","prompt":[1,2,3,4,5],"max_tokens":100,"n":2,"temperature":0.7,)"
       R"("top_p":0.95,"top_k":20,"seed":42,"stop":["```\n","</answer>"],)"
       R"("stop_token_ids":[151645,151643],"skip_special_tokens":false,"logprobs":0,)"
       R"("return_token_ids":true,"stream":false,"request_id":"t\"1"})"},
      {wire_flavour::vllm, &plain, "", true,
       R"({"prompt":[1,2,3,4,5],"max_tokens":100,"n":1,"temperature":1,"top_p":1,)"
       R"("skip_special_tokens":false,"logprobs":0,"return_token_ids":true,"stream":true,)"
       R"("request_id":"t\"1"})"},
      {wire_flavour::sglang, &full, "qwen", false,
       R"({"input_ids":[1,2,3,4,5],"sampling_params":{"max_new_tokens":100,"n":2,)"
       R"("temperature":0.7,"top_p":0.95,"top_k":20,"sampling_seed":42,)"
       R"("stop":["```\n","</answer>"],"stop_token_ids":[151645,151643],)"
       R"("skip_special_tokens":false},"return_logprob":true,"stream":false,"rid":"t\"1"})"},
      {wire_flavour::sglang, &plain, "", true,
       R"({"input_ids":[1,2,3,4,5],"sampling_params":{"max_new_tokens":100,"n":1,)"
       R"("temperature":1,"top_p":1,"skip_special_tokens":false},"return_logprob":true,)"
       R"("stream":true,"rid":"t\"1"})"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(to_string(r.flavour) + (r.stream ? " streamed" : ""));
    EXPECT_EQ(build_generate_body(r.flavour, r.model, prompt, continuation, *r.sampling, 100,
                                  "t\"1", r.stream),
              r.expected);
  }
  const std::vector<chat_message> messages{{"user", "hi"}};
  const auto tokenize = build_tokenize_body(wire_flavour::vllm, "m", messages, true);
  ASSERT_TRUE(tokenize.ok()) << tokenize.err().message;
  EXPECT_EQ(*tokenize, R"({"add_generation_prompt":true,"add_special_tokens":false,)"
                       R"("messages":[{"content":"hi","role":"user"}],"model":"m"})");
  auto vllm = build_tokenize_body(wire_flavour::vllm, "", messages, false);
  ASSERT_TRUE(vllm) << vllm.err().message;
  EXPECT_EQ(*vllm, R"({"add_generation_prompt":false,"add_special_tokens":false,)"
                   R"("messages":[{"content":"hi","role":"user"}]})");
  auto sglang = build_tokenize_body(wire_flavour::sglang, "m", messages, true);
  ASSERT_TRUE(sglang) << sglang.err().message;
  EXPECT_EQ(*sglang, R"({"messages":[{"content":"hi","role":"user"}],"model":"m"})");
}

TEST(ClientProtocol, ClassifiesErrorStatuses) {
  const retry_config retry;
  struct row {
    long status;
    std::string body;
    attempt_kind kind;
    bool endpoint_fault;
    std::string substring;
  };
  const std::vector<row> rows = {
      {400, fixture("vllm_error_context_length.json"), attempt_kind::truncated, false,
       "maximum context length"},
      {400, fixture("openai_error_invalid.json"), attempt_kind::rejected, false,
       "temperature must be"},
      {400, R"({"detail": "Input length (5000 tokens) is longer than the model's context length"})",
       attempt_kind::truncated, false, "longer than"},
      {404, R"({"detail": "Not Found"})", attempt_kind::rejected, false, "Not Found"},
      {422, "", attempt_kind::rejected, false, "(empty body)"},
      {429, R"({"error": {"message": "queue full"}})", attempt_kind::retry, false, "queue full"},
      {500, "engine died", attempt_kind::rejected, true, "engine died"},
      {502, "<html>bad gateway</html>", attempt_kind::retry, true, "HTTP 502"},
      {503, R"({"error": "Service Unavailable", "message": "warming up"})", attempt_kind::retry,
       true, "Service Unavailable: warming up"},
      {504, "", attempt_kind::retry, true, "HTTP 504"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(std::to_string(r.status) + " " + r.body);
    auto v = classify_http_status(r.status, r.body, retry);
    EXPECT_EQ(v.kind, r.kind);
    EXPECT_EQ(v.endpoint_fault, r.endpoint_fault);
    EXPECT_NE(v.message.find(r.substring), std::string::npos) << v.message;
  }
}

TEST(ClientProtocol, BackoffDoublesUpToTheCapWithJitterBelow) {
  retry_config r;
  r.base_backoff = std::chrono::milliseconds(100);
  r.max_backoff = std::chrono::milliseconds(1000);
  r.jitter = 0.5;
  struct row {
    int retry;
    double u;
    long long expected_ms;
  };
  const std::vector<row> rows = {
      {1, 0.0, 100}, {1, 0.999999, 50}, {2, 0.0, 200},   {3, 0.5, 300},
      {4, 0.0, 800}, {5, 0.0, 1000},    {40, 0.0, 1000}, {5, 1.0, 500},
  };
  for (const auto& row : rows) {
    EXPECT_EQ(backoff_delay(r, row.retry, row.u).count(), row.expected_ms)
        << "retry " << row.retry << " u " << row.u;
  }
  r.jitter = 0.0;
  EXPECT_EQ(backoff_delay(r, 2, 0.9).count(), 200);
}

TEST(ClientProtocol, RetryAfterInSecondsOrAsAnHttpDate) {
  using std::chrono::milliseconds;
  // 2026-10-21 07:28:00 UTC
  const auto now = std::chrono::system_clock::from_time_t(1792567680);
  EXPECT_EQ(parse_retry_after("120", now), milliseconds(120'000));
  EXPECT_EQ(parse_retry_after(" 3\r\n", now), milliseconds(3'000));
  EXPECT_EQ(parse_retry_after("0", now), milliseconds(0));
  EXPECT_EQ(parse_retry_after("Wed, 21 Oct 2026 07:28:30 GMT", now), milliseconds(30'000));
  EXPECT_EQ(parse_retry_after("Wednesday, 21-Oct-26 07:29:00 GMT", now), milliseconds(60'000));
  EXPECT_EQ(parse_retry_after("Wed, 21 Oct 2026 07:00:00 GMT", now), milliseconds(0));  // past
  for (const char* junk : {"", "  ", "-5", "1.5", "soon", "5 s"}) {
    EXPECT_EQ(parse_retry_after(junk, now), std::nullopt) << junk;
  }
  // A number too long for any clock is still a wait (one that max_backoff caps).
  EXPECT_GE(parse_retry_after("99999999999999999999999", now), milliseconds(3'600'000));

  retry_config r;
  r.max_backoff = milliseconds(10'000);
  EXPECT_EQ(retry_wait(r, milliseconds(100), std::nullopt), milliseconds(100));
  EXPECT_EQ(retry_wait(r, milliseconds(100), milliseconds(2'000)), milliseconds(2'000));
  EXPECT_EQ(retry_wait(r, milliseconds(800), milliseconds(2)), milliseconds(800));
  EXPECT_EQ(retry_wait(r, milliseconds(100), milliseconds(60'000)), milliseconds(10'000));
}

TEST(ClientProtocol, ContextLengthMessages) {
  const std::vector<std::pair<std::string, bool>> rows = {
      {"This model's maximum context length is 4096 tokens", true},
      {"The input (5000 tokens) is longer than the model's context length (4096 tokens).", true},
      {"prompt is too long", true},
      {"max_tokens must be at least 1", false},
      {"temperature must be non-negative", false},
  };
  for (const auto& [message, expected] : rows) {
    EXPECT_EQ(is_context_length_error(message), expected) << message;
  }
}

TEST(ClientProtocol, TokenizeBodiesAndResponses) {
  const auto vllm_body =
      build_tokenize_body(wire_flavour::vllm, "m", {{"user", "hi"}, {"assistant", "yo"}}, true);
  ASSERT_TRUE(vllm_body.ok()) << vllm_body.err().message;
  auto body = nlohmann::json::parse(*vllm_body);
  EXPECT_EQ(body["messages"][1]["content"], "yo");
  EXPECT_EQ(body["add_generation_prompt"], true);
  EXPECT_EQ(body["add_special_tokens"], false);
  EXPECT_EQ(body["model"], "m");

  auto ok = parse_tokenize_response(R"({"count": 3, "max_model_len": 4096, "tokens": [1, 2, 3]})");
  ASSERT_TRUE(ok) << ok.err().message;
  EXPECT_EQ(*ok, (std::vector<token_id>{1, 2, 3}));
  for (const char* bad : {"", "[]", R"({"count": 3})", R"({"tokens": ["a"]})"}) {
    EXPECT_FALSE(parse_tokenize_response(bad)) << bad;
  }
}

// ---- streamed responses (stream_accumulator) ----

const std::vector<token_id> stream_ids{750, 912, 2877, 64};
const std::vector<float> stream_logprobs{-0.125F, -0.5F, -0.03125F, -1.25F};

struct stream_fixture {
  wire_flavour flavour;
  const char* file;
  const char* version;  // the weight version the events carry
};

const std::vector<stream_fixture> stream_fixtures{
    {wire_flavour::vllm, "vllm_completion_stream.sse", "hdr"},
    {wire_flavour::sglang, "sglang_generate_stream.sse", "default"},
    {wire_flavour::sglang, "sglang_generate_stream_incremental.sse", "default"},
};

streamed_choices feed_all(wire_flavour flavour, std::string_view bytes, std::size_t piece,
                          std::vector<token_id> prompt = {}) {
  stream_accumulator acc(flavour, 1, std::move(prompt));
  for (std::size_t at = 0; at < bytes.size(); at += piece) {
    acc.feed(bytes.substr(at, piece));
  }
  return acc.finish("hdr");
}

TEST(ClientStreamProtocol, FixturesReadWholeInAnyPieces) {
  for (const auto& f : stream_fixtures) {
    SCOPED_TRACE(f.file);
    const std::string body = fixture(f.file);
    for (std::size_t piece : {body.size(), std::size_t{1}, std::size_t{7}, std::size_t{64}}) {
      const auto got = feed_all(f.flavour, body, piece, {151644, 872, 198});
      ASSERT_EQ(got.problem, parse_problem::none) << got.message;
      EXPECT_TRUE(got.complete);
      EXPECT_TRUE(got.done);
      ASSERT_EQ(got.choices.size(), 1U);
      EXPECT_EQ(got.choices[0].ids, stream_ids);
      EXPECT_EQ(got.choices[0].logprobs, stream_logprobs);
      EXPECT_EQ(got.choices[0].text, "def add(a");
      EXPECT_EQ(got.choices[0].finish, finish_reason::stop);
      EXPECT_EQ(got.choices[0].weight_version, f.version);
    }
  }
}

// A stream cut at any byte keeps a prefix of the whole generation, never more and never a token
// twice; it is complete exactly when the event carrying the finish reason arrived whole.
TEST(ClientStreamProtocol, ACutAtAnyByteKeepsAPrefix) {
  for (const auto& f : stream_fixtures) {
    SCOPED_TRACE(f.file);
    const std::string body = fixture(f.file);
    const std::size_t finish_event_end = body.find("\n\n", body.find("\"stop\"")) + 2;
    for (std::size_t cut = 0; cut <= body.size(); ++cut) {
      const auto got = feed_all(f.flavour, std::string_view(body).substr(0, cut), 5);
      ASSERT_EQ(got.problem, parse_problem::none) << cut << ": " << got.message;
      ASSERT_EQ(got.choices.size(), 1U);
      const auto& ids = got.choices[0].ids;
      ASSERT_LE(ids.size(), stream_ids.size()) << cut;
      EXPECT_TRUE(std::equal(ids.begin(), ids.end(), stream_ids.begin())) << cut;
      EXPECT_EQ(got.choices[0].logprobs.size(), ids.size()) << cut;
      EXPECT_EQ(got.complete, cut >= finish_event_end) << cut;
      if (!got.complete) {
        EXPECT_NE(got.message.find("ended before every choice finished"), std::string::npos);
      }
    }
  }
}

TEST(ClientStreamProtocol, BadEventsStopTheStreamAndKeepWhatCameBefore) {
  struct row {
    wire_flavour flavour;
    const char* file;
    std::string bad_event;  // put in place of the second event
    parse_problem problem;
    std::size_t kept;  // ids kept
    const char* message;
  };
  const std::vector<row> rows{
      {wire_flavour::vllm, "vllm_completion_stream.sse", "data: {\"choices\": [{\"ind\n\n",
       parse_problem::none, 1, "is not JSON"},
      {wire_flavour::sglang, "sglang_generate_stream.sse", "data: {\"text\": \"de\n\n",
       parse_problem::none, 1, "is not JSON"},
      {wire_flavour::vllm, "vllm_completion_stream.sse",
       "data: {\"error\": {\"message\": \"engine died\", \"type\": \"InternalServerError\", "
       "\"code\": 500}}\n\n",
       parse_problem::none, 1, "error event mid-stream: engine died"},
      {wire_flavour::vllm, "vllm_completion_stream.sse",
       "data: {\"choices\": [{\"index\": 0, \"text\": \" add\", \"logprobs\": null, "
       "\"finish_reason\": null}]}\n\n",
       parse_problem::schema, 1, "no 'token_ids'"},
      {wire_flavour::vllm, "vllm_completion_stream.sse",
       "data: {\"choices\": [{\"index\": 3, \"text\": \"\", \"token_ids\": []}]}\n\n",
       // A choice beyond n: a faulty reply (retried), not a configuration fault.
       parse_problem::invalid, 1, "out of range"},
      {wire_flavour::sglang, "sglang_generate_stream.sse",
       "data: {\"text\": \"x\", \"output_ids\": [9], \"meta_info\": {\"completion_tokens\": 7, "
       "\"finish_reason\": null, \"output_token_logprobs\": [[-1.0, 9, null]]}}\n\n",
       parse_problem::schema, 1, "completion_tokens is 7"},
      {wire_flavour::sglang, "sglang_generate_stream.sse",
       "data: {\"text\": \"x\", \"output_ids\": [9], \"meta_info\": {\"finish_reason\": null}}\n\n",
       parse_problem::schema, 1, "ignored return_logprob"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.bad_event);
    std::string body = fixture(r.file);
    const std::size_t first_end = body.find("\n\n") + 2;
    const std::size_t second_end = body.find("\n\n", first_end) + 2;
    body.replace(first_end, second_end - first_end, r.bad_event);
    stream_accumulator acc(r.flavour, 1, {});
    EXPECT_FALSE(acc.feed(body));
    EXPECT_FALSE(acc.feed("data: [DONE]\n\n"));  // nothing is read after a bad event
    const auto got = acc.finish("");
    EXPECT_EQ(got.problem, r.problem);
    EXPECT_FALSE(got.complete);
    EXPECT_FALSE(got.done);
    EXPECT_EQ(got.choices[0].ids.size(), r.kept);
    EXPECT_NE(got.message.find(r.message), std::string::npos) << got.message;
  }
}

TEST(ClientStreamProtocol, EchoedPromptMustMatchAndChoicesInterleave) {
  const auto mismatch =
      feed_all(wire_flavour::vllm, fixture("vllm_completion_stream.sse"), 4096, {151644, 872, 199});
  EXPECT_EQ(mismatch.problem, parse_problem::schema);
  EXPECT_NE(mismatch.message.find("re-tokenised"), std::string::npos);

  // n = 2, chunks of both choices interleaved as vLLM sends them.
  const std::string body =
      "data: {\"choices\": [{\"index\": 1, \"text\": \"b\", \"token_ids\": [2], \"logprobs\": "
      "{\"token_logprobs\": [-0.2]}, \"finish_reason\": null}]}\n\n"
      "data: {\"choices\": [{\"index\": 0, \"text\": \"a\", \"token_ids\": [1], \"logprobs\": "
      "{\"token_logprobs\": [-0.1]}, \"finish_reason\": \"length\"}]}\n\n"
      "data: {\"choices\": [{\"index\": 1, \"text\": \"c\", \"token_ids\": [3], \"logprobs\": "
      "{\"token_logprobs\": [-0.3]}, \"finish_reason\": \"stop\"}]}\n\n"
      "data: [DONE]\n\n";
  stream_accumulator acc(wire_flavour::vllm, 2, {});
  EXPECT_TRUE(acc.feed(body));
  const auto got = acc.finish("");
  ASSERT_TRUE(got.complete) << got.message;
  EXPECT_EQ(got.choices[0].ids, (std::vector<token_id>{1}));
  EXPECT_EQ(got.choices[0].finish, finish_reason::length);
  EXPECT_EQ(got.choices[1].ids, (std::vector<token_id>{2, 3}));
  EXPECT_EQ(got.choices[1].text, "bc");
  EXPECT_EQ(got.choices[1].finish, finish_reason::stop);
}

TEST(ClientStreamProtocol, RequestBodiesAskForAStream) {
  const std::vector<token_id> prompt{1, 2};
  sampling_config s;
  for (const auto flavour : {wire_flavour::vllm, wire_flavour::sglang}) {
    const auto streamed = nlohmann::json::parse(
        build_generate_body(flavour, "", prompt, {}, s, 8, "r.1", /*stream=*/true));
    const auto whole =
        nlohmann::json::parse(build_generate_body(flavour, "", prompt, {}, s, 8, "r.1"));
    EXPECT_EQ(streamed["stream"], true);
    EXPECT_EQ(whole["stream"], false);
  }
}

}  // namespace
}  // namespace leap::policy
