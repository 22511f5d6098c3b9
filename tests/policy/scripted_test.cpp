// The scripted backend: task matching, pass and fix rates, determinism, resumption, log-probs and
// the latency model, without HTTP. Its suite reader is launch::load_scripted_suite (tests/launch).
#include "policy/server/server.hpp"
#include "tests/policy/server_test_support.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace leap::policy {
namespace {

using namespace leap::policy::testing;
using steady = std::chrono::steady_clock;

backend_request chat_request_for(const std::vector<chat_message>& messages,
                                 std::optional<std::int64_t> seed, double temperature = 1.0) {
  backend_request r;
  r.prompt = render_chat(messages);
  r.sampling.seed = seed;
  r.sampling.temperature = temperature;
  r.sampling.max_tokens = 4096;
  return r;
}

struct collected {
  std::vector<token_step> steps;
  std::vector<std::size_t> batch_sizes;
};

collected generate_all(scripted_backend& backend, const backend_request& request,
                       generation_control& control) {
  collected out;
  const auto result = backend.generate(request, control, [&](std::span<const token_step> steps) {
    out.steps.insert(out.steps.end(), steps.begin(), steps.end());
    out.batch_sizes.push_back(steps.size());
    return true;
  });
  EXPECT_TRUE(result.ok());
  return out;
}

std::vector<token_id> ids_of(const collected& c) {
  std::vector<token_id> ids;
  for (const auto& s : c.steps) {
    ids.push_back(s.id);
  }
  return ids;
}

TEST(ScriptedBackend, CreateValidates) {
  struct row {
    std::string name;
    std::function<void(scripted_config&)> change;
    std::string error;
  };
  const std::vector<row> rows = {
      {"duplicate id", [](auto& c) { c.tasks[1].id = c.tasks[0].id; }, "appears twice"},
      {"duplicate prompt", [](auto& c) { c.tasks[1].prompt = c.tasks[0].prompt + "  "; },
       "has the same prompt as task"},
      {"empty prompt", [](auto& c) { c.tasks[0].prompt = " \n"; }, "has an empty prompt"},
      {"no solution", [](auto& c) { c.tasks[0].solution.clear(); }, "has no solution"},
      {"difficulty", [](auto& c) { c.tasks[0].difficulty = 4; }, "difficulty must be 1, 2 or 3"},
      {"pass rate", [](auto& c) { c.first_turn_pass[1] = 1.5; }, "difficulty 2 must be in [0, 1]"},
      {"fix rate", [](auto& c) { c.fix_probability = -0.1; }, "fix probability"},
      {"jitter", [](auto& c) { c.latency.jitter = 1.0; }, "jitter in [0, 1)"},
      {"task pass rate", [](auto& c) { c.tasks[2].first_turn_pass = 2.0; },
       "'python/reverse': the first-turn pass probability"},
  };
  for (const auto& r : rows) {
    scripted_config config;
    config.tasks = tiny_tasks();
    r.change(config);
    const auto backend = scripted_backend::create(config);
    ASSERT_FALSE(backend.ok()) << r.name;
    EXPECT_NE(backend.err().message.find(r.error), std::string::npos)
        << r.name << ": " << backend.err().message;
  }
}

TEST(ScriptedBackend, FindsTasksByTheDocumentedRule) {
  scripted_config config;
  config.tasks = tiny_tasks();
  // A task whose prompt contains another's: the longer one wins when both occur.
  config.tasks.push_back({"python/reverse_twice",
                          std::string(reverse_prompt) + " Then reverse it again.",
                          "python",
                          "def f(s):\n    return s\n",
                          {},
                          2,
                          std::nullopt});
  auto backend = make_backend(config);
  ASSERT_TRUE(backend);
  struct row {
    std::string text;
    std::string id;  // "" = unknown
  };
  const std::vector<row> rows = {
      {vector_add_prompt, "cuda/vector_add"},
      {std::string("\n  ") + sum_prompt + "\n", "cpp/sum"},
      {std::string("You are an expert.\n\n") + sum_prompt + "\n\nAnswer in one block.", "cpp/sum"},
      {std::string("Task: ") + reverse_prompt + " Then reverse it again. Go.",
       "python/reverse_twice"},
      {std::string("Task: ") + reverse_prompt, "python/reverse"},
      {"Write a sorting network.", ""},
  };
  for (const auto& r : rows) {
    const scripted_task* task = backend->find_task(r.text);
    EXPECT_EQ(task == nullptr ? std::string() : task->id, r.id) << r.text;
  }
}

TEST(ScriptedBackend, FirstTurnPassRateFollowsDifficulty) {
  auto backend = make_backend();
  ASSERT_TRUE(backend);
  struct row {
    const char* prompt;
    double rate;
  };
  for (const auto& r :
       std::vector<row>{{vector_add_prompt, 0.7}, {sum_prompt, 0.45}, {reverse_prompt, 0.2}}) {
    int passes = 0;
    constexpr int samples = 2000;
    for (int seed = 0; seed < samples; ++seed) {
      const scripted_answer a = backend->plan(chat_request_for({{"user", r.prompt}}, seed));
      ASSERT_NE(a.task, nullptr);
      EXPECT_EQ(a.turn, 1);
      passes += a.correct ? 1 : 0;
      if (!a.correct) {
        EXPECT_NE(a.label, "solution");
      }
    }
    EXPECT_NEAR(passes / static_cast<double>(samples), r.rate, 0.04) << r.prompt;
  }
}

TEST(ScriptedBackend, PerTaskOverrideAndDeterminism) {
  scripted_config config;
  config.tasks = tiny_tasks();
  config.tasks[0].first_turn_pass = 1.0;
  config.tasks[1].first_turn_pass = 0.0;
  auto backend = make_backend(config);
  ASSERT_TRUE(backend);
  for (int seed = 0; seed < 50; ++seed) {
    EXPECT_TRUE(backend->plan(chat_request_for({{"user", vector_add_prompt}}, seed)).correct);
    EXPECT_FALSE(backend->plan(chat_request_for({{"user", sum_prompt}}, seed)).correct);
  }
  // Same (server seed, request seed, prompt): same answer. No request seed: the arrival number
  // decides. Temperature 0: always the same, whatever the seed.
  auto plain = make_backend();
  const auto request = chat_request_for({{"user", reverse_prompt}}, 5);
  EXPECT_EQ(plain->plan(request).text, plain->plan(request).text);
  std::set<std::string> unseeded;
  std::set<std::string> greedy;
  for (std::uint64_t serial = 0; serial < 40; ++serial) {
    auto r = chat_request_for({{"user", reverse_prompt}}, std::nullopt);
    r.request_serial = serial;
    unseeded.insert(plain->plan(r).label);
    auto g = chat_request_for({{"user", reverse_prompt}}, static_cast<std::int64_t>(serial), 0.0);
    greedy.insert(plain->plan(g).label);
  }
  EXPECT_GE(unseeded.size(), 2U);
  EXPECT_EQ(greedy.size(), 1U);
  // Another server seed gives other answers for the same requests.
  scripted_config other;
  other.seed = 99;
  auto reseeded = make_backend(other);
  int differ = 0;
  for (int seed = 0; seed < 100; ++seed) {
    const auto r = chat_request_for({{"user", reverse_prompt}}, seed);
    differ += plain->plan(r).label != reseeded->plan(r).label ? 1 : 0;
  }
  EXPECT_GT(differ, 10);
}

TEST(ScriptedBackend, AnswersInAFencedBlockOfTheTaskLanguage) {
  auto backend = make_backend();
  const auto tasks = tiny_tasks();
  for (const auto& task : tasks) {
    for (int seed = 0; seed < 20; ++seed) {
      const scripted_answer a = backend->plan(chat_request_for({{"user", task.prompt}}, seed));
      EXPECT_NE(a.text.find("```" + task.language + "\n"), std::string::npos);
      const std::string code = last_fenced_block(a.text);
      if (a.correct) {
        EXPECT_EQ(code, task.solution);
      } else {
        bool is_wrong_candidate = false;
        for (const auto& w : task.wrong) {
          is_wrong_candidate |= w.code == code && w.label == a.label;
        }
        EXPECT_TRUE(is_wrong_candidate) << a.label;
      }
    }
  }
  const scripted_answer unknown = backend->plan(chat_request_for({{"user", "Sort this."}}, 1));
  EXPECT_EQ(unknown.task, nullptr);
  EXPECT_EQ(unknown.label, "unknown");
  EXPECT_EQ(last_fenced_block(unknown.text), "");
}

TEST(ScriptedBackend, DebugTurnsFixAtTheConfiguredRate) {
  const auto tasks = tiny_tasks();
  const scripted_task& task = tasks[1];  // cpp/sum
  const std::string wrong_answer =
      render_scripted_answer("Here is my implementation.", "cpp", task.wrong[0].code);
  const std::string right_answer =
      render_scripted_answer("Here is my implementation.", "cpp", task.solution);
  const auto conversation = [&](const std::string& answer) {
    return std::vector<chat_message>{
        {"user", task.prompt}, {"assistant", answer}, {"user", "error: wrong answer at index 0"}};
  };
  struct row {
    double fix;
    double expected;
  };
  for (const auto& r : std::vector<row>{{0.0, 0.0}, {1.0, 1.0}, {0.3, 0.3}}) {
    scripted_config config;
    config.fix_probability = r.fix;
    auto backend = make_backend(config);
    int fixed = 0;
    constexpr int samples = 1000;
    for (int seed = 0; seed < samples; ++seed) {
      const scripted_answer a = backend->plan(chat_request_for(conversation(wrong_answer), seed));
      EXPECT_EQ(a.turn, 2);
      EXPECT_NE(a.text.find("corrected"), std::string::npos);
      fixed += a.correct ? 1 : 0;
    }
    EXPECT_NEAR(fixed / static_cast<double>(samples), r.expected, 0.05) << r.fix;
    // An answer that was already right stays right.
    EXPECT_TRUE(backend->plan(chat_request_for(conversation(right_answer), 3)).correct);
  }
  // Turn 3: two earlier answers.
  auto backend = make_backend();
  auto three = conversation(wrong_answer);
  three.push_back({"assistant", wrong_answer});
  three.push_back({"user", "still wrong"});
  EXPECT_EQ(backend->plan(chat_request_for(three, 1)).turn, 3);
}

TEST(ScriptedBackend, GeneratesTheAnswerThenImEnd) {
  auto backend = make_backend();
  const auto request = chat_request_for({{"user", vector_add_prompt}}, 11);
  generation_control control;
  const collected out = generate_all(*backend, request, control);
  const std::vector<token_id> ids = ids_of(out);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.back(), special::im_end);
  EXPECT_EQ(byte_tokenizer::decode(std::span(ids).first(ids.size() - 1)),
            backend->plan(request).text);
  EXPECT_EQ(out.batch_sizes.size(), 1U);  // no latency: everything at once
  for (const auto& step : out.steps) {
    EXPECT_LT(step.logprob, 0.0);
    EXPECT_GT(step.logprob, -5.0);
    EXPECT_TRUE(step.top.empty());
  }
  // Log-probs belong to the text in its context, not to the request's seed.
  auto same_text = request;
  for (std::int64_t seed = 0; seed < 200; ++seed) {
    same_text.sampling.seed = seed;
    if (backend->plan(same_text).text == backend->plan(request).text && seed != 11) {
      generation_control c;
      const collected again = generate_all(*backend, same_text, c);
      ASSERT_EQ(again.steps.size(), out.steps.size());
      for (std::size_t i = 0; i < out.steps.size(); ++i) {
        EXPECT_DOUBLE_EQ(again.steps[i].logprob, out.steps[i].logprob);
      }
      break;
    }
  }
  // Top alternatives when asked, each below the sampled token's log-prob.
  auto with_top = request;
  with_top.top_logprobs = 3;
  generation_control c;
  for (const auto& step : generate_all(*backend, with_top, c).steps) {
    ASSERT_EQ(step.top.size(), 3U);
    for (const auto& alt : step.top) {
      EXPECT_LT(alt.logprob, step.logprob);
      EXPECT_NE(alt.id, step.id);
    }
  }
}

TEST(ScriptedBackend, ResumesAPartialAnswer) {
  auto backend = make_backend();
  const auto request = chat_request_for({{"user", sum_prompt}}, 21);
  generation_control control;
  const std::vector<token_id> full = ids_of(generate_all(*backend, request, control));
  for (const std::size_t cut : {std::size_t{1}, std::size_t{7}, full.size() / 2, full.size() - 1}) {
    auto resumed = request;
    resumed.prompt.insert(resumed.prompt.end(), full.begin(),
                          full.begin() + static_cast<std::ptrdiff_t>(cut));
    resumed.request_serial = 1000 + cut;  // a new arrival: must not matter
    generation_control c;
    const collected rest = generate_all(*backend, resumed, c);
    std::vector<token_id> joined(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(cut));
    const auto rest_ids = ids_of(rest);
    joined.insert(joined.end(), rest_ids.begin(), rest_ids.end());
    EXPECT_EQ(joined, full) << "cut at " << cut;
  }
  // Resumed without the request seed (a new sample), the partial text still leads to a candidate
  // that continues it.
  auto unseeded = request;
  unseeded.sampling.seed.reset();
  unseeded.prompt.insert(unseeded.prompt.end(), full.begin(), full.begin() + 40);
  for (std::uint64_t serial = 0; serial < 10; ++serial) {
    unseeded.request_serial = serial;
    generation_control c;
    const auto rest = ids_of(generate_all(*backend, unseeded, c));
    std::vector<token_id> joined(full.begin(), full.begin() + 40);
    joined.insert(joined.end(), rest.begin(), rest.end());
    const std::string text = byte_tokenizer::decode(joined, true);
    EXPECT_EQ(text.rfind("Here is my implementation.\n\n```cpp\n", 0), 0U);
    EXPECT_EQ(joined.back(), special::im_end);
  }
}

TEST(ScriptedBackend, LatencyModelIsHonoured) {
  scripted_config config;
  config.latency = {.ttft_ms = 120.0, .tokens_per_s = 2000.0, .jitter = 0.0};
  auto backend = make_backend(config);
  const auto request = chat_request_for({{"user", reverse_prompt}}, 1);
  const std::size_t tokens = backend->plan(request).text.size() + 1;
  generation_control control;
  std::vector<steady::duration> arrivals;
  const auto start = steady::now();
  const auto status = backend->generate(request, control, [&](std::span<const token_step>) {
    arrivals.push_back(steady::now() - start);
    return true;
  });
  ASSERT_TRUE(status.ok());
  ASSERT_FALSE(arrivals.empty());
  const auto expected_total = std::chrono::milliseconds(120) +
                              std::chrono::microseconds(500 * static_cast<long>(tokens - 1));
  EXPECT_GE(arrivals.front(), std::chrono::milliseconds(115));
  EXPECT_GE(arrivals.back(), expected_total - std::chrono::milliseconds(15));
  EXPECT_LT(arrivals.back(), expected_total + std::chrono::milliseconds(1500));
  EXPECT_GE(arrivals.size(), 3U);  // streamed in slices, not all at once

  // Jitter scales each request by one factor within [1 - j, 1 + j].
  config.latency = {.ttft_ms = 100.0, .tokens_per_s = 0.0, .jitter = 0.5};
  auto jittery = make_backend(config);
  std::set<long> firsts;
  for (std::uint64_t serial = 0; serial < 4; ++serial) {
    auto r = request;
    r.request_serial = serial;
    generation_control c;
    const auto t0 = steady::now();
    ASSERT_TRUE(jittery->generate(r, c, [](std::span<const token_step>) { return true; }).ok());
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0);
    EXPECT_GE(took.count(), 45);
    EXPECT_LT(took.count(), 1500);
    firsts.insert(took.count() / 5);
  }
  EXPECT_GE(firsts.size(), 2U);
}

TEST(ScriptedBackend, AbortAndPauseReachASleepingGeneration) {
  scripted_config config;
  config.latency = {.ttft_ms = 10000.0};
  auto backend = make_backend(config);
  const auto request = chat_request_for({{"user", reverse_prompt}}, 1);
  generation_control control;
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    control.abort("test abort");
  });
  const auto start = steady::now();
  std::size_t received = 0;
  ASSERT_TRUE(backend
                  ->generate(request, control,
                             [&](std::span<const token_step> s) {
                               received += s.size();
                               return true;
                             })
                  .ok());
  aborter.join();
  EXPECT_LT(steady::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(received, 0U);
  EXPECT_EQ(control.abort_message(), "test abort");

  // Paused in place: no tokens until resumed.
  scripted_config quick;
  auto fast = make_backend(quick);
  auto gate = std::make_shared<generation_gate>();
  gate->pause(/*freeze_running=*/true);
  generation_control paused(gate);
  std::atomic<bool> got_tokens{false};
  std::thread generator([&] {
    EXPECT_TRUE(fast->generate(request, paused,
                               [&](std::span<const token_step>) {
                                 got_tokens = true;
                                 return true;
                               })
                    .ok());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(got_tokens.load());
  gate->resume();
  generator.join();
  EXPECT_TRUE(got_tokens.load());
}

}  // namespace
}  // namespace leap::policy
