// The telemetry registry: updates, snapshots, Prometheus text exposition 0.0.4 (read back by a
// small parser, as a scraper reads it, and checked against the format's grammar), JSON,
// quantiles. (Its files are written by common/durable_file: tests/common.)
#include "orchestrator/telemetry.hpp"

#include "orchestrator/run_telemetry.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace leap::telemetry {
namespace {

void expect_valid_exposition(const std::string& text);

// The exposition as a scraper reads it: families in order, each with its HELP text, its TYPE and
// its samples (`name{labels}` -> value, in any order: the format does not fix the order of a
// histogram's _bucket, _sum and _count lines).
struct parsed_family {
  std::string name;
  std::string help;
  std::string type;
  std::map<std::string, double> samples;
  friend bool operator==(const parsed_family&, const parsed_family&) = default;
};

std::ostream& operator<<(std::ostream& out, const parsed_family& f) {
  out << f.name << " (" << f.type << ", " << f.help << "):";
  for (const auto& [series, value] : f.samples) {
    out << " " << series << "=" << value;
  }
  return out;
}

std::vector<parsed_family> parse_exposition(const std::string& text) {
  std::vector<parsed_family> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# HELP ", 0) == 0) {
      const auto space = line.find(' ', 7);
      out.push_back({line.substr(7, space - 7), line.substr(space + 1), "", {}});
    } else if (line.rfind("# TYPE ", 0) == 0) {
      if (!out.empty()) {
        out.back().type = line.substr(line.rfind(' ') + 1);
      }
    } else if (!line.empty() && !out.empty()) {
      const auto space = line.rfind(' ');
      out.back().samples[line.substr(0, space)] = std::strtod(line.c_str() + space + 1, nullptr);
    }
  }
  return out;
}

TEST(Telemetry, ExpositionOfEveryType) {
  registry r;
  r.add_counter("leap_things_total", "Things counted").inc(3);
  auto& g = r.add_gauge("leap_depth", "Depth per stage", {{"stage", "compile"}});
  g.set(5);
  g.add(-2);
  r.add_gauge("leap_depth", "Depth per stage", {{"stage", "run"}}).set(0.25);
  auto& h = r.add_histogram("leap_latency_seconds", "Latency", {0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 2.0, 20.0}) {
    h.observe(v);
  }
  const std::vector<parsed_family> expected = {
      {"leap_things_total", "Things counted", "counter", {{"leap_things_total", 3}}},
      {"leap_depth",
       "Depth per stage",
       "gauge",
       {{"leap_depth{stage=\"compile\"}", 3}, {"leap_depth{stage=\"run\"}", 0.25}}},
      {"leap_latency_seconds",
       "Latency",
       "histogram",
       {{"leap_latency_seconds_bucket{le=\"0.1\"}", 2},
        {"leap_latency_seconds_bucket{le=\"1\"}", 3},
        {"leap_latency_seconds_bucket{le=\"10\"}", 4},
        {"leap_latency_seconds_bucket{le=\"+Inf\"}", 5},
        {"leap_latency_seconds_sum", 22.65},
        {"leap_latency_seconds_count", 5}}},
  };
  const auto text = to_prometheus(r.take());
  EXPECT_EQ(parse_exposition(text), expected) << text;
  expect_valid_exposition(text);
  // Series keep their labels in the order given (prometheus-cpp alone would sort them).
  registry two;
  two.add_gauge("g", "h", {{"stage", "run"}, {"kind", "cpp"}}).set(1);
  EXPECT_NE(to_prometheus(two.take()).find("g{stage=\"run\",kind=\"cpp\"} 1\n"), std::string::npos);
}

TEST(Telemetry, EscapingOfHelpAndLabelValues) {
  struct row {
    std::string help;
    std::string label_value;
    std::string expected_help_line;
    std::string expected_series_line;
  };
  const std::vector<row> rows = {
      {"plain", "x", "# HELP m plain", "m{l=\"x\"} 1"},
      {"back\\slash", "a\\b", "# HELP m back\\\\slash", "m{l=\"a\\\\b\"} 1"},
      {"two\nlines", "line\nbreak", "# HELP m two\\nlines", "m{l=\"line\\nbreak\"} 1"},
      {"say \"hi\"", "q\"uote", "# HELP m say \"hi\"", "m{l=\"q\\\"uote\"} 1"},
  };
  for (const auto& c : rows) {
    SCOPED_TRACE(c.help);
    registry r;
    r.add_gauge("m", c.help, {{"l", c.label_value}}).set(1);
    const auto text = to_prometheus(r.take());
    EXPECT_NE(text.find(c.expected_help_line + "\n"), std::string::npos) << text;
    EXPECT_NE(text.find(c.expected_series_line + "\n"), std::string::npos) << text;
  }
}

// Numbers read back as a scraper reads them (Go's strconv.ParseFloat, here strtod: both take
// +Inf, -Inf and NaN in any letter case; prometheus-cpp writes NaN as "Nan").
TEST(Telemetry, NumbersReadBackAsWritten) {
  const std::vector<double> values = {0,         1,        -2.5,      0.1,       1e-9,
                                      123456789, 1e15 + 1, 1.0 / 0.0, -1.0 / 0.0};
  for (double v : values) {
    registry r;
    r.add_gauge("g", "h").set(v);
    const auto text = to_prometheus(r.take());
    const auto families = parse_exposition(text);
    ASSERT_EQ(families.size(), 1U) << text;
    EXPECT_EQ(families[0].samples.at("g"), v) << text;
  }
  registry r;
  r.add_gauge("g", "h").set(std::numeric_limits<double>::quiet_NaN());
  const auto text = to_prometheus(r.take());
  EXPECT_TRUE(std::isnan(parse_exposition(text).at(0).samples.at("g"))) << text;
  expect_valid_exposition(text);
}

TEST(Telemetry, RegistrationErrorsAreProgrammingErrors) {
  struct row {
    const char* what;
    std::function<void(registry&)> act;
  };
  const std::vector<row> rows = {
      {"invalid metric name", [](registry& r) { r.add_counter("9lives", "h"); }},
      {"space in the name", [](registry& r) { r.add_counter("a b", "h"); }},
      {"invalid label name",
       [](registry& r) {
         r.add_gauge("g", "h", {{"a-b", "x"}});
       }},
      {"le is reserved",
       [](registry& r) {
         r.add_gauge("g", "h", {{"le", "x"}});
       }},
      {"colon in a label name",
       [](registry& r) {
         r.add_gauge("g", "h", {{"a:b", "x"}});
       }},
      {"another type",
       [](registry& r) {
         r.add_counter("x", "h");
         r.add_gauge("x", "h");
       }},
      {"another help",
       [](registry& r) {
         r.add_counter("x", "h");
         r.add_counter("x", "other");
       }},
      {"other buckets",
       [](registry& r) {
         r.add_histogram("x", "h", {1, 2});
         r.add_histogram("x", "h", {1, 3});
       }},
      {"descending buckets",
       [](registry& r) {
         r.add_histogram("x", "h", {2, 1});
       }},
      {"infinite bucket",
       [](registry& r) {
         r.add_histogram("x", "h", {1, 1.0 / 0.0});
       }},
  };
  for (const auto& c : rows) {
    SCOPED_TRACE(c.what);
    registry r;
    EXPECT_THROW(c.act(r), std::invalid_argument);
  }
}

TEST(Telemetry, RegisteringTwiceGivesTheSameSeries) {
  registry r;
  auto& a = r.add_counter("c_total", "h", {{"k", "v"}});
  auto& b = r.add_counter("c_total", "h", {{"k", "v"}});
  EXPECT_EQ(&a, &b);
  auto& other = r.add_counter("c_total", "h", {{"k", "w"}});
  EXPECT_NE(&a, &other);
  a.inc();
  b.inc(2);
  other.inc(-5);  // ignored: counters never go down
  const auto s = r.take();
  ASSERT_EQ(s.families.size(), 1u);
  EXPECT_EQ(s.find("c_total", {{"k", "v"}})->value, 3);
  EXPECT_EQ(s.find("c_total", {{"k", "w"}})->value, 0);
  EXPECT_EQ(s.find("missing"), nullptr);
}

TEST(Telemetry, HistogramBucketsIncludeTheirUpperBound) {
  struct row {
    double value;
    std::size_t bucket;  // index into {1, 2, +Inf}
  };
  const std::vector<row> rows = {{-1, 0}, {0, 0}, {1, 0}, {1.0000001, 1}, {2, 1}, {2.5, 2}};
  for (const auto& c : rows) {
    histogram h({1, 2});
    h.observe(c.value);
    const auto counts = h.bucket_counts();
    ASSERT_EQ(counts.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(counts[i], i == c.bucket ? 1u : 0u) << c.value;
    }
  }
}

TEST(Telemetry, QuantilesInterpolateInsideTheBucket) {
  series_snapshot h;
  h.bounds = {1, 2, 4};
  h.cumulative = {0, 10, 20, 20};  // 10 in (1, 2], 10 in (2, 4]
  h.count = 20;
  struct row {
    double q;
    double expected;
  };
  const std::vector<row> rows = {{0.0, 1.0}, {0.25, 1.5}, {0.5, 2.0}, {0.75, 3.0}, {1.0, 4.0}};
  for (const auto& c : rows) {
    EXPECT_DOUBLE_EQ(quantile(h, c.q), c.expected) << c.q;
  }
  // In the +Inf bucket: the highest finite bound; empty: 0.
  h.cumulative = {0, 0, 0, 5};
  h.count = 5;
  EXPECT_DOUBLE_EQ(quantile(h, 0.5), 4.0);
  EXPECT_DOUBLE_EQ(quantile(series_snapshot{}, 0.5), 0.0);
}

TEST(Telemetry, SummaryValuesNameEverySeries) {
  registry r;
  r.add_gauge("leap_queue_depth", "h", {{"stage", "compile"}}).set(4);
  r.add_counter("leap_generated_tokens_total", "h").inc(100);
  auto& h = r.add_histogram("leap_compile_seconds", "h", {1, 2});
  h.observe(0.5);
  h.observe(1.5);
  const auto values = summary_values(r.take(), "telemetry.");
  const std::map<std::string, double> expected = {
      {"telemetry.queue_depth.compile", 4},   {"telemetry.generated_tokens_total", 100},
      {"telemetry.compile_seconds.count", 2}, {"telemetry.compile_seconds.sum", 2},
      {"telemetry.compile_seconds.mean", 1},  {"telemetry.compile_seconds.p50", 1},
      {"telemetry.compile_seconds.p90", 1.8}, {"telemetry.compile_seconds.p99", 1.98},
  };
  ASSERT_EQ(values.size(), expected.size());
  for (const auto& [name, value] : expected) {
    ASSERT_TRUE(values.count(name)) << name;
    EXPECT_NEAR(values.at(name), value, 1e-12) << name;
  }
}

TEST(Telemetry, JsonCarriesTheSameNumbers) {
  registry r;
  r.add_gauge("g", "say \"x\"", {{"stage", "a\nb"}}).set(2);
  r.add_gauge("nan", "h").set(std::numeric_limits<double>::quiet_NaN());
  auto& h = r.add_histogram("h_seconds", "h", {1});
  h.observe(0.5);
  h.observe(3);
  EXPECT_EQ(to_json(r.take(7)),
            "{\"unix_ms\":7,\"metrics\":["
            "{\"name\":\"g\",\"help\":\"say \\\"x\\\"\",\"type\":\"gauge\",\"series\":["
            "{\"labels\":{\"stage\":\"a\\nb\"},\"value\":2}]},"
            "{\"name\":\"nan\",\"help\":\"h\",\"type\":\"gauge\",\"series\":["
            "{\"labels\":{},\"value\":null}]},"
            "{\"name\":\"h_seconds\",\"help\":\"h\",\"type\":\"histogram\",\"series\":["
            "{\"labels\":{},\"count\":2,\"sum\":3.5,\"buckets\":[{\"le\":1,\"count\":1},"
            "{\"le\":\"+Inf\",\"count\":2}],\"p50\":1,\"p90\":1,\"p99\":1}]}]}\n");
}

// The exposition format's grammar (0.0.4), as a scraper reads it: comment lines of HELP and TYPE,
// sample lines `name{labels} value`; every family's TYPE before its samples; histogram series with
// ascending, cumulative buckets ending at +Inf equal to _count.
void expect_valid_exposition(const std::string& text) {
  const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*)");
  const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram))");
  const std::regex sample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*",?)*\})? ([-+0-9.eE]+|\+Inf|-Inf|NaN|Nan))");
  std::map<std::string, std::string> types;
  std::istringstream in(text);
  ASSERT_FALSE(text.empty());
  ASSERT_EQ(text.back(), '\n');
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, help)) {
      continue;
    }
    if (std::regex_match(line, m, type)) {
      EXPECT_EQ(types.count(m[1]), 0u) << "TYPE twice: " << line;
      types[m[1]] = m[2];
      continue;
    }
    ASSERT_TRUE(std::regex_match(line, m, sample)) << "not a sample line: '" << line << "'";
    std::string family = m[1];
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (!types.count(family) && family.size() > s.size() &&
          family.compare(family.size() - s.size(), s.size(), s) == 0) {
        family = family.substr(0, family.size() - s.size());
      }
    }
    EXPECT_TRUE(types.count(family)) << "sample before its TYPE: " << line;
  }
}

TEST(Telemetry, RunMetricsRenderAsValidExposition) {
  registry r;
  run_telemetry t(r);
  t.compile_seconds.observe(1.2);
  t.generation_wait.observe(0.003);
  t.generated_tokens.inc(42);
  t.compile_queue.set(3);
  const auto text = to_prometheus(r.take());
  expect_valid_exposition(text);
  EXPECT_NE(text.find("leap_queue_depth{stage=\"compile\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("leap_compile_seconds_count 1\n"), std::string::npos);
  EXPECT_NE(text.find("leap_queue_wait_seconds_bucket{stage=\"generation\",le=\"0.005\"} 1\n"),
            std::string::npos);
  // Every named metric is registered, once.
  const auto names = metric_names();
  EXPECT_EQ(names.size(), r.take().families.size());
  for (const auto& n : names) {
    EXPECT_NE(text.find("# TYPE " + n + " "), std::string::npos) << n;
  }
}

TEST(Telemetry, ReplayTableAndCsvOfStepRecords) {
  step_record plain;  // a step stored without telemetry (an older run): left out
  plain.step = 0;
  plain.metrics = {{"acc_at_1", 0.5}};
  step_record live;
  live.step = 1;
  live.metrics = {{"acc_at_1", 0.5},
                  {"telemetry.turns_total.first", 8},
                  {"telemetry.turns_total.debug", 4},
                  {"telemetry.generated_tokens_total", 1234},
                  {"telemetry.compile_seconds.p50", 0.25}};
  EXPECT_EQ(format_telemetry_table({plain}), "");
  const auto table = format_telemetry_table({plain, live});
  std::istringstream lines(table);
  std::string title, header, row, extra;
  ASSERT_TRUE(std::getline(lines, title));
  ASSERT_TRUE(std::getline(lines, header));
  ASSERT_TRUE(std::getline(lines, row));
  EXPECT_FALSE(std::getline(lines, extra)) << table;
  EXPECT_NE(header.find("compile p50 s"), std::string::npos);
  // Step 2 (1-based): 12 turns, 1234 tokens, compile median 0.250 s; absent values are 0.
  EXPECT_EQ(row.substr(0, 6), "     2");
  EXPECT_NE(row.find("|    12 |"), std::string::npos) << row;
  EXPECT_NE(row.find("|   1234 |"), std::string::npos) << row;
  EXPECT_NE(row.find("0.250"), std::string::npos) << row;
  EXPECT_EQ(telemetry_csv({plain}), "step\n");
  EXPECT_EQ(telemetry_csv({plain, live}),
            "step,telemetry.compile_seconds.p50,telemetry.generated_tokens_total,"
            "telemetry.turns_total.debug,telemetry.turns_total.first\n"
            "1,0.25,1234,4,8\n");
}

TEST(Telemetry, ReadmeListsEveryMetric) {
  std::ifstream in(std::filesystem::path(LEAP_SOURCE_DIR) / "README.md");
  const std::string readme((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto begin = readme.find("<!-- metrics-reference:begin -->");
  const auto end = readme.find("<!-- metrics-reference:end -->");
  ASSERT_NE(begin, std::string::npos);
  ASSERT_NE(end, std::string::npos);
  const auto table = readme.substr(begin, end - begin);
  for (const auto& name : metric_names()) {
    EXPECT_NE(table.find("| `" + name + "` |"), std::string::npos) << name;
  }
  std::size_t rows = 0;
  for (std::size_t at = table.find("| `leap_"); at != std::string::npos;
       at = table.find("| `leap_", at + 1)) {
    ++rows;
  }
  EXPECT_EQ(rows, metric_names().size()) << "README lists a metric that is not registered";
}

TEST(Telemetry, ConcurrentUpdatesAreNotLost) {
  registry r;
  auto& c = r.add_counter("c_total", "h");
  auto& h = r.add_histogram("h_seconds", "h", {0.5});
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.inc();
        h.observe(i % 2 == 0 ? 0.25 : 1.0);
      }
    });
  }
  // Snapshots taken meanwhile are always self-consistent.
  for (int i = 0; i < 50; ++i) {
    const auto s = r.take();
    const auto* hs = s.find("h_seconds", {});
    EXPECT_EQ(hs->cumulative.back(), hs->count);
  }
  for (auto& t : threads) {
    t.join();
  }
  const auto s = r.take();
  EXPECT_EQ(s.find("c_total", {})->value, 40000);
  EXPECT_EQ(s.find("h_seconds", {})->count, 40000u);
  EXPECT_EQ(s.find("h_seconds", {})->cumulative[0], 20000u);
  EXPECT_DOUBLE_EQ(s.find("h_seconds", {})->sum, 20000 * 0.25 + 20000 * 1.0);
}

TEST(Telemetry, RateMeterIsPerSecondBetweenReadings) {
  rate_meter m;
  EXPECT_EQ(m.update(100, 10), 0.0);  // first reading
  EXPECT_DOUBLE_EQ(m.update(300, 12), 100.0);
  EXPECT_EQ(m.update(300, 12), 0.0);  // no time passed
  EXPECT_DOUBLE_EQ(m.update(400, 14), 50.0);
}

}  // namespace
}  // namespace leap::telemetry
