// The control API's pure parts: token check, error shape, request parsing, submission.
#include "tools/daemon/api.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace leap::daemon {
namespace {

TEST(DaemonApi, BearerTokenCheck) {
  const std::string token = "abc123";
  struct row {
    std::string header;
    bool expected;
  };
  const std::vector<row> rows = {
      {"Bearer abc123", true},  {"bearer abc123", true},   {"BEARER abc123 ", true},
      {"Bearer abc124", false}, {"Bearer abc12", false},   {"Bearer abc1234", false},
      {"abc123", false},        {"Basic abc123", false},   {"", false},
      {"Bearer ", false},       {"Bearer  abc123", false},
  };
  for (const auto& r : rows) {
    EXPECT_EQ(authorized(r.header, token), r.expected) << r.header;
  }
  EXPECT_FALSE(authorized("Bearer ", ""));
}

TEST(DaemonApi, OneErrorShape) {
  struct row {
    int code;
    std::string type;
  };
  for (const auto& r : std::vector<row>{{400, "invalid_request_error"},
                                        {401, "authentication_error"},
                                        {404, "not_found_error"},
                                        {409, "conflict_error"},
                                        {503, "unavailable_error"},
                                        {500, "server_error"}}) {
    const auto j = nlohmann::json::parse(error_body(r.code, "why"));
    EXPECT_EQ(j["error"]["message"], "why");
    EXPECT_EQ(j["error"]["type"], r.type);
    EXPECT_EQ(j["error"]["code"], r.code);
  }
}

TEST(DaemonApi, ErrorBodiesSurviveBytesThatAreNotUtf8) {
  // The report: a message quoting a non-UTF-8 body made dump() throw (type_error.316): a 500.
  const auto j = nlohmann::json::parse(error_body(400, "bad: \xff\xfe name"));
  EXPECT_EQ(j["error"]["message"], "bad: \xef\xbf\xbd\xef\xbf\xbd name");
  EXPECT_EQ(nlohmann::json::parse(error_body(413, "x"))["error"]["type"],
            "request_too_large_error");
}

TEST(DaemonApi, Utf8Validation) {
  struct row {
    std::string text;
    std::optional<std::size_t> bad;
  };
  const std::vector<row> rows = {
      {"", std::nullopt},
      {"plain ascii", std::nullopt},
      {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", std::nullopt},  // e-acute, euro, emoji
      {"\xff", 0},                                                  // never in UTF-8
      {"ab\x80", 2},                                                // a lone continuation byte
      {"a\xc3", 1},                                                 // cut short
      {"\xc3\x28", 0},          // a lead without its continuation
      {"\xc0\xaf", 0},          // overlong '/'
      {"\xe0\x80\xaf", 0},      // overlong, three bytes
      {"\xed\xa0\x80", 0},      // a UTF-16 surrogate
      {"\xf4\x90\x80\x80", 0},  // past U+10FFFF
      {"ok\xf0\x9f\x98", 2},    // a four-byte form cut short
  };
  for (const auto& r : rows) {
    EXPECT_EQ(first_invalid_utf8(r.text), r.bad) << r.text;
  }
}

TEST(DaemonApi, FlowNestingDepth) {
  struct row {
    std::string text;
    std::size_t depth;
  };
  const std::vector<row> rows = {
      {"a: 1\n", 0},
      {"a: [1, 2]\n", 1},
      {"a: {b: [1, {c: 2}]}\n", 3},
      {"a: '[[[['\n", 0},            // quoted
      {"a: \"[[\\\"[[\"\n", 0},      // an escaped quote inside a double-quoted string
      {"a: 'it''s [[['\n", 0},       // a doubled single quote
      {"a: 1 # [[[[\nb: [1]\n", 1},  // a comment
      {"a: b#[[[\n", 3},             // '#' inside a word starts no comment
      {std::string(100000, '[') + std::string(100000, ']'), 100000},
  };
  for (const auto& r : rows) {
    EXPECT_EQ(flow_nesting_depth(r.text), r.depth) << r.text.substr(0, 40);
  }
}

TEST(DaemonApi, SubmitRefusesBodiesAndHeadersThatAreNotUtf8OrNestTooDeep) {
  struct row {
    std::string body;
    std::string name;
    std::string expected;
  };
  const std::vector<row> rows = {
      {"experiment:\n  name: \xff\xfe\n", "a.yaml", "not UTF-8 text (byte 20"},
      {"experiment:\n  steps: 1\n", "a\xff.yaml", "X-Leap-Config-Name: not UTF-8"},
      {"a: " + std::string(100000, '[') + std::string(100000, ']') + "\n", "a.yaml",
       "nests [ ] and { } 100000 deep"},
  };
  for (const auto& r : rows) {
    auto out = parse_submit(r.body, r.name, "");
    ASSERT_FALSE(out) << r.expected;
    EXPECT_NE(out.err().message.find(r.expected), std::string::npos) << out.err().message;
  }
  EXPECT_TRUE(parse_submit(
      "a: " + std::string(max_config_nesting, '[') + std::string(max_config_nesting, ']') + "\n",
      "a.yaml", ""));
}

TEST(DaemonApi, TailParameter) {
  EXPECT_FALSE(parse_tail("", false)->has_value());
  EXPECT_EQ(parse_tail("20", true)->value(), 20u);
  for (const char* bad : {"", "0", "-1", "x", "1.5", "9999999999"}) {
    auto t = parse_tail(bad, true);
    ASSERT_FALSE(t) << bad;
    EXPECT_NE(t.err().message.find("tail:"), std::string::npos);
  }
}

TEST(DaemonApi, SubmitRequestChecks) {
  auto ok = parse_submit("experiment:\n  steps: 1\n", "configs/a.yaml", "/work");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->source, "configs/a.yaml");
  EXPECT_EQ(ok->cwd, "/work");
  auto defaults = parse_submit("x: 1\n", "", "");
  ASSERT_TRUE(defaults);
  EXPECT_EQ(defaults->source, "config.yaml");
  EXPECT_EQ(defaults->cwd, "");
  EXPECT_FALSE(parse_submit(" \n", "a.yaml", ""));
  auto relative = parse_submit("x: 1\n", "a.yaml", "work");
  ASSERT_FALSE(relative);
  EXPECT_NE(relative.err().message.find("X-Leap-Cwd"), std::string::npos);
}

TEST(DaemonApi, SubmissionValidatesTheConfigAndResolvesTheRunFolder) {
  submit_request req;
  req.yaml = "experiment:\n  name: tiny\n  run_dir: runs/tiny/\n  steps: 2\n";
  req.source = "configs/tiny.yaml";
  req.cwd = "/home/u/proj";
  auto r = make_submission(req, 4, "/state/experiments/e4", 123);
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_EQ(r->id, "e4");
  EXPECT_EQ(r->name, "tiny");
  EXPECT_EQ(r->state, experiment_state::queued);
  EXPECT_EQ(r->cwd, "/home/u/proj");
  EXPECT_EQ(r->run_dir, "/home/u/proj/runs/tiny");
  EXPECT_EQ(r->submitted_unix_ms, 123);

  // No cwd: the experiment's own folder, so the default run_dir lands inside it.
  req.cwd.clear();
  req.yaml = "experiment:\n  steps: 2\n";
  r = make_submission(req, 5, "/state/experiments/e5", 1);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->run_dir, "/state/experiments/e5/runs/leap");
  // An absolute run_dir stays.
  req.yaml = "experiment:\n  run_dir: /data/../data/r\n";
  EXPECT_EQ(make_submission(req, 6, "/s/e6", 1)->run_dir, "/data/r");
}

TEST(DaemonApi, SubmissionErrorsAreTheConfigsOwn) {
  struct row {
    std::string yaml;
    std::string expected;
  };
  const std::vector<row> rows = {
      {"gate:\n  tau_min: x\n", "bad.yaml:2: gate.tau_min"},
      {"experiment:\n  stesp: 3\n", "bad.yaml:2: experiment.stesp"},
      {"rollout:\n  max_turns: 1\ngate:\n  policy: dcp\n", "gate.policy"},
      {"a: [1\n", "bad.yaml:"},
  };
  for (const auto& r : rows) {
    submit_request req;
    req.yaml = r.yaml;
    req.source = "bad.yaml";
    auto out = make_submission(req, 1, "/s/e1", 1);
    ASSERT_FALSE(out) << r.yaml;
    EXPECT_NE(out.err().message.find(r.expected), std::string::npos) << out.err().message;
  }
}

TEST(DaemonApi, ARunFolderServesOneActiveExperiment) {
  auto rec = [](std::uint64_t seq, experiment_state s, const std::string& dir) {
    experiment_record r;
    r.seq = seq;
    r.id = id_of(seq);
    r.state = s;
    r.run_dir = dir;
    return r;
  };
  const std::vector<experiment_record> records = {rec(1, experiment_state::succeeded, "/a"),
                                                  rec(2, experiment_state::queued, "/b"),
                                                  rec(3, experiment_state::running, "/c")};
  EXPECT_FALSE(run_dir_user(records, "/a"));  // a finished run's folder may be continued
  EXPECT_EQ(run_dir_user(records, "/b"), "e2");
  EXPECT_EQ(run_dir_user(records, "/c"), "e3");
  EXPECT_FALSE(run_dir_user(records, "/d"));
}

TEST(DaemonApi, StatusJsonCountsAndLists) {
  experiment_record a;
  a.seq = 2;
  a.id = "e2";
  a.state = experiment_state::queued;
  experiment_record b;
  b.seq = 1;
  b.id = "e1";
  b.state = experiment_state::running;
  b.pid = 9;
  daemon_settings s;
  s.max_concurrent = 1;
  const auto j = status_json({a, b}, s, false, 5000, 2000);
  EXPECT_EQ(j["state"], "serving");
  EXPECT_EQ(j["uptime_s"], 3.0);
  EXPECT_EQ(j["experiments"]["queued"], 1);
  EXPECT_EQ(j["experiments"]["running"], 1);
  EXPECT_EQ(j["experiments"]["failed"], 0);
  EXPECT_EQ(j["running"], nlohmann::json::array({"e1"}));
  EXPECT_EQ(j["queue"], nlohmann::json::array({"e2"}));
  EXPECT_EQ(status_json({}, s, true, 0, 0)["state"], "stopping");
}

}  // namespace
}  // namespace leap::daemon
