// The shared vocabulary's names are written to RocksDB exports, JSON bodies and config files: these
// tables pin every name, so that a renamed value fails here before it changes a stored record or a
// wire format.
#include "common/enums/advantage_kind.hpp"
#include "common/enums/finish_reason.hpp"
#include "common/enums/gate_decision.hpp"
#include "common/enums/gate_policy.hpp"
#include "common/enums/learner_kind.hpp"
#include "common/enums/log_verbosity.hpp"
#include "common/enums/loss_aggregation.hpp"
#include "common/enums/offpolicy_mode.hpp"
#include "common/enums/optimise_decision.hpp"
#include "common/enums/outcome_kind.hpp"
#include "common/enums/profile_mode.hpp"
#include "common/enums/profile_tool.hpp"
#include "common/enums/reward_kind.hpp"
#include "common/enums/run_status.hpp"
#include "common/enums/schedule_mode.hpp"
#include "common/enums/server_flavour.hpp"
#include "common/enums/split_kind.hpp"
#include "common/enums/task_kind.hpp"
#include "common/enums/threshold_unit.hpp"
#include "common/enums/transfer_backend.hpp"
#include "common/enums/verdict_category.hpp"
#include "common/enums/weight_sync_method.hpp"
#include "common/enums/wire_flavour.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace leap {
namespace {

template <class E>
struct name_case {
  E value;
  std::string name;
};

// Every value round-trips through its name, values() walks them in declaration order, and names
// that are near misses (`also_bad`: other spellings a user might type) are refused with the list.
template <class E, class Parse>
void expect_names(const std::vector<name_case<E>>& cases, Parse parse, const std::string& what,
                  const std::vector<std::string>& also_bad = {}) {
  ASSERT_EQ(enum_names::count<E>(), cases.size()) << what << ": a value without a pinned name";
  std::string valid;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    EXPECT_EQ(static_cast<std::size_t>(c.value), i) << c.name << ": values are dense from 0";
    EXPECT_EQ(to_string(c.value), c.name);
    const auto parsed = parse(c.name);
    ASSERT_TRUE(parsed.ok()) << parsed.err().message;
    EXPECT_EQ(*parsed, c.value);
    EXPECT_EQ(enum_names::values<E>()[i], c.value) << c.name;
    valid += (i == 0 ? "" : ", ") + c.name;
  }
  EXPECT_EQ(enum_names::valid_names<E>(), valid);
  std::vector<std::string> bad_names = {"", "STOP", "Pass", "unknown(9)", "x"};
  bad_names.insert(bad_names.end(), also_bad.begin(), also_bad.end());
  for (const std::string& bad : bad_names) {
    const auto parsed = parse(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.err().message, "unknown " + what + " '" + bad + "' (valid: " + valid + ")");
  }
  // A byte outside the enum (a corrupt record) still prints.
  EXPECT_EQ(to_string(static_cast<E>(200)), "unknown(200)");
}

// The same for an enum read only through enum_names (a config key's choice_field, a CLI option),
// with no parser of its own.
template <class E>
void expect_parsed_names(const std::vector<name_case<E>>& cases, const std::string& what,
                         const std::vector<std::string>& also_bad = {}) {
  expect_names<E>(
      cases, [&](std::string_view name) { return enum_names::parse<E>(name, what); }, what,
      also_bad);
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
  expect_parsed_names<log_verbosity>({{log_verbosity::trace, "trace"},
                                      {log_verbosity::debug, "debug"},
                                      {log_verbosity::info, "info"},
                                      {log_verbosity::warn, "warn"},
                                      {log_verbosity::error, "error"},
                                      {log_verbosity::off, "off"}},
                                     "log level");
}

TEST(Enums, LossAggregationNames) {
  expect_parsed_names<loss_aggregation>(
      {{loss_aggregation::token_mean, "token_mean"},
       {loss_aggregation::seq_mean_token_mean, "seq_mean_token_mean"},
       {loss_aggregation::seq_mean_token_sum, "seq_mean_token_sum"}},
      "loss aggregation");
}

TEST(Enums, ProfileModeNames) {
  expect_names<profile_mode>({{profile_mode::off, "off"},
                              {profile_mode::passing, "passing"},
                              {profile_mode::all_compiled, "all_compiled"}},
                             parse_profile_mode, "profile mode");
}

TEST(Enums, ProfileToolNames) {
  expect_parsed_names<profile_tool>({{profile_tool::automatic, "auto"},
                                     {profile_tool::ncu, "ncu"},
                                     {profile_tool::events, "events"}},
                                    "profile tool");
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
  expect_parsed_names<server_flavour>({{server_flavour::vllm, "vllm"},
                                       {server_flavour::sglang, "sglang"},
                                       {server_flavour::embedded, "embedded"}},
                                      "server flavour");
  // run_command mapped every flavour but sglang to vLLM's dialect; wire_of keeps that.
  static_assert(wire_of(server_flavour::vllm) == wire_flavour::vllm);
  static_assert(wire_of(server_flavour::sglang) == wire_flavour::sglang);
  static_assert(wire_of(server_flavour::embedded) == wire_flavour::vllm);
}

// ---- the orchestrator's vocabulary (issue 32): config keys, replay options, stored records ----
// The near misses are the ones the per-module tests checked before the names moved here.

TEST(Enums, GatePolicyNames) {
  expect_parsed_names<gate_policy>({{gate_policy::none, "none"},
                                    {gate_policy::full, "full"},
                                    {gate_policy::dcp, "dcp"},
                                    {gate_policy::dcp_adaptive, "dcp_adaptive"}},
                                   "gate policy",
                                   {"DCP", "dcp ", "adaptive", "dcp-adaptive", "unknown"});
}

TEST(Enums, ThresholdUnitNames) {
  expect_parsed_names<threshold_unit>(
      {{threshold_unit::count, "count"}, {threshold_unit::fraction, "fraction"}}, "threshold unit",
      {"counts", "Fraction", "percent"});
}

TEST(Enums, GateDecisionNames) {
  expect_names<gate_decision>({{gate_decision::closed_easy, "closed_easy"},
                               {gate_decision::closed_hopeless, "closed_hopeless"},
                               {gate_decision::closed_no_debug, "closed_no_debug"},
                               {gate_decision::open, "open"}},
                              parse_gate_decision, "gate decision", {"closed", "OPEN", "easy"});
}

TEST(Enums, OptimiseDecisionNames) {
  expect_names<optimise_decision>({{optimise_decision::off, "off"},
                                   {optimise_decision::closed_no_pass, "closed_no_pass"},
                                   {optimise_decision::closed_untimed, "closed_untimed"},
                                   {optimise_decision::closed_fast, "closed_fast"},
                                   {optimise_decision::closed_budget, "closed_budget"},
                                   {optimise_decision::open, "open"}},
                                  parse_optimise_decision, "optimise decision", {"OPEN"});
}

TEST(Enums, RewardKindNames) {
  // static_scalar is spelled "static" (a C++ keyword), and only that way.
  expect_parsed_names<reward_kind>({{reward_kind::rank, "rank"},
                                    {reward_kind::static_scalar, "static"},
                                    {reward_kind::binary, "binary"},
                                    {reward_kind::rank_speed, "rank_speed"},
                                    {reward_kind::prime_echo, "prime_echo"}},
                                   "reward kind", {"static_scalar", "Rank", "binary ", "scalar"});
}

TEST(Enums, AdvantageKindNames) {
  expect_parsed_names<advantage_kind>({{advantage_kind::grpo, "grpo"},
                                       {advantage_kind::mean_only, "mean_only"},
                                       {advantage_kind::none, "none"}},
                                      "advantage kind", {"GRPO", "mean-only", "dr_grpo", "none "});
}

TEST(Enums, OutcomeKindNames) {
  expect_parsed_names<outcome_kind>({{outcome_kind::first_turn_pass, "first_turn_pass"},
                                     {outcome_kind::debug_pass, "debug_pass"},
                                     {outcome_kind::failure, "failure"}},
                                    "outcome kind", {"pass", "Failure", "debug"});
}

TEST(Enums, SplitKindNames) {
  expect_names<split_kind>({{split_kind::train, "train"}, {split_kind::validation, "validation"}},
                           parse_split_kind, "split", {"Train", "valid"});
}

TEST(Enums, RunStatusNames) {
  expect_parsed_names<run_status>({{run_status::running, "running"},
                                   {run_status::finished, "finished"},
                                   {run_status::failed, "failed"},
                                   {run_status::interrupted, "interrupted"}},
                                  "run status", {"Running", "done"});
}

TEST(Enums, OffpolicyModeNames) {
  expect_parsed_names<offpolicy_mode>({{offpolicy_mode::off, "off"},
                                       {offpolicy_mode::drop_sequence, "drop_sequence"},
                                       {offpolicy_mode::truncate_token, "truncate_token"},
                                       {offpolicy_mode::mask_token, "mask_token"}},
                                      "off-policy mode", {"mask", "drop-sequence"});
}

TEST(Enums, LearnerKindNames) {
  expect_parsed_names<learner_kind>(
      {{learner_kind::record, "record"}, {learner_kind::torch, "torch"}}, "learner kind",
      {"Torch", "libtorch"});
}

TEST(Enums, ScheduleModeNames) {
  expect_parsed_names<schedule_mode>(
      {{schedule_mode::streaming, "streaming"}, {schedule_mode::barrier, "barrier"}},
      "schedule mode", {"stream", "Barrier"});
}

// policy.weight_sync: "auto" is the canonical name of automatic; the config alone reads "" (the
// spelling of configs from before the enum) as auto, the table refuses it like any other name.
TEST(Enums, WeightSyncMethodNames) {
  expect_names<weight_sync_method>(
      {{weight_sync_method::automatic, "auto"},
       {weight_sync_method::disk, "disk"},
       {weight_sync_method::in_memory, "in_memory"},
       {weight_sync_method::nccl, "nccl"},
       {weight_sync_method::ipc, "ipc"}},
      [](std::string_view name) {
        return enum_names::parse<weight_sync_method>(name, "weight sync method");
      },
      "weight sync method", {"automatic", "in-memory", "memory", "NCCL"});
}

// vLLM's --weight-transfer-config '{"backend": B}': the names are vLLM's.
TEST(Enums, TransferBackendNamesAndWhichStageTensors) {
  expect_names<transfer_backend>({{transfer_backend::disk, "disk"},
                                  {transfer_backend::nccl, "nccl"},
                                  {transfer_backend::ipc, "ipc"}},
                                 parse_transfer_backend, "weight-transfer backend",
                                 {"auto", "in_memory", "cuda_ipc"});
  EXPECT_FALSE(stages_tensors(transfer_backend::disk));
  EXPECT_TRUE(stages_tensors(transfer_backend::nccl));
  EXPECT_TRUE(stages_tensors(transfer_backend::ipc));
}

// sandbox/suite/validate_suite.py is a standalone author's tool (it runs without a build), so it
// keeps its own KINDS and EXT; this pins them to task_kind's table and to the suite's folders.
std::vector<std::string> quoted_strings(const std::string& text) {
  std::vector<std::string> out;
  const std::regex quoted("\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), quoted);
       it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1].str());
  }
  return out;
}

TEST(Enums, SuiteValidatorKindsAreTaskKindsAndTheSuitesFolders) {
  const std::filesystem::path suite = std::filesystem::path(LEAP_SOURCE_DIR) / "sandbox" / "suite";
  std::ifstream in(suite / "validate_suite.py");
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const std::string source = text.str();
  std::smatch kinds_line;
  ASSERT_TRUE(std::regex_search(source, kinds_line, std::regex("\nKINDS = \\(([^)]*)\\)")));
  const auto kinds = quoted_strings(kinds_line[1].str());
  ASSERT_FALSE(kinds.empty());
  for (const auto& kind : kinds) {
    const auto parsed = parse_task_kind(kind);
    EXPECT_TRUE(parsed.ok()) << "validate_suite.py's KINDS: " << parsed.err().message;
  }
  std::smatch ext_line;
  ASSERT_TRUE(std::regex_search(source, ext_line, std::regex("\nEXT = \\{([^}]*)\\}")));
  std::set<std::string> ext_kinds;
  const auto ext_strings = quoted_strings(ext_line[1].str());  // "cuda", ".cu", "cpp", ...
  for (std::size_t i = 0; i < ext_strings.size(); i += 2) {
    ext_kinds.insert(ext_strings[i]);
  }
  const std::set<std::string> kind_set(kinds.begin(), kinds.end());
  EXPECT_EQ(ext_kinds, kind_set) << "validate_suite.py: EXT must give each of KINDS its extension";
  std::set<std::string> folders;
  for (const auto& entry : std::filesystem::directory_iterator(suite)) {
    if (entry.is_directory()) {
      folders.insert(entry.path().filename().string());
    }
  }
  EXPECT_EQ(folders, kind_set) << "the suite's folders are its kinds";
}

}  // namespace
}  // namespace leap
