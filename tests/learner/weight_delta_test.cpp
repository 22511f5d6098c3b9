// Delta weight sync between a float32 learner (real optimizer steps) and bf16 servers: a delta
// applied gives bit-identical weights to a full sync, an unchanged model sends nothing, and a
// server that missed a delta (or holds other weights) refuses the next one and keeps its weights.
#include "learner/weight_delta.hpp"

#include "learner/trainer.hpp"
#include "tests/learner/test_support.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace leap::learner {
namespace {

using ::testing::HasSubstr;
using testing::scratch_dir;

// Every parameter's bytes, by name.
std::map<std::string, std::vector<std::uint8_t>> bytes_of(const policy& p) {
  std::map<std::string, std::vector<std::uint8_t>> out;
  for (const auto& name : p.parameter_names()) {
    auto t = p.parameter(name);
    EXPECT_TRUE(t.ok()) << name;
    if (t.ok()) {
      out[name] = t->data;
    }
  }
  return out;
}

// A bf16 server holding `source`'s weights, as a full sync through disk gives it.
policy bf16_server(const policy& source, const scratch_dir& dir, const std::string& name) {
  EXPECT_TRUE(source.save(dir.sub(name), "bfloat16").ok());
  policy_options o;
  o.dtype = "bfloat16";
  auto p = policy::load(dir.sub(name), o);
  EXPECT_TRUE(p.ok()) << p.err().message;
  return std::move(*p);
}

trainer make_trainer() {
  auto p = policy::create_random(testing::tiny_qwen2(), 7);
  EXPECT_TRUE(p.ok());
  trainer_options options;
  options.optimizer.lr = 1e-5;
  auto t = trainer::create(std::move(*p), options);
  EXPECT_TRUE(t.ok()) << t.err().message;
  return std::move(*t);
}

TEST(WeightDelta, DeltasAfterOptimizerStepsEqualAFullSyncBitForBit) {
  scratch_dir dir;
  auto t = make_trainer();
  const auto batch = testing::scored_batch(t.current_policy(), {.count = 4, .seed = 3});
  policy by_delta = bf16_server(t.current_policy(), dir, "served");
  policy by_full = bf16_server(t.current_policy(), dir, "served_full");
  weight_delta_sender sender("bfloat16");
  ASSERT_TRUE(sender.reset(t.current_policy(), 0).ok());
  std::int64_t changed_elements = 0;
  for (std::int64_t version = 1; version <= 3; ++version) {
    ASSERT_TRUE(t.update(batch).ok());
    const std::string folder = dir.sub("delta" + std::to_string(version));
    auto stats = sender.write_delta(t.current_policy(), version, folder);
    ASSERT_TRUE(stats.ok()) << stats.err().message;
    auto header = read_weight_delta_header(folder);
    ASSERT_TRUE(header.ok()) << header.err().message;
    EXPECT_EQ(header->base_version, version - 1);
    EXPECT_EQ(header->version, version);
    EXPECT_EQ(header->dtype, "bfloat16");
    EXPECT_GT(stats->changed_elements, 0) << "an optimizer step moved no bf16 weight";
    EXPECT_LT(stats->bytes, stats->full_bytes) << "version " << version;
    changed_elements += stats->changed_elements;
    auto applied = apply_weight_delta(by_delta, folder);
    ASSERT_TRUE(applied.ok()) << applied.err().message;
    ASSERT_TRUE(sender.commit().ok());
    ASSERT_TRUE(by_full.copy_weights_from(t.current_policy()).ok());
    EXPECT_EQ(bytes_of(by_delta), bytes_of(by_full)) << "version " << version;
  }
  EXPECT_EQ(sender.base_version(), 3);
  EXPECT_GT(changed_elements, 0);
}

TEST(WeightDelta, AnUnchangedModelSendsNothing) {
  scratch_dir dir;
  auto t = make_trainer();
  policy served = bf16_server(t.current_policy(), dir, "served");
  const auto before = bytes_of(served);
  weight_delta_sender sender("bfloat16");
  ASSERT_TRUE(sender.reset(t.current_policy(), 4).ok());
  auto stats = sender.write_delta(t.current_policy(), 5, dir.sub("delta"));
  ASSERT_TRUE(stats.ok()) << stats.err().message;
  EXPECT_EQ(stats->changed_tensors, 0);
  EXPECT_EQ(stats->changed_elements, 0);
  EXPECT_EQ(stats->bytes, 0);
  EXPECT_GT(stats->full_bytes, 0);
  std::uintmax_t on_disk = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.sub("delta"))) {
    on_disk += e.file_size();
  }
  EXPECT_LT(on_disk, 1024U) << "a manifest and an empty tensor file";
  ASSERT_TRUE(apply_weight_delta(served, dir.sub("delta")).ok());
  EXPECT_EQ(bytes_of(served), before);
}

TEST(WeightDelta, AServerThatMissedADeltaRefusesTheNextAndKeepsItsWeights) {
  scratch_dir dir;
  auto t = make_trainer();
  const auto batch = testing::scored_batch(t.current_policy(), {.count = 4, .seed = 5});
  policy kept_up = bf16_server(t.current_policy(), dir, "a");
  policy missed = bf16_server(t.current_policy(), dir, "b");
  weight_delta_sender sender("bfloat16");
  ASSERT_TRUE(sender.reset(t.current_policy(), 0).ok());

  ASSERT_TRUE(t.update(batch).ok());
  ASSERT_TRUE(sender.write_delta(t.current_policy(), 1, dir.sub("d1")).ok());
  ASSERT_TRUE(apply_weight_delta(kept_up, dir.sub("d1")).ok());  // `missed` never gets it
  ASSERT_TRUE(sender.commit().ok());

  ASSERT_TRUE(t.update(batch).ok());
  auto stats = sender.write_delta(t.current_policy(), 2, dir.sub("d2"));
  ASSERT_TRUE(stats.ok());
  const auto before = bytes_of(missed);
  auto refused = apply_weight_delta(missed, dir.sub("d2"));
  ASSERT_FALSE(refused.ok()) << "a delta on the wrong base was applied";
  EXPECT_THAT(refused.err().message, HasSubstr("checksum"));
  EXPECT_THAT(refused.err().message, HasSubstr("the weights are unchanged"));
  EXPECT_EQ(bytes_of(missed), before);
  ASSERT_TRUE(apply_weight_delta(kept_up, dir.sub("d2")).ok());

  // The fallback: a full sync, then deltas again from the new base.
  sender.forget();
  EXPECT_FALSE(sender.base_version().has_value());
  ASSERT_TRUE(missed.copy_weights_from(t.current_policy()).ok());
  ASSERT_TRUE(sender.reset(t.current_policy(), 2).ok());
  ASSERT_TRUE(t.update(batch).ok());
  ASSERT_TRUE(sender.write_delta(t.current_policy(), 3, dir.sub("d3")).ok());
  ASSERT_TRUE(apply_weight_delta(missed, dir.sub("d3")).ok());
  ASSERT_TRUE(apply_weight_delta(kept_up, dir.sub("d3")).ok());
  EXPECT_EQ(bytes_of(missed), bytes_of(kept_up));
}

TEST(WeightDelta, RefusesADeltaInAnotherDtypeAndAWriteWithoutBase) {
  scratch_dir dir;
  auto t = make_trainer();
  weight_delta_sender sender("bfloat16");
  auto no_base = sender.write_delta(t.current_policy(), 1, dir.sub("d"));
  ASSERT_FALSE(no_base.ok());
  EXPECT_THAT(no_base.err().message, HasSubstr("sync in full first"));
  ASSERT_TRUE(sender.reset(t.current_policy(), 0).ok());
  ASSERT_TRUE(sender.write_delta(t.current_policy(), 1, dir.sub("d")).ok());
  // A float32 server: the sender's dtype is not the served one.
  ASSERT_TRUE(t.current_policy().save(dir.sub("f32")).ok());
  auto f32 = policy::load(dir.sub("f32"));
  ASSERT_TRUE(f32.ok());
  auto refused = apply_weight_delta(*f32, dir.sub("d"));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.err().message, HasSubstr("the sender's dtype must be the served one"));
}

}  // namespace
}  // namespace leap::learner
