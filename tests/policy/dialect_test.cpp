// The per-flavour tables of detail/dialect.hpp and client.hpp's disk_sync_plan: every flavour has
// its dialect and its weight-sync preset. The rows are keyed by every value of the enums
// (enum_names::count), so a flavour added without its row here fails the test, as one added without
// its case in dialect.cpp fails -Wswitch. What each dialect writes and reads is
// client_protocol_test.cpp's fixture tables.
#include "policy/client/detail/dialect.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace leap::policy {
namespace {

std::vector<std::string> paths(const weight_sync_plan& plan) {
  std::vector<std::string> out;
  for (const auto& call : plan.calls) {
    out.push_back(call.method + " " + call.path + " " + call.body);
  }
  return out;
}

TEST(Dialect, EachWireFlavourHasItsOwn) {
  const std::map<wire_flavour, std::string> routes = {
      {wire_flavour::vllm, "/v1/completions"},
      {wire_flavour::sglang, "/generate"},
  };
  std::vector<const wire_dialect*> seen;
  for (std::size_t i = 0; i < enum_names::count<wire_flavour>(); ++i) {
    const auto flavour = static_cast<wire_flavour>(i);
    SCOPED_TRACE(to_string(flavour));
    ASSERT_TRUE(routes.contains(flavour)) << "no row for this flavour";
    const wire_dialect& d = dialect_of(flavour);
    EXPECT_EQ(d.flavour(), flavour);
    EXPECT_EQ(d.generate_route(), routes.at(flavour));
    for (const auto* other : seen) {
      EXPECT_NE(other, &d);
    }
    seen.push_back(&d);
    // The client's route follows the dialect unless the config names one.
    client_config config;
    config.flavour = flavour;
    EXPECT_EQ(generate_route(config), routes.at(flavour));
    config.generate_path = "/custom";
    EXPECT_EQ(generate_route(config), "/custom");
  }
}

TEST(Dialect, DiskSyncPresetPerServerFlavour) {
  const std::map<server_flavour, weight_sync_plan> presets = {
      {server_flavour::vllm, vllm_disk_plan()},
      {server_flavour::sglang, sglang_disk_plan()},
      // The project's server serves SGLang's load route (from the learner in memory in-process).
      {server_flavour::embedded, sglang_disk_plan()},
  };
  for (std::size_t i = 0; i < enum_names::count<server_flavour>(); ++i) {
    const auto flavour = static_cast<server_flavour>(i);
    SCOPED_TRACE(to_string(flavour));
    ASSERT_TRUE(presets.contains(flavour)) << "no row for this flavour";
    const auto plan = disk_sync_plan(flavour);
    const auto& expected = presets.at(flavour);
    EXPECT_EQ(paths(plan), paths(expected));
    EXPECT_EQ(plan.drain, expected.drain);
    EXPECT_EQ(plan.check_version, expected.check_version);
  }
  // A weight update in flight: each flavour's pause in abort mode, then its resume, no drain.
  const std::map<server_flavour, std::vector<std::string>> paused = {
      {server_flavour::vllm,
       {"/pause?mode=abort", "/collective_rpc", "/reset_prefix_cache", "/resume"}},
      {server_flavour::sglang,
       {"/pause_generation", "/update_weights_from_disk", "/flush_cache", "/continue_generation"}},
      {server_flavour::embedded,
       {"/pause_generation", "/update_weights_from_disk", "/flush_cache", "/continue_generation"}},
  };
  for (std::size_t i = 0; i < enum_names::count<server_flavour>(); ++i) {
    const auto flavour = static_cast<server_flavour>(i);
    SCOPED_TRACE(to_string(flavour));
    ASSERT_TRUE(paused.contains(flavour)) << "no row for this flavour";
    const auto plan = disk_sync_plan(flavour, true);
    std::vector<std::string> routes;
    for (const auto& call : plan.calls) {
      routes.push_back(call.path);
    }
    EXPECT_EQ(routes, paused.at(flavour));
    EXPECT_FALSE(plan.drain);
  }
}

// A server flavour's preset is the one of the server family whose load routes it has
// (reload_routes_of, beside its name in common/enums): the rows above are what that gives.
TEST(Dialect, DiskSyncPresetFollowsTheFlavoursReloadRoutes) {
  const std::map<wire_flavour, weight_sync_plan> by_routes = {
      {wire_flavour::vllm, vllm_disk_plan()},
      {wire_flavour::sglang, sglang_disk_plan()},
  };
  static_assert(reload_routes_of(server_flavour::vllm) == wire_flavour::vllm);
  static_assert(reload_routes_of(server_flavour::sglang) == wire_flavour::sglang);
  static_assert(reload_routes_of(server_flavour::embedded) == wire_flavour::sglang);
  for (const server_flavour flavour : enum_names::values<server_flavour>()) {
    SCOPED_TRACE(to_string(flavour));
    ASSERT_TRUE(by_routes.contains(reload_routes_of(flavour)));
    EXPECT_EQ(paths(disk_sync_plan(flavour)), paths(by_routes.at(reload_routes_of(flavour))));
  }
}

}  // namespace
}  // namespace leap::policy
