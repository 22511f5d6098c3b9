// The shared vocabulary's names are written to RocksDB exports, JSON bodies and config files: these
// tables pin every name, so that a renamed value fails here before it changes a stored record or a
// wire format.
#include "common/enums/finish_reason.hpp"
#include "common/enums/log_verbosity.hpp"
#include "common/enums/loss_aggregation.hpp"
#include "common/enums/server_flavour.hpp"
#include "common/enums/task_kind.hpp"
#include "common/enums/verdict_category.hpp"
#include "common/enums/wire_flavour.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace leap {
namespace {

template <class E>
struct name_case {
  E value;
  std::string name;
};

template <class E, class Parse>
void expect_names(const std::vector<name_case<E>>& cases, Parse parse, const std::string& what) {
  ASSERT_EQ(enum_names::count<E>(), cases.size()) << what << ": a value without a pinned name";
  std::string valid;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    EXPECT_EQ(static_cast<std::size_t>(c.value), i) << c.name << ": values are dense from 0";
    EXPECT_EQ(to_string(c.value), c.name);
    const auto parsed = parse(c.name);
    ASSERT_TRUE(parsed.ok()) << parsed.err().message;
    EXPECT_EQ(*parsed, c.value);
    valid += (i == 0 ? "" : ", ") + c.name;
  }
  for (const std::string bad : {"", "STOP", "Pass", "unknown(9)", "x"}) {
    const auto parsed = parse(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.err().message, "unknown " + what + " '" + bad + "' (valid: " + valid + ")");
  }
  // A byte outside the enum (a corrupt record) still prints.
  EXPECT_EQ(to_string(static_cast<E>(200)), "unknown(200)");
}

TEST(Enums, FinishReasonNames) {
  expect_names<finish_reason>({{finish_reason::stop, "stop"},
                               {finish_reason::length, "length"},
                               {finish_reason::abort, "abort"},
                               {finish_reason::error, "error"},
                               {finish_reason::other, "other"}},
                              parse_finish_reason, "finish reason");
}

TEST(Enums, VerdictCategoryNames) {
  expect_names<verdict_category>({{verdict_category::pass, "pass"},
                                  {verdict_category::format, "format"},
                                  {verdict_category::compile, "compile"},
                                  {verdict_category::forbidden, "forbidden"},
                                  {verdict_category::runtime, "runtime"},
                                  {verdict_category::timeout, "timeout"},
                                  {verdict_category::wrong_answer, "wrong_answer"}},
                                 parse_verdict_category, "verdict");
}

TEST(Enums, LogVerbosityNames) {
  expect_names<log_verbosity>({{log_verbosity::trace, "trace"},
                               {log_verbosity::debug, "debug"},
                               {log_verbosity::info, "info"},
                               {log_verbosity::warn, "warn"},
                               {log_verbosity::error, "error"},
                               {log_verbosity::off, "off"}},
                              parse_log_verbosity, "log level");
}

TEST(Enums, LossAggregationNames) {
  expect_names<loss_aggregation>({{loss_aggregation::token_mean, "token_mean"},
                                  {loss_aggregation::seq_mean_token_mean, "seq_mean_token_mean"},
                                  {loss_aggregation::seq_mean_token_sum, "seq_mean_token_sum"}},
                                 parse_loss_aggregation, "loss aggregation");
}

TEST(Enums, TaskKindNames) {
  expect_names<task_kind>({{task_kind::cuda, "cuda"},
                           {task_kind::cpp, "cpp"},
                           {task_kind::python, "python"},
                           {task_kind::kernelbench, "kernelbench"},
                           {task_kind::digits, "digits"}},
                          parse_task_kind, "task kind");
}

TEST(Enums, WireFlavourNames) {
  expect_names<wire_flavour>({{wire_flavour::vllm, "vllm"}, {wire_flavour::sglang, "sglang"}},
                             parse_wire_flavour, "wire flavour");
}

TEST(Enums, ServerFlavourNamesAndDialects) {
  expect_names<server_flavour>({{server_flavour::vllm, "vllm"},
                                {server_flavour::sglang, "sglang"},
                                {server_flavour::embedded, "embedded"}},
                               parse_server_flavour, "server flavour");
  // run_command mapped every flavour but sglang to vLLM's dialect; wire_of keeps that.
  static_assert(wire_of(server_flavour::vllm) == wire_flavour::vllm);
  static_assert(wire_of(server_flavour::sglang) == wire_flavour::sglang);
  static_assert(wire_of(server_flavour::embedded) == wire_flavour::vllm);
}

}  // namespace
}  // namespace leap
