#include "policy/wire/wire.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace leap::policy {
namespace {

TEST(Sse, FramesEvents) {
  struct row {
    std::string data;
    std::string expected;
  };
  const std::vector<row> rows = {
      {R"({"a":1})", "data: {\"a\":1}\n\n"},
      {"", "data: \n\n"},
      {"two\nlines", "data: two\ndata: lines\n\n"},
      {"trailing\n", "data: trailing\ndata: \n\n"},
  };
  for (const auto& r : rows) {
    EXPECT_EQ(sse_event(r.data), r.expected);
  }
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

TEST(Sse, ReaderReadsBackWhatWasFramed) {
  const std::vector<std::string> payloads{R"({"x":"y"})", "two\nlines", "", "[DONE]"};
  std::string stream;
  for (const auto& p : payloads) {
    stream += sse_event(p);
  }
  // Fed byte by byte, as a network might deliver it.
  sse_reader reader;
  std::vector<std::string> got;
  for (const char c : stream) {
    for (auto& e : reader.feed(std::string_view(&c, 1))) {
      got.push_back(std::move(e));
    }
  }
  EXPECT_EQ(got, payloads);
  EXPECT_FALSE(reader.is_partial());
}

TEST(Sse, ReaderTable) {
  struct row {
    std::string name;
    std::string input;
    std::vector<std::string> events;
    bool partial;
  };
  const std::vector<row> rows = {
      {"crlf", "data: a\r\n\r\n", {"a"}, false},
      {"no space after colon", "data:a\n\n", {"a"}, false},
      {"comment and other fields", ": keep-alive\nevent: x\nid: 3\ndata: b\n\n", {"b"}, false},
      {"blank line without data", "\n\nevent: x\n\n", {}, false},
      {"cut mid-event", "data: {\"a\":1}\n\ndata: {\"b\"", {"{\"a\":1}"}, true},
      {"cut before blank line", "data: c\n", {}, true},
  };
  for (const auto& r : rows) {
    sse_reader reader;
    EXPECT_EQ(reader.feed(r.input), r.events) << r.name;
    EXPECT_EQ(reader.is_partial(), r.partial) << r.name;
  }
}

}  // namespace
}  // namespace leap::policy
