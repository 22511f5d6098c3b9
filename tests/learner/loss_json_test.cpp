// The loss options' JSON (the data-parallel learner's wire), derived from their one field list.
#include "learner/detail/loss_json.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace leap::learner {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using json = nlohmann::json;

// Every member away from its default, so that a member the list leaves out comes back as its
// default and the round trip differs.
loss_options every_member_changed() {
  return {.clip_low = 0.15,
          .clip_high = 0.31,
          .kl_coef = 0.02,
          .aggregation = loss_aggregation::seq_mean_token_sum,
          .offpolicy = {
              .mode = offpolicy_mode::truncate_token, .low = 0.3, .high = 4.5, .max_staleness = 7}};
}

// The listed members (nested ones as "offpolicy.low") whose values in `a` and `b` are equal.
void collect_equal(const json& a, const json& b, const std::string& path,
                   std::vector<std::string>& out) {
  for (auto it = a.begin(); it != a.end(); ++it) {
    const std::string name = path + it.key();
    if (it->is_object()) {
      collect_equal(*it, b.at(it.key()), name + ".", out);
    } else if (*it == b.at(it.key())) {
      out.push_back(name);
    }
  }
}

TEST(LossJson, EveryMemberSurvivesTheRoundTrip) {
  const auto options = every_member_changed();
  std::vector<std::string> unchanged;
  collect_equal(detail::loss_options_json(options), detail::loss_options_json({}), "", unchanged);
  EXPECT_THAT(unchanged, IsEmpty()) << "every_member_changed() must change every listed member";

  const json j = detail::loss_options_json(options);
  auto back = detail::loss_options_from_json(json::parse(j.dump()));
  ASSERT_TRUE(back.ok()) << back.err().message;
  EXPECT_TRUE(*back == options) << "sent " << j.dump() << ", got back "
                                << detail::loss_options_json(*back).dump();
  EXPECT_FALSE(*back == loss_options{});
}

// The wire's text, pinned as the options' own walk wrote it before they used the records' field
// list (a build of that code printed these): every rank must read what rank 0 writes. nlohmann
// orders an object's keys by name, so the list's order does not show here.
TEST(LossJson, TheWireTextIsPinned) {
  EXPECT_EQ(detail::loss_options_json(every_member_changed()).dump(),
            R"({"aggregation":"seq_mean_token_sum","clip_high":0.31,"clip_low":0.15,)"
            R"("kl_coef":0.02,"offpolicy":{"high":4.5,"low":0.3,"max_staleness":7,)"
            R"("mode":"truncate_token"}})");
  EXPECT_EQ(detail::loss_options_json({}).dump(),
            R"({"aggregation":"seq_mean_token_mean","clip_high":0.28,"clip_low":0.2,"kl_coef":0.0,)"
            R"("offpolicy":{"high":2.0,"low":0.5,"max_staleness":-1,"mode":"off"}})");
}

TEST(LossJson, EnumsTravelByTheirNames) {
  const json j = detail::loss_options_json(every_member_changed());
  EXPECT_EQ(j.at("aggregation"), "seq_mean_token_sum");
  EXPECT_EQ(j.at("offpolicy").at("mode"), "truncate_token");
  EXPECT_EQ(j.at("offpolicy").at("max_staleness"), 7);
}

TEST(LossJson, ABrokenMessageNamesTheMember) {
  struct test_case {
    std::string name;
    std::function<void(json&)> edit;
    std::string expected;
  };
  const std::vector<test_case> cases = {
      {"missing", [](json& j) { j.at("offpolicy").erase("high"); }, "offpolicy.high: missing"},
      {"not_a_number", [](json& j) { j["clip_low"] = "0.2"; },
       "clip_low: expected a number, got \"0.2\""},
      {"unknown_name", [](json& j) { j["offpolicy"]["mode"] = "drop"; },
       "offpolicy.mode: unknown name 'drop' (valid: off, drop_sequence, truncate_token, "
       "mask_token)"},
      {"enum_as_number", [](json& j) { j["aggregation"] = 1; },
       "aggregation: expected a name, got 1"},
      {"fraction_as_integer", [](json& j) { j["offpolicy"]["max_staleness"] = 1.5; },
       "offpolicy.max_staleness: expected an integer, got 1.5"},
      {"integer_out_of_range", [](json& j) { j["offpolicy"]["max_staleness"] = 3000000000LL; },
       "offpolicy.max_staleness: expected an integer in its type's range, got 3000000000"},
      {"unsigned_out_of_range",
       [](json& j) { j["offpolicy"]["max_staleness"] = 18446744073709551615ULL; },
       "offpolicy.max_staleness: expected an integer in its type's range"},
      {"not_an_object", [](json& j) { j["offpolicy"] = json::array(); },
       "offpolicy: expected an object, got []"},
      {"root_not_an_object", [](json& j) { j = 3; }, "the loss options: expected an object, got 3"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    json j = detail::loss_options_json(every_member_changed());
    c.edit(j);
    auto back = detail::loss_options_from_json(j);
    ASSERT_FALSE(back.ok());
    EXPECT_THAT(back.err().message, HasSubstr(c.expected));
  }
}

}  // namespace
}  // namespace leap::learner
