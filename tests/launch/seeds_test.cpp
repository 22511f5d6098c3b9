// `leap run --seeds`'s rules (tools/launch/seeds.cpp): the seed list, each seed's folder and
// config (the seed stored, paths inside the run folder moved with it, the rest the config's), the
// checked run of a seed (its stored text reads the seed back), and the finished check a second
// launch uses to skip a seed, against a real RocksDB store.
#include "tests/actors/test_support.hpp"
#include "tools/launch/launch.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace leap::launch {
namespace {

namespace fs = std::filesystem;
using actors::testing::temp_dir;

TEST(Seeds, ListsRangesAndMixesInTheOrderGiven) {
  struct row {
    std::string text;
    std::vector<std::uint64_t> expected;
  };
  const std::vector<row> rows = {
      {"1,2,3", {1, 2, 3}}, {"1-3", {1, 2, 3}},      {"7", {7}},
      {"3,1", {3, 1}},      {"1-3,7", {1, 2, 3, 7}}, {"0-0", {0}},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.text);
    auto got = parse_seeds(r.text);
    ASSERT_TRUE(got) << got.err().message;
    EXPECT_EQ(*got, r.expected);
  }
}

TEST(Seeds, RefusesWhatIsNotASeedList) {
  struct row {
    std::string text;
    std::string says;
  };
  const std::vector<row> rows = {
      {"", "empty"},
      {"1,,2", "an empty item"},
      {"1,", "an empty item"},
      {"a", "'a' is not a seed"},
      {"-1", "'-1' is not a seed"},
      {"1-", "'1-' is not a seed"},
      {"3-1", "ends below its start"},
      {"1,2,1", "seed 1 is given twice"},
      {"1-3,2", "seed 2 is given twice"},
      {"1-5000", "more than 1000 seeds"},
      {"1.5", "'1.5' is not a seed"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.text);
    auto got = parse_seeds(r.text);
    ASSERT_FALSE(got);
    EXPECT_NE(got.err().message.find(r.says), std::string::npos) << got.err().message;
    EXPECT_EQ(got.err().message.rfind("--seeds", 0), 0u) << got.err().message;
  }
}

TEST(Seeds, EachSeedRunsInItsFolderWithThePathsInsideTheRunFolderMoved) {
  experiment_config base;
  base.experiment.name = "digits";
  base.experiment.seed = 1;
  base.experiment.run_dir = "runs/digits";
  base.learner.model_path = "runs/digits/model";
  base.learner.checkpoint_dir = "./runs/digits/ckpt/";
  base.policy.model = "runs/digits/model";
  base.policy.tokenizer = "models/tok";           // outside the run folder: shared
  base.verifier.cache_dir = "runs/digits-cache";  // a sibling, not inside
  base.data.train = "runs/digits.jsonl";

  const auto c = seed_config(base, 2);
  EXPECT_EQ(seed_run_dir("runs/digits", 2), "runs/digits/seed-2");
  EXPECT_EQ(c.experiment.seed, 2u);
  EXPECT_EQ(c.experiment.run_dir, "runs/digits/seed-2");
  EXPECT_EQ(c.experiment.name, "digits");  // one group in `leap report`
  EXPECT_EQ(c.learner.model_path, "runs/digits/seed-2/model");
  EXPECT_EQ(c.learner.checkpoint_dir, "runs/digits/seed-2/ckpt/");
  EXPECT_EQ(c.policy.model, "runs/digits/seed-2/model");
  EXPECT_EQ(c.policy.tokenizer, "models/tok");
  EXPECT_EQ(c.verifier.cache_dir, "runs/digits-cache");
  EXPECT_EQ(c.data.train, "runs/digits.jsonl");
  // Nothing else changes.
  auto back = c;
  back.experiment.seed = base.experiment.seed;
  back.experiment.run_dir = base.experiment.run_dir;
  back.learner.model_path = base.learner.model_path;
  back.learner.checkpoint_dir = base.learner.checkpoint_dir;
  back.policy.model = base.policy.model;
  EXPECT_TRUE(back == base);

  // An absolute run folder moves absolute paths inside it; an empty path stays empty.
  experiment_config abs = base;
  abs.experiment.run_dir = "/data/runs/d";
  abs.learner.model_path = "/data/runs/d/m";
  abs.learner.checkpoint_dir = "";
  const auto a = seed_config(abs, 10);
  EXPECT_EQ(a.learner.model_path, "/data/runs/d/seed-10/m");
  EXPECT_EQ(a.learner.checkpoint_dir, "");
}

TEST(Seeds, TheCheckedRunOfASeedStoresItsSeedAndFolder) {
  const temp_dir tmp;
  const fs::path& dir = tmp.path();
  const fs::path tasks = dir / "tasks.jsonl";
  std::ofstream(tasks) << R"({"id": "d/1", "kind": "digits", "target": 1, "prompt": "Sum 1."})"
                       << "\n";
  auto base = std::make_optional<experiment_config>();
  base->experiment.name = "s";
  base->experiment.run_dir = (dir / "run").string();
  base->data.train = tasks.string();
  base->data.task_kinds = {"digits"};
  auto checked = preflight_seed(*base, 3, "test.yaml");
  ASSERT_TRUE(checked) << checked.err().message;
  EXPECT_EQ(checked->config.experiment.seed, 3u);
  EXPECT_EQ(checked->config.experiment.run_dir, (dir / "run" / "seed-3").string());
  auto stored = parse_config(checked->text, "stored");
  ASSERT_TRUE(stored) << stored.err().message;
  EXPECT_TRUE(*stored == checked->config);
  // A seed whose config is refused names the seed.
  base->data.train = (dir / "missing.jsonl").string();
  auto refused = preflight_seed(*base, 4, "test.yaml");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.err().message.find("test.yaml (seed 4)"), std::string::npos)
      << refused.err().message;
}

TEST(Seeds, ASeedIsFinishedWhenItsStoreHoldsTheRunFinishedWithItsSteps) {
  const temp_dir tmp;
  const fs::path& dir = tmp.path();
  // No folder, no store: not finished (the seed runs).
  auto none = run_finished((dir / "none").string(), "s", 2);
  ASSERT_TRUE(none) << none.err().message;
  EXPECT_FALSE(*none);

  auto opened = trajectory_store::open(store_path_of_run_dir(dir / "run"));
  ASSERT_TRUE(opened) << opened.err().message;
  auto& store = **opened;
  ASSERT_TRUE(store.put_run(run_record{"s", "", 1, run_status::running}));
  for (std::uint64_t s = 0; s < 2; ++s) {
    step_record step;
    step.run_id = "s";
    step.step = s;
    ASSERT_TRUE(store.put_step(step));
  }
  ASSERT_TRUE(store.close());
  opened->reset();
  auto running = run_finished((dir / "run").string(), "s", 2);
  ASSERT_TRUE(running) << running.err().message;
  EXPECT_FALSE(*running);  // killed or interrupted: it continues

  auto reopened = trajectory_store::open(store_path_of_run_dir(dir / "run"));
  ASSERT_TRUE(reopened) << reopened.err().message;
  ASSERT_TRUE((*reopened)->put_run(run_record{"s", "", 1, run_status::finished}));
  ASSERT_TRUE((*reopened)->close());
  reopened->reset();
  auto finished = run_finished((dir / "run").string(), "s", 2);
  ASSERT_TRUE(finished) << finished.err().message;
  EXPECT_TRUE(*finished);
  // More steps asked than it ran (steps raised in the config): it continues.
  auto more = run_finished((dir / "run").string(), "s", 3);
  ASSERT_TRUE(more) << more.err().message;
  EXPECT_FALSE(*more);
  // Another experiment's name in the folder: not this one's.
  auto other = run_finished((dir / "run").string(), "other", 2);
  ASSERT_TRUE(other) << other.err().message;
  EXPECT_FALSE(*other);
}

}  // namespace
}  // namespace leap::launch
