#include "policy/server/detail/server_generation.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace leap::policy {
namespace {

std::vector<token_step> steps_of(const std::vector<token_id>& ids) {
  std::vector<token_step> steps;
  steps.reserve(ids.size());
  for (const token_id id : ids) {
    steps.push_back({id, -0.1, {}});
  }
  return steps;
}

std::vector<token_id> text_ids(const std::string& text) {
  return byte_tokenizer::encode(text, false);
}

// Feeds tokens until the builder finishes (or they run out, then the backend "ends naturally").
sequence_output run(const stop_rules& rules, const std::vector<token_id>& ids) {
  sequence_builder builder(rules, 0, {1});
  bool finished = false;
  for (const auto& step : steps_of(ids)) {
    if (builder.push(step)) {
      finished = true;
      break;
    }
  }
  if (!finished) {
    builder.finish_natural();
  }
  return builder.output();
}

TEST(SequenceBuilder, StopTable) {
  struct row {
    std::string name;
    stop_rules rules;
    std::vector<token_id> generated;
    std::string text;
    std::size_t tokens;
    finish_reason finish;
    std::optional<token_id> stop_token;
    std::optional<std::string> stop_string;
  };
  const auto ids_then = [](const std::string& text, std::vector<token_id> tail) {
    std::vector<token_id> ids = text_ids(text);
    ids.insert(ids.end(), tail.begin(), tail.end());
    return ids;
  };
  std::vector<row> rows;
  rows.push_back({"eos ends, kept in ids, not in text",
                  {.max_tokens = 100},
                  ids_then("hi", {special::im_end, 'x'}),
                  "hi",
                  3,
                  finish_reason::stop,
                  std::nullopt,
                  std::nullopt});
  rows.push_back({"max tokens",
                  {.max_tokens = 3},
                  text_ids("hello"),
                  "hel",
                  3,
                  finish_reason::length,
                  std::nullopt,
                  std::nullopt});
  rows.push_back({"eos on the last allowed token is a stop",
                  {.max_tokens = 3},
                  ids_then("hi", {special::eos}),
                  "hi",
                  3,
                  finish_reason::stop,
                  std::nullopt,
                  std::nullopt});
  rows.push_back({"stop token id",
                  {.max_tokens = 100, .stop_token_ids = {'!'}},
                  text_ids("ok!more"),
                  "ok",
                  3,
                  finish_reason::stop,
                  token_id{'!'},
                  std::nullopt});
  rows.push_back({"stop string trimmed",
                  {.max_tokens = 100, .stop = {"END"}},
                  text_ids("abcENDxyz"),
                  "abc",
                  6,
                  finish_reason::stop,
                  std::nullopt,
                  std::string("END")});
  rows.push_back({"stop string kept",
                  {.max_tokens = 100, .stop = {"END"}, .include_stop_str_in_output = true},
                  text_ids("abcENDxyz"),
                  "abcEND",
                  6,
                  finish_reason::stop,
                  std::nullopt,
                  std::string("END")});
  rows.push_back({"earliest of two stop strings",
                  {.max_tokens = 100, .stop = {"cd", "bcd"}},
                  text_ids("abcdef"),
                  "a",
                  4,
                  finish_reason::stop,
                  std::nullopt,
                  std::string("bcd")});
  rows.push_back({"ignore_eos",
                  {.max_tokens = 4, .ignore_eos = true, .skip_special_tokens = true},
                  ids_then("a", {special::im_end, 'b', 'c'}),
                  "abc",
                  4,
                  finish_reason::length,
                  std::nullopt,
                  std::nullopt});
  rows.push_back({"specials shown when not skipped",
                  {.max_tokens = 4, .ignore_eos = true, .skip_special_tokens = false},
                  ids_then("a", {special::im_end, 'b'}),
                  "a<|im_end|>b",
                  3,
                  finish_reason::stop,
                  std::nullopt,
                  std::nullopt});
  rows.push_back({"min tokens defers eos",
                  {.max_tokens = 100, .min_tokens = 2},
                  std::vector<token_id>{special::im_end, 'a', special::im_end},
                  "a",
                  3,
                  finish_reason::stop,
                  std::nullopt,
                  std::nullopt});
  rows.push_back({"backend ends without eos",
                  {.max_tokens = 100},
                  text_ids("abc"),
                  "abc",
                  3,
                  finish_reason::stop,
                  std::nullopt,
                  std::nullopt});
  for (const auto& r : rows) {
    const sequence_output out = run(r.rules, r.generated);
    EXPECT_EQ(out.text, r.text) << r.name;
    EXPECT_EQ(out.token_ids.size(), r.tokens) << r.name;
    EXPECT_EQ(out.logprobs.size(), r.tokens) << r.name;
    EXPECT_EQ(out.finish, r.finish) << r.name;
    EXPECT_EQ(out.stop_token, r.stop_token) << r.name;
    EXPECT_EQ(out.stop_string, r.stop_string) << r.name;
  }
}

TEST(SequenceBuilder, AbortKeepsPartialTokens) {
  sequence_builder builder({.max_tokens = 100}, 2, {7});
  builder.push({'a', -1.0, {}});
  builder.finish_abort("paused");
  builder.finish_natural();  // no effect once finished
  EXPECT_EQ(builder.output().finish, finish_reason::abort);
  EXPECT_EQ(builder.output().abort_message, "paused");
  EXPECT_EQ(builder.output().token_ids, std::vector<token_id>{'a'});
  EXPECT_EQ(builder.output().index, 2);
}

// Streaming deltas never split a UTF-8 character nor show text a stop string may swallow, and
// together they are exactly the final output.
TEST(SequenceBuilder, DeltasConcatenateToTheOutput) {
  struct row {
    std::string name;
    stop_rules rules;
    std::string generated;
  };
  const std::vector<row> rows = {
      {"plain", {.max_tokens = 100}, "hello world"},
      {"utf8", {.max_tokens = 100}, "caf\xC3\xA9 \xE2\x9C\x93 \xF0\x9F\x98\x80!"},
      {"stop string", {.max_tokens = 100, .stop = {"STOP"}}, "abc STO def STOP ghi"},
      {"length", {.max_tokens = 5}, "abcdefgh"},
  };
  for (const std::size_t chunk : {SIZE_MAX, std::size_t{3}, std::size_t{1}}) {
    for (const auto& r : rows) {
      SCOPED_TRACE("chunk " + std::to_string(chunk));
      sequence_builder builder(r.rules, 0, {1});
      std::string streamed;
      std::vector<token_id> streamed_ids;
      int finishes = 0;
      const auto drain = [&] {
        while (builder.has_delta()) {
          const sequence_output d = builder.take_delta(chunk);
          EXPECT_LE(d.token_ids.size(), chunk) << r.name;
          // Every piece handed out is complete UTF-8: no lead byte without its continuation.
          if (!d.text.empty()) {
            const auto last = static_cast<unsigned char>(d.text.back());
            EXPECT_FALSE(last >= 0xC0U) << r.name;
          }
          EXPECT_EQ(d.text_offset, streamed.size()) << r.name;
          EXPECT_EQ(d.text.find("STOP"), std::string::npos) << r.name;
          streamed += d.text;
          streamed_ids.insert(streamed_ids.end(), d.token_ids.begin(), d.token_ids.end());
          finishes += d.finish ? 1 : 0;
        }
      };
      bool done = false;
      for (const auto& step : steps_of(text_ids(r.generated))) {
        done = builder.push(step);
        drain();
        if (done) {
          break;
        }
      }
      if (!done) {
        builder.push({special::im_end, -0.1, {}});
        drain();
      }
      EXPECT_EQ(streamed, builder.output().text) << r.name;
      EXPECT_EQ(streamed_ids, builder.output().token_ids) << r.name;
      EXPECT_EQ(finishes, 1) << r.name;
    }
  }
}

TEST(SequenceBuilder, HoldsBackAPossibleStopPrefix) {
  sequence_builder builder({.max_tokens = 100, .stop = {"###"}}, 0, {1});
  for (const auto& step : steps_of(text_ids("ab#"))) {
    builder.push(step);
  }
  EXPECT_EQ(builder.take_delta().text, "ab");
  builder.push({'c', -0.1, {}});  // "#c" can no longer become "###"
  EXPECT_EQ(builder.take_delta().text, "#c");
}

}  // namespace
}  // namespace leap::policy
