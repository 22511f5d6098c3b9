// The JSON fast path's cursor as tables: what each reader takes, what it leaves to the DOM parser
// (a false), and where it stops. How the dialects' readers built on it agree with the DOM parser is
// client_protocol_test.cpp's SinglePassReaderAgreesWithTheDomParser.
#include "policy/wire/wire.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace leap::policy {
namespace {

TEST(JsonCursor, Integers) {
  struct row {
    std::string input;
    std::optional<long long> value;  // nullopt: refused
    std::string rest;                // what is left after a read
  };
  const std::vector<row> rows = {
      {"0", 0, ""},
      {" \n\t-12,", -12, ","},
      {"123456789012345678]", 123456789012345678LL, "]"},  // 18 digits: the most it takes
      {"1234567890123456789", std::nullopt, ""},           // 19: the DOM parser decides
      {"01", std::nullopt, ""},                            // JSON has no leading zeros
      {"-0", 0, ""},
      {"1.5", std::nullopt, ""},
      {"1e3", std::nullopt, ""},
      {"2E1", std::nullopt, ""},
      {"-", std::nullopt, ""},
      {"+1", std::nullopt, ""},
      {"\"1\"", std::nullopt, ""},
      {"", std::nullopt, ""},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.input);
    json_cursor c(r.input);
    long long v = -999;
    const bool ok = c.integer(v);
    ASSERT_EQ(ok, r.value.has_value());
    if (ok) {
      EXPECT_EQ(v, *r.value);
      EXPECT_EQ(std::string(c.p, c.e), r.rest);
    }
  }
}

TEST(JsonCursor, Numbers) {
  struct row {
    std::string input;
    std::optional<double> value;
  };
  const std::vector<row> rows = {
      {"-0.125", -0.125},   {"1E2", 100.0},         {"-1e-3", -0.001},   {"7", 7.0},
      {".5", std::nullopt}, {"01.5", std::nullopt}, {"-", std::nullopt}, {"nan", std::nullopt},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.input);
    json_cursor c(r.input);
    double v = 0;
    const bool ok = c.number(v);
    ASSERT_EQ(ok, r.value.has_value());
    if (ok) {
      EXPECT_DOUBLE_EQ(v, *r.value);
      EXPECT_TRUE(c.at_end());
    }
  }
}

TEST(JsonCursor, StringsRawAndDecoded) {
  struct row {
    std::string input;
    bool ok;
    std::string raw;
    bool escaped;
    std::string text;  // decoded
  };
  const std::vector<row> rows = {
      {R"("abc")", true, "abc", false, "abc"},
      {R"("a\"b")", true, R"(a\"b)", true, "a\"b"},
      {R"("x\\y\n")", true, R"(x\\y\n)", true, "x\\y\n"},
      {R"("\u00e9\ud83d\ude00")", true, R"(\u00e9\ud83d\ude00)", true, "\xc3\xa9\xf0\x9f\x98\x80"},
      {"\"a\nb\"", false, "", false, ""},  // a raw control character
      {R"("open)", false, "", false, ""},
      {R"(abc)", false, "", false, ""},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.input);
    json_cursor raw_cursor(r.input);
    std::string_view raw;
    bool escaped = false;
    ASSERT_EQ(raw_cursor.string(raw, escaped), r.ok);
    json_cursor text_cursor(r.input);
    std::string text;
    ASSERT_EQ(text_cursor.text(text), r.ok);
    if (r.ok) {
      EXPECT_EQ(raw, r.raw);
      EXPECT_EQ(escaped, r.escaped);
      EXPECT_EQ(text, r.text);
      EXPECT_TRUE(raw_cursor.at_end());
      EXPECT_TRUE(text_cursor.at_end());
    }
  }
}

TEST(JsonCursor, SkipTakesAnyValueUpToItsDepth) {
  struct row {
    std::string input;
    bool ok;
  };
  const auto nested = [](int levels) {
    return std::string(static_cast<std::size_t>(levels), '[') +
           std::string(static_cast<std::size_t>(levels), ']');
  };
  const std::vector<row> rows = {
      {R"({"a": [1, -2.5e3, "s\"", true, false, null, {}], "b": {"c": []}})", true},
      {"  null  ", true},
      {nested(65), true},  // depths 0..64
      {nested(66), false},
      {R"([1, 2,])", false},
      {R"({"a" 1})", false},
      {R"({"a": 1,})", false},
      {"tru", false},
      {"nul", false},
      {"", false},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.input);
    json_cursor c(r.input);
    EXPECT_EQ(c.skip() && c.at_end(), r.ok);
  }
}

TEST(JsonCursor, ObjectsHandEachKeyToTheCaller) {
  {
    json_cursor c(R"( { "a" : 1 , "b" : [2] } )");
    std::vector<std::string> keys;
    ASSERT_TRUE(c.object([&](std::string_view key) {
      keys.emplace_back(key);
      return c.skip();
    }));
    EXPECT_EQ(keys, (std::vector<std::string>{"a", "b"}));
    EXPECT_TRUE(c.at_end());
  }
  {
    json_cursor c("{}");
    EXPECT_TRUE(c.object([](std::string_view) { return false; }));
  }
  // An escaped key, the caller's refusal, a missing colon or brace: not the fast path.
  for (const char* input : {R"({"a\"": 1})", R"({"x": 1})", R"({"a" 1})", R"({"a": 1)", "[]"}) {
    SCOPED_TRACE(input);
    json_cursor c(input);
    EXPECT_FALSE(c.object([&](std::string_view key) { return key == "a" && c.skip(); }));
  }
}

TEST(JsonCursor, IdsAreIntegersInThe31BitRange) {
  struct row {
    std::string input;
    std::optional<std::vector<token_id>> ids;
  };
  const std::vector<row> rows = {
      {"[]", std::vector<token_id>{}},
      {"[1, 2,3 ]", std::vector<token_id>{1, 2, 3}},
      {"[0,2147483647]", std::vector<token_id>{0, 2147483647}},
      {"[2147483648]", std::nullopt},  // the DOM parser names it
      {"[-1]", std::nullopt},
      {"[1.0]", std::nullopt},
      {"[\"1\"]", std::nullopt},
      {"[1,]", std::nullopt},
      {"{}", std::nullopt},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.input);
    json_cursor c(r.input);
    std::vector<token_id> got;
    const bool ok = c.ids(got);
    ASSERT_EQ(ok, r.ids.has_value());
    if (ok) {
      EXPECT_EQ(got, *r.ids);
    }
  }
}

TEST(JsonCursor, StringOrIntegerReadsWeightVersions) {
  struct row {
    std::string input;
    bool ok;
    std::optional<std::string> value;  // starting from "before"
  };
  const std::vector<row> rows = {
      {R"("v3")", true, "v3"},     {"42", true, "42"},           {"-7", true, "-7"},
      {"null", true, "before"},    {"1.5", false, std::nullopt}, {"true", false, std::nullopt},
      {"{}", false, std::nullopt},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.input);
    json_cursor c(r.input);
    std::optional<std::string> out = "before";
    ASSERT_EQ(c.string_or_integer(out), r.ok);
    if (r.ok) {
      EXPECT_EQ(out, r.value);
      EXPECT_TRUE(c.at_end());
    }
  }
}

TEST(JsonCursor, LiteralsAndPeeking) {
  json_cursor c("  true , x");
  EXPECT_FALSE(c.literal("false"));
  EXPECT_TRUE(c.at('t'));
  EXPECT_TRUE(c.literal("true"));
  EXPECT_FALSE(c.eat(']'));
  EXPECT_TRUE(c.eat(','));
  EXPECT_FALSE(c.at_end());
  EXPECT_FALSE(c.literal("xy"));  // past the end
}

}  // namespace
}  // namespace leap::policy
